"""Memory of a training shard: the planner's estimate (icl.plan.run_bytes) against the measured
peak, per run, at the paper's sizes (d=15, K=4, N=100, 300 training and 1000 test prompts).

Each measurement trains a shard of R runs for 2 epochs in a subprocess and reads its peak RSS;
the memory of one run in the ensemble is the slope between two shard sizes, so the fixed cost
of Python, torch and the prompt cache cancels.

    .venv/bin/python benchmarks/memory.py
    .venv/bin/python benchmarks/memory.py --models gpt32 --sizes 2 6
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile

MODELS = {
    "softmax_q": {"name": "m", "kind": "softmax_q", "optimizer": "gd", "lr": 1.0},
    "block32": {"name": "m", "kind": "transformer_block", "optimizer": "adam", "lr": 1e-3, "width": 32},
    "block64": {"name": "m", "kind": "transformer_block", "optimizer": "adam", "lr": 1e-3, "width": 64},
    "gpt32": {"name": "m", "kind": "gpt", "optimizer": "adam", "lr": 1e-3, "width": 32, "layers": 3, "heads": 2,
              "positions": 201},
}


def config(model: dict, runs: int) -> dict:
    return {"experiments": {"mem": {
        "tokens": {"kind": "discrete", "d": 15, "K": 4, "delta": 3.0},
        "task": {"kind": "cosine", "L": 1.0, "c": 0.5},
        "prompts": {"N": 100, "train": 300, "test": 1000},
        "models": [model], "train": {"epochs": 2, "log_every": 1},
        "sweep": {"seed": list(range(runs))}}}, "shard_size": 100000, "memory_budget_mb": 10**6}


def one(model_key: str, runs: int) -> None:
    """Child: train one shard of `runs` runs, print its peak RSS in MB and the estimate."""
    from icl.config import validate
    from icl.data import write_dataset
    from icl.plan import plan, run_bytes
    from icl.train import train_shard
    cfg = validate(config(MODELS[model_key], runs))
    recs = plan(cfg, "mem")
    with tempfile.TemporaryDirectory() as tmp:
        paths = {}
        for r in recs:
            if r.data_id not in paths:
                paths[r.data_id] = os.path.join(tmp, f"{r.data_id}.npz")
                write_dataset(r.data_spec, paths[r.data_id])
        base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        train_shard([{"run_id": r.run_id, "data_id": r.data_id, "spec": r.spec} for r in recs], paths,
                    os.path.join(tmp, "s.npz"), device="cpu", label="mem")
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps({"peak_mb": peak, "before_mb": base, "estimate_mb": run_bytes(recs[0].spec) / 2**20}))


def measure(model_key: str, runs: int) -> dict:
    out = subprocess.run([sys.executable, __file__, "--one", model_key, str(runs)], capture_output=True,
                         text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sizes", nargs=2, type=int, default=[6, 30], help="the two shard sizes R")
    p.add_argument("--models", nargs="+", default=list(MODELS), choices=list(MODELS))
    p.add_argument("--one", nargs=2, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.one:
        one(args.one[0], int(args.one[1]))
        return
    r1, r2 = args.sizes
    print(f"{'model':10} {'peak RSS R=' + str(r1):>16} {'peak RSS R=' + str(r2):>16} "
          f"{'measured MB/run':>16} {'estimated MB/run':>17} {'estimate/measured':>18}")
    for key in args.models:
        a, b = measure(key, r1), measure(key, r2)
        per_run = (b["peak_mb"] - a["peak_mb"]) / (r2 - r1)
        print(f"{key:10} {a['peak_mb']:16.0f} {b['peak_mb']:16.0f} {per_run:16.1f} {a['estimate_mb']:17.1f} "
              f"{a['estimate_mb'] / per_run:18.2f}")


if __name__ == "__main__":
    main()
