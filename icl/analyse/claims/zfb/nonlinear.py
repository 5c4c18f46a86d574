"""Models beyond the LSA: the learning gate, and the nonlinear models against the LSA and least squares."""
from __future__ import annotations

import math

import numpy as np
import pandas as pd

from icl.analyse.claims import FAILS, NOT_TESTABLE, fmt
from icl.analyse.claims.judge import Band, Choices, DEFAULT, judge
from icl.analyse.claims.learned import below, reached
from icl.analyse.claims.zfb.inputs import HALF, LINEAR_ATTENTION
from icl.analyse.claims.zfb.setting import Setting, _pooled, _ratio_ci
from icl.models import MODELS


def at_length_N(trained: pd.DataFrame, sh: pd.DataFrame) -> pd.DataFrame:
    """Per trained run, in distribution at M = N (the training length): its error (`mse_at_N`), uniform
    attention's on the same prompts (`uniform_at_N`, what needs no training) and, for an LSA, its
    closed-form optimum's (`best_at_N`, the lsa_limit baseline: the best an LSA can reach). What the
    learning gate reads; a run without these cells is not in it."""
    cols = ["run_id", "mse_at_N", "uniform_at_N", "best_at_N"]
    if trained.empty or "predictor" not in sh:
        return pd.DataFrame(columns=cols)
    c = trained[(trained["shift"] == "none") & (trained["M"] == trained["N"])]
    base = sh[sh["run_id"].isna() & (sh["shift"] == "none")]
    uni = base[base["predictor"] == "uniform_attention"].drop_duplicates(["eval_id", "M"])
    j = c[["run_id", "model_kind", "eval_id", "M", "N", "mse"]].merge(
        uni[["eval_id", "M", "mse"]].rename(columns={"mse": "uniform_at_N"}), on=["eval_id", "M"])
    lim = base[base["predictor"] == "lsa_limit"].drop_duplicates(["eval_id", "M", "N"])
    if len(lim):
        j = j.merge(lim[["eval_id", "M", "N", "mse"]].rename(columns={"mse": "best_at_N"}), on=["eval_id", "M", "N"],
                    how="left")
        j["best_at_N"] = j["best_at_N"].where(j["model_kind"].isin(LINEAR_ATTENTION))
    else:
        j["best_at_N"] = np.nan
    if j.empty:
        return pd.DataFrame(columns=cols)
    return j.rename(columns={"mse": "mse_at_N"}).groupby("run_id", as_index=False)[cols[1:]].mean()


LEARNING = below("mse_at_N", "uniform_at_N", "in-distribution error at M = N",
                 best="best_at_N", best_name="the LSA optimum's error")
# a nonlinear network must also have left its plateau at ŷ ≈ 0 (summary.parquet's t_escape); the
# linear models' own optimum can sit above half of predicting 0's (random covariances), so not them
ESCAPED = reached("t_escape", "left the plateau at ŷ ≈ 0 (t_escape: the error at M = N below half of predicting 0's)")


def learning_criteria(kind: str) -> list:
    """What the learning gate asks of a run of this model kind (icl.models: its traits)."""
    return [LEARNING] if MODELS[kind].linear_attention or not MODELS[kind].nonlinear \
        else [LEARNING, ESCAPED]


def _paired(s: Setting, other: pd.DataFrame, shift, c=None, lengths=None) -> pd.DataFrame:
    """This setting's cells joined with `other`'s on the same training data and test prompts
    (data_id: same N, seed and training law), per (shift, c, M); suffixes _x (this model), _y."""
    mine = s.cells[s.cells["shift"] == shift]
    if c is not None:
        mine = mine[mine["c"] == c]
    if lengths is not None:
        mine = mine[lengths(mine)]
    keys = ["data_id", "shift", "M"]
    o = other[other["shift"] == shift].assign(c=lambda x: x["c"].fillna(-1.0), se2=lambda x: x["mse_se"] ** 2)
    g = o.groupby(keys + ["c"], sort=False)          # several runs of the other kind on one data set: their mean
    o = g.agg(mse=("mse", "mean"), se2=("se2", "sum")).reset_index().assign(n=g.size().to_numpy())
    o = o.assign(mse_se=np.sqrt(o["se2"]) / o["n"], c=o["c"].where(o["c"] != -1.0))
    j = mine.merge(o[keys + ["c", "mse", "mse_se"]], on=keys)
    return j[(j["c_x"] == j["c_y"]) | (j["c_x"].isna() & j["c_y"].isna())]


def _pooled_log_ratio(j: pd.DataFrame) -> tuple[float, float, float, pd.DataFrame]:
    """Per M the ratio of mean errors (this model over the other, paired runs), and their
    inverse-variance mean on the log scale over M (geometric), with a 95% interval."""
    per = j.groupby("M").agg(a=("mse_x", "mean"), b=("mse_y", "mean"), sa=("mse_se_x", lambda x: np.sqrt((x ** 2).sum())),
                             sb=("mse_se_y", lambda x: np.sqrt((x ** 2).sum())), n=("mse_x", "size")).reset_index()
    per["sa"], per["sb"] = per["sa"] / per["n"], per["sb"] / per["n"]
    r, _, _, sl = _ratio_ci(per["a"], per["sa"], per["b"], per["sb"])
    m, lo, hi = _pooled(np.log(r), sl)
    return math.exp(m), math.exp(lo), math.exp(hi), per.assign(ratio=r)


def _lsa_pool(s: Setting) -> pd.DataFrame:
    return s.pool[s.pool["model_kind"].isin(LINEAR_ATTENTION)]


def beyond_lsa(s: Setting, choices: Choices = DEFAULT) -> list[dict]:
    """Every model kind whose prediction is not linear in the labels (not lsa, softmax_q), trained on
    random covariances and tested on new ones at c = 1, d ≤ M ≤ N: its error below the trained LSA's
    of the same training data and test prompts (paired by N and seed); the inverse-variance weighted
    geometric mean over M of the ratio of mean errors, 95% interval from the test prompts' standard
    errors, against [0, 1]."""
    cid = "zfb.beyond_lsa"
    pred = "a nonlinear model's error below the LSA's on new random covariances (the LSA cannot adapt to Λ; ZFB §5: GPT-2 does)"
    if (s.cells["token_kind"] != "random_covariance").all():
        return [s.row(cid, NOT_TESTABLE, prediction=pred,
                      reason="trained on a fixed covariance: the LSA's limit on random covariances needs random-covariance training")]
    lsa = _lsa_pool(s)
    if lsa.empty:
        return [s.row(cid, NOT_TESTABLE, prediction=pred, reason="no trained LSA beside it")]
    j = _paired(s, lsa, "random_covariance", 1.0, lambda c: (c["M"] >= c["d"]) & (c["M"] <= c["N"]))
    if j.empty:
        return [s.row(cid, NOT_TESTABLE, prediction=pred,
                      reason="no 'random_covariance' shift at c = 1 with a test length d ≤ M ≤ N shared with a trained LSA")]
    g, lo, hi, per = _pooled_log_ratio(j)
    band = Band(-math.inf, 1.0, floor=0.0, source="the order the claim states")
    st = s.over_seeds(cid, "", g, lo, hi, ratio=True)
    v, why = judge(st.lo, st.hi, band, choices, "the error ratio", no_interval=st.few)
    if v == FAILS:
        why += f": the {s.kind} does not beat the LSA's limit"
    meas = (f"{s.kind}/LSA error: inverse-variance weighted geometric mean {fmt(g)} [{fmt(lo)}, {fmt(hi)}] over M = "
            f"{', '.join(f'{int(M)}: {fmt(float(x))}' for M, x in zip(per['M'], per['ratio']))} "
            f"({int(per['n'].max())} (N, seed) pairs; 95% interval from the test prompts' standard errors)")
    return [s.row(cid, v, prediction=pred, measurement=meas + st.text, reason=why, value=st.value, ci_lo=st.lo,
                  ci_hi=st.hi)]


def gpt_in_distribution(s: Setting, choices: Choices = DEFAULT) -> list[dict]:
    """GPT with learned positions (ZFB §5's GPT-2; one without is not its subject) trained on a
    fixed covariance, in distribution, d ≤ M ≤ N, paired with the trained LSA
    of the same data and with OLS on the same prompts: its error below the LSA's (inverse-variance
    weighted geometric mean over M of the ratio, against [0, 1]); and OLS-level: (GPT − OLS)/(LSA − OLS), inverse-variance
    mean over M, within ±½ (nearer OLS than the trained LSA: the midpoint between the two
    references, measured on the same prompts). 95% intervals from the test prompts' standard errors."""
    cid = "zfb.gpt_in_distribution"
    pred = "GPT matches OLS in distribution (ZFB §5, Garg et al.), below the LSA"
    c = s.cells[s.cells["token_kind"] == "gaussian"]
    if c.empty:
        return [s.row(cid, NOT_TESTABLE, prediction=pred,
                      reason="not trained on a fixed covariance (random covariances: zfb.beyond_lsa)")]
    if s.positional() == "none":
        return [s.row(cid, NOT_TESTABLE, prediction=pred,
                      reason="positional: none — ZFB §5's GPT-2 (Garg et al.'s) has learned positions; this model is "
                             "the contrast of zfb.length_spike, not the subject of this claim")]
    lsa = _lsa_pool(s)
    if lsa.empty:
        return [s.row(cid, NOT_TESTABLE, prediction=pred, reason="no trained LSA beside it")]
    inside = lambda x: (x["M"] >= x["d"]) & (x["M"] <= x["N"]) & (x["token_kind"] == "gaussian")   # noqa: E731
    j = _paired(s, lsa, "none", lengths=inside)
    if j.empty:
        return [s.row(cid, NOT_TESTABLE, prediction=pred,
                      reason="no in-distribution test at d ≤ M ≤ N shared with a trained LSA")]
    rows = []
    g, lo, hi, per = _pooled_log_ratio(j)
    band = Band(-math.inf, 1.0, floor=0.0, source="the order the claim states")
    st = s.over_seeds(cid, "below the LSA", g, lo, hi, ratio=True)
    v, why = judge(st.lo, st.hi, band, choices, "the GPT/LSA error ratio", no_interval=st.few)
    rows.append(s.row(cid, v, group="below the LSA", prediction="GPT's error below the trained LSA's (d ≤ M ≤ N)",
                      measurement=(f"GPT/LSA error: inverse-variance weighted geometric mean {fmt(g)} [{fmt(lo)}, {fmt(hi)}] over M = "
                                   f"{', '.join(f'{int(M)}: {fmt(float(x))}' for M, x in zip(per['M'], per['ratio']))} "
                                   f"({int(per['n'].max())} paired runs; 95% interval from the test prompts' standard errors)"
                                   + st.text),
                      reason=why, value=st.value, ci_lo=st.lo, ci_hi=st.hi))
    ols = s.pool[(s.pool["predictor"] == "ols") & (s.pool["shift"] == "none")].drop_duplicates(["eval_id", "M"])
    k = j.merge(ols[["eval_id", "M", "mse", "mse_se"]].rename(columns={"mse": "mse_o", "mse_se": "mse_se_o"}),
                left_on=["eval_id", "M"], right_on=["eval_id", "M"])
    band2 = Band(0.0, 0.0, HALF, source="the midpoint between OLS and the trained LSA")
    pred2 = f"OLS-level: (GPT − OLS)/(LSA − OLS) in {band2.text(choices.band)} (nearer OLS than the LSA)"
    if k.empty:
        rows.append(s.row(cid, NOT_TESTABLE, group="OLS-level", prediction=pred2,
                          reason="shift.parquet has no OLS baseline on these prompts"))
        return rows
    per = k.groupby("M").agg(g=("mse_x", "mean"), l=("mse_y", "mean"), o=("mse_o", "mean"),
                             sg=("mse_se_x", lambda x: np.sqrt((x ** 2).sum()) / len(x)),
                             sl=("mse_se_y", lambda x: np.sqrt((x ** 2).sum()) / len(x)),
                             so=("mse_se_o", lambda x: np.sqrt((x ** 2).sum()) / len(x))).reset_index()
    num, den = per["g"] - per["o"], per["l"] - per["o"]
    p = num / den
    se = np.abs(p) * np.sqrt((per["sg"] ** 2 + per["so"] ** 2) / num ** 2 + (per["sl"] ** 2 + per["so"] ** 2) / den ** 2)
    m, lo, hi = _pooled(p.to_numpy(float), se.to_numpy(float))
    st = s.over_seeds(cid, "OLS-level", m, lo, hi)
    v, why = judge(st.lo, st.hi, band2, choices, "(GPT − OLS)/(LSA − OLS)", no_interval=st.few)
    if v == FAILS:
        why += ": GPT's error is nearer the LSA's than OLS's" if st.value > 0 else ": GPT is below OLS by more than the band"
        why += f" ({_size(s)}; Garg et al.'s GPT-2 has 12 layers, 8 heads, width 256 and trained 500k steps of 64 prompts)"
    rows.append(s.row(cid, v, group="OLS-level", prediction=pred2, value=st.value, ci_lo=st.lo, ci_hi=st.hi, reason=why,
                      measurement=(f"(GPT − OLS)/(LSA − OLS) {fmt(m)} [{fmt(lo)}, {fmt(hi)}] (inverse-variance mean over "
                                   f"M = {', '.join(str(int(x)) for x in per['M'])}; OLS error {fmt(float(per['o'].max()))} "
                                   "at most; 95% interval from the test prompts' standard errors)" + st.text)))
    return rows


def _size(s: Setting) -> str:
    """The trained GPT's shape and its training (epochs of M prompts, where runs.parquet has them),
    which a verdict on a claim made of a larger model names."""
    r = s.runs.iloc[0]
    out = f"this GPT: {int(r['layers'])} layers, {int(r['heads'])} heads" + \
          (f", width {int(r['width'])}" if pd.notna(r.get("width")) else "")
    if pd.notna(r.get("epochs")) and pd.notna(r.get("M")):
        out += f", {int(r['epochs'])} epochs of {int(r['M'])} prompts"
    return out
