"""`icl check --estimate` against the jobs it predicts: the estimate first, on a quiet machine,
then the same config run by Snakemake from an empty results/ (or an existing run's logs/), and
per experiment the predicted training job time beside the one `icl timing` measured (Snakemake's
benchmark files: each job's wall time, Python start-up and prompt files included).

    .venv/bin/python benchmarks/estimate.py                       # the default config.yaml (~10 min)
    .venv/bin/python benchmarks/estimate.py --config my.yaml
    .venv/bin/python benchmarks/estimate.py --logs logs/          # a finished run of config.yaml
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", default=str(REPO / "config.yaml"))
    p.add_argument("--logs", help="logs/ of a finished run of --config (skips the run)")
    p.add_argument("--cores", type=int, default=2)
    p.add_argument("--workdir", help="run in this folder and keep its results/ (default: a temporary one)")
    args = p.parse_args()

    from icl.config import load
    from icl.plan.estimate import estimate, report
    from icl.jobs.timing import timing_table
    cfg = load(args.config)
    t = time.perf_counter()
    rows = estimate(cfg, device=cfg.get("device", "auto"))
    print(f"estimate: {time.perf_counter() - t:.1f} s to calibrate")
    print(report(rows, args.cores))

    with tempfile.TemporaryDirectory() as tmp:
        wd = args.workdir or tmp
        logs = args.logs
        if logs is None:
            t = time.perf_counter()
            res = subprocess.run([sys.executable, "-m", "snakemake", "-s", str(REPO / "Snakefile"), "-d", wd,
                                  "--cores", str(args.cores), "--configfile", args.config],
                                 capture_output=True, text=True)
            if res.returncode:
                sys.exit(f"snakemake failed:\n{res.stderr[-3000:]}")
            print(f"\nrun: snakemake --cores {args.cores} from an empty results/: {time.perf_counter() - t:.0f} s wall")
            logs = os.path.join(wd, "logs")
        measured = timing_table(logs, results=os.path.join(os.path.dirname(os.path.abspath(logs)), "results"))   # beside logs/
        measured = measured[measured["step"] == "train"].set_index("experiment")
        print(f"\n{'experiment':<24} {'predicted s':>12} {'measured s':>11} {'ratio':>7}  within ±30%")
        pred_all = meas_all = 0.0
        for name in cfg["experiments"]:
            pred = sum(r["seconds"] for r in rows if r["experiment"] == name)
            meas = float(measured.loc[name, "seconds"]) if name in measured.index else float("nan")
            pred_all, meas_all = pred_all + pred, meas_all + meas
            print(f"{name:<24} {pred:>12.1f} {meas:>11.1f} {pred / meas:>7.2f}  {'yes' if abs(pred / meas - 1) <= 0.3 else 'NO'}")
        print(f"{'total':<24} {pred_all:>12.1f} {meas_all:>11.1f} {pred_all / meas_all:>7.2f}  "
              f"{'yes' if abs(pred_all / meas_all - 1) <= 0.3 else 'NO'}")


if __name__ == "__main__":
    main()
