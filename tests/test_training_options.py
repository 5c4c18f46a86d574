"""Training options of the anchors' code (train.warmup, schedule, clip, curriculum) and the
escape from a plateau (t_escape): each against an independent computation."""
import copy
import math

import numpy as np
import pytest
import torch

from icl.config import ConfigError, validate
from icl.data import curriculum_stage, write_dataset
from icl.tables.measures import escape_time, summary_table
from icl.train.optim import Adam, GD, Schedule, clip_grads, lr_factor
from icl.plan.shards import plan
from icl.train.loop import train_shard

LINEAR = {"experiments": {"lin": {
    "tokens": {"kind": "gaussian", "d": 4, "covariance": "identity"},
    "task": {"kind": "linear"},
    "prompts": {"N": 8, "train": 16, "test": 32},
    "models": [{"name": "lsa", "kind": "lsa", "optimizer": "adam", "lr": 2e-2, "init_scale": 0.3}],
    "train": {"epochs": 40, "log_every": 10, "fresh": True},
    "sweep": {"seed": [0, 1]},
}}}


def _linear(**train):
    raw = copy.deepcopy(LINEAR)
    raw["experiments"]["lin"]["train"].update(train)
    return raw


# ----------------------------------------------------------------------------- the lr sequence

def _reference_factor(t, total, warmup, schedule):
    """The schedules written out independently (HF transformers' definitions)."""
    if t < warmup:
        return t / warmup
    frac = (t - warmup) / (total - warmup)
    return {"constant": 1.0, "linear": 1.0 - frac, "cosine": (1 + math.cos(math.pi * frac)) / 2}[schedule]


@pytest.mark.parametrize("schedule", ["constant", "linear", "cosine"])
def test_lr_factor_exact(schedule):
    total, warmup = 50, 10
    got = [lr_factor(t, total, warmup, schedule) for t in range(total)]
    want = [_reference_factor(t, total, warmup, schedule) for t in range(total)]
    assert got == pytest.approx(want, abs=1e-15)
    assert got[0] == 0.0 and got[5] == 0.5 and got[10] == 1.0          # from 0, linear, to lr


def test_cosine_matches_torch_scheduler():
    """After the warmup the cosine is torch's CosineAnnealingLR to 0 over the remaining steps."""
    p = torch.nn.Parameter(torch.zeros(1))
    opt = torch.optim.SGD([p], lr=1.0)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=30, eta_min=0.0)
    theirs = []
    for _ in range(30):
        theirs.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    ours = [lr_factor(t, 40, 10, "cosine") for t in range(10, 40)]
    np.testing.assert_allclose(ours, theirs, atol=1e-12)


def _train(**given):
    """A validated train section's settings (the schema's defaults beside `given`)."""
    from icl.settings import Train
    return Train.of({"log_every": 1, "checkpoint_every": 50, "fresh": False, **given})


def test_schedule_keeps_each_runs_lr():
    lrs = torch.tensor([1e-3, 1e-2, 0.5], dtype=torch.float64)
    s = Schedule(lrs, _train(epochs=20, warmup=4, schedule="linear"), steps_per_epoch=2)
    for step in (0, 1, 3, 4, 17, 39):
        np.testing.assert_allclose(s.at(step).numpy(), lrs.numpy() * _reference_factor(step, 40, 4, "linear"))
    plain = Schedule(lrs, _train(epochs=20), 2)
    assert plain.at(7) is lrs


def test_scheduled_adam_equals_torch_adam_with_lambda_lr():
    """Our Adam stepped with each run's scheduled lr equals torch.optim.Adam + LambdaLR per run."""
    g = torch.Generator().manual_seed(0)
    lrs = [1e-2, 3e-2]
    p0 = torch.randn(2, 3, generator=g, dtype=torch.float64)
    grads = [torch.randn(2, 3, generator=g, dtype=torch.float64) for _ in range(12)]
    sched = Schedule(torch.tensor(lrs, dtype=torch.float64), _train(epochs=12, warmup=3, schedule="cosine"), 1)
    params, opt = {"w": p0.clone()}, Adam(torch.tensor(lrs, dtype=torch.float64))
    for t, gr in enumerate(grads):
        opt.step(params, {"w": gr}, torch.ones(2, dtype=torch.bool), sched.at(t))
    for r, lr in enumerate(lrs):
        w = p0[r].clone().requires_grad_(True)
        ref = torch.optim.Adam([w], lr=lr)
        lam = torch.optim.lr_scheduler.LambdaLR(ref, lambda t: _reference_factor(t, 12, 3, "cosine"))
        for gr in grads:
            w.grad = gr[r].clone()
            ref.step()
            lam.step()
        torch.testing.assert_close(params["w"][r], w.detach(), rtol=1e-12, atol=1e-12)


# ----------------------------------------------------------------------------- clipping

def test_clip_acts_on_each_run_alone():
    g = torch.Generator().manual_seed(1)
    grads = {"a": torch.randn(3, 4, 5, generator=g, dtype=torch.float64),
             "b": torch.randn(3, 7, generator=g, dtype=torch.float64)}
    grads["a"][1] *= 100.0                   # one run's gradient is huge
    clipped = clip_grads(grads, 2.0)
    for r in range(3):
        ref = [torch.nn.Parameter(torch.zeros_like(grads[k][r])) for k in ("a", "b")]
        for p, k in zip(ref, ("a", "b")):
            p.grad = grads[k][r].clone()
        torch.nn.utils.clip_grad_norm_(ref, 2.0)
        for p, k in zip(ref, ("a", "b")):
            torch.testing.assert_close(clipped[k][r], p.grad, rtol=1e-12, atol=1e-12)
    norms = torch.sqrt(sum(v.flatten(1).pow(2).sum(1) for v in clipped.values()))
    assert norms[1] == pytest.approx(2.0, rel=1e-6)
    untouched = torch.sqrt(sum(v.flatten(1).pow(2).sum(1) for v in grads.values()))
    for r in (0, 2):                          # the others keep theirs where under the clip
        if untouched[r] < 2.0:
            torch.testing.assert_close(clipped["a"][r], grads["a"][r])


# ----------------------------------------------------------------------------- curriculum

CURRICULUM = {"dims": {"start": 2, "end": 4, "inc": 1, "interval": 5},
              "points": {"start": 3, "end": 9, "inc": 2, "interval": 4}}


def test_curriculum_stage_follows_garg():
    spec = validate(_linear(curriculum=CURRICULUM))
    run = plan(spec, "lin")[0]
    for step, dims, points in ((0, 2, 3), (3, 2, 3), (4, 2, 5), (5, 3, 5), (10, 4, 7), (12, 4, 9), (400, 4, 9)):
        assert curriculum_stage(run.spec, step) == {"dims": dims, "points": points}, step


def test_curriculum_logged_as_curves(tmp_path):
    cfg = validate(_linear(curriculum=CURRICULUM))
    runs = plan(cfg, "lin")
    path = str(tmp_path / "d.npz")
    write_dataset(runs[0].data_spec, path)
    recs = [{"run_id": r.run_id, "data_id": r.data_id, "spec": r.spec} for r in runs[:1]]
    out = train_shard(recs, {runs[0].data_id: path}, str(tmp_path / "s.npz"))
    np.testing.assert_array_equal(out["curriculum_dims"][0], [2, 4, 4, 4, 4])        # epochs 0, 10, 20, 30, 40
    np.testing.assert_array_equal(out["curriculum_points"][0], [3, 7, 9, 9, 9])


BAD = [
    ({"warmup": 41}, "lin.train.warmup: 41 steps is longer than the run"),
    ({"schedule": "step"}, "lin.train.schedule"),
    ({"clip": 0}, "lin.train.clip"),
    ({"curriculum": {"dims": {"start": 2, "end": 5, "inc": 1, "interval": 5}}}, "curriculum.dims.end: 5 exceeds tokens.d = 4"),
    ({"curriculum": {"points": {"start": 2, "end": 10, "inc": 1, "interval": 5}}}, "curriculum.points.end: 10 exceeds prompts.N + 1"),
    ({"curriculum": {"points": {"start": 2, "end": 9, "inc": 1, "interval": 0}}}, "curriculum.points.interval"),
    ({"curriculum": {"dims": {"start": 2, "end": 4, "inc": 1, "interval": 5}}, "fresh": False}, "needs train.fresh: true"),
]


@pytest.mark.parametrize("train,words", BAD, ids=[w[:30] for _, w in BAD])
def test_bad_training_options_named(train, words):
    with pytest.raises(ConfigError) as e:
        validate(_linear(**train))
    assert words in str(e.value) and "\n" not in str(e.value)


def test_options_change_the_run_ids_only_when_set():
    """Absent options leave a run as it was (its id, so nothing retrains); set ones make it new."""
    ids = lambda raw: [r.run_id for r in plan(validate(raw), "lin")]
    assert ids(_linear()) == ids(copy.deepcopy(LINEAR))
    assert set(ids(_linear(warmup=5))).isdisjoint(ids(_linear()))


# ----------------------------------------------------------------------------- t_escape

def test_escape_time_on_a_noisy_plateau():
    """A trace as a fresh-prompt run makes it: the zero predictor's error ~5 with the batch's noise,
    the model's error at it for 300 epochs, then falling; t_escape within a window of the drop."""
    rng = np.random.default_rng(0)
    E = 1000
    zero = 2.5 * (1 + 0.2 * rng.standard_normal((3, E)))
    level = np.concatenate([np.ones(300), np.exp(-np.arange(E - 300) / 100)])
    query = zero * level * (1 + 0.2 * rng.standard_normal((3, E)))
    query[2] = zero[2] * 0.9                   # never leaves
    t = escape_time(query, zero, 10)
    true = 300 + 100 * math.log(2)            # where the mean level crosses one half
    assert abs(t[0] - true) <= 12 and abs(t[1] - true) <= 12
    assert t[2] is pd_na()


def pd_na():
    import pandas as pd
    return pd.NA


def test_t_escape_from_training(tmp_path):
    """An LSA on fresh prompts learns: its trace's query error equals its objective (the LSA's
    loss reads the query only), the zero predictor's is ½E[y²] = ½d, and t_escape is measured."""
    cfg = validate(_linear(epochs=150))
    runs = plan(cfg, "lin")
    paths = {}
    for r in runs:
        paths[r.data_id] = str(tmp_path / f"{r.data_id}.npz")
        write_dataset(r.data_spec, paths[r.data_id])
    recs = [{"run_id": r.run_id, "data_id": r.data_id, "spec": r.spec} for r in runs]
    out = train_shard(recs, paths, str(tmp_path / "s.npz"))
    np.testing.assert_allclose(out["trace_query_loss"], out["trace_train_loss"], rtol=1e-6)
    assert np.nanmean(out["trace_zero_loss"]) == pytest.approx(0.5 * 4, rel=0.15)
    summ = summary_table(out)
    assert summ["t_escape"].notna().all()
    t = summ["t_escape"].to_numpy(int)
    ratio = out["trace_query_loss"] / out["trace_zero_loss"]
    assert np.all(ratio[np.arange(2), t] < 0.8) and np.all(ratio[:, 0] > 0.5)
