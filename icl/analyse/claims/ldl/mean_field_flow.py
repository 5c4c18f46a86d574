"""The loss against the mean-field curve of Lemma 2."""
from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np
import pandas as pd

from icl.analyse.claims import NOT_TESTABLE, UNSURE, fmt, verdict
from icl.analyse.claims.judge import Band, Choices, DEFAULT, boot_median, join, judge, too_few_seeds
from icl.analyse.claims.ldl.setting import MEAN_FIELD_DECADES, MEAN_FIELD_SPREAD, MEAN_FIELD_STEP, Setting


def mean_field_errors(s: Setting) -> pd.DataFrame:
    """Per run: the log ratio of its train loss to the mean-field loss at every logged epoch."""
    mf = s.theory_curves
    mf = mf[(mf["metric"] == "mean_field_loss") & mf["run_id"].isin(s.runs["run_id"])]
    if mf.empty:
        return pd.DataFrame(columns=["run_id", "epoch", "logratio"])
    j = mf.merge(s.curves, on=["run_id", "epoch"], suffixes=("_mf", "_run"))
    j = j[(j["value_mf"] > 0) & (j["value_run"] > 0)]
    return j.assign(logratio=np.log(j["value_run"] / j["value_mf"]))[["run_id", "epoch", "logratio"]]


def mean_field(s: Setting, choices: Choices = DEFAULT) -> list[dict]:
    """Lemma 2's population dynamics, integrated with no free constant (theory_curves): the runs'
    train loss follows the mean-field curve. One row per setting (L included: the seeds are the
    replicates): the median over the seeds' median log(loss / mean field), bootstrapped over
    seeds, within a band built from the approximation's own measured bias — the flow on each run's
    sampled feature counts beside the balanced one (|V_k| = p_k N), their median log ratio over the
    window, the band spanning 0 and every run's — widened by ± 2 standard errors of the median judged (the
    seed-to-seed standard deviation of log loss, the spread between training sets, × sqrt(π/2)/sqrt(n)),
    judged on at least 5 seeds; plus one row per run (scope `run`: its log ratio's
    interquartile range over training against the same band). A claim about the shape of the
    dynamics needs dynamics in its window: where the runs' loss fell by less than a decade over
    the logged epochs it reads not testable. Applies only where one GD step is within the
    population loss's curvature scale, η‖v‖⁴λ_max ≤ 1 (theory's mf_step; GD turns unstable at 2),
    and reads not testable elsewhere."""
    cid = "ldl.mean_field"
    testable = ("mean_field_testable", id(s.runs), id(s.curves))     # asked once: robust() asks under each choice
    if testable not in s.flows:
        s.flows[testable] = not mean_field_errors(s).empty
    if not s.flows[testable]:
        return [s.row(cid, NOT_TESTABLE, prediction="train loss = mean-field loss", measurement="—",
                      reason="the mean-field curve is derived for softmax_q under GD on discrete features with a "
                             "task whose label covariance is known (the cosine)")]
    rows = []
    for L, g in s.runs.groupby("L", sort=True):
        key = ("mean_field", id(s.runs), id(s.curves), L)     # measured once: robust() judges s under several choices
        if key not in s.flows:
            s.flows[key] = _measure(Setting(s.model, "", g, curves=s.curves[s.curves["run_id"].isin(g["run_id"])],
                                            theory_curves=s.theory_curves))
        rows += _mean_field_at(Setting(s.model, join(s.label, f"L={L:g}"), g, s.left_out), s.flows[key], choices)
    return rows


def mean_field_bias(s: Setting) -> pd.Series:
    """Per run: the balanced-count approximation's measured bias, the median over its logged epochs
    of log(flow on the run's sampled feature counts / balanced flow) (theory_curves'
    mean_field_loss_sampled against mean_field_loss); empty where the sampled flow was not written."""
    tc = s.theory_curves
    tc = tc[tc["run_id"].isin(s.runs["run_id"])]
    bal = tc[tc["metric"] == "mean_field_loss"]
    smp = tc[tc["metric"] == "mean_field_loss_sampled"]
    if smp.empty:
        return pd.Series(dtype=float)
    j = bal.merge(smp, on=["run_id", "epoch"], suffixes=("_b", "_s"))
    j = j[(j["value_b"] > 0) & (j["value_s"] > 0)]
    return np.log(j["value_s"] / j["value_b"]).groupby(j["run_id"]).median()


def _mean_field_at(s: Setting, m: _Measured | None, choices: Choices) -> list[dict]:
    """ldl.mean_field for the runs of one L (the seeds), measured as m."""
    cid = "ldl.mean_field"
    if m is None:
        return []
    if m.step > MEAN_FIELD_STEP:
        return [s.row(cid, NOT_TESTABLE, prediction="train loss = mean-field loss",
                      measurement=f"one GD step is η‖v‖⁴λ_max = {m.step:.3g} times the population loss's "
                                  f"curvature scale",
                      reason=f"at this learning rate one step overshoots the population loss's curvature scale "
                             f"(η‖v‖⁴λ_max > {MEAN_FIELD_STEP:g}): a step jumps across the dynamics Lemma 2 describes "
                             f"instead of following them, so the mean-field curve makes no prediction here")]
    if not len(m.fell) or float(m.fell.median()) < MEAN_FIELD_DECADES:
        f = float(m.fell.median()) if len(m.fell) else math.nan
        return [s.row(cid, NOT_TESTABLE, prediction="train loss = mean-field loss",
                      measurement=f"the loss fell by a factor {10 ** f:.3g} over {m.window} (median over {len(m.fell)} runs)",
                      reason=f"nothing to follow: the runs' loss fell by less than a decade over {m.window} "
                             f"({10 ** f:.3g}×), so agreeing with the mean-field curve there says nothing about the "
                             "shape of the dynamics")]
    if m.bias.empty:
        return [s.row(cid, NOT_TESTABLE, prediction="train loss = mean-field loss", measurement="—",
                      reason="theory_curves.parquet has no mean-field flow on the runs' sampled feature counts "
                             "(written by an older version), which the band needs (the balanced-count "
                             "approximation's measured bias): rerun the theory step")]
    bias, vals = m.bias, m.vals
    # the band's tolerance is the spread of the statistic judged, the median over the seeds' runs: the
    # seed-to-seed standard deviation of log loss times sqrt(π/2)/sqrt(n), the median's standard error
    spread = m.spread * math.sqrt(math.pi / 2 / max(len(vals), 1))
    b_lo, b_hi = min(0.0, float(bias.min())), max(0.0, float(bias.max()))
    band = Band(b_lo, b_hi, MEAN_FIELD_SPREAD * spread if np.isfinite(spread) else math.nan,
                source="the balanced-count approximation's measured bias and the spread of the seeds' median")
    pred = (f"median log(loss / mean field) in {band.text(choices.band)} (0 to the sampled-count flow's bias "
            f"{_span(bias)}, ± {MEAN_FIELD_SPREAD:g} standard errors of the median over {len(vals)} seeds, "
            f"{fmt(spread)}: the seeds' spread {fmt(m.spread)} × sqrt(π/2)/sqrt({len(vals)}))"
            if np.isfinite(spread) else "train loss = mean-field loss")
    rows = []
    if not np.isfinite(spread):
        rows.append(s.row(cid, UNSURE, prediction=pred, measurement=f"median log ratio {fmt(float(vals.median()))}",
                          reason="one seed: the spread between training sets, which sets the band, cannot be measured"))
    else:
        lo, hi = m.interval
        v, why = judge(lo, hi, band, choices, "the median log ratio")
        if m.few:
            v, why, lo, hi = UNSURE, m.few, math.nan, math.nan      # a statistic over seeds: at least five
        a, b = band.edges(choices.band)
        within = float(((vals >= a) & (vals <= b)).mean())
        rows.append(s.row(cid, v, prediction=pred, value=float(vals.median()), ci_lo=lo, ci_hi=hi, reason=why,
                          measurement=f"median log ratio {vals.median():+.3f} [{fmt(lo)}, {fmt(hi)}] over {len(vals)} "
                                      f"runs; {within:.0%} of runs within the band, the worst at {vals.abs().max():.3f}; "
                                      f"the loss fell {10 ** float(m.fell.median()):.3g}× over {m.window}"))
        # one run against the spread of one run (the seeds' standard deviation), not of their median
        one = Band(b_lo, b_hi, MEAN_FIELD_SPREAD * m.spread, source="the approximation's bias and the seeds' spread")
        pred_one = (f"the run's log(loss / mean field) in {one.text(choices.band)} (0 to the sampled-count flow's "
                    f"bias, ± {MEAN_FIELD_SPREAD:g} × the seeds' spread {fmt(m.spread)})")
        for seed, med, q1, q3 in m.per_run:
            vr, wr = judge(q1, q3, one, choices, "the run's log ratio (interquartile range over training)")
            rows.append(verdict(cid, vr, model=s.model, group=join(s.label, f"seed={seed}"), prediction=pred_one,
                                value=med, ci_lo=q1, ci_hi=q3, reason=wr, scope="run",
                                measurement=f"median log ratio {med:+.3f}, interquartile [{q1:+.3f}, {q3:+.3f}]"))
    return rows


class _Measured(NamedTuple):
    """What ldl.mean_field measures on the runs of one L, whatever the band's choices: the largest
    step against the curvature scale, the decades the loss fell in the window, the approximation's
    bias per run, the seeds' spread of log loss, each run's median log ratio (vals) and the
    interval of their median, and per run (by seed) its median and interquartile log ratio."""
    step: float
    fell: pd.Series
    window: str
    bias: pd.Series
    spread: float
    vals: pd.Series
    interval: tuple
    few: str
    per_run: list


def _measure(s: Setting) -> _Measured | None:
    """_Measured of the runs of one L; None where they have no mean-field curve."""
    df = s.runs
    err = mean_field_errors(s)
    if err.empty:
        return None
    step = df["mf_step"].astype(float) if "mf_step" in df else pd.Series(np.nan, index=df.index)
    step = float(step.max()) if step.notna().any() else math.nan
    # dynamics in the window: the runs' loss from the first logged epoch compared to the last one
    cur = s.curves[s.curves["run_id"].isin(err["run_id"].unique()) & s.curves["epoch"].isin(err["epoch"].unique())
                   & (s.curves["value"] > 0)]
    ends = cur.sort_values("epoch").groupby("run_id")["value"].agg(["first", "last"])
    fell = np.log10(ends["first"] / ends["last"])
    window = f"epochs {int(err['epoch'].min())}–{int(err['epoch'].max())}"
    bias = mean_field_bias(s).reindex(df["run_id"]).dropna()
    per_run = err.groupby("run_id")["logratio"]
    med = per_run.median()
    # the spread between training sets: seed-to-seed std of log loss at each epoch, median over epochs
    lg = s.curves[s.curves["run_id"].isin(df["run_id"])].merge(df[["run_id", "seed"]], on="run_id")
    lg = lg[lg["value"] > 0]
    spread = float(np.log(lg["value"]).groupby(lg["epoch"]).std().median()) if df["seed"].nunique() >= 2 else math.nan
    vals = med.reindex(df["run_id"]).dropna()
    by_run = {rid: g.to_numpy() for rid, g in per_run}
    runs = []
    for rid, seed in df.loc[df["run_id"].isin(vals.index), ["run_id", "seed"]].sort_values(["seed"]).to_numpy():
        q1, q3 = np.percentile(by_run[rid], [25, 75])
        runs.append((seed, float(np.median(by_run[rid])), float(q1), float(q3)))
    return _Measured(step, fell, window, bias, spread, vals, boot_median(vals.to_numpy()),
                     too_few_seeds(df.loc[df["run_id"].isin(vals.index), "seed"].nunique()), runs)


def _span(x: pd.Series) -> str:
    lo, hi = float(x.min()), float(x.max())
    return f"{lo:+.3f}" if np.isclose(lo, hi) else f"{lo:+.3f} to {hi:+.3f}"
