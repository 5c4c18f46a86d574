"""softmax_q: the analytic gradient against autograd and against central finite differences."""
import numpy as np
import pytest
import torch

from icl.models import SoftmaxQ


def _batch(R=2, B=5, N=7, d=4, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(R, B, N + 1, d, generator=g, dtype=torch.float64)
    y = torch.randn(R, B, N + 1, generator=g, dtype=torch.float64)
    Q = 0.3 * torch.randn(R, d, d, generator=g, dtype=torch.float64)
    return x, y, Q


def _loss(Q, x, y):
    m = SoftmaxQ({}, x.shape[-1])
    pred, _ = m.forward({"Q": Q}, x, y)
    return 0.5 * ((pred - y[:, :, -1]) ** 2).mean(1)


def test_gradient_matches_autograd():
    x, y, Q = _batch()
    loss, grads = SoftmaxQ({}, 4).loss_and_grads({"Q": Q}, x, y)
    Qa = Q.clone().requires_grad_(True)
    (ga,) = torch.autograd.grad(_loss(Qa, x, y).sum(), Qa)
    assert torch.allclose(loss, _loss(Q, x, y))
    assert torch.allclose(grads["Q"], ga, rtol=1e-10, atol=1e-12)


def test_gradient_matches_finite_differences():
    x, y, Q = _batch(R=1, seed=3)
    _, grads = SoftmaxQ({}, 4).loss_and_grads({"Q": Q}, x, y)
    h = 1e-6
    fd = np.zeros((4, 4))
    for i in range(4):
        for j in range(4):
            E = torch.zeros_like(Q)
            E[0, i, j] = h
            fd[i, j] = (_loss(Q + E, x, y) - _loss(Q - E, x, y)).item() / (2 * h)
    np.testing.assert_allclose(grads["Q"][0].numpy(), fd, rtol=1e-6, atol=1e-9)


def test_zero_init_gives_uniform_attention():
    x, y, _ = _batch()
    m = SoftmaxQ({}, 4)
    p = m.init([0, 1], ["a", "a"], "cpu", torch.float64)
    pred, a = m.forward(p, x, y)
    assert torch.allclose(a, torch.full_like(a, 1 / 7))
    assert torch.allclose(pred, y[:, :, :-1].mean(-1))


def _discrete(features="random", probs=None, seed=0, N=23, P=40):
    from icl.data import make_dataset
    tokens = {"kind": "discrete", "d": 5, "K": 4, "delta": 2.0, "noise": 0.0, "features": features, "probs": probs}
    ds = make_dataset({"tokens": tokens, "task": {"kind": "cosine", "L": 1.3, "c": 0.7},
                       "prompts": {"N": N, "train": P, "test": 1}, "seed": seed})
    t = lambda k: torch.from_numpy(ds[k])[None]
    x, y = t("train_x").double(), t("train_y").double()
    return tokens, x, y, t("train_feat"), t("features").double()


@pytest.mark.parametrize("features,probs", [("orthogonal", None), ("random", [0.55, 0.3, 0.1, 0.05])])
def test_feature_count_form_equals_token_form(features, probs):
    """On noiseless discrete tokens the count form (O(K) per prompt) gives the token form's loss,
    gradient, attention map, entropy and nearest-token mass, to float64 rounding."""
    tokens, x, y, feat, V = _discrete(features, probs)
    g = torch.Generator().manual_seed(1)
    params = {"Q": 0.8 * torch.randn(1, 5, 5, generator=g, dtype=torch.float64)}
    counted = SoftmaxQ({}, tokens)
    as_tokens = SoftmaxQ({}, {**tokens, "noise": 1e-300})     # noise forces the token form
    arrays = {"x": x, "y": y, "feat": feat, "features": V}.__getitem__
    bc, bt = counted.prepare(arrays), as_tokens.prepare(arrays)
    assert "x" not in bc and "x" in bt
    lc, gc, sc, _ = counted.step(params, bc)
    lt, gt, st, _ = as_tokens.step(params, bt)
    torch.testing.assert_close(lc, lt, rtol=1e-12, atol=0)
    torch.testing.assert_close(gc["Q"], gt["Q"], rtol=1e-10, atol=1e-14)
    dc, dt = counted.diagnostics(params, bc, sc), as_tokens.diagnostics(params, bt, st)
    assert set(dc) == set(dt) == {"attn", "attn_own", "attn_entropy", "attn_knn", "q_features"}
    for k in dc:
        torch.testing.assert_close(dc[k], dt[k], rtol=1e-10, atol=1e-14, equal_nan=True, msg=k)
    # the attention map is a distribution over key features for every query feature that occurs
    cols = dc["attn"][0].sum(0)
    torch.testing.assert_close(cols[~cols.isnan()], torch.ones_like(cols[~cols.isnan()]))


def test_feature_count_form_picks_itself():
    tokens = {"kind": "discrete", "d": 5, "K": 4, "delta": 2.0}
    assert SoftmaxQ({}, {**tokens, "noise": 0.0}).by_feature
    assert not SoftmaxQ({}, {**tokens, "noise": 0.1}).by_feature
    assert not SoftmaxQ({}, {"kind": "gaussian", "d": 5}).by_feature


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_count_form_where_the_weights_underflow(dtype):
    """Scores hundreds apart (a sharp run late in training) with features absent from short prompts:
    n_k exp(s_jk - max_k s_jk) underflows to 0 for every present feature of some prompts, and the
    count form takes those in log space. It must still give the token form's prediction and
    attention, finite."""
    tokens, x, y, feat, V = _discrete("orthogonal", None, seed=2, N=3, P=200)
    g = torch.Generator().manual_seed(5)
    scale = 600.0 if dtype == torch.float64 else 80.0
    params = {"Q": scale * torch.randn(1, 5, 5, generator=g, dtype=torch.float64).to(dtype)}
    x, y, V = x.to(dtype), y.to(dtype), V.to(dtype)
    counted = SoftmaxQ({}, tokens)
    as_tokens = SoftmaxQ({}, {**tokens, "noise": 1e-300})
    arrays = {"x": x, "y": y, "feat": feat, "features": V}.__getitem__
    bc, bt = counted.prepare(arrays), as_tokens.prepare(arrays)
    s = torch.einsum("rkd,rde,rje->rjk", V, params["Q"], V)[0]
    j, n = bc["query"][0].argmax(-1), bc["n"][0]
    direct = (n * torch.exp(s[j] - s[j].amax(-1, keepdim=True))).sum(-1)
    assert (direct == 0).any(), "the case this test is about: some prompts' weights all underflow"
    (pc, ac), (pt, at) = counted.predict(params, bc), as_tokens.predict(params, bt)
    assert torch.isfinite(pc).all() and torch.isfinite(ac).all()
    tol = {"rtol": 1e-10, "atol": 1e-12} if dtype == torch.float64 else {"rtol": 1e-4, "atol": 1e-5}
    torch.testing.assert_close(pc, pt, **tol)
    mass_t = torch.zeros_like(ac).scatter_add_(2, bt["feat"][:, :, :-1], at)
    torch.testing.assert_close(ac, mass_t, **tol)


@pytest.mark.parametrize("scale", [600.0, 0.5])
def test_the_accelerators_path_selects_on_the_device_and_agrees_with_the_cpus(scale, monkeypatch):
    """On an accelerator softmax_q's count form never asks the host whether a prompt's weights
    underflowed (a `bool(tensor)` per step waits for the device): it takes the log-space weights for
    the prompts that need them with torch.where. Run here on the CPU by saying the device may not be
    asked: where no prompt underflows (scale 0.5) it is bit for bit the CPU's path; where some do
    (scale 600) it agrees with it to float64 rounding, and with the token form."""
    from icl.models import softmax_q as M
    tokens, x, y, feat, V = _discrete("orthogonal", None, seed=2, N=3, P=200)
    g = torch.Generator().manual_seed(5)
    params = {"Q": scale * torch.randn(1, 5, 5, generator=g, dtype=torch.float64)}
    model = SoftmaxQ({}, tokens)
    b = model.prepare({"x": x, "y": y, "feat": feat, "features": V}.__getitem__)
    cpu = model.step(params, b)
    monkeypatch.setattr(M, "host_checks", lambda device: False)
    dev = model.step(params, b)
    for a, c in zip((cpu[0], cpu[1]["Q"], cpu[2]), (dev[0], dev[1]["Q"], dev[2])):
        if scale < 1:
            assert torch.equal(a, c)
        else:
            torch.testing.assert_close(a, c, rtol=1e-12, atol=1e-300)
