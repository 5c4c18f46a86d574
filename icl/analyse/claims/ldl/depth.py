"""Depth: LDL's one-layer analysis leaves multi-layer models to future work (its conclusion; the
reviewers' first request, ../shared/papers/002). What an experiment with models of several depths
can decide: does depth let the model learn the task in context where fewer layers do not?

Each deeper model against the shallowest of its kind, seed by seed on the same test prompts: the
ratio of their errors at the query, each relative to uniform attention's on those prompts
(final_query_test_loss / uniform_test_loss), r = r_deep / r_shallow. Predicted: r < 1. The seeds
are the units (they share nothing else): the geometric mean over seeds with its Student-t
interval on log r (icl.stats.mean_interval), on at least MIN_SEEDS seeds. No learning gate: that
the deeper model learns where the shallow one does not is the claim itself, so a deep model that
did not learn either reads r ≈ 1, inconclusive or not holding, never left out."""
from __future__ import annotations

import math

import numpy as np
import pandas as pd

from icl.analyse.claims import FAILS, NOT_TESTABLE, fmt, verdict
from icl.analyse.claims.judge import Band, Choices, DEFAULT, judge, too_few_seeds
from icl.stats import mean_interval

CID = "ldl.depth"
PRED = "error at the query (× uniform attention's) lower for the deeper model: ratio deep/shallow < 1"
BAND = Band(-math.inf, 1.0, floor=0.0, source="the order the claim states")


def _relative(df: pd.DataFrame) -> pd.Series:
    loss = df["final_query_test_loss"] if "final_query_test_loss" in df else df["final_test_loss"]
    return loss.astype(float) / df["uniform_test_loss"].astype(float)


def depth(runs: pd.DataFrame, summary: pd.DataFrame, choices: Choices = DEFAULT) -> list[dict]:
    """Models of one kind at several depths (GPTs of 1, 2, 4 layers): each deeper model against the
    shallowest, seed by seed on the same test prompts, the ratio of their errors at the query, each
    as a multiple of uniform attention's; the geometric mean over seeds with its 95% Student-t
    interval on the log ratio (at least 5 seeds), against [0, 1]. No learning gate: whether the
    deeper model learns where the shallow one does not is the claim.

    One row per deeper model and setting of the other swept values (the task's L, …); none where no
    kind comes in two depths."""
    if "layers" not in runs or runs["layers"].nunique(dropna=True) < 2:
        return []
    df = runs.merge(summary, on="run_id")
    df = df[df["layers"].notna()].assign(rel=lambda d: _relative(d))
    rows = []
    for kind, k in df.groupby("model_kind"):
        depths = k.groupby("model")["layers"].first().sort_values(kind="stable")
        if depths.nunique() < 2:
            continue
        shallow = depths.index[0]
        keys = [c for c in ("L", "N", "d", "K") if c in k and k[c].nunique() > 1]
        for deep in depths.index[depths > depths.iloc[0]]:
            for lab, g in (k.groupby(keys) if keys else [((), k)]):
                rows.append(_row(g, shallow, deep, int(depths[shallow]), int(depths[deep]), keys, lab, choices))
    return rows


def _row(g: pd.DataFrame, shallow: str, deep: str, ls: int, ld: int, keys, lab, choices: Choices) -> dict:
    lab = lab if isinstance(lab, tuple) else (lab,)
    group = "; ".join(f"{c}={v:g}" for c, v in zip(keys, lab))
    a = g[g["model"] == shallow].groupby("seed")["rel"].mean()
    b = g[g["model"] == deep].groupby("seed")["rel"].mean()
    both = pd.concat([a.rename("s"), b.rename("d")], axis=1).dropna()
    both = both[(both > 0).all(axis=1)]
    model = f"{deep} vs {shallow}"
    if both.empty:
        return verdict(CID, NOT_TESTABLE, prediction=PRED, measurement="—", model=model, group=group,
                       reason=f"no seed trained both {deep} and {shallow} with a test loss at the query")
    logr = np.log(both["d"] / both["s"]).to_numpy()
    m, lo, hi = mean_interval(logr)
    per = ", ".join(f"{int(s)}: {fmt(float(x))}" for s, x in zip(both.index, np.exp(logr)))
    meas = (f"{deep} ({ld} layers) {fmt(float(both['d'].median()))}× and {shallow} ({ls}) "
            f"{fmt(float(both['s'].median()))}× uniform attention's error at the query (medians over seeds); "
            f"ratio per seed {per}")
    few = too_few_seeds(len(both))
    if few:
        v, why = judge(math.nan, math.nan, BAND, choices, "the ratio", no_interval=few)
        return verdict(CID, v, prediction=PRED, measurement=meas, reason=why, value=math.exp(m), model=model,
                       group=group)
    g_m, g_lo, g_hi = math.exp(m), math.exp(lo), math.exp(hi)
    v, why = judge(g_lo, g_hi, BAND, choices, "the ratio deep/shallow")
    if v == FAILS:
        why += f": {ld} layers do no better than {ls}"
    meas += f"; geometric mean {fmt(g_m)} [{fmt(g_lo)}, {fmt(g_hi)}] (95% Student-t interval over {len(both)} seeds on log r)"
    return verdict(CID, v, prediction=PRED, measurement=meas, reason=why, value=g_m, ci_lo=g_lo, ci_hi=g_hi,
                   model=model, group=group)

