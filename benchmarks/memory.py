"""Memory of a training shard: each model kind's estimate (Model.train_bytes, which the planner
cuts shards by) against the measured peak, per run, at the shapes of config/paper.yaml.

Each measurement trains a shard of R runs for 2 epochs (logging every epoch) in a subprocess and
reads its peak RSS; the memory of one run in the ensemble is the slope between two shard sizes,
so the fixed cost of Python, torch, the prompt cache and the chunked forwards cancels.

    .venv/bin/python benchmarks/memory.py                       # every workload below
    .venv/bin/python benchmarks/memory.py --only block_count softmax_q_count
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile

LDL = {"tokens": {"kind": "discrete", "d": 15, "K": 4, "delta": 3.0}, "task": {"kind": "cosine", "L": 1.0, "c": 0.5},
       "prompts": {"N": 100, "train": 300, "test": 1000}}
POLY = {"tokens": {"kind": "gaussian", "d": 30}, "task": {"kind": "polynomial", "L": 1.0},
        "prompts": {"N": 150, "train": 500, "test": 1000}}
ZFB = {"tokens": {"kind": "gaussian", "d": 20}, "task": {"kind": "linear"},
       "prompts": {"N": 100, "train": 5000, "test": 5000}}
GPT = {"tokens": {"kind": "gaussian", "d": 20}, "task": {"kind": "linear"},
       "prompts": {"N": 100, "train": 64, "test": 64}}
SQ = {"name": "m", "kind": "softmax_q", "optimizer": "gd", "lr": 1.0}
BLOCK = {"name": "m", "kind": "transformer_block", "optimizer": "adam", "lr": 1e-3, "width": 64}
WORKLOADS = {   # name: (data, model, train settings, the two shard sizes), as in config/paper.yaml
    "softmax_q_count": (LDL, SQ, {}, (64, 4096)),             # ldl_cosine: the count form (0.2 MB a run: 4096 runs, so
                                                              # the slope is ~800 MB, well above the tens of MB a fixed cost moves)
    "block_count": (LDL, BLOCK, {}, (8, 256)),               # 1.2 GB of slope: a fixed cost that moves by
                                                              # ~60 MB under a parallel suite read 1.29x at (8, 64)
    "softmax_q_token": (POLY, SQ, {}, (4, 32)),               # ldl_polynomial: the token form
    "block_token": (POLY, BLOCK, {}, (2, 12)),
    "lsa_fresh": (ZFB, {"name": "m", "kind": "lsa", "optimizer": "adam", "lr": 1e-2}, {"fresh": True}, (2, 12)),
    "block_fresh": (ZFB, BLOCK, {"fresh": True}, (2, 8)),     # zfb_fixed at N=100
    "gpt_paper": (GPT, {"name": "m", "kind": "gpt", "optimizer": "adam", "lr": 1e-4, "layers": 12, "heads": 8,
                        "width": 256, "positions": 401}, {"fresh": True}, (1, 3)),   # zfb_gpt, 64 test prompts
}


def config(name: str, runs: int) -> dict:
    data, model, train, _ = WORKLOADS[name]
    return {"experiments": {"mem": {**data, "models": [model], "train": {"epochs": 2, "log_every": 1, **train},
                                    "sweep": {"seed": list(range(runs))}}},
            "shard_size": 100000, "memory_budget_mb": 10**6}


def peak_mb() -> float:
    """This process's peak resident memory in MB: VmHWM, the high-water mark of its own address
    space. Not getrusage's ru_maxrss, which Linux carries across exec from the image it replaced:
    a child started by a large process (pytest after a long suite, 1 GB) reads its parent's peak,
    and the slope between two shard sizes came out 0.6-1.6x the true one."""
    try:
        with open("/proc/self/status") as f:
            return next(int(line.split()[1]) for line in f if line.startswith("VmHWM:")) / 1024
    except (OSError, StopIteration):
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def one(name: str, runs: int) -> None:
    """Child: train one shard of `runs` runs, print its peak RSS in MB and the estimate."""
    from icl.config import validate
    from icl.data import write_dataset
    from icl.plan.shards import plan, run_bytes
    import torch
    from icl.train.loop import train_ensemble
    cfg = validate(config(name, runs))
    recs = plan(cfg, "mem")
    with tempfile.TemporaryDirectory() as tmp:
        paths = {}
        for r in recs:
            if r.data_id not in paths:
                paths[r.data_id] = os.path.join(tmp, f"{r.data_id}.npz")
                write_dataset(r.data_spec, paths[r.data_id])
        base = peak_mb()
        # one ensemble of all the runs: what Model.train_bytes estimates a run of (train_shard would
        # cut a shard past the kind's ensemble cap into chunks, and hold one at a time)
        train_ensemble([{"run_id": r.run_id, "data_id": r.data_id, "spec": r.spec} for r in recs], paths,
                       os.path.join(tmp, "s.npz"), torch.device("cpu"), label="mem")
    peak = peak_mb()
    print(json.dumps({"peak_mb": peak, "before_mb": base, "estimate_mb": run_bytes(recs[0].spec) / 2**20}))


def measure(name: str, runs: int) -> dict:
    out = subprocess.run([sys.executable, __file__, "--one", name, str(runs)], capture_output=True, text=True)
    if out.returncode:
        sys.exit(f"{name} with {runs} runs failed:\n{out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def per_run(name: str) -> dict:
    """The workload's two shard sizes, each measured in a fresh process: their peaks, the slope
    between them (`measured`, MB a run) and the estimate (`estimate`, MB a run)."""
    r1, r2 = WORKLOADS[name][3]
    a, b = measure(name, r1), measure(name, r2)
    return {"r1": r1, "r2": r2, "peak1": a["peak_mb"], "peak2": b["peak_mb"],
            "measured": (b["peak_mb"] - a["peak_mb"]) / (r2 - r1), "estimate": a["estimate_mb"]}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--only", nargs="+", choices=list(WORKLOADS), default=list(WORKLOADS))
    p.add_argument("--one", nargs=2, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.one:
        one(args.one[0], int(args.one[1]))
        return
    print(f"{'workload':16} {'R1':>4} {'R2':>4} {'peak MB R1':>11} {'peak MB R2':>11} {'measured MB/run':>16} "
          f"{'estimated MB/run':>17} {'estimate/measured':>18}")
    for name in args.only:
        m = per_run(name)
        print(f"{name:16} {m['r1']:>4} {m['r2']:>4} {m['peak1']:11.0f} {m['peak2']:11.0f} {m['measured']:16.2f} "
              f"{m['estimate']:17.2f} {m['estimate'] / m['measured']:18.2f}", flush=True)


if __name__ == "__main__":
    main()
