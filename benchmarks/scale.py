"""Scale: planning a 10,000-run sweep, and tables + theory + analyse + report for 10,000 runs.

    .venv/bin/python benchmarks/scale.py              # 10,000 runs
    .venv/bin/python benchmarks/scale.py --runs 2000

Planning is timed as a user meets it: `snakemake -n` on the config, in a subprocess (its peak
memory is the child's max RSS). Training is replaced by synthetic shard files of the right shapes
(101 logged epochs, K = 4), so the rest of the pipeline is timed on a realistic amount of data.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time

import numpy as np
import yaml

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def config(n_runs: int) -> dict:
    seeds = max(1, n_runs // (2 * 25 * 4))
    return {"shard_size": 512, "experiments": {"big": {
        "tokens": {"kind": "discrete", "d": 15, "K": 4, "delta": 3.0},
        "task": {"kind": "cosine", "L": 1.0, "c": 0.5},
        "prompts": {"N": 100, "train": 300, "test": 300},
        "models": [{"name": "softmax_q", "kind": "softmax_q", "optimizer": "gd", "lr": 5.0},
                   {"name": "block", "kind": "transformer_block", "optimizer": "adam", "lr": 1e-3, "width": 8}],
        "train": {"epochs": 400, "log_every": 4},
        "sweep": {"task.L": np.round(np.geomspace(0.05, 5, 25), 4).tolist(), "tokens.delta": [1.5, 3.0, 4.5, 6.0],
                  "seed": list(range(seeds))}}}}


def synthetic_shard(runs, path, rng):
    """A shard file as train_shard writes it, with plausible decaying curves."""
    from icl.jobs.provenance import code_hash, code_version
    R, ep, K = len(runs), np.arange(0, 401, 4), 4
    rate = rng.uniform(0.005, 0.05, (R, 1))
    loss = rng.uniform(0.01, 1.0, (R, 1)) * np.exp(-rate * ep) + 1e-6
    attn = np.full((R, len(ep), K, K), 1.0 / K)
    own = 1 - 0.75 * np.exp(-rate * ep)
    for k in range(K):
        attn[:, :, k, k] = own
        for j in range(K):
            if j != k:
                attn[:, :, j, k] = (1 - own) / (K - 1)
    is_q = runs[0]["spec"]["model"]["kind"] == "softmax_q"
    np.savez(path, run_id=np.array([r["run_id"] for r in runs]), epoch=ep, diverged_at=np.full(R, -1),
             seconds=np.asarray(1.0), device=np.asarray("cpu"), device_name=np.asarray("synthetic"),
             threads=np.asarray(1), code_version=np.asarray(code_version()), code_hash=np.asarray(code_hash()),
             train_loss=loss, test_loss=loss * 1.1, attn_own=own, attn_entropy=np.log(100) * (1 - own),
             attn_knn=own, attn=attn, q_features=rng.normal(size=(R, len(ep), K, K)) if is_q else np.zeros((R, len(ep), 0, 0)),
             effective=np.zeros((R, len(ep), 0, 0)), dist_target=np.full((R, len(ep)), np.nan))


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--runs", type=int, default=10_000)
    args = p.parse_args()
    cfg = config(args.runs)
    with tempfile.TemporaryDirectory() as wd:
        cpath = os.path.join(wd, "big.yaml")
        with open(cpath, "w") as fh:
            yaml.safe_dump(cfg, fh)
        t = time.perf_counter()
        res = subprocess.run([sys.executable, "-m", "snakemake", "-s", os.path.join(REPO, "Snakefile"), "-d", wd,
                              "--configfile", cpath, "-n", "--quiet", "all"], capture_output=True, text=True)
        plan_s = time.perf_counter() - t
        if res.returncode:
            sys.exit(res.stderr[-2000:])
        rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
        from icl.cli import main as icl
        from icl.config import validate
        from icl.plan.shards import plan
        full = validate(cfg)
        runs = plan(full, "big")
        print(f"{len(runs)} runs in {len({r.shard for r in runs})} shards")
        print(f"plan: snakemake -n took {plan_s:.1f} s, peak memory {rss:.0f} MB")
        res_dir = os.path.join(wd, "results", "big")
        os.makedirs(os.path.join(res_dir, "shards"), exist_ok=True)
        t = time.perf_counter()
        icl(["plan", "--experiment", "big", "--spec", json.dumps(full), "--runs", f"{res_dir}/runs.parquet",
             "--plan", f"{res_dir}/plan.json"])
        icl(["theory", "--plan", f"{res_dir}/plan.json", "--out", f"{res_dir}/theory.parquet",
             "--curves", f"{res_dir}/theory_curves.parquet"])
        t_theory = time.perf_counter() - t
        rng = np.random.default_rng(0)
        recs = json.load(open(f"{res_dir}/plan.json"))["runs"]
        shards = {}
        for r in recs:
            shards.setdefault(r["shard"], []).append(r)
        paths = []
        for name, members in shards.items():
            path = os.path.join(res_dir, "shards", f"{name}.npz")
            synthetic_shard(members, path, rng)
            paths.append(path)
        steps = {}
        for step, argv in (("tables", ["tables", "--runs", f"{res_dir}/runs.parquet", "--outdir", res_dir, "--processes", "2", *paths]),
                           ("analyse", ["analyse", res_dir]),
                           ("report", ["report", "--plan", f"{res_dir}/plan.json", "--results", res_dir,
                                       "--out", os.path.join(wd, "reports", "big.html"), "--processes", "2"])):
            t = time.perf_counter()
            icl(argv)
            steps[step] = time.perf_counter() - t
        size = os.path.getsize(os.path.join(wd, "reports", "big.html")) / 2**20
        print(f"plan + theory tables (incl. {sum(1 for r in recs if r['spec']['model']['kind'] == 'softmax_q')} "
              f"mean-field curves): {t_theory:.1f} s")
        print("; ".join(f"{k}: {v:.1f} s" for k, v in steps.items())
              + f"; tables + analyse + report together {sum(steps.values()):.1f} s (report {size:.1f} MB)")
        print(f"peak memory of this process: {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MB")


if __name__ == "__main__":
    main()
