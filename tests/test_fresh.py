"""Fresh prompts made where the model trains (icl.train.streams, icl.train.fresh): the hash against a plain
Python one, the drawn x, w, y against their closed forms at stated Monte Carlo tolerances, a run's
prompts independent of the runs beside it, and the step loop free of host round trips."""
import copy
import math

import numpy as np
import pytest
import torch

from icl.config import ConfigError, validate
from icl.data import STREAM_FRESH, covariance, curriculum_stage, features, write_dataset
from icl.train.fresh import FreshPrompts
from icl.plan.shards import plan
from icl.train.streams import MASK, Stream, run_keys, triple32
from icl.train.loop import ShardTraining, train_shard
from numerics import PINNED
from test_train import resumed_after_kill

CPU = torch.device("cpu")


def _triple32_python(v: int) -> int:
    """Wellons' triple32 as published, in plain 32-bit wrap-around arithmetic."""
    v ^= v >> 17
    v = (v * 0xED5AD4BB) % 2**32
    v ^= v >> 11
    v = (v * 0xAC4C1B51) % 2**32
    v ^= v >> 15
    v = (v * 0x31848BAB) % 2**32
    return v ^ (v >> 14)


def test_hash_equals_the_published_one():
    xs = [0, 1, 2, 0xFFFFFFFF, 0x80000000, 123456789, 0xDEADBEEF] + list(np.random.default_rng(0).integers(0, 2**32, 200))
    got = triple32(torch.tensor(xs, dtype=torch.int64)).tolist()
    assert got == [_triple32_python(int(x)) for x in xs]
    assert all(0 <= g <= MASK for g in got)


def test_the_cpus_numpy_hash_is_the_device_forms_bit_for_bit(monkeypatch):
    """On a CPU the hash runs in numpy's uint32 (`on_host`); on CUDA in int64 torch operations. The
    two must give the same integers, so the same prompts: every draw kind, seeds past 2^32, a
    stream past 2^32, counters near 2^31, and blocks (BLOCK) that cut rows and columns."""
    import icl.train.streams as streams
    seeds = torch.tensor([0, 1, 7, 2**40 + 3, 2**62 + 11])

    def draws():
        st = streams.Stream(seeds, 2**33 + 5)
        k0, k1 = st._keys(9)
        return [st.normal(1, (3, 7, 5), torch.float64), st.uniform(2, (11, 3), torch.float64),
                st.exponential(3, (13,), torch.float64), st._uniform64((k0, k1), 2**31 - 3, 2**31 + 40),
                triple32(torch.tensor([0, 1, 0xFFFFFFFF, 0x80000000]))]
    host = draws()
    monkeypatch.setattr(streams, "BLOCK", 7)           # blocks of 7 values: a row cut in pieces
    small = draws()
    monkeypatch.setattr(streams, "BLOCK", 40)          # several rows a block
    rows = draws()
    monkeypatch.setattr(streams, "on_host", lambda x: False)
    device = draws()
    for a, b, c, d in zip(host, small, rows, device):
        assert torch.equal(a, d) and torch.equal(b, d) and torch.equal(c, d)
    # the uint32 counters stop at 2^32, where the int64 form's would go on: a longer draw is refused
    k0, k1 = streams.Stream(seeds, 0)._keys(1)
    assert streams.uniform64_cpu(k0, k1, 2**32 - 2, 2**32).shape == (5, 2)
    with pytest.raises(ValueError, match="past the stream's 2\\^32 counters"):
        streams.uniform64_cpu(k0, k1, 2**32 - 2, 2**32 + 1)


def test_uniform_normal_exponential_moments():
    """Mean, variance and tails of 2·10⁶ draws each (standard errors: 2e-4 for a mean of unit
    variance; a tolerance of 5 standard errors)."""
    st = Stream(torch.tensor([0, 1]), STREAM_FRESH + 3)
    n = 10**6
    u = st.uniform(1, (n,), torch.float64)
    assert 0 < float(u.min()) and float(u.max()) < 1
    assert abs(float(u.mean()) - 0.5) < 5 * math.sqrt(1 / 12 / (2 * n))
    assert abs(float(u.var()) - 1 / 12) < 5 * math.sqrt(1 / 180 / (2 * n))
    z = st.normal(2, (n,), torch.float64)
    assert abs(float(z.mean())) < 5 / math.sqrt(2 * n)
    assert abs(float(z.var()) - 1) < 5 * math.sqrt(2 / (2 * n))
    assert abs(float((z ** 4).mean()) - 3) < 5 * math.sqrt(96 / (2 * n))
    assert abs(float((z.abs() > 1.959964).double().mean()) - 0.05) < 5 * math.sqrt(0.05 * 0.95 / (2 * n))
    e = st.exponential(3, (n,), torch.float64)
    assert abs(float(e.mean()) - 1) < 5 / math.sqrt(2 * n)
    assert abs(float(e.var()) - 1) < 5 * math.sqrt(8 / (2 * n))
    # neighbours, the two runs, and two purposes are uncorrelated (|r| < 5/√n)
    for a, b in ((z[0, :-1], z[0, 1:]), (z[0], z[1]), (z[0], st.normal(4, (n,), torch.float64)[0])):
        assert abs(float(torch.corrcoef(torch.stack([a, b]))[0, 1])) < 5 / math.sqrt(n)


def test_a_runs_draws_do_not_depend_on_the_runs_beside_it():
    a = Stream(torch.tensor([3, 5]), 7).normal(1, (4, 6))
    b = Stream(torch.tensor([1, 3, 7, 5]), 7).normal(1, (4, 6))
    torch.testing.assert_close(a, b[[1, 3]], rtol=0, atol=0)
    assert not torch.equal(a[0], Stream(torch.tensor([3]), 8).normal(1, (4, 6))[0])       # another epoch: other draws
    k0, k1 = run_keys(torch.tensor([3, 3, 4]), 7, 1)
    assert k0[0] == k0[1] != k0[2] and k0[0] != run_keys(torch.tensor([3]), 7, 2)[0][0] and k0[0] != k1[0]


def test_every_seed_and_epoch_has_a_key_of_its_own():
    """The seeds of a sweep draw independent fresh prompts: no (seed, epoch) shares its key with
    another over the seeds and epochs a sweep uses. The keys once XORed the seed with the stream,
    so that seed 1 at epoch 0 drew what seed 0 drew at epoch 1 (and every seed below 64 the same
    prompts as seed 0, in another order)."""
    from icl.data import STREAM_FRESH
    seeds = torch.arange(64)
    keys = torch.stack([run_keys(seeds, STREAM_FRESH + e, 1)[0] for e in range(256)])     # (epochs, seeds)
    assert len(set(keys.flatten().tolist())) == keys.numel()
    a = Stream(torch.tensor([0, 1]), STREAM_FRESH).normal(1, (50,), torch.float64)
    b = Stream(torch.tensor([0, 1]), STREAM_FRESH + 1).normal(1, (50,), torch.float64)
    assert not torch.equal(a[1], b[0]) and not torch.equal(a[0], b[1])


def test_a_draw_in_spans_equals_it_at_once(monkeypatch):
    """A draw is made CHUNK values at a time (its memory bounded); its numbers are the same."""
    import icl.train.streams as streams
    st = Stream(torch.tensor([3, 5, 9]), 1000007)
    whole = [st.normal(1, (7, 9, 5)), st.uniform(2, (11, 3)), st.exponential(3, (13,))]
    monkeypatch.setattr(streams, "CHUNK", 7)                 # 2 values a run at a time, odd spans
    parts = [st.normal(1, (7, 9, 5)), st.uniform(2, (11, 3)), st.exponential(3, (13,))]
    for a, b in zip(whole, parts):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


def _specs(tokens, task, N=20, P=4000, seeds=(0, 1)):
    raw = {"experiments": {"f": {"tokens": tokens, "task": task, "prompts": {"N": N, "train": P, "test": 4},
                                 "models": [{"name": "m", "kind": "lsa", "optimizer": "adam", "lr": 1e-2}],
                                 "train": {"epochs": 1, "fresh": True}, "sweep": {"seed": list(seeds)}}}}
    return [r.spec for r in plan(validate(raw), "f")]


def test_gaussian_tokens_have_their_covariance_and_linear_labels_their_law():
    """A rotated covariance R diag(λ) Rᵀ: the sample covariance of 4000·21 tokens within 5 standard
    errors entry by entry; y = <w, x> exactly per prompt, with w ~ N(0, I) over prompts."""
    tok = {"kind": "gaussian", "d": 3, "covariance": {"eigenvalues": [3.0, 1.0, 0.25], "rotation_seed": 4}}
    specs = _specs(tok, {"kind": "linear"})
    out = FreshPrompts(specs, None, CPU).draw(0)
    x, y = out["x"].double(), out["y"].double()
    assert x.shape == (2, 4000, 21, 3) and y.shape == (2, 4000, 21) and (out["feat"] == -1).all()
    lam = covariance(tok)
    xs = x.reshape(-1, 3)
    emp = xs.T @ xs / len(xs)
    se = np.sqrt((np.diag(lam)[:, None] * np.diag(lam)[None] + lam ** 2) / len(xs))
    assert np.all(np.abs(emp.numpy() - lam) < 5 * se)
    w = torch.linalg.lstsq(x, y.unsqueeze(-1)).solution[..., 0]          # (R, P, d): each prompt's own w
    torch.testing.assert_close(torch.einsum("rptd,rpd->rpt", x, w), y, atol=2e-5, rtol=1e-5)
    wf = w.reshape(-1, 3)
    assert torch.all((wf.mean(0)).abs() < 5 / math.sqrt(len(wf)))
    torch.testing.assert_close(wf.T @ wf / len(wf), torch.eye(3, dtype=torch.float64), atol=5 * math.sqrt(2 / len(wf)), rtol=0)


def test_random_covariances_follow_the_per_prompt_law():
    """ZFB Thm 4.5's law: per prompt Λ = diag(λ), λ_i ~ scale·Exp(1). A prompt's sample variance of
    coordinate i over its 201 tokens estimates its λ_i: over prompts their mean is scale and their
    variance scale²·(1 + 2/T) (Exp's variance plus the sampling noise of a variance of T normals)."""
    scale, T = 2.0, 201
    specs = _specs({"kind": "random_covariance", "d": 4, "scale": scale}, {"kind": "linear"}, N=T - 1, P=3000)
    x = FreshPrompts(specs, None, CPU).draw(5)["x"].double()
    v = (x ** 2).mean(2).reshape(-1)                                        # per prompt and coordinate
    n = len(v)
    assert abs(float(v.mean()) - scale) < 5 * scale * math.sqrt(1 / n)
    assert abs(float(v.var()) / scale ** 2 - (1 + 2 / T)) < 5 * math.sqrt(8 / n)
    # within a prompt the coordinates are independent (λ_i drawn per coordinate)
    r = torch.corrcoef(torch.stack([(x[..., 0] ** 2).mean(2).reshape(-1), (x[..., 1] ** 2).mean(2).reshape(-1)]))[0, 1]
    assert abs(float(r)) < 5 / math.sqrt(n)


def test_one_ensemble_of_mixed_covariance_kinds_draws_each_run_as_alone():
    """Runs that differ only in their continuous tokens' kind train in one shard (icl.plan.shards.shape_key):
    each run's prompts there are bit for bit those it draws in a shard of its own kind."""
    kinds = [{"kind": "gaussian", "d": 3, "covariance": {"eigenvalues": [3.0, 1.0, 0.25], "rotation_seed": 4}},
             {"kind": "random_covariance", "d": 3, "scale": 2.0}, {"kind": "gaussian", "d": 3},
             {"kind": "random_covariance", "d": 3}]
    alone = [_specs(tok, {"kind": "linear"}, N=6, P=5, seeds=(i,))[0] for i, tok in enumerate(kinds)]
    mixed = FreshPrompts(alone, None, CPU).draw(4)
    for i, spec in enumerate(alone):
        own = FreshPrompts([spec], None, CPU).draw(4)
        for key in ("x", "y", "feat"):
            torch.testing.assert_close(mixed[key][i], own[key][0], rtol=0, atol=0, msg=f"run {i} {key}")
    raw = {"experiments": {"f": {"tokens": kinds[2], "task": {"kind": "linear"}, "prompts": {"N": 6, "train": 5, "test": 4},
                                 "models": [{"name": "m", "kind": "lsa", "optimizer": "adam", "lr": 1e-2}],
                                 "train": {"epochs": 1, "fresh": True}, "sweep": {"tokens": kinds, "seed": [0, 1]}}}}
    assert len({r.shard for r in plan(validate(raw), "f")}) == 1


def test_one_ensemble_refuses_discrete_beside_continuous_tokens():
    """Discrete tokens change the step's shapes (features, K): the plan never puts them beside
    continuous ones, and an ensemble handed both says so rather than drawing one kind for all."""
    discrete = _specs({"kind": "discrete", "d": 4, "K": 3, "delta": 2.0}, {"kind": "cosine", "L": 1.0, "c": 0.5},
                      N=6, P=5, seeds=(0,))
    gaussian = _specs({"kind": "gaussian", "d": 4}, {"kind": "linear"}, N=6, P=5, seeds=(1,))
    with pytest.raises(ValueError, match="mixes discrete and continuous tokens"):
        FreshPrompts(discrete + gaussian, None, CPU)


def test_discrete_tokens_and_cosine_labels():
    """Non-uniform feature frequencies within 5 standard errors of p_k; x is its feature's row; the
    cosine's labels are bounded by L/c, with E[y²] = (L/c)²/2 (φ uniform) and, for two tokens of
    one prompt, E[y y'] = ½(L/c)²·Ω_d(c·|v − v'|) (icl.tasks.cosine_label_cov)."""
    from icl.tasks import cosine_label_cov
    probs = [0.1, 0.2, 0.3, 0.4]
    tok = {"kind": "discrete", "d": 6, "K": 4, "delta": 2.0, "probs": probs}
    task = {"kind": "cosine", "L": 1.5, "c": 0.7}
    specs = _specs(tok, task, N=30, P=3000)
    feats = torch.from_numpy(np.stack([features(s["tokens"], s["seed"]) for s in specs])).float()
    out = FreshPrompts(specs, feats, CPU).draw(2)
    f, x, y = out["feat"], out["x"], out["y"].double()
    n = f.numel()
    share = torch.bincount(f.reshape(-1), minlength=4).double() / n
    assert torch.all((share - torch.tensor(probs)).abs() < 5 * torch.sqrt(torch.tensor(probs) * 0.6 / n))
    torch.testing.assert_close(x, feats[torch.arange(2).view(2, 1, 1), f], rtol=0, atol=0)
    amp = task["L"] / task["c"]
    assert float(y.abs().max()) <= amp * (1 + 1e-6)
    m = y.numel()
    assert abs(float((y ** 2).mean()) - amp ** 2 / 2) < 5 * math.sqrt(amp ** 4 / 8 / (m / 31))   # 31 tokens share a prompt
    C = cosine_label_cov(feats[0].double().numpy(), task["L"], task["c"])
    a, b = f[0, :, 0], f[0, :, 1]                 # two tokens of every prompt: E[y y'] by their features
    for j, k in ((0, 1), (2, 3), (1, 1)):
        sel = (a == j) & (b == k)
        prod = (y[0, :, 0] * y[0, :, 1])[sel]
        assert abs(float(prod.mean()) - C[j, k]) < 5 * amp ** 2 / 2 / math.sqrt(int(sel.sum()))


def test_curriculum_prompts_zero_past_dims_and_short():
    specs = _specs({"kind": "gaussian", "d": 4}, {"kind": "linear"}, N=8, P=16)
    fp = FreshPrompts(specs, None, CPU)
    b = fp.draw(3, {"dims": 2, "points": 5})
    assert b["x"].shape == (2, 16, 5, 4) and b["y"].shape == (2, 16, 5)
    assert torch.all(b["x"][..., 2:] == 0) and torch.all(b["x"][..., :2] != 0)
    full = fp.draw(3, {"dims": 4, "points": 9})
    torch.testing.assert_close(full["x"], fp.draw(3)["x"], rtol=0, atol=0)    # at its end: the same draws


def test_curriculum_stage_of_a_run_sets_the_draw():
    raw = {"experiments": {"c": {"tokens": {"kind": "gaussian", "d": 4}, "task": {"kind": "linear"},
                                 "prompts": {"N": 8, "train": 16, "test": 4},
                                 "models": [{"name": "m", "kind": "lsa", "optimizer": "adam", "lr": 1e-2}],
                                 "train": {"epochs": 20, "fresh": True, "curriculum": {
                                     "dims": {"start": 2, "end": 4, "inc": 1, "interval": 5}}}}}}
    spec = plan(validate(raw), "c")[0].spec
    x = FreshPrompts([spec], None, CPU).draw(7, curriculum_stage(spec, 7))["x"]
    assert torch.all(x[..., 3:] == 0) and torch.all(x[..., :3] != 0)


# ----------------------------------------------------------------------------- in training

GPT = {"experiments": {"g": {
    "tokens": {"kind": "gaussian", "d": 3}, "task": {"kind": "linear"}, "prompts": {"N": 6, "train": 8, "test": 16},
    "models": [{"name": "gpt", "kind": "gpt", "optimizer": "adam", "lr": 3e-3, "layers": 1, "heads": 2, "width": 8,
                "positions": 13}],
    # float32 and eager on every device (tests/numerics.py); test_compiled_step_equals_eager compiles
    "train": {"epochs": 12, "log_every": 6, "checkpoint_every": 5, "fresh": True, **PINNED},
    "sweep": {"seed": [0, 1, 2]}}}}


def _gpt(tmp_path, also=(), seeds=None, sweep=None, **train):
    """GPT's runs (with the models `also` beside its GPT, on `seeds`, or over `sweep`), their
    datasets written."""
    raw = copy.deepcopy(GPT)
    raw["experiments"]["g"]["train"].update(train)
    raw["experiments"]["g"]["models"] += list(also)
    if seeds is not None or sweep is not None:
        raw["experiments"]["g"]["sweep"] = sweep or {"seed": seeds}
    runs = plan(validate(raw), "g")
    paths = {}
    for r in runs:
        paths[r.data_id] = str(tmp_path / f"{r.data_id}.npz")
        write_dataset(r.data_spec, paths[r.data_id])
    return [{"run_id": r.run_id, "data_id": r.data_id, "spec": r.spec} for r in runs], paths


def test_a_run_trains_the_same_in_shards_of_other_composition(tmp_path):
    recs, paths = _gpt(tmp_path)
    together = train_shard(recs, paths, str(tmp_path / "all.npz"))
    apart = train_shard([recs[2], recs[0]], paths, str(tmp_path / "two.npz"))
    for key in ("trace_train_loss", "train_loss", "test_loss", "param_attn_w"):
        np.testing.assert_allclose(apart[key][0], together[key][2], rtol=1e-5, atol=1e-7, err_msg=key)
        np.testing.assert_allclose(apart[key][1], together[key][0], rtol=1e-5, atol=1e-7, err_msg=key)


def test_a_shard_of_both_covariance_kinds_trains_each_run_as_its_own_kinds_shard(tmp_path):
    """zfb_gpt's sweep over fixed and random covariances is one shard since the kinds share a step's
    shapes (the plan: test_one_ensemble_of_mixed_covariance_kinds_draws_each_run_as_alone): each run's
    logged numbers are those of the shards split by kind, to float32's rounding (a CPU's batched
    matmuls may round otherwise at another number of runs, as in
    test_a_run_trains_the_same_in_shards_of_other_composition; the default zfb_gpt's GPTs moved by
    at most 5e-6 relative when its shards merged, its LSA not at all)."""
    recs, paths = _gpt(tmp_path, sweep={"tokens": [{"kind": "gaussian", "d": 3},
                                                   {"kind": "random_covariance", "d": 3, "scale": 2.0}], "seed": [0, 1]})
    together = train_shard(recs, paths, str(tmp_path / "all.npz"))
    row = {str(r): i for i, r in enumerate(together["run_id"])}
    for kind in ("gaussian", "random_covariance"):
        part = [r for r in recs if r["spec"]["tokens"]["kind"] == kind]
        apart = train_shard(part, paths, str(tmp_path / f"{kind}.npz"))
        for j, r in enumerate(apart["run_id"]):
            for key in ["trace_train_loss", "train_loss", "test_loss"] + [k for k in apart if k.startswith("param_")]:
                np.testing.assert_allclose(apart[key][j], together[key][row[str(r)]], rtol=1e-5, atol=1e-7,
                                           err_msg=f"{kind} {key}")


def test_a_shard_in_chunks_equals_it_whole(tmp_path, monkeypatch):
    """A job splits its shard into chunks that suit the device (here 2 runs, then 1): the chunks'
    files are merged into the shard's and removed; every run's numbers are those of the whole."""
    from icl.models.gpt import GPT as GPTKind
    recs, paths = _gpt(tmp_path)
    whole = train_shard(recs, paths, str(tmp_path / "whole.npz"))
    monkeypatch.setattr(GPTKind, "ensemble_cap", classmethod(lambda cls, spec: 2))
    out = str(tmp_path / "chunked.npz")
    chunked = train_shard(recs, paths, out, threads=2)
    assert sorted(p.name for p in tmp_path.iterdir() if "chunked" in p.name) == ["chunked.npz"]
    assert set(chunked) == set(whole)
    assert list(chunked["run_id"]) == list(whole["run_id"])
    # the key bias (part of attn_b) has a zero gradient in exact arithmetic (softmax ignores a shift),
    # so Adam turns its rounding noise into steps of size lr: not compared
    for key in set(whole) - {"seconds", "threads", "param_attn_b"}:
        if whole[key].dtype.kind == "f":
            np.testing.assert_allclose(chunked[key], whole[key], rtol=1e-5, atol=1e-7, err_msg=key)
        else:
            np.testing.assert_array_equal(chunked[key], whole[key], err_msg=key)


def test_resumed_fresh_run_equals_an_unbroken_one(tmp_path):
    recs, paths = _gpt(tmp_path)
    ref = train_shard(recs, paths, str(tmp_path / "ref.npz"))
    res = resumed_after_kill(recs, paths, str(tmp_path / "res.npz"))
    for key in set(ref) - {"seconds"}:
        np.testing.assert_array_equal(res[key], ref[key], err_msg=key)


def test_the_step_loop_never_waits_for_the_host(tmp_path, monkeypatch):
    """Between logged epochs nothing is copied to the host: no .cpu(), .item(), .numpy(), .tolist()
    and no tensor read as a Python bool or number (each of those waits for a GPU's queue). The
    stream's hash runs in its device form, as on CUDA (on a CPU it reads its tensors through numpy
    views, which copy nothing: `on_host`)."""
    import icl.train.streams as streams
    monkeypatch.setattr(streams, "on_host", lambda x: False)
    recs, paths = _gpt(tmp_path)
    sh = ShardTraining(recs, paths, CPU)
    sh.train_epoch(0)                                   # a logged epoch (0) may copy
    calls = []
    for name in ("cpu", "item", "numpy", "tolist", "__bool__", "__int__", "__float__", "new_tensor"):
        orig = getattr(torch.Tensor, name)
        monkeypatch.setattr(torch.Tensor, name, lambda self, *a, _n=name, _o=orig, **k: calls.append(_n) or _o(self, *a, **k))
    for name in ("tensor", "as_tensor", "from_numpy"):          # a copy from the host (on CUDA it waits too)
        orig = getattr(torch, name)
        monkeypatch.setattr(torch, name, lambda *a, _n=name, _o=orig, **k: calls.append(_n) or _o(*a, **k))
    for epoch in range(1, 6):                           # not on the logging grid (every 6)
        sh.train_epoch(epoch)
    monkeypatch.undo()
    assert calls == []
    assert np.isnan(sh.trace.arrays["train_loss"][:, 1:6]).all()          # still on the device
    sh.train_epoch(6)                                   # a logged epoch copies what the steps left there
    assert np.isfinite(sh.trace.arrays["train_loss"][:, :6]).all()


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA: torch's sync debug mode watches the GPU's queue")
def test_no_step_synchronises_with_a_gpu(tmp_path):
    """On CUDA, torch raises on any operation that waits for the GPU (sync debug mode 'error')."""
    recs, paths = _gpt(tmp_path)
    sh = ShardTraining(recs, paths, torch.device("cuda"))
    sh.train_epoch(0)
    torch.cuda.set_sync_debug_mode("error")
    try:
        for epoch in range(1, 6):
            sh.train_epoch(epoch)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    sh.train_epoch(6)
    assert np.isfinite(sh.trace.arrays["train_loss"][:, :6]).all()


def test_a_diverging_run_is_frozen_and_marked_at_its_epoch(tmp_path, monkeypatch):
    """Run 1's step returns a NaN loss at epoch 4 (off the logging grid): it is marked 4 and
    frozen from then on; the others train on."""
    recs, paths = _gpt(tmp_path)
    sh = ShardTraining(recs, paths, CPU)
    step, state = sh.model.step, {"epoch": 0}

    def poisoned(params, batch):
        out = step(params, batch)
        if state["epoch"] != 4:
            return out
        loss = out.loss.clone()
        loss[1] = float("nan")
        return out._replace(loss=loss)
    monkeypatch.setattr(sh.model, "step", poisoned)
    for epoch in range(12):
        state["epoch"] = epoch
        if epoch == 5:
            frozen = {k: v[1].clone() for k, v in sh.params.items()}
        sh.train_epoch(epoch)
    sh.log(12)
    out = sh.result(0.0)
    assert out["diverged_at"].tolist() == [-1, 4, -1]
    assert np.isnan(out["trace_train_loss"][1, 5:12]).all() and np.isfinite(out["trace_train_loss"][1, :4]).all()
    assert np.isfinite(out["trace_train_loss"][[0, 2], :12]).all()
    for k, v in sh.params.items():
        torch.testing.assert_close(v[1], frozen[k], rtol=0, atol=0)


def test_bf16_losses_agree_with_float32(tmp_path):
    """bf16 autocast of the GPT's blocks (float32 weights, optimizer, loss) over 50 steps: every
    run's loss at every step within 3 % of float32's (bf16 keeps 8 bits of mantissa: a relative
    rounding of 0.4 % per matmul, which 50 Adam steps of a 1-layer model do not grow past that)."""
    recs, paths = _gpt(tmp_path, epochs=50, log_every=25, checkpoint_every=100)
    f32 = train_shard(recs, paths, str(tmp_path / "f32.npz"))
    recs_bf16 = [{**r, "spec": {**r["spec"], "train": {**r["spec"]["train"], "precision": "bf16"}}} for r in recs]
    b16 = train_shard(recs_bf16, paths, str(tmp_path / "bf16.npz"))
    assert str(b16["precision"]) == "bf16" and str(f32["precision"]) == "float32"
    rel = np.abs(b16["trace_train_loss"] - f32["trace_train_loss"]) / f32["trace_train_loss"]
    assert rel.max() < 0.03, f"bf16 against float32: max relative difference {rel.max():.3g}"
    assert rel.max() > 0                                # it did train in another precision


@pytest.mark.parametrize("precision", ["bf16", {"cpu": "float32", "cuda": "bf16"}])
def test_bf16_refused_for_an_experiment_without_blocks(precision):
    raw = copy.deepcopy(GPT)
    raw["experiments"]["g"]["models"] = [{"name": "lsa", "kind": "lsa", "optimizer": "adam", "lr": 1e-2}]
    raw["experiments"]["g"]["train"]["precision"] = precision
    with pytest.raises(ConfigError, match=r"g\.train\.precision: bf16 .* lsa has none; bf16 is for experiments with the kinds gpt"):
        validate(raw)


@pytest.mark.parametrize("precision,words", [
    ("bf32", "precision: 'bf32' is not allowed; matmul precision"),
    ({"gpu": "bf16"}, "precision: unknown key 'gpu'; allowed keys: cpu, cuda"),
    ({"cuda": "fp16"}, "precision.cuda: 'fp16' is not allowed; allowed: float32, tf32, bf16"),
    ({}, "precision: must not be empty")])
def test_a_bad_precision_is_named(precision, words):
    raw = copy.deepcopy(GPT)
    raw["experiments"]["g"]["train"]["precision"] = precision
    with pytest.raises(ConfigError) as e:
        validate(raw)
    assert str(e.value).startswith("experiments.g.train." + words), str(e.value)


PRECISIONS = [  # setting, device type, the kind has blocks to autocast -> what the job trains in
    (None, "cpu", True, "float32"), (None, "cuda", True, "tf32"), ("tf32", "cpu", True, "float32"),
    ("bf16", "cpu", True, "bf16"), ("bf16", "cuda", False, "tf32"), ("bf16", "cpu", False, "float32"),
    ({"cuda": "bf16"}, "cpu", True, "float32"), ({"cuda": "bf16"}, "cuda", True, "bf16"),
    ({"cpu": "bf16"}, "cuda", True, "tf32"), ({"cpu": "float32", "cuda": "float32"}, "cuda", True, "float32"),
    ({"cpu": "tf32", "cuda": "bf16"}, "cpu", True, "float32"), ({"cuda": "bf16"}, "cuda", False, "tf32")]


@pytest.mark.parametrize("setting,device,blocks,expected", PRECISIONS)
def test_the_precision_a_job_takes_on_its_device(setting, device, blocks, expected):
    from icl.jobs.runtime import precision_on
    assert precision_on(setting, device, blocks) == expected


def test_a_precision_per_device_trains_in_this_devices_entry(tmp_path):
    """{cpu: float32, cuda: bf16} (autocast on CUDA only, as nanoGPT) trains on the CPU bit for bit as
    float32 and says float32; {cpu: bf16} autocasts here and says bf16."""
    recs, paths = _gpt(tmp_path, epochs=8, log_every=4, checkpoint_every=100)
    at = lambda p: [{**r, "spec": {**r["spec"], "train": {**r["spec"]["train"], "precision": p}}} for r in recs]
    f32 = train_shard(recs, paths, str(tmp_path / "f32.npz"), device="cpu")       # on the CPU on any machine
    cuda_only = train_shard(at({"cpu": "float32", "cuda": "bf16"}), paths, str(tmp_path / "cuda_only.npz"), device="cpu")
    here = train_shard(at({"cuda": "tf32", "cpu": "bf16"}), paths, str(tmp_path / "here.npz"), device="cpu")
    assert (str(f32["precision"]), str(cuda_only["precision"]), str(here["precision"])) == ("float32", "float32", "bf16")
    np.testing.assert_array_equal(cuda_only["trace_train_loss"], f32["trace_train_loss"])
    assert not np.array_equal(here["trace_train_loss"], f32["trace_train_loss"])


def test_bf16_beside_a_kind_without_blocks_trains_that_kind_at_the_devices_default(tmp_path):
    """ZFB §5's GPT beside the trained LSA: bf16 autocasts the GPT's blocks; the LSA's shard, with
    nothing to autocast, trains in the device's default (a CPU's float32: the test trains on the CPU
    on any machine) and its record says so."""
    recs, paths = _gpt(tmp_path, also=[{"name": "lsa", "kind": "lsa", "optimizer": "adam", "lr": 1e-2}], seeds=[0],
                       precision="bf16")
    said = {r["spec"]["model"]["kind"]: str(train_shard([r], paths, str(tmp_path / f"{r['run_id']}.npz"), device="cpu")["precision"])
            for r in recs}
    assert said == {"gpt": "bf16", "lsa": "float32"}


@pytest.mark.parametrize("fails_at", [1, 20])
def test_a_step_torch_cannot_compile_is_made_eagerly(tmp_path, monkeypatch, capfd, fails_at):
    """Where torch cannot compile (here its compiled functions raise from their `fails_at`-th call
    on: the first draw, or a step in the seventh epoch, as a new shape can), that call is made again
    eagerly and so is the rest: the run ends with an eager run's numbers, bit for bit (nothing
    stepped twice, no epoch rerun), the log says why and the shard says it was not compiled. Before,
    only a failure in the first epoch fell back, by rerunning that epoch; a later one ended the job."""
    recs, paths = _gpt(tmp_path)
    eager = train_shard(recs, paths, str(tmp_path / "eager.npz"))
    calls = []

    def cannot(fn, **kw):
        def compiled(*a, **k):
            calls.append(fn)
            if len(calls) >= fails_at:
                raise RuntimeError("no C compiler (a stand-in for inductor's error)")
            return fn(*a, **k)
        return compiled
    monkeypatch.setattr(torch, "compile", cannot)
    recs_c, _ = _gpt(tmp_path, compile=True)
    out = train_shard(recs_c, paths, str(tmp_path / "fell-back.npz"))
    assert len(calls) == fails_at and not bool(out["compiled"])
    assert capfd.readouterr().err.count("compiling the step failed (RuntimeError: no C compiler") == 1
    params = [k for k in eager.keys() if k.startswith("param_")]
    assert len(params) > 3
    for key in ("trace_train_loss", "train_loss", "test_loss", *params):
        np.testing.assert_array_equal(out[key], eager[key], err_msg=key)


@pytest.mark.slow
@pytest.mark.parametrize("mode", [True, "graphs"])
def test_compiled_step_equals_eager(tmp_path, mode):
    """torch.compile of the GPT's forward and loss and of Adam's update (inductor, on the CPU: about
    a minute to compile) gives the eager losses over 12 steps, and the shard says how it was compiled.
    `graphs` (CUDA graphs of the forward and backward on a GPU) is, on a CPU, the compiled step:
    the same numbers, through the same path a GPU takes (the clones of the graphs' outputs)."""
    recs, paths = _gpt(tmp_path)
    eager = train_shard(recs, paths, str(tmp_path / "eager.npz"))
    recs_c, _ = _gpt(tmp_path, compile=mode)
    assert [r["run_id"] for r in recs_c] == [r["run_id"] for r in recs]      # the same runs, another path
    comp = train_shard(recs_c, paths, str(tmp_path / "compiled.npz"))
    assert str(comp["compiled"]) == ("graphs" if mode == "graphs" else "yes") and not bool(eager["compiled"])
    for key in ("trace_train_loss", "test_loss", "param_attn_w"):
        np.testing.assert_allclose(comp[key], eager[key], rtol=2e-4, atol=1e-6, err_msg=key)
