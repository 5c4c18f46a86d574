"""Reliability through the real workflow: a SIGKILLed run resumes to the same tables, reruns are
bit-for-bit identical, malformed configs stop before any job, corrupt files are named."""
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from icl.data import Dataset, read_dataset
from icl.store.io import read_parquet
from icl.tables.build import aggregate
from numerics import PINNED

REPO = Path(__file__).resolve().parent.parent
TABLES = ["runs", "curves", "attention", "matrices", "summary"]
TIMING = ["train_seconds"]

LONG = {
    "experiments": {
        "long": {
            "tokens": {"kind": "discrete", "d": 6, "K": 3, "delta": 2.0},
            "task": {"kind": "cosine", "L": 1.0, "c": 0.5},
            "prompts": {"N": 16, "train": 64, "test": 64},
            "models": [{"name": "blk", "kind": "transformer_block", "optimizer": "adam", "lr": 3e-3, "width": 16}],
            "train": {"epochs": 300, "log_every": 25, "checkpoint_every": 100, **PINNED},
            "sweep": {"task.L": [0.3, 1.0], "seed": [0, 1]},
        }
    }
}


def _cmd(wd, *args):
    return [sys.executable, "-m", "snakemake", "-s", str(REPO / "Snakefile"), "-d", str(wd),
            "--configfile", str(wd / "c.yaml"), "--cores", "2", *args]


TARGETS = [f"results/long/{t}.parquet" for t in TABLES]     # the tables: analysis and report add nothing here


def _run(wd, *args, timeout=600):
    res = subprocess.run(_cmd(wd, *TARGETS, *args), capture_output=True, text=True, timeout=timeout)
    assert res.returncode == 0, res.stderr[-3000:]
    return res


def _tables(wd, exp="long"):
    out = {}
    for t in TABLES:
        df = pd.read_parquet(wd / "results" / exp / f"{t}.parquet").drop(columns=TIMING, errors="ignore")
        out[t] = df.sort_values(list(df.columns[:3])).reset_index(drop=True)
    return out


def _assert_same(a, b):
    for t in TABLES:
        pd.testing.assert_frame_equal(a[t], b[t], check_exact=True, obj=t)


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    wd = tmp_path_factory.mktemp("ref")
    (wd / "c.yaml").write_text(yaml.safe_dump(LONG))
    _run(wd)
    return wd


@pytest.mark.slow      # test_sigkill_mid_training_then_resume compares a second fresh directory bit for bit too
def test_rerun_in_fresh_directory_is_bit_identical(reference, tmp_path):
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(LONG))
    _run(tmp_path)
    _assert_same(_tables(reference), _tables(tmp_path))


@pytest.mark.slow      # 47 s of make test's work; the quick suite keeps a SIGKILL resumed bit for bit in
                       # test_a_training_job_killed_by_the_kernel_… (one job) and the workflow's own resume
                       # in test_a_damaged_shard_… (to equal tables); CI runs this one
def test_sigkill_mid_training_then_resume(reference, tmp_path):
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(LONG))
    proc = subprocess.Popen(_cmd(tmp_path, *TARGETS), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    shards = tmp_path / "results" / "long" / "shards"
    deadline = time.time() + 300
    # the checkpoint's own name: its temporary twin (NAME.npz.ckpt.PID.tmp.ckpt, renamed over it
    # when complete) also ends in .ckpt, and a kill while it is written leaves nothing to resume
    while time.time() < deadline and not list(shards.glob("*.npz.ckpt")):
        assert proc.poll() is None, "workflow finished before a checkpoint was written"
        time.sleep(0.05)
    assert list(shards.glob("*.npz.ckpt")), "no checkpoint appeared"
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    assert not list(shards.glob("*.npz")), "the shard finished before the kill; make the run longer"
    subprocess.run(_cmd(tmp_path, "--unlock"), capture_output=True, timeout=120)
    _run(tmp_path, "--rerun-incomplete")
    log = next((tmp_path / "logs" / "long" / "train").glob("*.log")).read_text()
    assert "resuming from checkpoint at epoch" in log
    _assert_same(_tables(reference), _tables(tmp_path))


MALFORMED = [
    ("experiments: {x: {tokens: {kind: discrete, d: 3, K: 4, delta: 1.0}}}", "experiments.x: missing key 'task'"),
    ("experiments: null", "experiments: None has the wrong type"),
    ("experiments: {'../up': {}}", "experiment names use letters"),
    ("shard_size: 0\n" + yaml.safe_dump(LONG), "shard_size: 0 is out of range"),
    ("experiments: {x: 3}", "experiments.x: 3 has the wrong type"),
    ("verbose: true\n" + yaml.safe_dump(LONG), "unknown key 'verbose'"),
]


@pytest.mark.parametrize("text,words", MALFORMED, ids=[w[:30] for _, w in MALFORMED])
def test_malformed_config_stops_before_any_job(tmp_path, text, words):
    (tmp_path / "c.yaml").write_text(text + "\n")
    (tmp_path / "results").mkdir()
    (tmp_path / "results" / "keep.txt").write_text("old result")
    res = subprocess.run(_cmd(tmp_path, "-n"), capture_output=True, text=True, timeout=120)
    assert res.returncode != 0
    err = res.stderr.strip()
    assert words in err and err.startswith("config error:") and len(err.splitlines()) == 1, err
    assert "Traceback" not in res.stderr + res.stdout
    assert [p.name for p in (tmp_path / "results").iterdir()] == ["keep.txt"]
    assert (tmp_path / "results" / "keep.txt").read_text() == "old result"


def _bad_configs():
    """The malformed configs of test_config.py (checked there one by one against icl.config), as
    files a user would write; every fifth goes through the workflow in the default run, the
    others under `-m slow` (each is a Snakemake start, ~4 s)."""
    import copy
    from conftest import TINY
    from test_config import BAD, _set
    return [pytest.param(yaml.safe_dump(_set(copy.deepcopy(TINY), p, v)), words[0], id=words[0],
                         marks=() if i % 5 == 0 else pytest.mark.slow) for i, (p, v, words) in enumerate(BAD)]


@pytest.mark.parametrize("text,key", _bad_configs())
def test_each_malformed_config_refused_by_the_workflow(tmp_path, text, key):
    """Every one of them through `snakemake -n`: non-zero exit, one line naming the key, no
    traceback, results/ untouched."""
    (tmp_path / "c.yaml").write_text(text)
    (tmp_path / "results").mkdir()
    res = subprocess.run(_cmd(tmp_path, "-n"), capture_output=True, text=True, timeout=120)
    err = res.stderr.strip()
    assert res.returncode != 0 and err.startswith("config error: " + key), err
    assert len(err.splitlines()) == 1 and "Traceback" not in res.stderr + res.stdout
    assert list((tmp_path / "results").iterdir()) == []


def _truncate(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def test_truncated_table_is_named(reference, tmp_path):
    bad = tmp_path / "summary.parquet"
    bad.write_bytes((reference / "results/long/summary.parquet").read_bytes())
    _truncate(bad)
    with pytest.raises(RuntimeError, match=r"table .*summary\.parquet is unreadable.*moved aside to .*summary\.parquet"
                                           r"\.damaged-.*rerun snakemake \(the same command\) to rebuild it"):
        read_parquet(str(bad))
    assert not bad.exists() and len(list(tmp_path.glob("summary.parquet.damaged-*"))) == 1     # kept, out of the way


def test_truncated_shard_is_named(reference, tmp_path):
    shard = next((reference / "results/long/shards").glob("*.npz"))
    bad = tmp_path / shard.name
    bad.write_bytes(shard.read_bytes())
    _truncate(bad)
    with pytest.raises(RuntimeError, match=rf"shard file .*{bad.name} is unreadable.*moved aside.*retrain"):
        aggregate(str(reference / "results/long/runs.parquet"), [str(bad)], str(tmp_path))
    left = sorted(p.name for p in tmp_path.iterdir())
    assert len(left) == 1 and left[0].startswith(bad.name + ".damaged-")   # no table left, whole or half; the shard kept


def test_truncated_prompts_are_named(reference, tmp_path):
    src = next((reference / "results/long/prompts").glob("*.npz"))
    bad = tmp_path / src.name
    bad.write_bytes(src.read_bytes())
    _truncate(bad)
    with pytest.raises(RuntimeError, match=rf"prompt file .*{bad.name} is unreadable.*moved aside.*regenerate"):
        read_dataset(str(bad))
    assert not bad.exists() and len(list(tmp_path.glob(bad.name + ".damaged-*"))) == 1


def test_tables_carry_provenance(reference):
    from icl.store.io import read_provenance
    for t in TABLES:
        meta = read_provenance(str(reference / "results/long" / f"{t}.parquet"))
        assert {"icl_version", "code_version", "code_hash", "config_hash"} <= set(meta), t
    summ = pd.read_parquet(reference / "results/long/summary.parquet")
    assert summ["code_hash"].nunique() == 1 and len(summ["code_hash"].iloc[0]) == 12
    assert np.all(~summ["diverged"])


# ---------------------------------------------------------------- the faults of issue 64, through the workflow

def _copy_of(reference, tmp_path):
    """A finished workflow directory to damage: the reference's config, results and Snakemake state."""
    import shutil
    for part in ("c.yaml", "results", ".snakemake"):
        src = reference / part
        (shutil.copytree if src.is_dir() else shutil.copy)(src, tmp_path / part)
    return tmp_path


def _train_cmd(wd, shard, *extra) -> list[str]:
    """`icl train` of one shard of a copy of the reference, as the train rule runs it."""
    return [sys.executable, "-m", "icl", "train", "--plan", str(wd / "results/long/plan.json"), "--shard", shard.stem,
            "--prompts-dir", str(wd / "results/long/prompts"), "--out", str(shard), "--threads", "2", *extra]


def _training(cmd, log):
    """`cmd` started with its stderr in `log`, returned once it has logged an epoch."""
    with open(log, "w") as err:
        job = subprocess.Popen(cmd, stderr=err, cwd=REPO)
    deadline = time.time() + 300
    while "epoch " not in log.read_text():
        assert job.poll() is None and time.time() < deadline, log.read_text()[-2000:]
        time.sleep(0.02)
    return job


def _mount_tmpfs(where: Path, size: str) -> bool:
    where.mkdir()
    return subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)],
                          capture_output=True).returncode == 0


@pytest.mark.slow
def test_a_full_disk_is_named_and_the_same_command_resumes_once_space_is_freed(reference, tmp_path):
    """results/ on a 400 kB tmpfs: the workflow stops with one line naming the file, the bytes
    written and the free space, leaves nothing partial, and once the filesystem is grown the same
    command finishes to the reference's tables."""
    disk = tmp_path / "disk"
    if os.geteuid() != 0 or not _mount_tmpfs(disk, "400k"):
        pytest.skip("needs root to mount a small tmpfs")
    try:
        wd = tmp_path / "wd"
        wd.mkdir()
        (wd / "c.yaml").write_text(yaml.safe_dump(LONG))
        (wd / "results").symlink_to(disk)
        res = subprocess.run(_cmd(wd, *TARGETS), capture_output=True, text=True, timeout=600)
        assert res.returncode != 0
        said = [line for p in (wd / "logs").rglob("*.log") for line in p.read_text().splitlines()
                if "no space left on the device" in line]
        assert said and all(l.startswith("error: no space left on the device to write ") and "bytes free" in l
                            for l in said), said
        assert not [p for p in disk.rglob("*") if ".tmp" in p.name]          # nothing partial left
        subprocess.run(["mount", "-o", "remount,size=64m", str(disk)], check=True)
        _run(wd, "--rerun-incomplete")
        _assert_same(_tables(reference), _tables(wd))
    finally:
        subprocess.run(["umount", "-l", str(disk)], capture_output=True)


@pytest.mark.slow
def test_a_preempted_training_job_stops_at_its_epoch_and_the_same_command_resumes(reference, tmp_path):
    """SIGTERM to the training job (as SLURM sends at preemption or the time limit): it checkpoints
    at the epoch it is in, exits with icl.train.stopping.RETRY and says so in its log; the same
    command resumes it there, to the reference's tables."""
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(LONG))
    proc = subprocess.Popen(_cmd(tmp_path, *TARGETS), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    logs = tmp_path / "logs" / "long" / "train"
    deadline = time.time() + 300
    pid = None
    while time.time() < deadline and pid is None:
        assert proc.poll() is None, "workflow finished before training was under way"
        if any("epoch " in p.read_text() for p in logs.glob("*.log")) if logs.exists() else False:
            ps = subprocess.run(["pgrep", "-f", "icl train --plan"], capture_output=True, text=True).stdout.split()
            pid = [int(p) for p in ps] or None
        time.sleep(0.05)
    assert pid, "no training job seen"
    for p in pid:                      # SLURM signals every process of the job: its shell and the trainer
        os.kill(p, signal.SIGTERM)
    assert proc.wait(300) != 0
    log = "".join(p.read_text() for p in logs.glob("*.log"))
    assert "stopped: " in log and "stopped by SIGTERM after epoch" in log and "checkpoint saved" in log, log[-2000:]
    _run(tmp_path, "--rerun-incomplete")
    log = "".join(p.read_text() for p in logs.glob("*.log"))
    assert "resuming from checkpoint at epoch" in log
    _assert_same(_tables(reference), _tables(tmp_path))


def test_a_damaged_shard_is_moved_aside_and_the_same_command_retrains_it(reference, tmp_path):
    """A truncated shard (a disk fault, a copy cut short): the tables step moves it aside, kept,
    and says to rerun; the same command retrains that shard, to the reference's tables."""
    wd = _copy_of(reference, tmp_path)
    shard = next((wd / "results/long/shards").glob("*.npz"))
    _truncate(shard)
    res = subprocess.run(_cmd(wd, *TARGETS), capture_output=True, text=True, timeout=600)
    assert res.returncode != 0
    log = (wd / "logs/long/tables.log").read_text()
    assert f"shard file {shard.relative_to(wd)} is unreadable" in log and "moved aside" in log, log[-1500:]
    assert list(shard.parent.glob(shard.name + ".damaged-*"))
    _run(wd)
    _assert_same(_tables(reference), _tables(wd))


def test_two_trainers_on_one_shard_leave_it_whole(reference, tmp_path):
    """A double submission: two training jobs of one shard at once. One trains, the other waits,
    says so and finds the shard done; the shard equals the reference's."""
    import json
    wd = _copy_of(reference, tmp_path)
    shard = next((wd / "results/long/shards").glob("*.npz"))
    ref = dict(np.load(shard))
    shard.unlink()
    cmd = _train_cmd(wd, shard)
    jobs = [subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True, cwd=REPO) for _ in range(2)]
    errs = [j.communicate(timeout=300)[1] for j in jobs]
    assert [j.returncode for j in jobs] == [0, 0], errs
    assert sum("is training this shard already; waiting for it" in e for e in errs) == 1, errs
    got = dict(np.load(shard))
    assert json.dumps(sorted(got)) == json.dumps(sorted(ref))
    for k in set(ref) - {"seconds"}:
        np.testing.assert_array_equal(got[k], ref[k], err_msg=k)


def test_a_training_job_killed_by_the_kernel_says_so_and_the_same_command_resumes(reference, tmp_path):
    """SIGKILL to the training (what the kernel's OOM killer sends): the job's work runs in a child
    (icl.jobs.supervise), so the job still exits with one line naming the likely cause, the memory
    estimate and the limit, and 137 as a killed process would; the checkpoint is kept and the same
    command finishes the shard equal to the reference's."""
    wd = _copy_of(reference, tmp_path)
    shard = next((wd / "results/long/shards").glob("*.npz"))
    ref = dict(np.load(shard))
    shard.unlink()
    cmd = _train_cmd(wd, shard, "--mem-mb", "3000")
    log = tmp_path / "train.log"
    job = _training(cmd, log)
    children = Path(f"/proc/{job.pid}/task/{job.pid}/children").read_text().split()
    assert len(children) == 1, children           # the job's work is one child process
    os.kill(int(children[0]), signal.SIGKILL)
    assert job.wait(120) == 128 + signal.SIGKILL
    said = log.read_text().strip().splitlines()[-1]
    assert said.startswith(f"error: [{shard.stem}] the training process was killed (SIGKILL), probably out of "
                           "memory (estimate "), said
    assert " runs at once, limit " in said and "the job's mem_mb = 3000" in said and "the retry asks for twice the memory" in said, said
    assert not shard.exists()
    res = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO, timeout=300)
    assert res.returncode == 0, res.stderr[-2000:]
    got = dict(np.load(shard))
    for k in set(ref) - {"seconds"}:
        np.testing.assert_array_equal(got[k], ref[k], err_msg=k)


def test_a_stop_signal_to_the_job_alone_reaches_the_training(reference, tmp_path):
    """A scheduler that signals only the job's own process (not its children): the supervising parent
    passes SIGTERM on, so the training still checkpoints at its epoch and the job exits with RETRY."""
    from icl.train.stopping import RETRY
    wd = _copy_of(reference, tmp_path)
    shard = next((wd / "results/long/shards").glob("*.npz"))
    shard.unlink()
    log = tmp_path / "train.log"
    job = _training(_train_cmd(wd, shard), log)
    job.send_signal(signal.SIGTERM)                 # the parent only
    assert job.wait(120) == RETRY, log.read_text()[-2000:]
    said = log.read_text()
    assert "stopped by SIGTERM after epoch" in said and Path(str(shard) + ".ckpt").exists(), said[-2000:]
