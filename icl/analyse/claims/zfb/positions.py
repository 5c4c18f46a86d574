"""The GPT's learned positions: the error spike at M > N, and against the prompts' variance."""
from __future__ import annotations

import math

import numpy as np
import pandas as pd

from icl.analyse.claims import FAILS, NOT_TESTABLE, UNSURE, fmt
from icl.analyse.claims.judge import Band, Choices, DEFAULT, join, judge
from icl.analyse.claims.zfb.inputs import WITH_POSITIONS, _z
from icl.analyse.claims.zfb.setting import OverSeeds, Setting, _agg, _ratio_ci
from icl.stats import MIN_SEEDS, equivalence_seeds, mean_interval, welch_interval


def _spike(c: pd.DataFrame, N: int):
    """MSE(M*)/MSE(N) with M* the longest test length in (N, 2N] (else the shortest beyond N): the
    ratio of means over runs, its log standard error, and M*; None where a length is missing."""
    beyond = sorted(m for m in c["M"].unique() if m > N)
    if not beyond or not (c["M"] == N).any():
        return None
    within = [m for m in beyond if m <= 2 * N]
    Ms = within[-1] if within else beyond[0]
    a, b = _agg(c[c["M"] == Ms], ["mse"], by=("M",)), _agg(c[c["M"] == N], ["mse"], by=("M",))
    r, _, _, sl = _ratio_ci(a["mse"], a["mse_se"], b["mse"], b["mse_se"])
    return float(r[0]), float(sl[0]), int(Ms)


def _seed_spikes(c: pd.DataFrame, N: int, Ms: int) -> dict:
    """Each seed's spike MSE(Ms)/MSE(N) (`_spike` on that seed's rows), where it has both lengths."""
    out = {}
    for seed, g in c.groupby("seed"):
        sp = _spike(g, N)
        if sp is not None and sp[2] == Ms and sp[0] > 0:
            out[int(seed)] = sp[0]
    return out


LAW = ("token_kind", "d", "covariance", "scale", "task_kind", "N")   # what makes two seeds' training data one law


def same_law(pool: pd.DataFrame, c: pd.DataFrame) -> pd.DataFrame:
    """The rows of `pool` trained on the law of `c` (every column of LAW equal, missing values alike),
    in distribution; empty unless they are one model's."""
    keep = pool["shift"] == "none"
    for col in (k for k in LAW if k in pool and k in c):
        ref = c[col].iloc[0]
        keep &= pool[col].isna() if pd.isna(ref) else (pool[col] == ref).fillna(False)
    out = pool[keep]
    return out if out["model"].nunique() == 1 else out.iloc[:0]


EQUIVALENCE = 0.5     # the margin of an equivalence test: this share of the learned-position spike's own effect, in log


def equivalence(value: float, learned: float, logs, other_logs=None) -> tuple[bool, str]:
    """Whether the ratio of the two spikes is shown equal to 1 by two one-sided tests at 5 % each
    (its 90 % interval on the logs inside ±m), the margin m = EQUIVALENCE × log(the learned-position
    spike), the claim's own effect in the same runs; and the sentence saying so, or saying what 80 %
    power would need (seeds an arm at today's spread). `logs`: the paired seeds' log ratios, or with
    `other_logs` the two models' own seeds' log spikes (Welch). ('', False) where the learned-position
    spike shows no effect to take a margin from (≤ 1)."""
    if not (learned > 1 and math.isfinite(value)):
        return False, ""
    m = EQUIVALENCE * math.log(learned)
    x = np.asarray(logs, float)
    if other_logs is None:
        _, lo, hi = mean_interval(x, level=0.90)
        sd, arms, n = float(np.std(x, ddof=1)) if len(x) > 1 else math.nan, 1, len(x)
    else:
        y = np.asarray(other_logs, float)
        _, lo, hi = welch_interval(x, y, level=0.90)
        sd, arms, n = float(np.sqrt((np.var(x, ddof=1) + np.var(y, ddof=1)) / 2)), 2, min(len(x), len(y))
    if not (math.isfinite(lo) and math.isfinite(hi) and math.isfinite(sd)):
        return False, ""
    margin = f"×{fmt(math.exp(m))} (half the learned-position spike {fmt(learned)}, in log)"
    if -m < lo and hi < m:
        return True, (f"equal within the margin {margin} by two one-sided tests at 5 %: the ratio's 90 % interval "
                      f"[{fmt(math.exp(lo))}, {fmt(math.exp(hi))}] lies inside [{fmt(math.exp(-m))}, {fmt(math.exp(m))}]")
    need = equivalence_seeds(sd, m, arms)
    return False, (f"equivalence within the margin {margin} is not shown (90 % interval [{fmt(math.exp(lo))}, "
                   f"{fmt(math.exp(hi))}] on {n} seeds); at today's spread (log-sd {sd:.2f}) two one-sided tests "
                   f"would need {need} seeds {'an arm' if arms == 2 else 'paired'} for 80 % power")


def unpaired(mine: pd.DataFrame, other: pd.DataFrame, N: int, Ms: int) -> OverSeeds | None:
    """The spike with learned positions over the spike without, where fewer than MIN_SEEDS seeds
    have both models learned but each model has at least MIN_SEEDS seeds of its own: the ratio of
    the two sets of seeds' geometric means with Welch's interval on their logs (the seeds of one
    model are independent of the other's, so the seed stays the unit); None where either has fewer."""
    a, b = _seed_spikes(mine, N, Ms), _seed_spikes(other, N, Ms)
    if min(len(a), len(b)) < MIN_SEEDS:
        return None
    d, lo, hi = welch_interval(np.log(list(a.values())), np.log(list(b.values())))
    listed = lambda v: ", ".join(f"{k}: {fmt(x)}" for k, x in sorted(v.items()))      # noqa: E731
    return OverSeeds(math.exp(d), math.exp(lo), math.exp(hi), logs=(np.log(list(a.values())), np.log(list(b.values()))),
                     text=(
        f"; fewer than {MIN_SEEDS} seeds have both models learned, so each model's own seeds are judged apart: "
        f"ratio of geometric means {fmt(math.exp(d))} [{fmt(math.exp(lo))}, {fmt(math.exp(hi))}] (95% Welch interval "
        f"on the logs; with learned positions, {len(a)} seeds: {listed(a)}; without, {len(b)} seeds: {listed(b)})"))


def length_spike(s: Setting, choices: Choices = DEFAULT) -> list[dict]:
    """GPT with learned positions, in distribution: the error at the longest test length M* in
    (N, 2N] above its value at M = N (ratio of means over runs > 1); and that spike larger than
    with positional: none on the same training data (ratio of the two spikes > 1, paired by N,
    seed and training law; where fewer than five seeds have both models learned, each model's own
    seeds apart, Welch's interval on the logs: `unpaired`). 95% intervals by the delta method on the
    test prompts' standard errors. An inconclusive comparison over seeds can be refuted by
    equivalence: two one-sided tests at 5 % against half the learned-position spike in log, the
    claim's own effect (`equivalence`), the margin and the seeds 80 % power would need said."""
    cid = "zfb.length_spike"
    pred = "error at M > N above its value at M = N with learned positions (random beyond N), not (or less) without"
    pos = s.positional()
    if pos != "learned":
        why = "runs.parquet has no positional setting for this model" if not pos else \
            f"positional: {pos} — the spike is judged on the learned-positions model, against this one"
        return [s.row(cid, NOT_TESTABLE, prediction=pred, reason=why)]
    c = s.cells[s.cells["shift"] == "none"]
    N = int(s.runs["N"].iloc[0])
    sp = _spike(c, N)
    if sp is None:
        return [s.row(cid, NOT_TESTABLE, prediction=pred, reason="no in-distribution test at M = N and at some M > N")]
    r, sl, Ms = sp
    z = _z()
    band = Band(1.0, math.inf, source="the order the claim states")
    lo, hi = r * math.exp(-z * sl), r * math.exp(z * sl)
    st = s.over_seeds(cid, "learned positions", r, lo, hi, ratio=True)
    v, why = judge(st.lo, st.hi, band, choices, "MSE(M*)/MSE(N)", no_interval=st.few)
    rows = [s.row(cid, v, group="learned positions", prediction=f"MSE({Ms})/MSE({N}) > 1", value=st.value, ci_lo=st.lo,
                  ci_hi=st.hi,
                  reason=why + (": no spike past the training length" if v == FAILS else ""),
                  measurement=(f"MSE(M={Ms})/MSE(N={N}) {fmt(r)} [{fmt(lo)}, {fmt(hi)}] (means over "
                               f"{c['run_id'].nunique()} runs; 95% interval: delta method on the test prompts' standard errors)"
                               + st.text))]
    nopos = s.pool[s.pool["model_kind"].isin(WITH_POSITIONS)
                   & (s.pool.get("positional", pd.Series(index=s.pool.index)) == "none")]
    other = nopos[(nopos["shift"] == "none") & nopos["data_id"].isin(c["data_id"])]
    group = "learned vs no positions"
    pred2 = f"MSE({Ms})/MSE({N}) larger with learned positions than with positional: none"
    if other.empty:
        rows.append(s.row(cid, NOT_TESTABLE, group=group, prediction=pred2,
                          reason="no GPT with positional: none trained on the same data"))
        return rows
    mine = c[c["data_id"].isin(other["data_id"])]
    sp_l, sp_n = _spike(mine, N), _spike(other, N)
    if sp_l is None or sp_n is None or sp_n[2] != Ms:
        rows.append(s.row(cid, NOT_TESTABLE, group=group, prediction=pred2,
                          reason="the GPT without positions lacks the test lengths M = N or M*"))
        return rows
    q, sq = sp_l[0] / sp_n[0], math.hypot(sp_l[1], sp_n[1])
    lo, hi = q * math.exp(-z * sq), q * math.exp(z * sq)
    st = s.over_seeds(cid, group, q, lo, hi, ratio=True)
    if st.few and s.seed_values is not None:
        st = unpaired(c, same_law(nopos, c), N, Ms) or st
    v, why = judge(st.lo, st.hi, band, choices, "the ratio of the two spikes", no_interval=st.few)
    if v == FAILS:
        why += ": removing the positions does not shrink the spike"
    elif v == UNSURE and not st.few and s.seed_values is not None:   # a null refuted by equivalence, against its own effect
        per = s.seed_values.get((cid, join(s.label, group)), {})
        logs = st.logs or (np.log([x for x in per.values() if x > 0]), None)
        equal, said = equivalence(st.value, rows[0]["value"], *logs)
        if equal:
            v, why = FAILS, f"removing the positions leaves the spike as it is: {said}"
        elif said:
            why = f"{why}; {said}"
    rows.append(s.row(cid, v, group=group, prediction=pred2, value=st.value, ci_lo=st.lo, ci_hi=st.hi, reason=why,
                      measurement=(f"spike with learned positions {fmt(sp_l[0])}, without {fmt(sp_n[0])} "
                                   f"(model {', '.join(sorted(other['model'].unique()))}); ratio {fmt(q)} [{fmt(lo)}, {fmt(hi)}] "
                                   f"over {mine['data_id'].nunique()} shared training sets; 95% interval: delta method "
                                   "on the test prompts' standard errors" + st.text)))
    return rows


def spike_vs_variance(s: Setting, choices: Choices = DEFAULT) -> list[dict]:
    """GPT with learned positions, under each shift with a test variance c (random_covariance, scale):
    the spike MSE(M*)/MSE(N) at c > 1 smaller than at c = 1 (M* the longest test length in
    (N, 2N]); the ratio of the two spikes against [0, 1], 95% interval by the delta method on the
    test prompts' standard errors."""
    cid = "zfb.spike_vs_variance"
    pred = "the spike at M > N smaller on prompts with higher variance (c = 4, 9 vs 1)"
    if s.positional() != "learned":
        return [s.row(cid, NOT_TESTABLE, prediction=pred,
                      reason="the spike is a learned-positions effect (zfb.length_spike): judged on that model")]
    N = int(s.runs["N"].iloc[0])
    rows = []
    band = Band(-math.inf, 1.0, floor=0.0, source="the order the claim states")
    for kind in ("random_covariance", "scale"):
        c = s.cells[s.cells["shift"] == kind]
        base = _spike(c[c["c"] == 1.0], N)
        for cv in sorted(x for x in c["c"].dropna().unique() if x > 1):
            sp = _spike(c[c["c"] == cv], N)
            if base is None or sp is None or sp[2] != base[2]:
                continue
            q, sq = sp[0] / base[0], math.hypot(sp[1], base[1])
            lo, hi = q * math.exp(-_z() * sq), q * math.exp(_z() * sq)
            group = f"{kind}, c={cv:g} vs 1"
            st = s.over_seeds(cid, group, q, lo, hi, ratio=True)
            v, why = judge(st.lo, st.hi, band, choices, "the ratio of the spikes", no_interval=st.few)
            rows.append(s.row(cid, v, group=group, prediction=f"spike at c={cv:g} below the spike at c=1",
                              value=st.value, ci_lo=st.lo, ci_hi=st.hi,
                              reason=why + (": the spike does not shrink at higher variance" if v == FAILS else ""),
                              measurement=(f"MSE({sp[2]})/MSE({N}): {fmt(sp[0])} at c={cv:g}, {fmt(base[0])} at c=1; ratio "
                                           f"{fmt(q)} [{fmt(lo)}, {fmt(hi)}] (95% interval: delta method on the test "
                                           "prompts' standard errors)" + st.text)))
    if not rows:
        rows.append(s.row(cid, NOT_TESTABLE, prediction=pred,
                          reason="no random_covariance or scale shift at c = 1 and c > 1 with test lengths M = N and M > N"))
    return rows
