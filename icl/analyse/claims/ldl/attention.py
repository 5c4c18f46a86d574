"""Attention claims: Prop. 1's attention to one, the off-diagonal logits, the own logit's monotone rise."""
from __future__ import annotations

import math
from dataclasses import replace

import numpy as np

from icl.analyse.claims import NOT_TESTABLE, UNSURE, count, fmt, of
from icl.analyse.claims.judge import Band, Choices, DEFAULT, join, judge, median_by_seed, share
from icl.analyse.claims.ldl.identities import monotone_identity, shift_identity
from icl.analyse.claims.ldl.setting import (ATTN_TOL, CONVERGED, MONOTONE, OSCILLATES, Setting, _not_gd, converged,
                                    dynamics_runs, learning)


def attention_to_one(s: Setting, choices: Choices = DEFAULT) -> list[dict]:
    """Prop. 1: once the loss has converged to O(ε²), 1 − Attn_own = O(ε). Judged on the runs
    that learned (icl.analyse.claims.learned; a setting with none reads not testable) and met the
    precondition (final loss ≤ 10⁻² of uniform attention's, ε = 0.1): the median final own
    attention, bootstrapped over whole seeds (a seed's runs share its draws), against [1 − ε, 1]."""
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
    kept = df.loc[conv & df["attn_own_final"].notna()]
    own, seeds = kept["attn_own_final"].astype(float).to_numpy(), kept["seed"].to_numpy()
    note = "; ".join(p for p in (f"{of(conv.sum(), len(df), 'run')} met the precondition", learned.note) if p)
    if not len(own):
        return [s.row(cid, UNSURE, prediction=pred, measurement=note,
                      reason=f"no run's train loss fell to {CONVERGED:g} of the uniform-attention loss, the "
                             f"theorem's precondition; train longer")]
    med = float(np.median(own))
    lo, hi = median_by_seed(own, seeds, bounds=(0.0, 1.0))     # a share of attention; the seed is the unit
    v, why = judge(lo, hi, band, choices, "the median converged run's own attention")
    return [s.row(cid, v, prediction=pred, value=med, ci_lo=lo, ci_hi=hi, reason=why,
                  measurement=f"final Attn_own: median {med:.3f} [{fmt(lo)}, {fmt(hi)}], lowest {own.min():.3f}; {note}")]


def offdiag_logits(s: Setting, choices: Choices = DEFAULT) -> list[dict]:
    """Props. 2-4, what Proposition 3 bounds: in each phase the off-diagonal logits q_{k,k'} move at a rate
    O(·/K²) against the own logit's Θ(·/K), and they fall overall. Judged on the runs whose path is dynamics
    (trained, crossing 10⁻¹ of their start after ≥ 5 steps). `rate, phase j`, one row per phase (the phases
    `ldl.phases` counts, icl.tables.phases on the own attention's logit, up to the phase window): each run's mean
    path Σ|Δq_{k,k'}| of its off-diagonal logits over the mean rise of its own logits in that phase
    (summary's `qoff_phase_rates`, every epoch's change counted, so an oscillation counts in full), times K
    − 1, is within [0, RATE_C] = [0, 4] (the rate ≤ 4/(K − 1) of the own one) in a share of the runs that
    have the phase, with its exact binomial interval, in [½, 1]. Under GD on noise-free orthogonal features
    softmax's shift invariance makes each value ≥ 1 (equal when all fall together) and, with the own logit's
    rise, their mean fall: there the `rate` and `fall` rows read not testable naming the identity, and report
    what the data could move (the path beyond the identity's) as an observation. `fall`: the share of runs
    in which most of them fell, with its exact binomial interval, in [½, 1]. `oscillation`, an observation no row decides ("oscillates" is the paper's informal word beside Prop.
    3's bound): the share of runs whose logits' path is ≥ 2% longer than their net change, with its exact
    binomial interval. The whole-run ratio −Δq_{k,k'}/Δq_k stays in summary as `qoff_rate` and decides
    nothing."""
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
    rows = phase_rate_rows(s, df, choices)
    has = df[df["qoff_fell"].notna()]
    fell, seeds = has["qoff_fell"].astype(float).to_numpy(), has["seed"].to_numpy()
    fall_band = Band(1.0, 1.0, 0.5, floor=0.0, ceil=1.0)
    # the median run's share ≥ ½ ⇔ at least half the runs have most of their logits fallen: judged as that
    # share of runs, with its exact binomial interval (a bootstrap of runs that all read 1.0 has zero width)
    most, lo, hi = share(fell >= 0.5, seeds)
    v, why = judge(lo, hi, fall_band, choices, "the share of runs in which most off-diagonal logits fell")
    ident = shift_identity(df)
    if ident:                # the column sum: the off-diagonal logits fall together by what the own one rises
        why = (f"{ident}; with the own logit's rise (no GD step lowers it) their mean falls by 1/(K − 1) of it, so "
               f"their overall decrease is fixed by algebra and the share is an observation, not evidence")
    rows.append(s.row(cid, NOT_TESTABLE if ident else v, group="fall",
                      prediction=f"overall decrease: most off-diagonal logits fell in a share of runs "
                                 f"{fall_band.text(choices.band)} (exact binomial interval)",
                      value=most, ci_lo=lo, ci_hi=hi, reason=why,
                      measurement=f"most fell in {int((fell >= 0.5).sum())} of {len(fell)} runs [{fmt(lo)}, {fmt(hi)}]; "
                                  f"share that fell: median over runs {np.median(fell):.2f}"))
    if "qoff_path_excess" in df and df["qoff_path_excess"].notna().any():
        hx = df[df["qoff_path_excess"].notna()]
        ex = hx["qoff_path_excess"].astype(float).to_numpy()
        osc_band = Band(2 * OSCILLATES, math.inf, OSCILLATES, floor=0.0)
        # the median run's excess in the band ⇔ at least half the runs' is: judged as that share of runs with its
        # exact binomial interval (a monotone decay's excess is exactly 0 in every run: a bootstrap has zero width)
        edge = osc_band.edges()[0]
        osc, lo, hi = share(ex >= edge, hx["seed"].to_numpy())
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


# Props. 2-4's rate bound as a number: |g_(k,k')| = O(·/K²) against g_k = Θ(·/K). In their proofs (Lemmas 4,
# 7, 9) the two constants differ by Eq. 4's label-gap constant squared, which inside Eq. 4's domain
# (the gap per unit LΔ within [EQ4_MIN, 1] = [½, 1] of its small-LΔ value) is at most 4, and by attention
# factors the lemmas fix at unit order (Attn_n = Θ((1 − Attn_k)/K)): the mean off-diagonal rate is then at
# most RATE_C/(K − 1) of the own one. Under GD the same algebra that fixes the signed mean (softmax's shift
# invariance: Σ_k' Δq_(k,k') = −Δq_k) makes (K − 1)·rate ≥ 1, equal to 1 when all fall together.
RATE_C = 4.0


def phase_rate_rows(s: Setting, df, choices: Choices = DEFAULT) -> list[dict]:
    """Prop. 3's bound, per phase (icl.tables.phases on the own attention's logit, the phases the
    `phases` claim counts; summary's qoff_phase_rates): each run's off-diagonal logits' mean path
    over the own logits' mean rise in phase j, times K − 1, within [0, RATE_C] in a share of the
    runs that have that phase in [½, 1] (exact binomial interval). K = 2 with softmax's shift
    invariance: the one off-diagonal logit mirrors the own one step by step, so the rate is 1 by
    algebra (not testable)."""
    cid = "ldl.offdiag_logits"
    K = int(df["K"].iloc[0])
    band = Band(0.0, RATE_C, 0.0, floor=0.0,
                source="Props. 2-4: |g_(k,k')| = O(·/K²) against g_k = Θ(·/K); the two constants differ in the "
                       "proofs (Lemmas 4, 7, 9) by Eq. 4's label-gap constant squared, ≤ (1/EQ4_MIN)² = 4 inside "
                       "Eq. 4's domain, with the lemmas' attention factors at unit order")
    pred = (f"in each phase, (K − 1) × the off-diagonal logits' mean rate (path Σ|Δq_(k,k')|) over the own logit's "
            f"(rise Δq_k) in {band.text()}: O(1/K), K = {K}")
    per_run = [list(v) if isinstance(v, (list, tuple, np.ndarray)) else []
               for v in (df["qoff_phase_rates"] if "qoff_phase_rates" in df else [[]] * len(df))]
    n = max((len(v) for v in per_run), default=0)
    why = shift_identity(df)
    if why and K == 2:
        return [s.row(cid, NOT_TESTABLE, group="rate", prediction=pred,
                      measurement=f"{len(df)} runs; with K = 2 the one off-diagonal logit per query moves by minus "
                                  f"the own logit's step at every step",
                      reason=f"{why}; with one off-diagonal logit its path equals the own logit's rise, so the "
                             f"rate is 1 in every phase by algebra")]
    if not n and "phase_spread" in df and not (df["phase_spread"] > 0).any():
        return [s.row(cid, NOT_TESTABLE, group="rate", prediction=pred,
                      measurement=f"{len(df)} runs, one seed per setting: no phase count",
                      reason="no run has phases to measure the rates in: a count is chosen against the setting's "
                             "seeds (the fewest laws that fit a run within their spread), and each setting here "
                             "has one seed")]
    if not n:
        return [s.row(cid, UNSURE, group="rate", prediction=pred,
                      measurement="no phase rates in summary (tables made before qoff_phase_rates, or no phase found)",
                      reason="no run's logits were measured per phase; remake the tables (icl tables)")]
    within = Band(1.0, 1.0, 0.5, floor=0.0, ceil=1.0)
    rows = []
    seeds_all = df["seed"].to_numpy()
    for j in range(n):
        r = (K - 1) * np.array([v[j] for v in per_run if len(v) > j], float)
        sd = np.array([s_ for v, s_ in zip(per_run, seeds_all) if len(v) > j])
        has = len(r)
        sd, r = sd[np.isfinite(r)], r[np.isfinite(r)]
        grp = f"rate, phase {j + 1}"
        pj = (f"in phase {j + 1}, (K − 1) × the off-diagonal logits' mean rate over the own logit's in "
              f"{band.text(choices.band)} (O(1/K), K = {K}) in a share of runs {within.text(choices.band)} "
              f"(exact binomial interval)")
        if not len(r):
            rows.append(s.row(cid, UNSURE, group=grp, prediction=pj,
                              measurement=f"{has} runs have a phase {j + 1}; in none did the own logits rise",
                              reason="no own logit rose in this phase, so there is no rate to compare with"))
            continue
        # the median run's rate ≤ RATE_C ⇔ at least half the runs' is: judged as that share with its exact
        # binomial interval (runs whose logits all fall monotonically read 1 to float rounding: a bootstrap of
        # them has zero width)
        ok = r <= band.edges(choices.band)[1]
        sh, lo, hi = share(ok, sd)
        v, w = judge(lo, hi, within, choices, f"the share of runs whose phase-{j + 1} rate is within the bound")
        excess = ""
        if why:              # the identity fixes (K − 1)·rate ≥ 1, = 1 for a monotone fall: only the excess is data
            v, w = NOT_TESTABLE, (f"{why}; so (K − 1)·rate ≥ 1, equal to 1 where the off-diagonal logits fall "
                                  f"monotonically: the bound is met by algebra, and what the data can move (a path "
                                  f"longer than the identity's) is reported as an observation")
            x = r - 1.0
            excess = (f"; the path beyond the identity's, (K − 1)·rate − 1: median {np.median(x):.3g}, largest "
                      f"{x.max():.3g}")
        rows.append(s.row(cid, v, group=grp, prediction=pj, value=sh, ci_lo=lo, ci_hi=hi,
                          reason=w,
                          measurement=f"(K − 1)·rate in phase {j + 1} within {band.text(choices.band)} in "
                                      f"{int(ok.sum())} of {len(r)} runs [{fmt(lo)}, {fmt(hi)}]; median "
                                      f"{np.median(r):.3g}, range {r.min():.3g} to {r.max():.3g}; "
                                      f"{count(len(df) - has, 'run')} {'has' if len(df) - has == 1 else 'have'} no phase {j + 1}{excess}"))
    return rows


def own_logit_monotone(s: Setting, choices: Choices = DEFAULT) -> list[dict]:
    """Lemma 2: g_k ≥ 0, so under GD the own logit q_k never decreases. From every epoch's
    q_features: the share of runs none of whose own logits ever fell, in one epoch, by more than
    0.1% of its rise over training (float rounding), with its exact binomial (Clopper–Pearson)
    interval over the seeds, against [0.9, 1] (so it holds only on ≥ 36 seeds, all monotone). On
    noise-free tokens at orthogonal features an identity fixes it (each prompt's gradient on q_k is
    −r²·A_k ≤ 0): not testable there, the share reported as an observation."""
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
    hd = df[df["qown_drop"].notna()]
    drop = hd["qown_drop"].astype(float).to_numpy()
    mono = drop <= MONOTONE
    sh, lo, hi = share(mono, hd["seed"].to_numpy())
    v, why = judge(lo, hi, band, choices, "the share of monotone runs")
    if (ident := monotone_identity(df)):        # a value an identity fixes is not evidence: reported, not judged
        v, why = NOT_TESTABLE, f"{ident}; the share of monotone runs is an observation of that identity, not evidence"
    return [s.row(cid, v, prediction=pred, value=sh, ci_lo=lo, ci_hi=hi, reason=why,
                  measurement=f"{int(mono.sum())} of {len(mono)} runs monotone ({sh:.0%}, exact binomial 95% interval "
                              f"[{fmt(lo)}, {fmt(hi)}]); the largest fall of an own logit is {fmt(float(drop.max()))} "
                              f"of its rise")]
