"""The cluster profile without a cluster (runs everywhere, no root): it is documented, it keeps
cluster settings out of config.yaml, and Snakemake accepts it with the current rules (a dry run
builds the group jobs and applies its shard size)."""
import re
import subprocess
import sys
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parent.parent.parent
PROFILE = REPO / "workflow" / "profiles" / "slurm"


def test_every_key_of_the_profiles_is_commented():
    for path in (PROFILE / "config.yaml", Path(__file__).parent / "ci-profile" / "config.yaml"):
        for n, line in enumerate(path.read_text().splitlines(), 1):
            if re.match(r"^\s*[A-Za-z_][\w-]*:", line):
                assert "#" in line, f"{path.name}:{n}: key without a comment: {line.strip()}"


def test_profile_settings():
    prof = yaml.safe_load((PROFILE / "config.yaml").read_text())
    assert prof["executor"] == "slurm"
    assert prof["slurm-status-command"] == "squeue"
    assert prof["config"]["shard_size"] >= 256
    assert prof["retries"] >= 1 and prof["rerun-incomplete"] is True
    train = prof["set-resources"]["train"]
    assert "runtime" in train and "gpu" not in train      # GPUs: opt-in, commented out
    assert prof["cores"] >= prof["set-threads"]["train"]  # --cores caps every job's threads
    # every step after training shares the `post` job, the analysis included
    assert {r: prof["groups"].get(r) for r in ("tables", "analyse", "report", "index")} == dict.fromkeys(
        ("tables", "analyse", "report", "index"), "post")
    # cluster settings live in the profile only
    cfg = (REPO / "config.yaml").read_text()
    assert not re.search(r"(?m)^\s*(executor|slurm\w*|partition|account)\s*:", cfg)


def dry_run(tmp_path, *args):
    cfg = {"experiments": {"many": {
        "tokens": {"kind": "discrete", "d": 4, "K": 2, "delta": 2.0},
        "task": {"kind": "cosine", "L": 1.0, "c": 0.5},
        "prompts": {"N": 8, "train": 8, "test": 8},
        "models": [{"name": "sq", "kind": "softmax_q", "optimizer": "gd", "lr": 1.0}],
        "train": {"epochs": 2},
        "sweep": {"seed": list(range(100))},
    }}}
    (tmp_path / "many.yaml").write_text(yaml.safe_dump(cfg))
    res = subprocess.run(
        [sys.executable, "-m", "snakemake", "-n", "-s", str(REPO / "Snakefile"), "-d", str(tmp_path),
         "--workflow-profile", str(PROFILE), "--configfile", str(tmp_path / "many.yaml"), *args],
        cwd=REPO, capture_output=True, text=True, timeout=300)
    out = res.stdout + res.stderr
    assert res.returncode == 0, out[-4000:]
    stats = dict(re.findall(r"(?m)^(\w+)\s+(\d+)$", out.split("Job stats:")[-1]))
    return out, {k: int(v) for k, v in stats.items()}


def test_dry_run_with_the_cluster_profile(tmp_path):
    out, stats = dry_run(tmp_path)
    # 100 runs of one shape: one training job at the profile's shard_size (512), not 2 (at 64)
    assert stats["train"] == 1, stats
    assert "Group job prep" in out and "Group job post" in out
    # the command line still overrides the profile's shard size: shards of 16 to 64 runs
    _, stats = dry_run(tmp_path, "--config", "shard_size=64")
    assert 2 <= stats["train"] <= 100 // 16, stats


def test_training_uses_the_gpu_slurm_gives_it():
    """SLURM hands a job its GPUs through CUDA_VISIBLE_DEVICES; a CPU node sets none visible.
    `device: auto` must follow that: CPU when no GPU is visible, CUDA when one is."""
    import os
    code = "from icl.jobs.runtime import pick_device; print(pick_device('auto').type)"

    def device(visible):
        env = dict(os.environ, CUDA_VISIBLE_DEVICES=visible)
        res = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                             timeout=120, cwd=REPO)
        assert res.returncode == 0, res.stderr[-2000:]
        return res.stdout.strip()

    assert device("") == "cpu"
    import torch
    if torch.cuda.is_available():
        assert device("0") == "cuda"
