"""Prop. 1's accurate prediction for unseen functions."""
from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pandas as pd

from icl.analyse.claims import FAILS, NOT_TESTABLE, fmt, of
from icl.analyse.claims.judge import Band, Choices, DEFAULT, join, judge, median_by_seed, share
from icl.analyse.claims.ldl.setting import CONVERGED, GAIN_TOL, Setting, _empty, converged, learning


def unseen_functions(s: Setting, choices: Choices = DEFAULT) -> list[dict]:
    """Prop. 1: accurate prediction on task functions never seen in training. Judged on the runs
    that learned (icl.analyse.claims.learned: final train loss ≤ ½ of uniform attention's) and met
    Prop. 1's precondition, a loss at the O(ε²) it assumes (final train loss ≤ 10⁻² of uniform
    attention's); the others are counted and left out, and a setting with none reads not testable. The test loss is set against
    what needs no training on the same test prompts: the share of the achievable gain,
    (uniform − final)/(uniform − oracle), uniform attention (the mean of the context labels) against
    the feature oracle (the mean label of the context tokens sharing the query's feature). The
    median over runs, bootstrapped over whole seeds (a seed's runs share its draws), must be ≥ 0.9. Continuous tokens have no feature oracle and 0
    is out of reach of a model that averages context labels: not testable there."""
    cid = "ldl.unseen_functions"
    band = Band(1.0, math.inf, GAIN_TOL)
    pred = f"share of the achievable gain on new functions {band.text(choices.band)}"
    df = s.runs
    if "uniform_test_loss" not in df or df["uniform_test_loss"].isna().all():
        return [s.row(cid, NOT_TESTABLE, prediction=pred, measurement="—",
                      reason="the tables have no uniform-attention loss on the test prompts (made by an older "
                             "version): rerun the training")]
    orc = df["oracle_test_loss"].astype(float) if "oracle_test_loss" in df else pd.Series(np.nan, index=df.index)
    if orc.isna().all():
        cont = not df["token_kind"].eq("discrete").all()
        return [s.row(cid, NOT_TESTABLE, prediction=pred,
                      measurement=f"final test loss {df['final_test_loss'].astype(float).median():.3g}, uniform "
                                  f"attention's {df['uniform_test_loss'].astype(float).median():.3g} (medians)",
                      reason=("continuous tokens: no feature oracle, and 0 (a predictor that knew each prompt's "
                              "function) is out of reach of a model that averages context labels; the tables hold no "
                              "reference these runs can reach on the same test prompts, so the share of the "
                              "achievable gain cannot be measured") if cont else
                      "the tables have no feature-oracle loss on the test prompts (made by an older version): rerun "
                      "the training")]
    learned = learning(df, on_new_prompts=False)     # the held-out loss is what this claim judges
    if learned.none:
        return [s.row(cid, NOT_TESTABLE, prediction=pred, measurement=learned.note, reason=learned.none)]
    df = learned.kept
    conv = converged(df)               # Prop. 1's precondition: the loss reached the O(ε²) it assumes
    pre = (f"{of((~conv).sum(), len(df), 'run')} did not reach Prop. 1's precondition (final train loss ≤ "
           f"{CONVERGED:g} of uniform attention's; theirs {_ratio(df[~conv])}) and are left out" if (~conv).any() else "")
    if not conv.any():
        return [s.row(cid, NOT_TESTABLE, prediction=pred, measurement=join(pre, learned.note),
                      reason=f"no run reached Proposition 1's precondition, a loss at the O(ε²) it assumes: {pre}")]
    df = df[conv]
    learned = replace(learned, note=join(pre, learned.note))
    uni, orc = df["uniform_test_loss"].astype(float), orc.reindex(df.index)
    fin = df["final_query_test_loss" if "final_query_test_loss" in df else "final_test_loss"].astype(float)
    gain = ((uni - fin) / (uni - orc)).dropna()
    share, seeds = gain.to_numpy(), df.loc[gain.index, "seed"].to_numpy()
    if not len(share):
        return [_empty(s, cid, "no run has a final test loss", pred)]
    med = float(np.median(share))
    lo, hi = median_by_seed(share, seeds)          # the seed, not the run, is the unit of independence
    v, why = judge(lo, hi, band, choices, "the median share")
    ratio = (fin / uni).dropna()
    if v == FAILS:
        r = float(ratio.median())
        why += (f"; on new functions the model does worse than uniform attention (its test loss {r:.3g}× "
                f"uniform attention's, median)" if r > 1 else
                f"; on new functions the model recovers only {med:.2f} of the gain the feature oracle reaches "
                f"(its test loss {r:.3g}× uniform attention's, median)")
    meas = (f"(uniform − final)/(uniform − oracle) test loss: median {med:.3f} [{fmt(lo)}, {fmt(hi)}], lowest "
            f"{share.min():.3f} over {len(share)} runs; uniform {uni.median():.3g}, oracle {orc.median():.3g}, final "
            f"{fin.median():.3g} (medians)")
    return [s.row(cid, v, prediction=pred, value=med, ci_lo=lo, ci_hi=hi, reason=why,
                  measurement="; ".join(p for p in (meas, learned.note) if p))]


def _ratio(df: pd.DataFrame) -> str:
    """The runs' final train loss as a multiple of uniform attention's, as a range."""
    r = (df["final_train_loss"].astype(float) / df["uniform_train_loss"].astype(float)).dropna()
    return "—" if r.empty else (f"{r.min():.3g}×" if np.isclose(r.min(), r.max(), rtol=5e-3) else f"{r.min():.3g}–{r.max():.3g}×")
