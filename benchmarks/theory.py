"""The theory step alone: `python -m icl theory` (one thread, as the Snakemake rule runs it) on the
plan of benchmarks/pipeline.py's sweep and on config.yaml's ldl_phase_diagram, from a cold start
(no store of flows) and again with the store the first run wrote (a sweep rewritten with nothing
new), checking that both give the same theory_curves. Prints wall and CPU seconds of each.

    .venv/bin/python benchmarks/theory.py                  # 720 runs, and ldl_phase_diagram (450)
    .venv/bin/python benchmarks/theory.py --seeds 20       # 120 runs

The code timed is the `icl` that `python -m icl` imports in the current folder: run from another
checkout's top folder with PYTHONPATH=. to time its theory step on the same plans (--no-store for
a checkout from before the store). Before/after in benchmarks/README.md were measured that way.
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
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "benchmarks"))
from pipeline import config as sweep_config  # noqa: E402


def plan(wd: str, cfg: dict, exp: str) -> str:
    Path(wd, "c.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))
    subprocess.run([sys.executable, "-m", "snakemake", f"results/{exp}/plan.json", "-s", str(REPO / "Snakefile"), "-d", wd,
                    "--cores", "1", "--configfile", os.path.join(wd, "c.yaml")], check=True, capture_output=True)
    return os.path.join(wd, "results", exp, "plan.json")


def theory(plan_json: str, out: str, store: str | None) -> tuple[float, float]:
    """Wall and CPU seconds (user + system, of the child) of one `icl theory`."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    subprocess.run([sys.executable, "-m", "icl", "theory", "--plan", plan_json, "--out", out + ".theory.parquet",
                    "--curves", out + ".curves.parquet"] + (["--flows", store] if store else []),
                   check=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.perf_counter() - t, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seeds", type=int, default=120, help="seeds per L of pipeline.py's sweep (6 x seeds runs)")
    p.add_argument("--experiment", default="ldl_phase_diagram", help="a config.yaml experiment timed too ('' for none)")
    p.add_argument("--no-store", action="store_true", help="no --flows (a checkout from before the store)")
    args = p.parse_args()
    import pandas as pd
    workloads = [("ldl_sweep", sweep_config(args.seeds, 400, 4))]
    if args.experiment:
        full = yaml.safe_load((REPO / "config.yaml").read_text())
        workloads.append((args.experiment, {**full, "experiments": {args.experiment: full["experiments"][args.experiment]}}))
    with tempfile.TemporaryDirectory() as wd:
        for exp, cfg in workloads:
            d = os.path.join(wd, exp)
            os.makedirs(d)
            pj = plan(d, cfg, exp)
            store = None if args.no_store else os.path.join(d, "flows.npz")
            n = len(json.loads(Path(pj).read_text())["runs"])
            wall, cpu = theory(pj, os.path.join(d, "cold"), store)
            print(f"{exp}, {n} runs: theory step {wall:.1f} s wall, {cpu:.1f} s CPU (cold)")
            if store:
                wall, cpu = theory(pj, os.path.join(d, "warm"), store)
                same = pd.read_parquet(os.path.join(d, "cold.curves.parquet")).equals(
                    pd.read_parquet(os.path.join(d, "warm.curves.parquet")))
                print(f"{exp}, {n} runs: theory step {wall:.1f} s wall, {cpu:.1f} s CPU (store of flows present; "
                      f"theory_curves {'the same' if same else 'DIFFERENT'})")


if __name__ == "__main__":
    main()
