"""Which seeds of config.yaml's `zfb_gpt` GPTs leave the plateau at ŷ ≈ 0, at a number of steps you choose:
each GPT shard trained as a job trains it (its fresh prompts, its warmup; no LLC, no evaluation), and per
run its positions, token kind, seed, t_escape (the step its query error first stays below half of
predicting 0's; empty: never) and final query error. What issue 49 measures a GPT recipe by: a claim
over seeds needs five that learned.

    .venv/bin/python benchmarks/gpt_escape.py --steps 3000            # 15 GPTs, ~4-5 minutes on 2 cores
    .venv/bin/python benchmarks/gpt_escape.py --steps 2000 --seeds 0 1 2 3 4 5 6
    .venv/bin/python benchmarks/gpt_escape.py --steps 2000 --lr 2e-3 --positional none
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd
import yaml

REPO = Path(__file__).resolve().parent.parent


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog=__doc__.split("\n\n", 1)[1],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=2000, help="optimisation steps (epochs of 64 fresh prompts)")
    ap.add_argument("--seeds", type=int, nargs="+", help="seeds (default: config.yaml's)")
    ap.add_argument("--lr", type=float, help="the GPT's peak learning rate (default: config.yaml's)")
    ap.add_argument("--warmup", type=int, help="steps of linear warmup (default: config.yaml's)")
    ap.add_argument("--positional", choices=["learned", "none"], help="only the GPTs with these positions")
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    sys.path.insert(0, str(REPO))
    from icl.config import validate
    from icl.data import write_dataset
    from icl.tables.measures import summary_table
    from icl.plan.shards import plan
    from icl.train.loop import train_shard

    exp = yaml.safe_load((REPO / "config.yaml").read_text())["experiments"]["zfb_gpt"]
    exp["train"].update(epochs=args.steps, checkpoint_every=args.steps, log_every=min(exp["train"]["log_every"], args.steps),
                        warmup=min(exp["train"].get("warmup") or 0, args.steps))
    exp["train"].pop("llc", None)
    if args.warmup is not None:
        exp["train"]["warmup"] = args.warmup
    if args.lr is not None:
        next(m for m in exp["models"] if m["kind"] == "gpt")["lr"] = args.lr
    exp.pop("evaluate", None)
    if args.seeds:
        exp["sweep"]["seed"] = args.seeds
    runs = [r for r in plan(validate({"experiments": {"zfb_gpt": exp}}), "zfb_gpt") if r.spec["model"]["kind"] == "gpt"
            and args.positional in (None, r.spec["model"]["positional"])]
    t0 = time.time()
    with tempfile.TemporaryDirectory(prefix="gpt-escape-") as tmp:
        paths = {}
        for r in runs:
            if r.data_id not in paths:
                paths[r.data_id] = os.path.join(tmp, f"{r.data_id}.npz")
                write_dataset(r.data_spec, paths[r.data_id])
        shards: dict = {}
        for r in runs:
            shards.setdefault(r.shard, []).append({"run_id": r.run_id, "data_id": r.data_id, "shard": r.shard, "spec": r.spec})
        print("positional  token_kind          seed  t_escape  final query error")
        for name, recs in shards.items():
            out = train_shard(recs, paths, os.path.join(tmp, f"{name}.npz"), threads=args.threads, label=name)
            summ = summary_table(out)
            for rec, te, err in zip(recs, summ["t_escape"], summ["final_query_train_loss"]):
                s = rec["spec"]
                print(f"{s['model']['positional']:<11} {s['tokens']['kind']:<19} {s['seed']:>4}  "
                      f"{'—' if pd.isna(te) else int(te):>8}  {float(err):.3f}", flush=True)
    print(f"{len(runs)} GPTs, {args.steps} steps: {time.time() - t0:.0f} s")


if __name__ == "__main__":
    main()
