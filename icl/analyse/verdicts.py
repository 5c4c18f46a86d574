"""The analyse step: from an experiment's tables alone, the measurements across runs (slopes and
stability, icl.analyse.fits; the one collapse clock, icl.analyse.collapse) and every claim's verdict
(icl.analyse.claims), written beside the tables as slopes.parquet, stability.parquet, clock.parquet,
collapse.parquet and verdicts.parquet. The report only reads and draws them.

No Snakemake needed: `icl analyse results/<experiment>` re-judges finished results, e.g. after a
change to a claim; the experiment's config comes from the folder's plan.json.
"""
from __future__ import annotations

import os

import pandas as pd

from icl.analyse import claims, collapse, fits

from icl import tasks
from icl.analyse.claims import ldl as claims_ldl, zfb as claims_zfb
from icl.store.io import read_parquet, read_plan, write_parquet
from icl.jobs.provenance import stamp

OUTPUTS = ("slopes", "stability", "clock", "collapse", "verdicts")


def read_tables(results_dir: str) -> dict:
    """What the analysis reads: the per-run tables, the train-loss curves and the LSA's matrices."""
    path = lambda name: os.path.join(results_dir, f"{name}.parquet")
    tabs = {k: read_parquet(path(k)) for k in ("runs", "summary", "theory", "theory_curves", "shift")}
    tabs["curves"] = read_parquet(path("curves"), filters=[("metric", "in", ["train_loss", "attn_own"])])
    tabs["matrices"] = read_parquet(path("matrices"), filters=[("name", "==", "effective")])
    return tabs


def verdict_rows(experiment: str, exp: dict, tabs: dict) -> pd.DataFrame:
    """Every claim's verdict for this experiment (icl.analyse.claims), as verdicts.parquet holds them."""
    rows = []
    if tasks.family(exp["task"]["kind"]).ldl:
        for m in tabs["runs"]["model"].unique():
            rows += claims_ldl.verdicts(tabs, m)
        rows += claims_ldl.depth(tabs["runs"], tabs["summary"])
    if len(tabs["shift"]):
        rows += claims_zfb.verdicts(tabs)
    return claims.table(experiment, rows)


def judge(experiment: str, exp: dict, tabs: dict) -> dict[str, pd.DataFrame]:
    """slopes, stability, the clock's tables and verdicts from the tables (`tabs` gains slopes,
    stability, clock and collapse: the step-size claim reads the stability table)."""
    tabs["slopes"] = fits.convergence_slopes(tabs["runs"], tabs["summary"], tabs["theory"])
    tabs["stability"] = fits.max_stable_lr(tabs["runs"], tabs["summary"])
    tabs["clock"], tabs["collapse"] = collapse.clock_tables(tabs)
    return {"slopes": tabs["slopes"], "stability": tabs["stability"], "clock": tabs["clock"],
            "collapse": tabs["collapse"], "verdicts": verdict_rows(experiment, exp, tabs)}


def analyse(results_dir: str) -> dict[str, pd.DataFrame]:
    """Judge results/<experiment>/ and write its slopes, stability and verdicts tables there."""
    pl = read_plan(os.path.join(results_dir, "plan.json"))
    tabs = read_tables(results_dir)
    out = judge(pl["experiment"], pl["config"], tabs)
    meta = stamp(str(tabs["runs"]["config_hash"].iloc[0]))
    for name in OUTPUTS:
        write_parquet(out[name], os.path.join(results_dir, f"{name}.parquet"), meta)
    return out
