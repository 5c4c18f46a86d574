"""Training a shard: the ensemble equals each run trained alone; attention maps; divergence;
resume from a checkpoint gives the same numbers as an unbroken run."""
import os
import re

import numpy as np
import pytest

from icl.config import validate
from icl.data import write_dataset
from icl.plan.shards import plan
from icl.tables.measures import summary_table
from icl.train.loop import train_shard


@pytest.fixture
def tiny_plan(tiny_raw, tmp_path):
    cfg = validate(tiny_raw)
    runs = plan(cfg, "tiny")
    paths = {}
    for r in runs:
        if r.data_id not in paths:
            paths[r.data_id] = str(tmp_path / f"{r.data_id}.npz")
            write_dataset(r.data_spec, paths[r.data_id])
    recs = [{"run_id": r.run_id, "data_id": r.data_id, "shard": r.shard, "spec": r.spec} for r in runs]
    return recs, paths, tmp_path


def _members(recs, kind):
    return [r for r in recs if r["spec"]["model"]["kind"] == kind]


@pytest.mark.parametrize("kind", ["softmax_q", "transformer_block"])
def test_ensemble_equals_runs_alone(tiny_plan, kind):
    recs, paths, tmp = tiny_plan
    members = _members(recs, kind)
    together = train_shard(members, paths, str(tmp / "all.npz"))
    for i, r in enumerate(members):
        alone = train_shard([r], paths, str(tmp / f"one{i}.npz"))
        for key in ("train_loss", "test_loss", "attn_own", "attn"):
            np.testing.assert_allclose(together[key][i], alone[key][0], rtol=2e-5, atol=1e-7, err_msg=key)
    # the loss goes down for every run
    assert np.all(together["train_loss"][:, -1] < together["train_loss"][:, 0])


def test_attention_map_columns_sum_to_one(tiny_plan):
    recs, paths, tmp = tiny_plan
    out = train_shard(_members(recs, "softmax_q"), paths, str(tmp / "a.npz"))
    attn = out["attn"]                                   # (R, E, key k, query j)
    np.testing.assert_allclose(attn.sum(2), 1.0, atol=1e-5)
    # zero init: uniform attention over tokens, so the map at epoch 0 is the feature frequencies
    assert np.all(out["q_features"][:, 0] == 0)
    np.testing.assert_allclose(out["attn_own"], np.diagonal(attn, axis1=2, axis2=3).mean(-1), rtol=1e-6)


def _replay_gd(r, paths):
    """softmax_q retrained by hand with plain GD on the token form: the loss before each step
    (epochs 0..E) and Q after the last step."""
    import torch
    from icl.data import read_dataset
    from icl.models import SoftmaxQ
    ds = read_dataset(paths[r["data_id"]])
    m = SoftmaxQ({}, 6)
    p = m.init([0], ["sq"], "cpu")
    x, y = torch.from_numpy(ds["train_x"])[None], torch.from_numpy(ds["train_y"])[None]
    losses = []
    for _ in range(r["spec"]["train"]["epochs"]):
        loss, g = m.loss_and_grads(p, x, y)
        losses.append(loss.item())
        p["Q"] = p["Q"] - r["spec"]["model"]["lr"] * g["Q"]
    losses.append(m.loss_and_grads(p, x, y)[0].item())
    return np.asarray(losses), p["Q"][0].numpy(), ds


def test_q_features_formula(tiny_plan):
    """q_features[i, j] = v_j^T Q v_i, checked against the parameters after a short run."""
    recs, paths, tmp = tiny_plan
    r = _members(recs, "softmax_q")[0]
    out = train_shard([r], paths, str(tmp / "q.npz"))
    _, Q, ds = _replay_gd(r, paths)
    V = ds["features"]
    expect = np.array([[V[j] @ Q @ V[i] for j in range(3)] for i in range(3)])
    np.testing.assert_allclose(out["q_features"][0, -1], expect, rtol=1e-4, atol=1e-6)


def test_divergence_is_contained(tiny_plan):
    recs, paths, tmp = tiny_plan
    from icl.data import read_dataset
    members = [dict(r) for r in _members(recs, "softmax_q")]
    bad = read_dataset(paths[members[1]["data_id"]])
    bad["train_y"][3, 5] = np.inf                        # one poisoned label makes run 1 NaN
    np.savez(tmp / "bad.npz", **bad)
    members[1] = {**members[1], "data_id": "bad"}
    out = train_shard(members, {**paths, "bad": str(tmp / "bad.npz")}, str(tmp / "d.npz"))
    assert out["diverged_at"][1] >= 0
    assert np.all(out["diverged_at"][[0, 2, 3]] < 0)
    assert np.isfinite(out["train_loss"][[0, 2, 3]]).all()
    assert np.isnan(out["train_loss"][1, -1])
    summ = summary_table(out)
    assert summ["diverged"].tolist() == [False, True, False, False]


def resumed_after_kill(runs, paths, out: str, at: int = 7) -> dict:
    """train_shard killed (KeyboardInterrupt) once `at` epochs are done, after the checkpoint a
    killed job leaves behind, then run again: what the rerun returns."""
    import icl.train.loop as T
    orig = T.Progress.update

    def boom(self, done, *a, **k):
        orig(self, done, *a, **k)
        if done == at:
            raise KeyboardInterrupt
    T.Progress.update = boom
    try:
        with pytest.raises(KeyboardInterrupt):
            train_shard(runs, paths, out)
    finally:
        T.Progress.update = orig
    assert os.path.exists(out + ".ckpt") and not os.path.exists(out)
    res = train_shard(runs, paths, out)
    assert not os.path.exists(out + ".ckpt")
    return res


@pytest.mark.parametrize("kind", ["softmax_q", "transformer_block"])
def test_resume_from_checkpoint_is_exact(tiny_plan, kind):
    recs, paths, tmp = tiny_plan
    members = _members(recs, kind)
    ref = train_shard(members, paths, str(tmp / "ref.npz"))
    res = resumed_after_kill(members, paths, str(tmp / "res.npz"))
    assert set(res) == set(ref)
    for key in set(ref) - {"seconds"}:                   # every logged array and final parameter
        np.testing.assert_array_equal(res[key], ref[key], err_msg=key)


def test_damaged_checkpoint_is_moved_aside_and_the_shard_retrains(tiny_plan, capfd):
    """Issue 64.5: a damaged checkpoint is kept for inspection beside its name and the shard trains
    from epoch 0 under the same command, to the numbers of a run that never had one."""
    recs, paths, tmp = tiny_plan
    members = _members(recs, "softmax_q")
    out = str(tmp / "x.npz")
    with open(out + ".ckpt", "wb") as fh:
        fh.write(b"not a checkpoint")
    got = train_shard(members, paths, out)
    err = capfd.readouterr().err
    assert re.search(r"checkpoint .*x\.npz\.ckpt is damaged \(UnpicklingError\): moved aside to .*x\.npz\.ckpt\.damaged-"
                     r"\d{8}-\d{6} \(kept for inspection\); this shard restarts from epoch 0", err), err
    kept = list(tmp.glob("x.npz.ckpt.damaged-*"))
    assert len(kept) == 1 and kept[0].read_bytes() == b"not a checkpoint" and not os.path.exists(out + ".ckpt")
    ref = train_shard(members, paths, str(tmp / "clean.npz"))
    for key in set(ref) - {"seconds"}:
        np.testing.assert_array_equal(got[key], ref[key], err_msg=key)


class Payload:
    """Unpickled, it would create the file `path`: what a checkpoint must never be able to do."""

    def __init__(self, path):
        self.path = path

    def __reduce__(self):
        return open, (self.path, "w")


def test_checkpoint_holding_python_objects_is_refused(tiny_plan):
    """A checkpoint is data: one that carries a pickled object is refused with its path and what
    to do, and the object is never unpickled. One written by training loads (weights_only)."""
    import torch
    recs, paths, tmp = tiny_plan
    members = _members(recs, "softmax_q")
    out = str(tmp / "p.npz")
    marker = tmp / "unpickled"
    torch.save({"run_ids": [r["run_id"] for r in members], "epoch": 5, "params": Payload(str(marker))},
               out + ".ckpt")
    with pytest.raises(RuntimeError, match=r"checkpoint .*p\.npz\.ckpt holds Python objects.*delete it to restart"):
        train_shard(members, paths, out)
    assert not marker.exists()
    from icl.train.checkpoints import Checkpoint, snapshot
    from icl.train.loop import ShardTraining
    sh = ShardTraining(members, paths, torch.device("cpu"))
    ck = Checkpoint(str(tmp / "good.ckpt"), [r["run_id"] for r in members], "t")
    ck.save(snapshot(sh, 3, 1.5))
    assert torch.load(ck.path, weights_only=True)["epoch"] == 3 and ck.load(torch.device("cpu"))["elapsed"] == 1.5


def test_feature_count_training_equals_token_training(tiny_plan, monkeypatch):
    """A softmax_q shard trained in the count form logs what the token form logs (float32)."""
    from icl import models
    recs, paths, tmp = tiny_plan
    members = _members(recs, "softmax_q")
    counted = train_shard(members, paths, str(tmp / "c.npz"))
    monkeypatch.setattr(models.SoftmaxQ, "prepare", models.Model.prepare)
    tokens = train_shard(members, paths, str(tmp / "t.npz"))
    for key in ("train_loss", "test_loss", "attn_own", "attn_entropy", "attn_knn", "attn", "q_features", "param_Q"):
        np.testing.assert_allclose(counted[key], tokens[key], rtol=2e-5, atol=1e-7, err_msg=key)


def test_logged_train_loss_is_the_loss_before_each_step(tiny_plan):
    """The train loss and attention come from the training step's own forward: they must equal
    a separate forward at the logged epoch's parameters (here: replayed by hand with plain GD)."""
    recs, paths, tmp = tiny_plan
    r = _members(recs, "softmax_q")[0]
    out = train_shard([r], paths, str(tmp / "l.npz"))
    expect, _, _ = _replay_gd(r, paths)
    np.testing.assert_allclose(out["train_loss"][0], expect[out["epoch"]], rtol=1e-5)


def test_a_full_batch_epoch_is_logged_from_its_one_step(tiny_plan, monkeypatch):
    """Full batch on fixed prompts: the log hook at a logged epoch's start takes that epoch's step
    and logs its forward (ShardTraining.start_epoch), so each epoch runs one forward and backward,
    and a separate forward of the training prompts (Model.loss) runs only for the state training
    ended in. A log that took a forward of its own would call loss once more per logged epoch."""
    from icl import models
    recs, paths, tmp = tiny_plan
    r = _members(recs, "softmax_q")[0]
    calls = {"step": 0, "loss": 0, "test_losses": 0}
    for name in calls:
        real = getattr(models.SoftmaxQ, name)
        monkeypatch.setattr(models.SoftmaxQ, name,
                            lambda self, *a, _real=real, _name=name, **k: (calls.__setitem__(_name, calls[_name] + 1),
                                                                           _real(self, *a, **k))[1])
    out = train_shard([r], paths, str(tmp / "once.npz"))
    epochs = r["spec"]["train"]["epochs"]
    assert len(out["epoch"]) > 2 and out["epoch"][-1] == epochs
    # the test prompts' forward at every logged epoch (test_losses calls loss), the train prompts' at the end
    assert calls == {"step": epochs, "test_losses": len(out["epoch"]), "loss": len(out["epoch"]) + 1}, calls
    expect, _, _ = _replay_gd(r, paths)
    np.testing.assert_allclose(out["train_loss"][0], expect[out["epoch"]], rtol=1e-5)


@pytest.mark.parametrize("sig", ["SIGTERM", "SIGUSR1"])
def test_a_stop_signal_checkpoints_at_the_epochs_end_and_the_rerun_resumes_exactly(tiny_plan, sig, capfd):
    """Issue 64.3: SLURM's SIGTERM (preemption, the time limit) or an early SIGUSR1 arriving as epoch
    4 ends, between checkpoints (every 5 here): the job saves a checkpoint there, not at the last
    checkpoint_every, and stops with icl.train.stopping.Stopped; the same job run again resumes at
    epoch 4 and ends with the numbers of a run never stopped."""
    import signal
    import icl.train.loop as T
    from icl.train.stopping import Stopped
    recs, paths, tmp = tiny_plan
    members = _members(recs, "softmax_q")
    ref = train_shard(members, paths, str(tmp / "ref.npz"))
    orig = T.Progress.update

    def signalled(self, done, *a, **k):
        orig(self, done, *a, **k)
        if done == 4:                       # arrives as epoch 4 ends
            os.kill(os.getpid(), getattr(signal, sig))
    T.Progress.update = signalled
    out = str(tmp / "res.npz")
    try:
        with pytest.raises(Stopped, match=rf"stopped by {sig} after epoch 4 of \d+: checkpoint saved to .*res\.npz\.ckpt"):
            train_shard(members, paths, out)
    finally:
        T.Progress.update = orig
    assert os.path.exists(out + ".ckpt") and not os.path.exists(out)
    capfd.readouterr()
    res = train_shard(members, paths, out)
    assert "resuming from checkpoint at epoch 4" in capfd.readouterr().err
    for key in set(ref) - {"seconds"}:
        np.testing.assert_array_equal(res[key], ref[key], err_msg=key)


def test_a_shard_that_does_not_fit_its_memory_is_refused_in_one_line(tiny_plan):
    """Issue 64.2: a job given less memory than one run's estimate stops before training, naming the
    estimate and the limit; nothing is written."""
    recs, paths, tmp = tiny_plan
    out = str(tmp / "big.npz")
    with pytest.raises(RuntimeError, match=r"^\[shard\] does not fit: one run needs an estimated \d+\.\d+ [GM]B and the job "
                                           r"has 0\.00 GB left of 1\.0 MB \(the job's mem_mb = 1\); give the job more "
                                           r"memory"):
        train_shard(_members(recs, "transformer_block"), paths, out, mem_mb=1)
    assert not os.path.exists(out) and not os.path.exists(out + ".ckpt")


def test_a_shard_larger_than_its_memory_trains_in_chunks_that_fit(tiny_plan, capfd, monkeypatch):
    """The same shard given room for two and a half runs (the process holding the rest of a
    1000 MB job) trains in chunks of two, to the numbers of the whole ensemble (float32 rounding: a
    run in a smaller ensemble sums in another order)."""
    from icl import models
    from icl.jobs import memory
    recs, paths, tmp = tiny_plan
    members = _members(recs, "transformer_block")
    whole = train_shard(members, paths, str(tmp / "whole.npz"))
    per_run = models.MODELS["transformer_block"].train_bytes(members[0]["spec"])
    monkeypatch.setattr(memory, "resident", lambda: 1000 * 2**20 - int(2.5 * per_run))
    capfd.readouterr()
    parts = train_shard(members, paths, str(tmp / "parts.npz"), mem_mb=1000)
    err = capfd.readouterr().err
    assert f"{len(members)} runs at an estimated" in err and "trained 2 at a time" in err, err
    assert f"{len(members)} runs in {-(-len(members) // 2)} chunks of at most 2" in err
    for key in ("train_loss", "test_loss", "attn_own"):
        np.testing.assert_allclose(parts[key], whole[key], rtol=2e-5, atol=1e-7, err_msg=key)


def test_a_worker_killed_by_the_kernel_is_said_to_be_out_of_memory(tiny_plan, monkeypatch):
    """A chunk's forked worker killed by signal 9 (the kernel's OOM killer): the job says so with its
    chunks and limit, instead of a bare BrokenProcessPool."""
    import signal
    import icl.train.loop as T
    recs, paths, tmp = tiny_plan
    monkeypatch.setattr(T, "chunk_size", lambda runs, dev: 1)
    monkeypatch.setattr(T, "_chunk_job", lambda item: os.kill(os.getpid(), signal.SIGKILL))
    with pytest.raises(RuntimeError, match=r"a training worker was killed, probably out of memory: 2 chunks of at most 1 "
                                           r"runs at once, limit .* GB \(.*\); the finished chunks are kept"):
        train_shard(_members(recs, "softmax_q"), paths, str(tmp / "k.npz"), threads=2)


def test_a_slurm_job_stops_on_its_own_ahead_of_its_time_limit(tiny_plan, monkeypatch, capfd):
    """Issue 64.3: SLURM enforces a time limit up to ~30 s late, so a job that finished just past it
    is killed while Snakemake records it and loses its shard. Under SLURM the trainer reads its job's
    end from squeue and stops itself, checkpointed, once the next epoch would end within a tenth of the
    limit (10 s to 2 min) of it; the rerun resumes to the numbers of a run never stopped."""
    import subprocess as sp
    import time as _time
    import icl.train.loop as T
    from icl.train import stopping
    from icl.train.stopping import Stopped
    # squeue's answer, as SLURM 22.05 prints %S|%e: a 10-minute job ends 600 s after its start: 60 s margin
    start = _time.time() - 100
    fmt = lambda t: _time.strftime("%Y-%m-%dT%H:%M:%S", _time.localtime(t))
    answer = {"out": f"{fmt(start)}|{fmt(start + 600)}\n"}
    monkeypatch.setenv("SLURM_JOB_ID", "42")
    monkeypatch.setattr(stopping.subprocess, "run", lambda cmd, **k: sp.CompletedProcess(cmd, 0, answer["out"], ""))
    assert stopping.job_deadline() == pytest.approx(start + 600 - 60, abs=1.01)
    answer["out"] = f"{fmt(start)}|{fmt(start + 60)}\n"                 # 1 minute: the 10 s floor
    assert stopping.job_deadline() == pytest.approx(start + 60 - 10, abs=1.01)
    for bad in ("N/A|N/A\n", "", "2026-11-29T10:00:00|UNLIMITED\n"):
        answer["out"] = bad
        assert stopping.job_deadline() is None
    monkeypatch.delenv("SLURM_JOB_ID")
    assert stopping.job_deadline() is None                                # not under SLURM
    # the loop: a deadline that passes as epoch 3 ends
    recs, paths, tmp = tiny_plan
    members = _members(recs, "softmax_q")
    ref = train_shard(members, paths, str(tmp / "ref.npz"))
    orig = T.Progress.update
    clock = {"deadline": None}

    def passing(self, done, *a, **k):
        orig(self, done, *a, **k)
        if done == 3:
            clock["deadline"] = _time.time() - 1
    monkeypatch.setattr(T.Progress, "update", passing)
    monkeypatch.setattr(T, "job_deadline", lambda: None)
    real = T.StopRequests

    class Deadlined(real):
        def due(self, epoch_seconds):
            self.deadline = clock["deadline"]
            return super().due(epoch_seconds)
    monkeypatch.setattr(T, "StopRequests", Deadlined)
    out = str(tmp / "dl.npz")
    with pytest.raises(Stopped, match=r"stopped by the job's time limit ahead \(SLURM\) after epoch 3 of \d+: checkpoint saved"):
        train_shard(members, paths, out)
    monkeypatch.setattr(T, "StopRequests", real)
    monkeypatch.setattr(T.Progress, "update", orig)
    capfd.readouterr()
    res = train_shard(members, paths, out)
    assert "resuming from checkpoint at epoch 3" in capfd.readouterr().err
    for key in set(ref) - {"seconds"}:
        np.testing.assert_array_equal(res[key], ref[key], err_msg=key)
