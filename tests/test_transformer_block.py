"""transformer_block: the query-only algebra against the block computed the plain way."""
import math

import torch

from icl.models import TransformerBlock


def _ln(h, g, b):
    return torch.nn.functional.layer_norm(h, (h.shape[-1],), eps=1e-5) * g + b


def reference_forward(p, x, y, r, width):
    """Every token embedded, normalised and projected to q, k, v; the query row read out."""
    yin = y[r].clone()
    yin[:, -1] = 0
    h = x[r] @ p["emb_x"][r] + yin[..., None] * p["emb_y"][r] + p["emb_b"][r]
    z = _ln(h, p["ln1_g"][r], p["ln1_b"][r])
    q, k, v = z @ p["wq"][r], z @ p["wk"][r], z @ p["wv"][r]
    s = (q[:, -1:, :] @ k[:, :-1, :].transpose(1, 2)).squeeze(1) / math.sqrt(width)
    a = torch.softmax(s, -1)
    hq = h[:, -1] + (a.unsqueeze(1) @ v[:, :-1]).squeeze(1) @ p["wo"][r]
    hq = hq + torch.relu(_ln(hq, p["ln2_g"][r], p["ln2_b"][r]) @ p["w1"][r] + p["b1"][r]) @ p["w2"][r] + p["b2"][r]
    return _ln(hq, p["lnf_g"][r], p["lnf_b"][r]) @ p["head_w"][r] + p["head_b"][r], a


def _setup(seed=0):
    g = torch.Generator().manual_seed(seed)
    m = TransformerBlock({"width": 16, "ffn_mult": 4}, 5)
    p = m.init([0, 1, 2], ["a", "a", "b"], "cpu", torch.float64)
    p = {k: v + 0.2 * torch.randn(v.shape, generator=g, dtype=torch.float64) for k, v in p.items()}
    x = torch.randn(3, 7, 11, 5, generator=g, dtype=torch.float64)
    y = torch.randn(3, 7, 11, generator=g, dtype=torch.float64)
    return m, p, x, y


def test_query_only_forward_equals_full_block():
    m, p, x, y = _setup()
    pred, a = m.forward(p, x, y)
    for r in range(3):
        pr, ar = reference_forward(p, x, y, r, 16)
        torch.testing.assert_close(pred[r], pr, rtol=1e-12, atol=1e-12)
        torch.testing.assert_close(a[r], ar, rtol=1e-12, atol=1e-12)


def test_gradients_equal_full_block():
    m, p, x, y = _setup(seed=4)
    _, grads = m.loss_and_grads(p, x, y)
    for r in (0, 2):
        leaves = {k: v.clone().requires_grad_(True) for k, v in p.items()}
        pr, _ = reference_forward(leaves, x, y, r, 16)
        loss = 0.5 * ((pr - y[r, :, -1]) ** 2).mean()
        ref = torch.autograd.grad(loss, list(leaves.values()))
        for (k, _), gr in zip(leaves.items(), ref):
            torch.testing.assert_close(grads[k][r], gr[r], rtol=1e-10, atol=1e-12)


def test_query_label_is_hidden():
    m, p, x, y = _setup()
    y2 = y.clone()
    y2[:, :, -1] += 100.0
    torch.testing.assert_close(m.forward(p, x, y)[0], m.forward(p, x, y2)[0])


def test_runs_are_independent():
    """Perturbing run 0's parameters leaves runs 1 and 2 untouched."""
    m, p, x, y = _setup()
    p2 = {k: v.clone() for k, v in p.items()}
    p2["wq"][0] += 1.0
    torch.testing.assert_close(m.forward(p, x, y)[0][1:], m.forward(p2, x, y)[0][1:])


def test_feature_count_form_equals_token_form():
    """On noiseless discrete tokens the block reads K + 1 tokens a prompt with log-count logits;
    loss, every gradient and every attention summary equal the token form's (float64 rounding)."""
    from test_softmax_q import _discrete
    tokens, x, y, feat, V = _discrete("random", [0.55, 0.3, 0.1, 0.05])
    counted = TransformerBlock({"width": 8, "ffn_mult": 2}, tokens)
    as_tokens = TransformerBlock({"width": 8, "ffn_mult": 2}, {**tokens, "noise": 1e-300})
    p = counted.init([3], ["b"], "cpu", torch.float64)
    arrays = {"x": x, "y": y, "feat": feat, "features": V}.__getitem__
    bc, bt = counted.prepare(arrays), as_tokens.prepare(arrays)
    assert bc["x"].shape[2] == 5 and bt["x"].shape[2] == 24           # K + 1 against N + 1 tokens
    lc, gc, sc, _ = counted.step(p, bc)
    lt, gt, st, _ = as_tokens.step(p, bt)
    torch.testing.assert_close(lc, lt, rtol=1e-12, atol=0)
    for k in gt:
        torch.testing.assert_close(gc[k], gt[k], rtol=1e-9, atol=1e-12, msg=k)
    dc, dt = counted.diagnostics(p, bc, sc), as_tokens.diagnostics(p, bt, st)
    assert set(dc) == set(dt) == {"attn", "attn_own", "attn_entropy", "attn_knn"}
    for k in dc:
        torch.testing.assert_close(dc[k], dt[k], rtol=1e-10, atol=1e-14, equal_nan=True, msg=k)
