"""The whole pipeline at sweep scale against the reference loop, `../shared/reference/naive_softmax_q.py`,
run as it is beside it.

The workload is the reference's: softmax_q at LDL §6 sizes (d=15, K=4, Δ=3, N=100, 300 training
prompts, c=0.5, SGD at lr 1 from Q=0), 6 L x S seeds, 400 epochs. Measured in one run of this script:
  same losses  the reference's own `data` and `SoftmaxQ` (its definitions, read from the file) trained
               on a few of its prompt sets, against icl's softmax_q ensemble on the same prompts:
               the train-loss curves must agree (max relative difference below 1e-4) before any timing;
  loop         the reference file itself, two single-thread processes side by side (runs 0..R/2-1 and
               R/2..R-1, as `snakemake --cores 2` would run two jobs), each printing its own training
               seconds (its data generation excluded);
  pipeline     `snakemake --cores 2` from an empty results/ to the report, on the same sweep with 1000
               test prompts a run besides (the loop has none): prompts, training, tables, theory,
               analysis and report, start-up included.
Prints both times, their ratios (the whole pipeline's wall time, and the training loops' own seconds
per core), where the pipeline's job time went (`icl timing`, one row per step, with each job kind's
peak memory), and inside the training jobs the share of start-up, prompt files, setup, the loop and
writing (from the jobs' logs).

    .venv/bin/python benchmarks/pipeline.py                  # 720 runs (the loop takes ~3-5 minutes)
    .venv/bin/python benchmarks/pipeline.py --seeds 20       # 120 runs
"""
from __future__ import annotations

import argparse
import ast
import glob
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import yaml

REPO = Path(__file__).resolve().parent.parent
REFERENCE = REPO.parent / "shared" / "reference" / "naive_softmax_q.py"
LS = [0.1, 0.2, 0.4, 1.0, 1.5, 2.0]          # the reference's L of run r: LS[r % 6]


def reference_definitions(path: Path = REFERENCE) -> dict:
    """The reference's imports, constants, `data` and `SoftmaxQ`, executed from its own source
    (its training loop, which reads sys.argv, left out): the same code the timed processes run."""
    tree = ast.parse(path.read_text())
    keep = []
    for node in tree.body:
        if isinstance(node, (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.ClassDef)):
            keep.append(node)
        elif isinstance(node, ast.Assign):
            try:
                ast.literal_eval(node.value)
                keep.append(node)
            except ValueError:
                pass
    ns: dict = {}
    exec(compile(ast.Module(keep, []), str(path), "exec"), ns)
    return ns


def same_losses(epochs: int = 30, runs: int = 6) -> float:
    """Max relative difference of the train-loss curves, reference loop vs icl's ensemble, on the
    reference's prompts of runs 0..runs-1 (each its own L)."""
    import torch
    from icl import models
    from icl.train import optim
    ref = reference_definitions()
    torch.set_num_threads(1)
    sets = [ref["data"](r, LS[r % 6]) for r in range(runs)]
    ref_curves = []
    for X, y, xq, yq in sets:
        model = ref["SoftmaxQ"]()
        opt = torch.optim.SGD(model.parameters(), lr=1.0)
        hist = []
        for _ in range(epochs):
            opt.zero_grad()
            loss = 0.5 * ((model(X, y, xq) - yq) ** 2).mean()
            loss.backward()
            opt.step()
            hist.append(loss.item())
        ref_curves.append(hist)
    d, K, delta = ref["d"], ref["K"], ref["delta"]
    V = (delta / np.sqrt(2) * np.eye(d)[:K]).astype(np.float32)
    x = torch.stack([torch.cat([X, xq.unsqueeze(1)], 1) for X, _, xq, _ in sets])
    arrays = {"feat": (x @ torch.from_numpy(V).T).argmax(-1),
              "y": torch.stack([torch.cat([y, yq.unsqueeze(1)], 1) for _, y, _, yq in sets]),
              "features": torch.from_numpy(V).expand(runs, K, d).contiguous()}
    model = models.build({"kind": "softmax_q", "lr": 1.0}, {"kind": "discrete", "d": d, "K": K, "delta": delta})
    batch = model.prepare(arrays.__getitem__, diagnose=False)
    params = model.init(list(range(runs)), ["m"] * runs, torch.device("cpu"))
    opt = optim.build("gd", torch.ones(runs))
    ours = []
    for _ in range(epochs):
        loss, grads, *_ = model.step(params, batch)
        opt.step(params, grads, torch.ones(runs, dtype=torch.bool))
        ours.append(loss.numpy().astype(float))
    ours = np.array(ours).T
    ref_curves = np.array(ref_curves)
    return float(np.max(np.abs(ours - ref_curves) / np.abs(ref_curves)))


def config(seeds: int, epochs: int, log_every: int) -> dict:
    return {"experiments": {"ldl_sweep": {
        "description": f"{6 * seeds} softmax_q runs at the reference loop's sizes",
        "tokens": {"kind": "discrete", "d": 15, "K": 4, "delta": 3.0},
        "task": {"kind": "cosine", "L": 1.0, "c": 0.5}, "prompts": {"N": 100, "train": 300, "test": 1000},
        "models": [{"name": "softmax_q", "kind": "softmax_q", "optimizer": "gd", "lr": 1.0}],
        "train": {"epochs": epochs, "log_every": log_every, "checkpoint_every": 100},
        "sweep": {"task.L": LS, "seed": list(range(seeds))}}}}


def run_reference(runs: int, epochs: int) -> float:
    """The reference as two single-thread processes side by side; the slower one's training seconds."""
    half = runs // 2
    procs = [subprocess.Popen([sys.executable, str(REFERENCE), str(n), str(epochs), str(first)],
                              stdout=subprocess.PIPE, text=True)
             for n, first in ((half, 0), (runs - half, half))]
    secs = []
    for p in procs:
        out, _ = p.communicate()
        if p.returncode:
            sys.exit(f"the reference loop failed (exit {p.returncode})")
        secs.append(float(out.strip().splitlines()[-1]))
    return max(secs)


LOG_LINE = re.compile(r"prompt files ready in ([0-9.]+)s|"
                      r"setup ([0-9.]+)s, training ([0-9.]+)s, writing ([0-9.]+)s, ([0-9]+) threads")


def train_breakdown(logs: str, job_seconds: float) -> dict:
    """Inside the training jobs, summed over jobs: prompt files, setup (reading prompts, the model's
    form), the training loop, writing the shard, and the rest of the job (start-up: the interpreter,
    imports, reading the plan) from the logs each job writes; and the loops' core-seconds."""
    out = {"prompt files": 0.0, "setup": 0.0, "training loop": 0.0, "writing": 0.0}
    core_s = 0.0
    for path in glob.glob(os.path.join(logs, "*", "train", "*.log")):
        for m in LOG_LINE.finditer(Path(path).read_text()):
            if m.group(1):
                out["prompt files"] += float(m.group(1))
            else:
                out["setup"] += float(m.group(2))
                out["training loop"] += float(m.group(3))
                out["writing"] += float(m.group(4))
                core_s += float(m.group(3)) * int(m.group(5))
    out["start-up"] = job_seconds - sum(out.values())
    return out, core_s


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seeds", type=int, default=120, help="seeds per L (6 x seeds runs)")
    p.add_argument("--epochs", type=int, default=400)
    p.add_argument("--log-every", type=int, default=4, help="the pipeline's logging grid (test loss, attention "
                   "maps); train loss and own attention are traced every epoch whatever it is")
    p.add_argument("--keep", metavar="DIR", help="run the pipeline in DIR (kept) instead of a temporary directory")
    args = p.parse_args()
    if not REFERENCE.exists():
        sys.exit(f"the reference loop is not at {REFERENCE} (../shared beside the checkout)")
    diff = same_losses()
    print(f"same losses: reference vs icl on the reference's prompts, 6 runs x 30 epochs: max relative "
          f"difference {diff:.2e} ({'ok' if diff < 1e-4 else 'FAIL'})")
    if diff >= 1e-4:
        sys.exit("the two do not train the same model; no timing")
    runs = 6 * args.seeds
    loop_s = run_reference(runs, args.epochs)
    print(f"loop: {REFERENCE.name}, {runs} runs x {args.epochs} epochs, training only, 2 processes x 1 thread: "
          f"{loop_s:.1f} s ({runs * args.epochs / loop_s:.0f} model-epochs/s)")

    with tempfile.TemporaryDirectory() as tmp:
        wd = args.keep or tmp
        os.makedirs(wd, exist_ok=True)
        if os.path.exists(os.path.join(wd, "results")):
            sys.exit(f"{wd}/results exists: the pipeline is timed from an empty results/")
        (Path(wd) / "sweep.yaml").write_text(yaml.safe_dump(config(args.seeds, args.epochs, args.log_every),
                                                            sort_keys=False))
        cmd = [sys.executable, "-m", "snakemake", "-s", str(REPO / "Snakefile"), "-d", wd, "--cores", "2",
               "--configfile", os.path.join(wd, "sweep.yaml")]
        t = time.perf_counter()
        res = subprocess.run(cmd, capture_output=True, text=True)
        wall = time.perf_counter() - t
        if res.returncode:
            sys.exit(f"snakemake failed:\n{res.stderr[-3000:]}")
        from icl.jobs.timing import summary_line, timing_table
        df = timing_table(os.path.join(wd, "logs"), results=os.path.join(wd, "results"))
        train_jobs = df.loc[df["step"] == "train", "seconds"].sum()
        parts, loop_core_s = train_breakdown(os.path.join(wd, "logs"), train_jobs)
        print(f"pipeline: snakemake --cores 2, empty results/ to the report (log_every {args.log_every}): {wall:.1f} s wall")
        print(f"ratio, whole pipeline: {loop_s / wall:.1f}x the loop's training time")
        print(f"ratio, training loops per core: {2 * loop_s / loop_core_s:.1f}x (the loop: 2 x {loop_s:.1f} core-s; "
              f"the pipeline's training loops: {loop_core_s:.1f} core-s, seconds x threads summed over its jobs)")
        print(df.to_string(index=False, float_format=lambda v: f"{v:.2f}"))
        print(summary_line(df))
        print("inside the training jobs: " + ", ".join(f"{k} {v:.1f} s ({100 * v / train_jobs:.0f}%)"
                                                       for k, v in parts.items()))
        other = wall - df["seconds"].sum() / 2
        print(f"wall time by step (job seconds / 2 cores): " + ", ".join(
            f"{s} {100 * v / 2 / wall:.0f}%" for s, v in df.groupby("step")["seconds"].sum().items())
            + f"; Snakemake itself and idle cores ~{100 * other / wall:.0f}%")


if __name__ == "__main__":
    main()
