"""Where the time goes: Snakemake's per-job `benchmark:` files aggregated by step.

    icl timing            # every experiment under logs/
    icl timing ldl_cosine
"""
from __future__ import annotations

import glob
import json
import os

import pandas as pd


def timing_table(logs: str = "logs", experiment: str | None = None, results: str = "results") -> pd.DataFrame:
    """benchmark_table of the benchmark files under logs/<experiment>/ (every experiment's) of the jobs
    the experiment has now (benchmark_files)."""
    return benchmark_table(benchmark_files(logs, experiment, results)[0])


def benchmark_files(logs: str = "logs", experiment: str | None = None,
                    results: str = "results") -> tuple[list[str], list[str]]:
    """(the benchmark files of the jobs the experiments plan now, those of shards they no longer
    plan). A shard's file (<step>/<shard>.tsv) counts only where results/<experiment>/plan.json still
    plans that shard: a changed sweep leaves the files of its old shards in logs/, and summing them
    counted jobs that no longer exist. An experiment without a plan.json keeps every file."""
    keep, stale, planned = [], [], {}
    for path in sorted(glob.glob(os.path.join(logs, experiment or "*", "benchmark", "**", "*.tsv"), recursive=True)):
        exp, _, shard = _job(path)
        if exp not in planned:
            planned[exp] = _shards(os.path.join(results, exp, "plan.json"))
        (stale if shard and planned[exp] is not None and shard not in planned[exp] else keep).append(path)
    return keep, stale


def _job(path: str) -> tuple[str, str, str | None]:
    """(experiment, step, shard or None) of logs/<experiment>/benchmark/<step>.tsv or <step>/<shard>.tsv."""
    parts = os.path.normpath(path).split(os.sep)
    if "benchmark" not in parts[:-1] or parts.index("benchmark") == 0 or not path.endswith(".tsv"):
        raise RuntimeError(f"{path}: not a Snakemake benchmark file (logs/<experiment>/benchmark/<step>.tsv, "
                           f"or <step>/<shard>.tsv), nor a folder of them")
    at = len(parts) - 1 - parts[::-1].index("benchmark")
    return parts[at - 1], parts[at + 1].removesuffix(".tsv"), (parts[-1].removesuffix(".tsv") if len(parts) - at > 2 else None)


def _shards(plan_path: str) -> set | None:
    try:
        with open(plan_path) as f:
            return {r["shard"] for r in json.load(f)["runs"]}
    except (OSError, ValueError, KeyError):
        return None


def benchmark_table(paths) -> pd.DataFrame:
    """One row per (experiment, step) of these benchmark files (logs/<experiment>/benchmark/<step>.tsv
    or <step>/<shard>.tsv): jobs, wall seconds summed over jobs, and peak memory as Snakemake
    measured it over the job's processes: RSS summed (pages a forked worker shares with its parent
    counted in each) and PSS (each shared page split among its sharers: the job's own)."""
    rows = []
    paths = [f for p in paths for f in (sorted(glob.glob(os.path.join(p, "**", "*.tsv"), recursive=True))
                                        if os.path.isdir(p) else [p])]     # a folder: the files under it
    for path in paths:
        exp, step, _ = _job(path)
        try:
            b = pd.read_csv(path, sep="\t")
        except (OSError, pd.errors.ParserError, pd.errors.EmptyDataError):
            continue
        rows.append({"experiment": exp, "step": step, "seconds": float(b["s"].iloc[-1]),
                     **{f"{m}_mb": float(pd.to_numeric(b[m], errors="coerce").iloc[-1]) if m in b else float("nan")
                        for m in ("max_rss", "max_pss")}})
    if not rows:
        return pd.DataFrame(columns=["experiment", "step", "jobs", "seconds", "share", "max_rss_mb", "max_pss_mb"])
    df = pd.DataFrame(rows).groupby(["experiment", "step"]).agg(
        jobs=("seconds", "size"), seconds=("seconds", "sum"), max_rss_mb=("max_rss_mb", "max"),
        max_pss_mb=("max_pss_mb", "max")).reset_index()
    df["share"] = df["seconds"] / df["seconds"].sum()
    return df.sort_values(["experiment", "seconds"], ascending=[True, False])


def summary_line(df: pd.DataFrame) -> str:
    total = df["seconds"].sum()
    train = df.loc[df["step"] == "train", "seconds"].sum()
    ev = df.loc[df["step"] == "evaluate", "seconds"].sum()
    rest = total - train - ev
    return (f"{total:.1f} s of job time: {train:.1f} s training jobs ({100 * train / total:.0f}%), "
            f"{ev:.1f} s evaluating trained models under shift ({100 * ev / total:.0f}%), "
            f"{rest:.1f} s ({100 * rest / total:.0f}%) in planning, data, tables, theory and reports") \
        if total else "no benchmark files"
