"""gpt: the ensemble against a plain per-run module (nanoGPT's blocks, Garg et al.'s read-in and
read-out: benchmarks/reference_models.py, code of its own) in float64, causality, the positional
table, the attention diagnostics, and a run through training, tables and evaluation."""
import re
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
from reference_models import GPTReference  # noqa: E402

from icl.train import optim  # noqa: E402
from icl.models import GPT, Batch  # noqa: E402

CASES = [(1, 1, "learned"), (2, 2, "none"), (3, 4, "learned"), (2, 1, "none")]


def _setup(layers, heads, positional, loss="all", seed=0, d=3, W=8, N=6, R=3, B=5, P=30):
    m = GPT({"width": W, "layers": layers, "heads": heads, "ffn_mult": 2, "positional": positional,
             "positions": P, "loss": loss}, d)
    p = m.init(list(range(R)), ["a"] * R, "cpu", torch.float64)
    g = torch.Generator().manual_seed(seed)
    # away from GPT-2's tiny init, so that every weight matters to the comparison
    p = {k: v + 0.2 * torch.randn(v.shape, generator=g, dtype=torch.float64) for k, v in p.items()}
    x = torch.randn(R, B, N + 1, d, generator=g, dtype=torch.float64)
    y = torch.randn(R, B, N + 1, generator=g, dtype=torch.float64)
    return m, p, x, y


def _reference(m, p, r):
    return GPTReference(m.d, m.w, m.layers, m.heads, m.f // m.w, m.positions if m.learned else None).double().load_from(p, r)


@pytest.mark.parametrize("layers,heads,positional", CASES)
def test_predictions_equal_the_plain_module(layers, heads, positional):
    m, p, x, y = _setup(layers, heads, positional)
    pred, _ = m.forward(p, x, y, every=True)
    query, _ = m.forward(p, x, y)
    for r in range(3):
        ref = _reference(m, p, r)(x[r], y[r])                      # every x position
        torch.testing.assert_close(pred[r], ref, rtol=0, atol=1e-10)
        torch.testing.assert_close(query[r], ref[:, -1], rtol=0, atol=1e-10)


@pytest.mark.parametrize("layers,heads,positional", CASES)
@pytest.mark.parametrize("loss", ["all", "query"])
def test_gradients_equal_the_plain_module(layers, heads, positional, loss):
    m, p, x, y = _setup(layers, heads, positional, loss, seed=1)
    losses, grads = m.loss_and_grads(p, x, y)
    for r in (0, 2):
        ref = _reference(m, p, r)
        pr = ref(x[r], y[r])
        value = 0.5 * ((pr - y[r]) ** 2).mean() if loss == "all" else 0.5 * ((pr[:, -1] - y[r, :, -1]) ** 2).mean()
        value.backward()
        torch.testing.assert_close(losses[r], value.detach(), rtol=0, atol=1e-12)
        ref_grads = ref.grads_as(p)
        assert set(ref_grads) == set(grads)
        for k, gr in ref_grads.items():
            torch.testing.assert_close(grads[k][r], gr, rtol=0, atol=1e-10, msg=k)


def test_causal_a_later_token_never_changes_an_earlier_prediction():
    """The prediction at x_i reads x_1..x_i and y_1..y_{i-1}: changing y_i or anything after it
    leaves the predictions at x_1..x_i as they were, and changes the later ones."""
    m, p, x, y = _setup(3, 2, "learned")
    pred, _ = m.forward(p, x, y, every=True)
    for i in (0, 3, 5):
        x2, y2 = x.clone(), y.clone()
        y2[:, :, i] += 1.0
        x2[:, :, i + 1:] += 1.0
        after, _ = m.forward(p, x2, y2, every=True)
        torch.testing.assert_close(after[:, :, :i + 1], pred[:, :, :i + 1], rtol=0, atol=0)
        assert (after[:, :, i + 1:] - pred[:, :, i + 1:]).abs().min() > 0


def test_runs_are_independent():
    m, p, x, y = _setup(2, 2, "learned")
    p2 = {k: v.clone() for k, v in p.items()}
    p2["fc_w"][0] += 1.0
    p2["wpe"][0] += 1.0
    torch.testing.assert_close(m.forward(p, x, y)[0][1:], m.forward(p2, x, y)[0][1:], rtol=0, atol=0)


def test_the_table_size_changes_no_number():
    """Position p's initial embedding does not depend on the table's size, and rows past the
    training prompts get zero gradients, which Adam turns into zero steps: a model with a table
    of 13 positions and one of 40 train to the same numbers, and the unused rows keep their init."""
    out = []
    for P in (13, 40):
        m = GPT({"width": 8, "layers": 2, "heads": 2, "ffn_mult": 2, "positional": "learned", "positions": P,
                 "loss": "all"}, 3)
        p = m.init([0, 1], ["a", "b"], "cpu")
        wpe0 = p["wpe"].clone()
        g = torch.Generator().manual_seed(0)
        x, y = torch.randn(2, 16, 7, 3, generator=g), torch.randn(2, 16, 7, generator=g)
        batch = Batch({"x": x, "y": y, "target": y[:, :, -1]})
        opt = optim.build("adam", torch.tensor([1e-2, 3e-2]))
        losses = []
        for _ in range(5):
            loss, grads, *_ = m.step(p, batch)
            opt.step(p, grads, torch.ones(2, dtype=torch.bool))
            losses.append(loss)
        torch.testing.assert_close(p["wpe"][:, 13:], wpe0[:, 13:], rtol=0, atol=0)
        out.append((torch.stack(losses), {k: v[:, :13] if k == "wpe" else v for k, v in p.items()}, wpe0[:, :13]))
    torch.testing.assert_close(out[0][0], out[1][0], rtol=0, atol=0)
    torch.testing.assert_close(out[0][2], out[1][2], rtol=0, atol=0)
    for k in out[0][1]:
        torch.testing.assert_close(out[0][1][k], out[1][1][k], rtol=0, atol=0, msg=k)


def test_longer_prompts_than_training_and_the_table_limit():
    m, p, x, y = _setup(2, 2, "learned", N=6, P=21)                  # 2·10 + 1 = 21 tokens fit
    xl = torch.randn(3, 5, 11, 3, dtype=torch.float64)
    yl = torch.randn(3, 5, 11, dtype=torch.float64)
    assert m.forward(p, xl, yl)[0].shape == (3, 5)
    with pytest.raises(ValueError, match="longer than the positional table"):
        m.forward(p, torch.randn(3, 5, 12, 3, dtype=torch.float64), torch.randn(3, 5, 12, dtype=torch.float64))
    none = GPT({"width": 8, "layers": 2, "heads": 2, "positional": "none"}, 3)
    q = none.init([0], ["a"], "cpu")
    assert "wpe" not in q and none.forward(q, torch.randn(1, 2, 300, 3), torch.randn(1, 2, 300))[0].shape == (1, 2)


def test_forward_without_gradients_in_chunks_equals_one_pass(monkeypatch):
    import icl.models.gpt as gpt
    m, p, x, y = _setup(2, 2, "learned", B=9)
    whole, seen = m.forward(p, x, y)
    monkeypatch.setattr(gpt, "CHUNK_FLOATS", 1)
    with torch.no_grad():
        parts, seen2 = m.forward(p, x, y)
    torch.testing.assert_close(parts, whole, rtol=0, atol=1e-12)
    torch.testing.assert_close(seen2, seen, rtol=0, atol=1e-12)


def test_prompts_without_diagnostics_skip_the_query_attention_and_change_no_number(monkeypatch):
    """Fresh prompts (prepared without diagnostics) train without the query's attention summary:
    the step returns none, and its loss and gradients are those of a step that computed it."""
    import icl.models.gpt as gpt
    m, p, x, y = _setup(3, 2, "learned")
    arrays = {"x": x, "y": y}
    plain, diagnosed = m.prepare(arrays.__getitem__, diagnose=False), m.prepare(arrays.__getitem__)
    loss, grads, seen, _ = m.step(p, plain)
    loss2, grads2, seen2, _ = m.step(p, diagnosed)
    assert seen is None and seen2.shape == (3, 5, 3, 2, 6)
    torch.testing.assert_close(loss, loss2, rtol=0, atol=0)
    for k in grads:
        torch.testing.assert_close(grads[k], grads2[k], rtol=0, atol=0)
    whole = m.forward(p, x, y, every=True)[0]
    monkeypatch.setattr(gpt, "CHUNK_FLOATS", 1)
    with torch.no_grad():                   # and through the chunked forward
        pred, none = m.forward(p, x, y, every=True, attend=False)
    assert none is None
    torch.testing.assert_close(pred, whole, rtol=0, atol=1e-12)


def _discrete_batch(m, R=2, B=40, N=12, K=3, seed=0):
    g = np.random.default_rng(seed)
    V = np.eye(K, m.d) * 2.0
    feat = g.integers(0, K, size=(R, B, N + 1))
    x = V[feat]
    y = g.standard_normal((R, B, N + 1))
    arrays = {"x": torch.tensor(x), "y": torch.tensor(y), "feat": torch.tensor(feat),
              "features": torch.tensor(np.broadcast_to(V, (R, K, m.d)).copy())}
    return m.prepare(arrays.__getitem__)


def test_attention_diagnostics_per_layer_and_head():
    m = GPT({"width": 8, "layers": 3, "heads": 2, "positional": "learned", "positions": 40}, {"kind": "discrete", "d": 4, "K": 3})
    p = m.init([0, 1], ["a", "a"], "cpu", torch.float64)
    batch = _discrete_batch(m)
    loss, _, seen, _ = m.step(p, batch)
    assert seen.shape == (2, 40, 3, 2, 12)                          # (R, B, layers, heads, N examples)
    torch.testing.assert_close(seen.sum(-1), torch.ones(2, 40, 3, 2, dtype=torch.float64))
    d = m.diagnostics(p, batch, seen)
    assert set(d) == {"attn", "attn_own", "attn_entropy", "attn_knn"}
    assert set(m.log_shapes()) == set(d) | set(m.test_losses(p, batch)) - {"test_loss"}     # loss: all adds the query's
    assert d["attn"].shape == (2, 3, 2, 3, 3)
    torch.testing.assert_close(d["attn"].sum(-2), torch.ones(2, 3, 2, 3, dtype=torch.float64))  # over key features
    own = torch.diagonal(d["attn"][:, -1], dim1=-2, dim2=-1).mean(-1).mean(-1)     # last layer, mean over heads
    torch.testing.assert_close(d["attn_own"], own)
    # the map of (layer, head) is the feature-summed attention of that head: check one by hand
    l, h, r = 1, 0, 1
    w, feat = seen[r, :, l, h], batch["feat"][r, :, :-1]
    mass = torch.stack([(w * (feat == k)).sum(-1) for k in range(3)], -1)         # (B, key feature)
    qf = batch["feat"][r, :, -1]
    for j in range(3):
        torch.testing.assert_close(d["attn"][r, l, h, :, j], mass[qf == j].mean(0))


def _experiment(tmp_path, tokens, evaluate=None, **model):
    from icl.config import validate
    from icl.data import ensure_datasets
    from icl.plan.shards import plan
    exp = {"tokens": tokens, "task": {"kind": "linear"} if tokens["kind"] != "discrete" else {"kind": "cosine", "L": 1.0, "c": 0.5},
           "prompts": {"N": 6, "train": 12, "test": 10},
           "models": [{"name": "g", "kind": "gpt", "optimizer": "adam", "lr": 3e-3, "width": 8, "layers": 2, "heads": 2,
                       "positions": 21, **model}],
           "train": {"epochs": 4, "log_every": 2, "batch_size": 6}, "sweep": {"seed": [0, 1]}}
    if evaluate:
        exp["evaluate"] = evaluate
    cfg = validate({"experiments": {"g": exp}})
    runs = [{"run_id": r.run_id, "data_id": r.data_id, "shard": r.shard, "spec": r.spec} for r in plan(cfg, "g")]
    return runs, ensure_datasets(runs, str(tmp_path / "prompts"))


def test_trains_and_writes_attention_by_layer_and_head(tmp_path):
    from icl.tables.build import long_tables, runs_table, summary_table
    from icl.train.loop import train_shard
    runs, paths = _experiment(tmp_path, {"kind": "discrete", "d": 4, "K": 3, "delta": 2.0})
    sh = train_shard(runs, paths, str(tmp_path / "s.npz"))
    assert sh["attn"].shape == (2, 3, 2, 2, 3, 3) and np.isfinite(sh["train_loss"]).all()
    t = long_tables(sh)
    att = t["attention"].to_pandas()
    assert set(zip(att["layer"], att["head"])) == {(0, 0), (0, 1), (1, 0), (1, 1)}
    assert len(att) == 2 * 3 * 2 * 2 * 3 * 3
    sums = att.groupby(["run_id", "epoch", "layer", "head", "query_feature"])["attn"].sum().dropna()
    np.testing.assert_allclose(sums, 1.0, rtol=1e-5)
    assert {"train_loss", "test_loss", "attn_own", "attn_entropy", "attn_knn"} <= set(t["curves"].to_pandas()["metric"])
    summ = summary_table(sh)
    assert summ["attn_off_final"].notna().all()
    rt = runs_table(runs, "g", "h")
    assert rt["layers"].tolist() == [2, 2] and rt["positional"].tolist() == ["learned"] * 2
    assert rt["model_kind"].tolist() == ["gpt"] * 2 and rt["init_scale"].isna().all()


def test_evaluated_beyond_the_training_length(tmp_path):
    from icl.evaluate.cells import evaluate_trained
    from icl.train.loop import train_shard
    ev = {"lengths": [3, 6, 10], "prompts": 20, "shifts": [{"kind": "none"}, {"kind": "scale", "c": [2.0]}]}
    runs, paths = _experiment(tmp_path, {"kind": "gaussian", "d": 3}, ev, positional="none")
    train_shard(runs, paths, str(tmp_path / "s.npz"))
    df = evaluate_trained(runs, paths, str(tmp_path / "s.npz"), str(tmp_path / "shift.parquet"))
    mine = df[df["model_kind"] == "gpt"]
    assert len(mine) == 2 * 2 * 3 and mine["mse"].notna().all()
    assert mine["theory_mse_learned"].isna().all()                  # the LSA theory is not the GPT's


@pytest.mark.parametrize("model,key,match", [
    ({"heads": 3}, "heads", "3 heads do not divide width=8"),
    ({"positions": 20}, "positions", "evaluate.lengths reaches M=10, a prompt of 2·10+1 = 21 tokens"),
    ({"layers": 0}, "layers", "out of range"),
    ({"positional": "sometimes"}, "positional", "allowed: learned, none"),
])
def test_bad_settings_are_refused_naming_the_key(model, key, match):
    from icl.config import ConfigError, validate
    exp = {"tokens": {"kind": "gaussian", "d": 3}, "task": {"kind": "linear"}, "prompts": {"N": 6, "train": 12, "test": 10},
           "models": [{"name": "g", "kind": "gpt", "optimizer": "adam", "lr": 3e-3, "width": 8, **model}],
           "train": {"epochs": 4}, "evaluate": {"lengths": [3, 10], "shifts": [{"kind": "none"}]}}
    with pytest.raises(ConfigError, match=rf"^experiments\.g\.models\.0\.{key}: .*{re.escape(match)}"):
        validate({"experiments": {"g": exp}})


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
def test_the_same_numbers_on_cuda():
    m, p, x, y = _setup(3, 2, "learned")
    loss, grads = m.loss_and_grads(p, x, y)
    pc = {k: v.cuda() for k, v in p.items()}
    loss_c, grads_c = m.loss_and_grads(pc, x.cuda(), y.cuda())
    torch.testing.assert_close(loss_c.cpu(), loss, rtol=1e-9, atol=1e-12)
    for k in grads:
        torch.testing.assert_close(grads_c[k].cpu(), grads[k], rtol=1e-8, atol=1e-10)


def test_the_query_loss_is_logged_beside_the_objective(tmp_path):
    """A GPT trained on every x position (loss: all) is judged at the query, where uniform attention
    and the oracle are measured: test_query_loss and the summary's final_query_*_loss are ½MSE at
    the query of the final parameters, computed here with the plain module on the stored prompts;
    the objective (mean over positions) stays test_loss. With loss: query the two are one column."""
    from icl.data import read_dataset
    from icl.tables.build import summary_table
    from icl.train.loop import train_shard
    runs, paths = _experiment(tmp_path, {"kind": "discrete", "d": 4, "K": 3, "delta": 2.0})
    sh = train_shard(runs, paths, str(tmp_path / "s.npz"))
    summ = summary_table(sh).set_index("run_id")
    # the time to half of uniform attention's loss is read at the query, where that loss is measured:
    # a query trace falling linearly from 2x to 0.1x of it crosses ½ at 15/19 of the way, whatever the
    # objective (the mean over positions) does
    E = sh["trace_query_loss"].shape[1]
    fake = dict(sh, trace_query_loss=sh["uniform_train_loss"][:, None] * np.linspace(2.0, 0.1, E)[None, :])
    t = summary_table(fake)["t_unif_5e-1"].to_numpy(float)
    cross = 1.5 / 1.9 * (E - 1)
    assert np.all(np.floor(cross) <= t) and np.all(t <= np.ceil(cross))
    assert summ["t_unif_5e-1"].isna().all()       # the runs themselves stay above it at the query
    m = GPT(runs[0]["spec"]["model"], 4)
    params = {k[len("param_"):]: torch.from_numpy(v).double() for k, v in sh.items() if k.startswith("param_")}
    for r, run in enumerate(runs):
        z = read_dataset(paths[run["data_id"]])
        ref = _reference(m, params, r)
        for split in ("train", "test"):
            x, y = (torch.from_numpy(np.asarray(z[f"{split}_{k}"], np.float64)) for k in ("x", "y"))
            with torch.no_grad():
                pred = ref(x, y)
            query = 0.5 * float(((pred[:, -1] - y[:, -1]) ** 2).mean())
            every = 0.5 * float(((pred - y) ** 2).mean())
            assert summ.loc[run["run_id"], f"final_query_{split}_loss"] == pytest.approx(query, rel=1e-4)
            assert summ.loc[run["run_id"], f"final_{split}_loss"] == pytest.approx(every, rel=1e-4)
            assert abs(query - every) > 1e-3 * every             # the two differ: the check can tell them apart
    runs, paths = _experiment(tmp_path / "q", {"kind": "discrete", "d": 4, "K": 3, "delta": 2.0}, loss="query")
    summ = summary_table(train_shard(runs, paths, str(tmp_path / "q.npz")))
    assert (summ["final_query_test_loss"] == summ["final_test_loss"]).all()
    assert (summ["final_query_train_loss"] == summ["final_train_loss"]).all()


def test_crossings_are_read_on_the_trace_averaged_over_the_noisier_windows(tmp_path):
    """summary_table: a GPT trained on every x position whose query trace is noisy (σ = 0.3 in
    log-loss, fresh prompts) and whose objective's trace is not: crossing_window is the query's
    (the larger), t_unif_5e-1 is read on the query trace averaged over it (near the true crossing,
    where the raw trace first dips below half far earlier), and t_abs on the averaged objective."""
    from icl.tables.build import summary_table
    from icl.tables.measures import crossing_time, denoise_windows, denoised
    from icl.train.loop import train_shard
    runs, paths = _experiment(tmp_path, {"kind": "gaussian", "d": 3, "covariance": "identity"})
    sh = train_shard(runs, paths, str(tmp_path / "s.npz"))
    E = 301
    t = np.arange(E, dtype=float)
    true = 0.3 + 0.7 * np.exp(-t / 80)                      # of uniform attention's loss: ½ at 100.2
    ref = sh["uniform_train_loss"][:, None]
    noisy = ref * true * np.exp(np.random.default_rng(0).normal(0, 0.3, (2, E)))
    fake = {k: v for k, v in sh.items() if not k.startswith("trace_")}
    fake.update(trace_train_loss=np.tile(np.exp(-t / 50), (2, 1)), trace_query_loss=noisy,
                trace_zero_loss=np.tile(2 * ref[:, 0:1], (1, E)))
    summ = summary_table(fake)
    w = denoise_windows(noisy)
    assert (denoise_windows(fake["trace_train_loss"]) == 1).all() and (w > 1).all()
    assert summ["crossing_window"].tolist() == w.tolist()
    t_unif = summ["t_unif_5e-1"].to_numpy(float)
    np.testing.assert_allclose(t_unif, crossing_time(denoised(noisy, w) / ref, t, 0.5).to_numpy(float))
    assert np.all(np.abs(t_unif - 100.2) < 25)
    assert np.all(crossing_time(noisy / ref, t, 0.5).to_numpy(float) < 70)     # the raw trace's dips
    np.testing.assert_allclose(summ["t_abs_1e-2"].to_numpy(float),
                               crossing_time(denoised(fake["trace_train_loss"], w), t, 1e-2).to_numpy(float))
