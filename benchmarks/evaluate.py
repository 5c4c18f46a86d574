"""Evaluation under shift at the paper's sizes: what one trained run costs, and where it goes.

zfb_fixed of config/paper.yaml (Gaussian d=20 with the rotated covariance, the LSA trained at
N=40), its evaluate section as it is (5000 prompts per cell, ten shift cells, nine test lengths up
to M=400): R runs (seeds) are trained 2 epochs (what they learned does not change the cost), then
`icl.evaluate.cells.evaluate_trained` evaluates the shard as the workflow's evaluate job does, with
2 threads, timed by part: drawing the prompts, the model's forward passes, the baselines (OLS,
ridge, 1-NN, Nadaraya-Watson, the LSA limit: once per prompt set of the experiment) and the
theory of every cell. Prints seconds per part, per run, and the peak memory of the process.

    .venv/bin/python benchmarks/evaluate.py                   # 2 runs, 5000 prompts (~1 minute)
    .venv/bin/python benchmarks/evaluate.py --runs 4 --prompts 1000
"""
from __future__ import annotations

import argparse
import copy
import os
import resource
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parent.parent


def experiment(runs: int, prompts: int | None) -> dict:
    exp = copy.deepcopy(yaml.safe_load((REPO / "config" / "paper.yaml").read_text())["experiments"]["zfb_fixed"])
    exp["models"] = [m for m in exp["models"] if m["kind"] == "lsa"]
    exp["sweep"] = {"seed": list(range(runs))}
    exp["prompts"].update(train=64, test=64)
    exp["train"].update(epochs=2, log_every=1, checkpoint_every=2)
    if prompts:
        exp["evaluate"]["prompts"] = prompts
    return {"experiments": {"ev": exp}}


def timed(module, name, totals):
    """module.name, wrapped to add its seconds to totals[name]."""
    fn = getattr(module, name)

    def wrapper(*a, **k):
        t = time.perf_counter()
        try:
            return fn(*a, **k)
        finally:
            totals[name] += time.perf_counter() - t
    setattr(module, name, wrapper)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--runs", type=int, default=2)
    p.add_argument("--prompts", type=int, default=None, help="prompts per cell (default: the paper's)")
    args = p.parse_args()
    import torch
    from icl.evaluate import cells as evaluate
    from icl import models
    from icl.config import validate
    from icl.data import ensure_datasets
    from icl.plan.shards import plan
    from icl.train.loop import train_shard
    cfg = validate(experiment(args.runs, args.prompts))
    ev = cfg["experiments"]["ev"]["evaluate"]
    runs = [{"run_id": r.run_id, "data_id": r.data_id, "shard": r.shard, "spec": r.spec} for r in plan(cfg, "ev")]
    torch.set_num_threads(2)
    totals: dict = defaultdict(float)
    with tempfile.TemporaryDirectory() as wd:
        paths = ensure_datasets(runs, wd)
        train_shard(runs, paths, os.path.join(wd, "s.npz"), device="cpu", threads=2, label="train")
        timed(evaluate, "eval_prompts", totals)         # from here on: the evaluation's parts only
        timed(evaluate.baselines, "predict_all", totals)
        timed(evaluate, "theory_cell", totals)
        timed(models.MODELS["lsa"], "forward", totals)
        base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        t = time.perf_counter()
        df = evaluate.evaluate_trained(runs, paths, os.path.join(wd, "s.npz"), os.path.join(wd, "s.parquet"),
                                       device="cpu", threads=2, label="evaluate")
        total = time.perf_counter() - t
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    n_cells = len(evaluate.cells(ev)) * len(ev["lengths"])
    print(f"\nzfb_fixed at paper shapes: {args.runs} LSA runs, {ev['prompts']} prompts x {n_cells} cells "
          f"(lengths up to {max(ev['lengths'])}), 2 threads: {total:.1f} s ({total / args.runs:.1f} s per run), "
          f"{len(df)} rows; peak RSS {peak:.0f} MB (before evaluation {base:.0f} MB)")
    rest = total - sum(totals.values())
    for name, label in (("eval_prompts", "drawing the prompts"), ("forward", "the model's forward passes"),
                        ("predict_all", "the baselines (once per prompt set)"), ("theory_cell", "the theory of every cell")):
        print(f"  {label:40s} {totals[name]:7.2f} s  {100 * totals[name] / total:4.0f}%")
    print(f"  {'the rest (tables of rows, statistics)':40s} {rest:7.2f} s  {100 * rest / total:4.0f}%")


if __name__ == "__main__":
    sys.exit(main())
