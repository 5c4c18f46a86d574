"""Attention claims: Prop. 1's attention to one, the off-diagonal logits, the own logit's monotone rise."""
from __future__ import annotations

import math
from dataclasses import replace

import numpy as np

from icl.claims import NOT_TESTABLE, UNSURE, fmt
from icl.claims.judge import Band, Choices, DEFAULT, boot_median, join, judge, share
from icl.claims.ldl.identities import shift_identity
from icl.claims.ldl.setting import (ATTN_TOL, CONVERGED, MONOTONE, OSCILLATES, Setting, _not_gd, converged,
                                    dynamics_runs, learning)


def attention_to_one(s: Setting, choices: Choices = DEFAULT) -> list[dict]:
    """Prop. 1: once the loss has converged to O(ε²), 1 − Attn_own = O(ε). Judged on the runs
    that learned (icl.claims.learned; a setting with none reads not testable) and met the
    precondition (final loss ≤ 10⁻² of uniform attention's, ε = 0.1): the median final own
    attention, bootstrapped over runs, against [1 − ε, 1]."""
    cid = "ldl.attention_to_one"
    band = Band(1.0, 1.0, ATTN_TOL, floor=0.0, ceil=1.0)
    pred = f"final Attn_own of converged runs in {band.text(choices.band)} (1 − Attn = O(ε), ε = 0.1)"
    df = s.runs
    if not df["token_kind"].eq("discrete").all():
        return [s.row(cid, NOT_TESTABLE, prediction=pred, measurement="continuous tokens",
                      reason="the claim is about discrete features; bilinear logits xᵢᵀQx_q favour large-norm "
                             "tokens, not near ones, so no nearest-token mass measures it")]
    if df["attn_own_final"].isna().all():
        return [s.row(cid, NOT_TESTABLE, prediction=pred, measurement="no attention logged",
                      reason="this model logs no attention map")]
    learned = learning(df)
    if learned.none:
        return [s.row(cid, NOT_TESTABLE, prediction=pred, measurement=learned.note, reason=learned.none)]
    df = learned.kept
    conv = converged(df)
    own = df.loc[conv, "attn_own_final"].astype(float).dropna().to_numpy()
    note = "; ".join(p for p in (f"{int(conv.sum())} of {len(df)} runs met the precondition", learned.note) if p)
    if not len(own):
        return [s.row(cid, UNSURE, prediction=pred, measurement=note,
                      reason=f"no run's train loss fell to {CONVERGED:g} of the uniform-attention loss, the "
                             f"theorem's precondition; train longer")]
    med = float(np.median(own))
    lo, hi = boot_median(own)
    v, why = judge(lo, hi, band, choices, "the median converged run's own attention")
    return [s.row(cid, v, prediction=pred, value=med, ci_lo=lo, ci_hi=hi, reason=why,
                  measurement=f"final Attn_own: median {med:.3f} [{fmt(lo)}, {fmt(hi)}], lowest {own.min():.3f}; {note}")]


def offdiag_logits(s: Setting, choices: Choices = DEFAULT) -> list[dict]:
    """Props. 2-4, what Proposition 3 bounds: while q_k rises, the off-diagonal logits q_{k,k'}
    fall overall, more slowly (rate O(·/K²) against Θ(·/K)). Two rows judged on the runs whose
    path is dynamics (trained, crossing 10⁻¹ of their start after ≥ 5 steps): `rate` (median
    −Δq_{k,k'}/Δq_k in (0, 1); not testable where softmax's shift invariance fixes it) and `fall`
    (the share of runs in which most of them fell, with its exact binomial interval, in [½, 1]);
    and `oscillation`, an observation no row decides ("oscillates" is the paper's informal word
    beside Prop. 3's bound): the share of runs whose logits' path is ≥ 2% longer than their net
    change, with its exact binomial interval."""
    cid = "ldl.offdiag_logits"
    if "qoff_fell" not in s.runs or s.runs["qoff_fell"].isna().all():
        return [s.row(cid, NOT_TESTABLE, prediction="q_{k,k'} falls overall, more slowly than q_k rises",
                      measurement="no feature logits logged",
                      reason="only softmax_q on discrete features logs the logits q_{k,k'} = v_k'ᵀ Q v_k")]
    df, note = dynamics_runs(s.runs)
    if df.empty:
        return [s.row(cid, NOT_TESTABLE, prediction="q_{k,k'} falls overall, more slowly than q_k rises",
                      measurement=note, reason=f"no run's logits trace dynamics: {note}")]
    s = replace(s, left_out=join(s.left_out, note))
    rows = []
    rate_band = Band(0.0, 1.0, 0.0, floor=0.0)
    pred = "−Δq_(k,k')/Δq_k in (0, 1): slower than the own logit"
    r = df["qoff_rate"].astype(float).dropna().to_numpy()
    if (why := shift_identity(df)):
        rows.append(s.row(cid, NOT_TESTABLE, group="rate", prediction=pred, reason=why,
                          measurement=f"median rate {fmt(float(np.median(r))) if len(r) else '—'} over {len(df)} runs"))
    elif not len(r):
        rows.append(s.row(cid, UNSURE, group="rate", prediction=pred, measurement="the own logits did not rise",
                          reason="no run's own logit rose, so there is no rate to compare with"))
    else:
        lo, hi = boot_median(r)
        v, why = judge(lo, hi, rate_band, choices, "the median rate")
        rows.append(s.row(cid, v, group="rate", prediction=pred, value=float(np.median(r)), ci_lo=lo, ci_hi=hi,
                          reason=why, measurement=f"median over runs {np.median(r):.3f} [{fmt(lo)}, {fmt(hi)}]"))
    fell = df["qoff_fell"].astype(float).dropna().to_numpy()
    fall_band = Band(1.0, 1.0, 0.5, floor=0.0, ceil=1.0)
    # the median run's share ≥ ½ ⇔ at least half the runs have most of their logits fallen: judged as that
    # share of runs, with its exact binomial interval (a bootstrap of runs that all read 1.0 has zero width)
    most, lo, hi = share(fell >= 0.5)
    v, why = judge(lo, hi, fall_band, choices, "the share of runs in which most off-diagonal logits fell")
    K2 = int(df["K"].iloc[0]) == 2 and shift_identity(df)
    rows.append(s.row(cid, NOT_TESTABLE if K2 else v, group="fall",
                      prediction=f"overall decrease: most off-diagonal logits fell in a share of runs "
                                 f"{fall_band.text(choices.band)} (exact binomial interval)",
                      value=most, ci_lo=lo, ci_hi=hi,
                      reason=(f"with K = 2 the one off-diagonal logit falls by exactly what the own logit rises "
                              f"({shift_identity(df)})" if K2 else why),
                      measurement=f"most fell in {int((fell >= 0.5).sum())} of {len(fell)} runs [{fmt(lo)}, {fmt(hi)}]; "
                                  f"share that fell: median over runs {np.median(fell):.2f}"))
    if "qoff_path_excess" in df and df["qoff_path_excess"].notna().any():
        ex = df["qoff_path_excess"].astype(float).dropna().to_numpy()
        osc_band = Band(2 * OSCILLATES, math.inf, OSCILLATES, floor=0.0)
        # the median run's excess in the band ⇔ at least half the runs' is: judged as that share of runs with its
        # exact binomial interval (a monotone decay's excess is exactly 0 in every run: a bootstrap has zero width)
        edge = osc_band.edges()[0]
        osc, lo, hi = share(ex >= edge)
        rows.append(s.row(cid, NOT_TESTABLE, group="oscillation",
                          prediction=f"an observation, not a verdict: the share of runs whose q_(k,k') oscillate (path / "
                                     f"|net change| − 1 {osc_band.text()}, 0 for a monotone change)",
                          value=osc, ci_lo=lo, ci_hi=hi,
                          reason="Proposition 3 bounds the off-diagonal logits' rate and states their overall decrease; "
                                 "\"oscillates\" is informal wording beside that bound, with no amount the theorem fixes, "
                                 "so the share is reported and decides nothing",
                          measurement=f"{int((ex >= edge).sum())} of {len(ex)} runs oscillate ({osc:.0%}, exact binomial "
                                      f"95% interval [{fmt(lo)}, {fmt(hi)}]): path longer than the net change by a median "
                                      f"{np.median(ex):.3g} (every epoch's logits)"))
    return rows


def own_logit_monotone(s: Setting, choices: Choices = DEFAULT) -> list[dict]:
    """Lemma 2: g_k ≥ 0, so under GD the own logit q_k never decreases. From every epoch's
    q_features: the share of runs none of whose own logits ever fell, in one epoch, by more than
    0.1% of its rise over training (float rounding), with its exact binomial (Clopper–Pearson)
    interval, against [0.9, 1] (so it holds only on ≥ 36 runs, all monotone)."""
    cid = "ldl.own_logit_monotone"
    band = Band(1.0, 1.0, 0.1, floor=0.0, ceil=1.0)
    pred = f"the share of runs whose own logits never fall in {band.text(choices.band)}"
    df = s.runs
    if "qown_drop" not in df or df["qown_drop"].isna().all():
        return [s.row(cid, NOT_TESTABLE, prediction=pred, measurement="no feature logits logged",
                      reason="only softmax_q on discrete features logs the logits q_k = v_kᵀ Q v_k")]
    if not (df["optimizer"] == "gd").all():
        return [_not_gd(s, cid)]
    df, note = dynamics_runs(df)
    if df.empty:
        return [s.row(cid, NOT_TESTABLE, prediction=pred, measurement=note, reason=f"no run's logits trace dynamics: {note}")]
    s = replace(s, left_out=join(s.left_out, note))
    drop = df["qown_drop"].astype(float).dropna().to_numpy()
    mono = drop <= MONOTONE
    sh, lo, hi = share(mono)
    v, why = judge(lo, hi, band, choices, "the share of monotone runs")
    return [s.row(cid, v, prediction=pred, value=sh, ci_lo=lo, ci_hi=hi, reason=why,
                  measurement=f"{int(mono.sum())} of {len(mono)} runs monotone ({sh:.0%}, exact binomial 95% interval "
                              f"[{fmt(lo)}, {fmt(hi)}]); the largest fall of an own logit is {fmt(float(drop.max()))} "
                              f"of its rise")]
