"""The workflow on a real SLURM cluster, not a mock.

A throw-away single-node cluster (munge, MariaDB + slurmdbd, slurmctld, slurmd from the Debian
packages; tests/slurm/start-slurm.sh) runs a small experiment through
snakemake-executor-plugin-slurm with the cluster profile (--workflow-profile
workflow/profiles/slurm) plus the CI overlay (--profile tests/slurm/ci-profile). Checked:

- a run to completion gives the same tables as a local run of the same config (the rerun at the
  end of the failure test; a run from scratch under `-m slow`);
- a training job that finds a damaged checkpoint moves it aside and trains from epoch 0 in its
  first attempt; a training job cancelled with scancel (SIGTERM) is retried (`--retries 1` over the
  profile's 3) and resumes from its checkpoint; cancelled again, it is reported with its log
  paths, and Snakemake exits non-zero; rerunning resumes from the checkpoint and ends with the same
  tables.

Needs root and apt-get (it installs the packages: ~10-30 s); skipped otherwise. Every Snakemake
call runs under `timeout -s INT -k 60`; the daemons are stopped by the PIDs they recorded.
"""
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import pytest
import yaml

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
PROFILE = REPO / "workflow" / "profiles" / "slurm"
CI_PROFILE = HERE / "ci-profile"
SLURM_DIR = os.environ.get("ICL_SLURM_DIR", "/tmp/icl-slurm-ci")
# the cluster profile's `config:` (shard_size, memory_budget_mb); the local run uses the same
CLUSTER_CONFIG = yaml.safe_load((PROFILE / "config.yaml").read_text())["config"]
CLUSTER_CONFIG_ARGS = [f"{k}={v}" for k, v in CLUSTER_CONFIG.items()]

# 8 runs in 2 shards (one per model kind); the transformer_block shard trains ~6 s on one CPU
# and checkpoints every 250 of its 4000 epochs, so it can be cancelled in the middle.
CI_EXPERIMENT = {
    "experiments": {
        "ci": {
            "description": "SLURM CI experiment",
            "tokens": {"kind": "discrete", "d": 6, "K": 3, "delta": 2.0},
            "task": {"kind": "cosine", "L": 1.0, "c": 0.5},
            "prompts": {"N": 12, "train": 16, "test": 24},
            "models": [
                {"name": "sq", "kind": "softmax_q", "optimizer": "gd", "lr": 2.0},
                {"name": "blk", "kind": "transformer_block", "optimizer": "adam", "lr": 3e-3, "width": 8},
            ],
            "train": {"epochs": 4000, "log_every": 100, "checkpoint_every": 250},
            "sweep": {"task.L": [0.2, 1.5], "seed": [0, 1]},
        }
    }
}
# columns that may differ between two correct runs: wall time and code provenance
VOLATILE = {"train_seconds", "code_version", "code_hash"}
SNAKEMAKE_LIMIT = 420      # seconds for one snakemake call (timeout -s INT, then -k 60); 173 s measured
                           # beside a second pytest worker on a slow day (make test, 2026-11-25)


def _why_skip():
    if sys.platform != "linux" or os.geteuid() != 0:
        return "needs root on Linux: it installs SLURM with apt-get and starts its daemons"
    if shutil.which("apt-get") is None:
        return "needs apt-get (Debian/Ubuntu) to install munge, slurm and mariadb"
    marker = "# written by icl-dynamics tests/slurm/start-slurm.sh"
    for conf in ("/etc/slurm/slurm.conf", "/etc/slurm/slurmdbd.conf"):
        if os.path.exists(conf) and marker not in Path(conf).read_text():
            return f"{conf} belongs to a real SLURM installation; not replacing it"
    return None


pytestmark = pytest.mark.skipif(_why_skip() is not None, reason=_why_skip() or "")


# ---------------------------------------------------------------------------------------------
# helpers


def _env():
    env = dict(os.environ, SLURM_DIR=SLURM_DIR, PYTHONUNBUFFERED="1")
    for k in list(env):                # a SLURM_* from a surrounding allocation would leak into sbatch
        if k.startswith(("SLURM_", "SBATCH_", "SRUN_")) and k != "SLURM_DIR":
            env.pop(k)
    return env


def snakemake_cmd(wd, *args, profile=True, limit=SNAKEMAKE_LIMIT):
    cmd = ["timeout", "-s", "INT", "-k", "60", str(limit), sys.executable, "-m", "snakemake",
           "-s", str(REPO / "Snakefile"), "-d", str(wd), "--configfile", str(wd / "ci.yaml")]
    if profile:
        cmd += ["--workflow-profile", str(PROFILE), "--profile", str(CI_PROFILE)]
    return cmd + list(args)


def run_snakemake(wd, *args, profile=True, limit=SNAKEMAKE_LIMIT):
    res = subprocess.run(snakemake_cmd(wd, *args, profile=profile, limit=limit), cwd=REPO, env=_env(),
                         capture_output=True, text=True, timeout=limit + 90)
    (wd / f"snakemake-{time.time():.0f}.out").write_text(res.stdout + res.stderr)
    return res


def new_workdir(tmp_path_factory, name):
    wd = tmp_path_factory.mktemp(name)
    (wd / "ci.yaml").write_text(yaml.safe_dump(CI_EXPERIMENT))
    return wd


def read_tables(wd):
    out = {}
    for f in sorted((wd / "results" / "ci").glob("*.parquet")):
        df = pd.read_parquet(f)
        df = df.drop(columns=[c for c in df.columns if c in VOLATILE])
        for c in df.columns:           # lists/arrays (probs, phase_ends, ...) compared as JSON text
            if df[c].dtype == object:
                df[c] = df[c].map(lambda v: json.dumps(v.tolist() if hasattr(v, "tolist") else v,
                                                       sort_keys=True, default=str))
        df = df.sort_values(list(df.columns), kind="stable", na_position="last").reset_index(drop=True)
        out[f.name] = df
    return out


def assert_same_tables(wd, reference):
    got = read_tables(wd)
    assert sorted(got) == sorted(reference), "different set of tables"
    for name, ref in reference.items():
        pd.testing.assert_frame_equal(got[name], ref, check_exact=True, obj=name)


def squeue(fmt="%i|%T|%k"):
    res = subprocess.run(["squeue", "-h", "-t", "all", "-o", fmt], capture_output=True, text=True, timeout=30)
    return [line.split("|") for line in res.stdout.splitlines() if line.strip()]


def wait_until(cond, timeout, what, proc=None):
    t0 = time.time()
    while time.time() - t0 < timeout:
        value = cond()
        if value:
            return value
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"snakemake exited ({proc.returncode}) while waiting for {what}")
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


# ---------------------------------------------------------------------------------------------
# fixtures


@pytest.fixture(scope="module")
def machine_lock():
    """One throw-away cluster per machine (it owns /etc/slurm and the SLURM ports): a second test
    session on the same machine waits here instead of stopping the first one's daemons."""
    import fcntl
    with open("/tmp/icl-slurm-ci.lock", "w") as fh:
        t0 = time.time()
        while True:
            try:
                fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.time() - t0 > 900:
                    pytest.fail("another test session has held the SLURM test cluster for 15 min")
                time.sleep(1)
        yield
        fcntl.flock(fh, fcntl.LOCK_UN)


@pytest.fixture(scope="module")
def cluster(machine_lock, tmp_path_factory):
    """Start the cluster (and, meanwhile, the local reference run); stop every daemon at the end."""
    local_wd = new_workdir(tmp_path_factory, "local")
    # the reference: the same config and settings without SLURM, with as many threads per training
    # job (1) as the CI overlay gives (max-threads), so that the numbers can be compared exactly
    local = subprocess.Popen(
        snakemake_cmd(local_wd, "--cores", "2", "--max-threads", "1", "--config", *CLUSTER_CONFIG_ARGS,
                      profile=False),
        cwd=REPO, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    log = tmp_path_factory.getbasetemp() / "start-slurm.log"
    t0 = time.time()
    try:
        # stale daemons of an earlier, killed session (by their PID files only), then a fresh start
        subprocess.run(["bash", str(HERE / "stop-slurm.sh")], env=_env(), timeout=120)
        with open(log, "w") as fh:     # a file, not a pipe: the daemons inherit it
            rc = subprocess.run(["bash", str(HERE / "start-slurm.sh")], env=_env(), stdout=fh,
                                stderr=subprocess.STDOUT, timeout=600).returncode
        assert rc == 0, f"start-slurm.sh failed:\n{log.read_text()[-4000:]}"
        start_s = time.time() - t0
        out, _ = local.communicate(timeout=SNAKEMAKE_LIMIT + 90)
        assert local.returncode == 0, out[-4000:]
        yield SimpleNamespace(reference=read_tables(local_wd), local_wd=local_wd, start_s=start_s)
    finally:
        if local.poll() is None:
            local.send_signal(signal.SIGINT)
            try:
                local.wait(60)
            except subprocess.TimeoutExpired:
                local.kill()
        # the jobs of this throw-away cluster, then its daemons (by PID); the daemons' logs are kept
        # next to the test's work directories
        subprocess.run(["scancel", "--user", "root"], capture_output=True, timeout=60)
        try:
            wait_until(lambda: all(state not in ("PENDING", "RUNNING", "COMPLETING")
                                   for _, state, _ in squeue()), 60, "the jobs to end")
        except (AssertionError, OSError, subprocess.SubprocessError):
            pass
        if os.path.isdir(f"{SLURM_DIR}/log"):
            shutil.copytree(f"{SLURM_DIR}/log", tmp_path_factory.getbasetemp() / "slurm-logs", dirs_exist_ok=True)
        subprocess.run(["bash", str(HERE / "stop-slurm.sh")], env=_env(), timeout=120)


# ---------------------------------------------------------------------------------------------
# tests


@pytest.mark.slow     # the rerun at the end of the next test goes through SLURM to the same tables and report
def test_run_on_slurm_equals_local_run(cluster, tmp_path_factory):
    wd = new_workdir(tmp_path_factory, "slurm")
    res = run_snakemake(wd)
    out = res.stdout + res.stderr
    assert res.returncode == 0, out[-6000:]
    # it really went through SLURM: each training shard was its own SLURM job, recorded by sacct
    assert "has been submitted with SLURM jobid" in out
    shards = sorted(p.stem for p in (wd / "results/ci/shards").glob("*.npz"))
    assert len(shards) == 2
    acct = subprocess.run(["sacct", "-X", "-n", "-P", "-a", "-o", "JobIDRaw,State,Comment"],
                          capture_output=True, text=True, timeout=30).stdout
    for shard in shards:
        assert f"COMPLETED|rule_train_wildcards_ci_{shard}" in acct, acct
    assert_same_tables(wd, cluster.reference)
    assert (wd / "reports" / "ci.html").exists() and (wd / "reports" / "index.html").exists()
    # a node without GPU trains on CPU (with a GPU, SLURM's CUDA_VISIBLE_DEVICES picks the device)
    import torch
    if not torch.cuda.is_available():
        assert set(pd.read_parquet(wd / "results/ci/summary.parquet")["device"]) == {"cpu"}


def seed_from(wd, src, *names):
    """Copy finished outputs of the local run (mtimes kept), so that a test starts at training."""
    for name in names:
        a, b = src / "results/ci" / name, wd / "results/ci" / name
        b.parent.mkdir(parents=True, exist_ok=True)
        (shutil.copytree if a.is_dir() else shutil.copy2)(a, b)


@pytest.mark.slow     # 4 minutes on a real cluster: the quick suite (make test) stays within 10; CI (make check) runs it
def test_failures_are_reported_retried_and_a_rerun_resumes(cluster, tmp_path_factory):
    """Two training jobs go wrong on the cluster, in one Snakemake run with `--retries 1`:
    - the softmax_q job finds a damaged checkpoint: it moves it aside (kept for inspection), says so
      in its log and trains the shard from epoch 0, in its first attempt (issue 64.5);
    - the transformer_block job is cancelled with scancel after a checkpoint (SIGTERM: it saves a
      checkpoint at the epoch it is in and exits): the retry resumes from the checkpoint; cancelled
      again, it is reported with its log paths, and Snakemake exits non-zero.
    A rerun then resumes the cancelled shard and ends with the same tables as the local run."""
    wd = new_workdir(tmp_path_factory, "failures")
    seed_from(wd, cluster.local_wd, "plan.json", "runs.parquet", "prompts", "theory.parquet",
              "theory_curves.parquet")
    shards = sorted(pd.read_parquet(wd / "results/ci/runs.parquet")["shard"].unique())
    bad = next(s for s in shards if s.startswith("softmax_q-"))
    cut = next(s for s in shards if s.startswith("transformer_block-"))
    (wd / "results/ci/shards").mkdir(parents=True)
    damaged = wd / f"results/ci/shards/{bad}.npz.ckpt"
    damaged.write_bytes(b"not a checkpoint")
    bad_log = wd / f"logs/ci/train/{bad}.log"
    ckpt = wd / f"results/ci/shards/{cut}.npz.ckpt"
    cut_log = wd / f"logs/ci/train/{cut}.log"

    def running(not_this=None):
        for jid, state, comment in squeue():
            if state == "RUNNING" and jid != not_this and comment == f"rule_train_wildcards_ci_{cut}":
                return jid
        return None

    proc = subprocess.Popen(snakemake_cmd(wd, "--retries", "1"), cwd=REPO, env=_env(), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    out = ""
    try:
        # react to events in whatever order they come (a state machine, polled every 0.1 s)
        cancelled, resumed_at, t0 = [], None, time.time()
        while len(cancelled) < 2:
            assert proc.poll() is None, "snakemake exited before both cancellations"
            assert time.time() - t0 < SNAKEMAKE_LIMIT - 30, f"stuck; cancelled so far: {cancelled}"
            job = running(not_this=cancelled[-1] if cancelled else None)
            if job and not cancelled and ckpt.exists():
                subprocess.run(["scancel", job], check=True, timeout=30)   # attempt 1, after a checkpoint
                cancelled.append(job)
            elif job and cancelled and cut_log.exists() and "resuming from checkpoint" in cut_log.read_text():
                # attempt 2 resumed from that checkpoint: cancel it too, once it has written another
                resumed_at = resumed_at or ckpt.stat().st_mtime
                if ckpt.stat().st_mtime > resumed_at:
                    subprocess.run(["scancel", job], check=True, timeout=30)
                    cancelled.append(job)
            time.sleep(0.1)
        first, second = cancelled
        out, _ = proc.communicate(timeout=SNAKEMAKE_LIMIT)
    finally:
        if not out:                         # the test failed early: stop snakemake, keep its output
            if proc.poll() is None:
                proc.send_signal(signal.SIGINT)
            try:
                out, _ = proc.communicate(timeout=90)
            except subprocess.TimeoutExpired:
                proc.kill()
        (wd / "snakemake-failed.out").write_text(out or "")
    tail = out[-8000:]
    assert proc.returncode != 0, tail
    # each failure names the rule's log and the SLURM log of the failed job ...
    assert "Error in rule train" in out and "'CANCELLED'" in out, tail
    assert f"logs/ci/train/{cut}.log" in out, tail
    assert out.count(f".snakemake/slurm_logs/rule_train/ci_{cut}/") >= 3, tail
    assert f".snakemake/slurm_logs/rule_train/ci_{cut}/{second}.log" in out, tail
    # ... the cancelled job was retried and resumed; the damaged checkpoint was moved aside and its
    # shard trained from epoch 0 in one attempt, no error
    assert f"SLURM jobid {first} " in out and f"SLURM jobid {second} " in out, tail
    said = bad_log.read_text()
    assert "is damaged (UnpicklingError): moved aside to" in said and "restarts from epoch 0" in said, said
    assert not damaged.exists() and list(damaged.parent.glob(damaged.name + ".damaged-*"))
    assert (wd / f"results/ci/shards/{bad}.npz").exists()
    assert ckpt.exists() and not (wd / f"results/ci/shards/{cut}.npz").exists()

    # rerun: the cancelled shard resumes from its checkpoint as a SLURM job, the tables and the
    # report are made by SLURM's `post` job, and they equal the local run's
    res = run_snakemake(wd)
    out = res.stdout + res.stderr
    assert res.returncode == 0, out[-6000:]
    assert "has been submitted with SLURM jobid" in out
    assert "resuming from checkpoint" in cut_log.read_text()
    acct = subprocess.run(["sacct", "-X", "-n", "-P", "-a", "-o", "JobIDRaw,State,Comment"],
                          capture_output=True, text=True, timeout=30).stdout
    for shard in (bad, cut):
        assert f"COMPLETED|rule_train_wildcards_ci_{shard}" in acct, acct
    assert_same_tables(wd, cluster.reference)
    assert (wd / "reports" / "ci.html").exists() and (wd / "reports" / "index.html").exists()
    import torch
    if not torch.cuda.is_available():    # a node without GPU trains on CPU
        assert set(pd.read_parquet(wd / "results/ci/summary.parquet")["device"]) == {"cpu"}


@pytest.mark.slow     # about 3 minutes: SLURM's time limits are whole minutes
def test_a_shard_longer_than_its_time_limit_completes_across_retries(cluster, tmp_path_factory):
    """Issue 64.3: a training job with a 1-minute limit (`--set-resources train:runtime=1`, sbatch -t 1)
    and about 90 s of work. The trainer reads its job's end from squeue and stops itself, checkpointed,
    10 s ahead of it (exit 75: FAILED to sacct); where it did not, SLURM's SIGTERM at the limit stops it
    the same way (TIMEOUT). Each retry resumes there, and the shard completes within the retries
    (`--retries 4`) instead of failing each time, never killed after writing its shard. The work is
    sized from this machine's speed measured just before (2000 epochs of the same shard, one thread,
    trained locally): a speed read earlier, beside the cluster's start, was 2-3x too slow."""
    import re
    cfg = json.loads(json.dumps(CI_EXPERIMENT))
    exp = cfg["experiments"]["ci"]
    exp["models"] = [m for m in exp["models"] if m["kind"] == "transformer_block"]

    def with_epochs(name, epochs):
        exp["train"] = {"epochs": epochs, "log_every": max(1, epochs // 40), "checkpoint_every": max(1, epochs // 40)}
        wd = tmp_path_factory.mktemp(name)
        (wd / "ci.yaml").write_text(yaml.safe_dump(cfg))
        return wd

    cal = with_epochs("calibrate", 2000)
    res = run_snakemake(cal, "--until", "train", "--cores", "1", "--max-threads", "1", profile=False)
    assert res.returncode == 0, (res.stdout + res.stderr)[-3000:]
    log = next((cal / "logs/ci/train").glob("*.log")).read_text()
    elapsed = float(re.findall(r"([\d.]+)s elapsed", log)[-1])
    epochs = max(4000, int(2000 * 90 / max(elapsed, 0.1)) // 1000 * 1000)       # ~90 s: two or three attempts
    wd = with_epochs("timelimit", epochs)
    res = run_snakemake(wd, "--until", "train", "--retries", "4", "--set-resources", "train:runtime=1", limit=900)
    out = res.stdout + res.stderr
    shard = next(p.stem for p in (wd / "results/ci/shards").glob("*.npz")) if res.returncode == 0 else None
    assert res.returncode == 0 and shard, f"{epochs} epochs (2000 took {elapsed} s here)\n" + out[-6000:]
    acct = subprocess.run(["sacct", "-X", "-n", "-P", "-a", "-o", "JobIDRaw,State,Comment"],
                          capture_output=True, text=True, timeout=30).stdout
    states = [s for _, s, c in (line.split("|") for line in acct.splitlines()) if c == f"rule_train_wildcards_ci_{shard}"]
    assert len(states) >= 2 and states[-1] == "COMPLETED", (states, epochs, elapsed)
    assert set(states[:-1]) <= {"FAILED", "TIMEOUT"}, (states, epochs, elapsed)     # stopped, never lost
    log = (wd / f"logs/ci/train/{shard}.log").read_text()       # the last attempt's
    assert "resuming from checkpoint at epoch" in log, log[-3000:]
