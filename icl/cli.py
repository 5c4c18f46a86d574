"""Entry points the workflow's rules call (`python -m icl <step> ...`); usable by hand too.

Each step reads plain files and writes plain files, so it can be run and tested without
Snakemake. `plan.json` (written by `plan`) carries the validated experiment and every run spec.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

from icl.config import ConfigError
from icl.train.stopping import RETRY, Stopped


def cmd_check(args) -> None:
    from icl.config import load
    cfg = load(args.config)
    from icl.plan.shards import plan
    for name in cfg["experiments"]:
        runs = plan(cfg, name)
        print(f"{name}: {len(runs)} runs in {len({r.shard for r in runs})} shards")
    if args.estimate:
        from icl.plan.estimate import estimate, report
        from icl.jobs.runtime import device_setting
        device = device_setting(args.device, cfg)
        rows = estimate(cfg, device=device, progress=lambda text: print(text, file=sys.stderr, flush=True))
        if rows and rows[0]["basis"] == "FLOPs":
            from icl.plan.estimate import flop_note
            print(f"\npredicted training on a CUDA device ({flop_note()}):")
        else:
            print(f"\npredicted training on this machine ({device}; evaluation under shift not included):")
        print(report(rows, args.cores or os.cpu_count() or 1))


def read_plan(path: str) -> dict:
    from icl.store.files import read_plan    # pandas and pyarrow load only for the steps that read tables
    return read_plan(path)


def _json_arg(flag: str, text: str):
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise ConfigError(f"{flag} is not valid JSON ({e})") from None


def cmd_plan(args) -> None:
    from icl.plan.shards import plan
    from icl.jobs.runtime import stable_hash
    from icl.store.io import write_parquet
    from icl.tables.build import runs_table
    cfg = _json_arg("--spec", args.spec)
    if args.experiment not in cfg.get("experiments", {}):
        raise ConfigError(f"--experiment {args.experiment!r} is not in --spec; it has: {', '.join(cfg.get('experiments', {}))}")
    runs = plan(cfg, args.experiment)
    recs = [{"run_id": r.run_id, "data_id": r.data_id, "shard": r.shard, "spec": r.spec} for r in runs]
    chash = stable_hash(cfg["experiments"][args.experiment])
    from icl.jobs.provenance import stamp
    write_parquet(runs_table(recs, args.experiment, chash), args.runs, stamp(chash))
    from icl.store.files import atomic_path
    with atomic_path(args.plan) as tmp, open(tmp, "w") as fh:
        json.dump({"experiment": args.experiment, "config": cfg["experiments"][args.experiment],
                   "settings": {k: v for k, v in cfg.items() if k != "experiments"},
                   "config_hash": chash, "runs": recs}, fh, indent=1)
    print(f"{args.experiment}: {len(runs)} runs in {len({r.shard for r in runs})} shards", file=sys.stderr)


def _shard_job(args, pl: dict, runs: list[dict]) -> tuple[list[dict], dict, str]:
    """The runs of args.shard, their prompt files (written first where missing), and the device
    (--device, else the plan's)."""
    from icl.data import ensure_datasets
    mine = [r for r in runs if r["shard"] == args.shard]
    if not mine:
        sys.exit(f"error: shard {args.shard} is not in {args.plan}; rerun snakemake to refresh the plan")
    t = time.time()
    stale = os.path.getmtime(args.code_stamp) if args.code_stamp else None
    paths = ensure_datasets(mine, args.prompts_dir, stale, workers=args.threads or 1)
    print(f"[{args.shard}] {len(paths)} prompt files ready in {time.time() - t:.2f}s", file=sys.stderr, flush=True)
    from icl.jobs.runtime import device_setting
    return mine, paths, device_setting(args.device, pl["settings"])


def cmd_train(args) -> None:
    from icl.train.loop import train_shard
    pl = read_plan(args.plan)
    runs, paths, device = _shard_job(args, pl, pl["runs"])
    train_shard(runs, paths, args.out, device=device, threads=args.threads, label=args.shard, mem_mb=args.mem_mb)


def train_killed(args, sig: int) -> str:
    """The line for a training job whose process the kernel killed (icl.jobs.supervise)."""
    from icl.jobs.supervise import killed
    from icl.train.loop import memory_words
    mine = [r for r in read_plan(args.plan)["runs"] if r["shard"] == args.shard]
    return f"[{args.shard}] " + killed(sig, *memory_words(mine, args.mem_mb))


def cmd_evaluate(args) -> None:
    from icl.evaluate.cells import baseline_owners, evaluate_trained
    pl = read_plan(args.plan)
    every = pl["runs"]
    if args.evaluate_spec:      # the workflow's stamp: the evaluate section this job was run for
        with open(args.evaluate_spec) as fh:
            ev = json.load(fh)
        every = [{**r, "spec": {**r["spec"], "evaluate": ev}} for r in every]
    runs, paths, device = _shard_job(args, pl, every)
    if not runs[0]["spec"].get("evaluate"):
        sys.exit(f"error: experiment {pl['experiment']} has no evaluate section; nothing to evaluate")
    evaluate_trained(runs, paths, args.trained, args.out, device=device, threads=args.threads,
                     budget_mb=pl["settings"].get("memory_budget_mb", 4096), label=args.shard,
                     baseline_keys={k for k, s in baseline_owners(every).items() if s == args.shard})


def cmd_tables(args) -> None:
    from icl.tables.build import aggregate
    t = time.time()
    summary = aggregate(args.runs, args.shards, args.outdir, args.shift, processes=args.processes)
    print(f"tables: {len(summary)} runs in {time.time() - t:.2f}s", file=sys.stderr)


def cmd_theory(args) -> None:
    from icl.jobs.provenance import stamp
    from icl.store.io import write_parquet
    from icl.models import kinds
    from icl.theory.table import curve_rows, flow_rows, ldl_rows, lsa_rows, mean_field_flows
    pl = read_plan(args.plan)
    meta = stamp(pl["config_hash"])
    flat_max_L = (pl["config"].get("report") or {}).get("flat_max_L")
    mean_field = kinds("mean_field")
    flows = mean_field_flows(pl["runs"], mean_field, args.flows)
    theory = ldl_rows(pl["runs"], flat_max_L, mean_field).merge(lsa_rows(pl["runs"]), on="run_id")
    write_parquet(theory.merge(flow_rows(flows), on="run_id", how="left"), args.out, meta)
    write_parquet(curve_rows(flows), args.curves, meta)


def cmd_analyse(args) -> None:
    from icl.analyse.verdicts import analyse
    t = time.time()
    out = analyse(args.results)
    counts = out["verdicts"]["verdict"].value_counts()
    print(f"{args.results}: {len(out['verdicts'])} verdicts ("
          + ", ".join(f"{n} {v}" for v, n in counts.items()) + f") in {time.time() - t:.2f}s", file=sys.stderr)


def cmd_report(args) -> None:
    from icl.report.page import render
    pl = read_plan(args.plan)
    render(pl["experiment"], pl["config"], args.results, args.out, processes=args.processes,
           benchmarks=args.benchmarks, paper=args.paper or None)
    print(f"wrote {args.out}", file=sys.stderr)


def cmd_index(args) -> None:
    from icl.report.index import render_index
    render_index(_json_arg("--experiments", args.experiments), args.results, args.out)


def cmd_timing(args) -> None:
    from icl.jobs.timing import benchmark_files, benchmark_table, summary_line
    current, stale = benchmark_files(args.logs, args.experiment, args.results)
    df = benchmark_table(current)
    if df.empty:
        where = os.path.join(args.logs, args.experiment or "*", "benchmark")
        sys.exit(f"error: no benchmark files under {where}; run snakemake first (every rule writes one)")
    print(df.to_string(index=False, float_format=lambda v: f"{v:.2f}"))
    print(summary_line(df))
    if stale:
        print(f"left out: {len(stale)} benchmark file{'s' if len(stale) != 1 else ''} of shards the plans no longer "
              f"have (a sweep changed since they ran), e.g. {stale[0]}")


def cmd_claims(args) -> None:
    from icl.analyse.claims.readme import readme_table
    print(readme_table())


EPILOG = """what a person runs by hand:
  icl check my.yaml        validate a config; print each experiment's runs and shards
  icl check --estimate my.yaml   ... and its predicted training time and memory on this machine
  icl analyse results/EXP  re-judge an experiment's finished tables (slopes, stability, verdicts)
  icl timing [EXPERIMENT]  where the job time went, by step (after a snakemake run)
  icl claims               every claim id and the rule that judges it (docs/claims.md's verdict table)
the other steps are what the workflow's rules call; `icl STEP --help` lists their arguments."""


def main(argv=None) -> None:
    p = argparse.ArgumentParser(prog="icl", description=__doc__, epilog=EPILOG,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("check", help="validate a config file and print how many runs and shards it plans")
    s.add_argument("config")
    s.add_argument("--estimate", action="store_true",
                   help="also predict each experiment's training time and memory on this machine, timed on "
                        "a few epochs of one shard of each shape (icl/plan/estimate.py)")
    s.add_argument("--cores", type=int, help="cores the wall-time estimate assumes (default: this machine's)")
    s.add_argument("--device", choices=["auto", "cpu", "cuda"], help="where to time (default: the config's device)")
    s.set_defaults(fn=cmd_check)
    s = sub.add_parser("plan", help="expand an experiment into runs.parquet and plan.json")
    s.add_argument("--experiment", required=True)
    s.add_argument("--spec", required=True, help="the validated config as JSON")
    s.add_argument("--runs", required=True)
    s.add_argument("--plan", required=True)
    s.set_defaults(fn=cmd_plan)
    def shard_job(name, help_, fn):
        s = sub.add_parser(name, help=help_)
        s.add_argument("--plan", required=True)
        s.add_argument("--shard", required=True)
        s.add_argument("--prompts-dir", required=True, help="where the prompt files are (written there if missing)")
        s.add_argument("--code-stamp", help="prompt files older than this file are written anew (rerun_on_code_change)")
        s.add_argument("--threads", type=int, default=None)
        s.add_argument("--device", choices=["auto", "cpu", "cuda"], default=None)
        s.set_defaults(fn=fn)
        return s
    s = shard_job("train", "train one shard as a vectorized ensemble", cmd_train)
    s.add_argument("--out", required=True)
    s.add_argument("--mem-mb", type=int, default=None,
                   help="the memory the job was given (Snakemake's mem_mb): the shard trains in chunks that fit "
                        "in it, or is refused in one line where one run does not")
    s.set_defaults(killed=train_killed)
    s = shard_job("evaluate", "evaluate one trained shard and the baselines under shift (ZFB)", cmd_evaluate)
    s.add_argument("--trained", required=True, help="the shard's .npz written by `icl train`")
    s.add_argument("--out", required=True, help="where its shift.parquet goes")
    s.add_argument("--evaluate-spec", help="a JSON file with the evaluate section to use instead of the plan's")
    s = sub.add_parser("tables", help="aggregate shard results into parquet tables")
    s.add_argument("--runs", required=True)
    s.add_argument("--outdir", required=True)
    s.add_argument("--shift", nargs="*", default=[], help="the shards' shift.parquet files (from `icl evaluate`)")
    s.add_argument("--processes", type=int, default=1,
                   help="with 2 or more, the summaries are made in a second process while the tables are written")
    s.add_argument("shards", nargs="+")
    s.set_defaults(fn=cmd_tables)
    s = sub.add_parser("theory", help="write theory.parquet and theory_curves.parquet for a plan")
    s.add_argument("--plan", required=True)
    s.add_argument("--out", required=True)
    s.add_argument("--curves", required=True)
    s.add_argument("--flows", help="an .npz of mean-field flows integrated before (read where present, rewritten): "
                   "a plan that gains runs integrates only theirs")
    s.set_defaults(fn=cmd_theory)
    s = sub.add_parser("analyse", help="slopes, stability and every claim's verdict from an experiment's tables: "
                                       "writes slopes.parquet, stability.parquet and verdicts.parquet")
    s.add_argument("results", help="results/<experiment> (its plan.json holds the experiment's config)")
    s.set_defaults(fn=cmd_analyse)
    s = sub.add_parser("report", help="render reports/<experiment>.html from the tables and the analysis")
    s.add_argument("--plan", required=True)
    s.add_argument("--results", required=True)
    s.add_argument("--out", required=True)
    s.add_argument("--processes", type=int, default=1, help="draw the figures in this many processes (default 1)")
    s.add_argument("--benchmarks", nargs="*", default=None,
                   help="Snakemake benchmark files of the jobs before the report, for its timing table "
                        "(or their folder, logs/<experiment>/benchmark)")
    s.add_argument("--paper", nargs="?", const="", default="",
                   help="config/paper.yaml: the headline quotes its sizes for this experiment where they differ")
    s.set_defaults(fn=cmd_report)
    s = sub.add_parser("index", help="render reports/index.html")
    s.add_argument("--experiments", required=True, help="JSON mapping name -> experiment")
    s.add_argument("--results", default="results", help="where results/<experiment>/ are")
    s.add_argument("--out", required=True)
    s.set_defaults(fn=cmd_index)
    s = sub.add_parser("timing", help="where the time went: Snakemake benchmark files summed by step")
    s.add_argument("experiment", nargs="?")
    s.add_argument("--logs", default="logs")
    s.add_argument("--results", default="results", help="where each experiment's plan.json says which shards it has now")
    s.set_defaults(fn=cmd_timing)
    s = sub.add_parser("claims", help="every claim id and the rule that judges it, as a markdown table")
    s.set_defaults(fn=cmd_claims)
    args = p.parse_args(argv)
    if argv is None and getattr(args, "killed", None):     # a job run as a program: its work in a child,
        from icl.jobs.supervise import in_child            # so that a kill by the kernel is reported
        in_child(lambda: run(args), lambda sig: args.killed(args, sig))
    else:
        run(args)


def run(args) -> None:
    """args.fn(args), its expected failures said in one line (a traceback is for the unexpected)."""
    try:
        args.fn(args)
    except Stopped as e:        # SIGTERM / SIGUSR1: checkpointed; the workflow's retry resumes it
        print(f"stopped: {e}", file=sys.stderr, flush=True)
        sys.exit(RETRY)
    except (ConfigError, RuntimeError) as e:
        sys.exit(f"error: {e}")
    except OSError as e:        # a wrong path or a full disk: say which file, not a traceback
        sys.exit(f"error: {e.strerror or e}: {e.filename or ''}".rstrip(": "))


if __name__ == "__main__":
    main()
