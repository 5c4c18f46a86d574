"""The whole pipeline at sweep scale against the per-run loop a researcher would write.

720 softmax_q runs at LDL §6 sizes (d=15, K=4, Δ=3, N=100, 300 training and 1000 test prompts,
400 epochs, 6 L x 120 seeds, log_every 1), measured side by side in one run of this script:
  loop      benchmarks/throughput.py's fair loop (query-row scores, nn.Module + torch.optim.SGD,
            the train loss recorded every epoch), training only, two single-thread processes side
            by side, each timing its own training (not its start-up or its data);
  pipeline  `snakemake --cores 2` from an empty results/ to the report: prompts, training, tables,
            theory, analysis (slopes, stability, verdicts) and report (figures), start-up included.
Prints both times, their ratio, where the pipeline's job time went (`icl timing`), the share of
tables + analysis + report in the wall time, and the report job's peak memory.

    .venv/bin/python benchmarks/pipeline.py                  # 720 runs (the loop takes ~5 minutes)
    .venv/bin/python benchmarks/pipeline.py --seeds 20       # 120 runs
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).parent))
import throughput  # noqa: E402


def config(seeds: int, epochs: int) -> dict:
    return {"experiments": {"ldl_sweep": {
        "description": f"{6 * seeds} softmax_q runs at LDL §6 sizes",
        **throughput.LDL, "models": [throughput.MODELS["softmax_q"][1]],
        "train": {"epochs": epochs, "log_every": 1, "checkpoint_every": 100},
        "sweep": {"task.L": throughput.LS, "seed": list(range(seeds))}}}}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seeds", type=int, default=120, help="seeds per L (6 x seeds runs)")
    p.add_argument("--epochs", type=int, default=400)
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as wd:
        data = os.path.join(wd, "loop-data")
        os.makedirs(data)
        throughput.workload("softmax_q", args.seeds, args.epochs, data)      # the loop's prompt files, untimed
        loop_args = argparse.Namespace(epochs=args.epochs, data=data)
        procs = [throughput.child("softmax_q", "loop", args.seeds, loop_args, 1, "cpu", part) for part in (0, 1)]
        halves = [throughput.result(pr) for pr in procs]
        runs = sum(h["runs"] for h in halves)
        loop_s = max(h["seconds"] for h in halves)
        print(f"loop: {runs} runs x {args.epochs} epochs, training only, 2 processes x 1 thread: {loop_s:.1f} s "
              f"({runs * args.epochs / loop_s:.0f} model-epochs/s)")

        (Path(wd) / "sweep.yaml").write_text(yaml.safe_dump(config(args.seeds, args.epochs), sort_keys=False))
        cmd = [sys.executable, "-m", "snakemake", "-s", str(REPO / "Snakefile"), "-d", wd, "--cores", "2",
               "--configfile", os.path.join(wd, "sweep.yaml")]
        t = time.perf_counter()
        res = subprocess.run(cmd, capture_output=True, text=True)
        wall = time.perf_counter() - t
        if res.returncode:
            sys.exit(f"snakemake failed:\n{res.stderr[-3000:]}")
        print(f"pipeline: snakemake --cores 2, empty results/ to the report: {wall:.1f} s wall")
        print(f"ratio: the pipeline is {loop_s / wall:.1f}x the loop's training alone")

        from icl.timing import summary_line, timing_table
        df = timing_table(os.path.join(wd, "logs"))
        print(df.to_string(index=False, float_format=lambda v: f"{v:.2f}"))
        print(summary_line(df))
        post = df.loc[df["step"].isin(["tables", "analyse", "report"]), "seconds"].sum()
        rep = df[df["step"] == "report"].iloc[0]
        print(f"tables + analyse + report: {post:.1f} s = {100 * post / wall:.0f}% of "
              f"the wall time; report job peak memory {rep['max_pss_mb']:.0f} MB PSS ({rep['max_rss_mb']:.0f} MB RSS "
              "summed over it and its forked figure workers, shared pages counted in each)")
        sizes = {t: os.path.getsize(os.path.join(wd, "results/ldl_sweep", f"{t}.parquet")) / 2**20
                 for t in ("curves", "attention", "matrices")}
        print("tables on disk: " + ", ".join(f"{k} {v:.1f} MB" for k, v in sizes.items()))


if __name__ == "__main__":
    main()
