"""Theorem 1 as the bound it is: the constant the theory's own dynamics need, along the theorem's limit.

Theorem 1 says T ≤ C·K·log(K/ε)/(ηδ²L²Δ²) with C unknown. A slope of log T on log(1/ε) at one K
cannot contradict that over the finite range K ≥ 1/ε allows; what can is the constant a run needs,
C = T·ηδ²L²Δ²/(K·log(K/ε)), growing along the theorem's own limit: K growing with ε = 1/K and δ =
sqrt(20K/N) below min p_k. No run of a CPU's size is inside that limit beyond K = 4 (N ≥ 20K³), and
the balanced flow is its δ → 0 end, where a bound in 1/δ² is infinite and charges nothing; the
sampled-count flow at N = 80K³ (δ = min p_k / 2, inside at the constants ×½ and ×2) is the theory's
own dynamics inside every hypothesis. On one collapse clock it is one universal flow stepped by the
run's clock_per_epoch (icl.analyse.collapse.sampled_flow_time), so it costs a few seconds per K.

`bound_along_K` reads, per seed (its own draw of the feature counts) and K, the needed constant at
the step of the setting's fastest run (on one clock L moves only the step: τ at the other steps of
ldl_flow_K agrees within 0.5 %), and judges the mean over seeds of the slope of log C on log K
against (−∞, 0]: C already divides by the bound's log(K/ε), so a bounded C does not grow (without
that factor it would have to fall by the slope of log log(K/ε), faster still). Holds where the
slope's interval lies below 0 (the constant stays bounded), does not hold where it lies above (the
constant grows: the theory's own dynamics need more time than the bound allows).
"""
from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd

from icl.analyse import fits
from icl.analyse.claims import FAILS, NOT_TESTABLE, curve_json, fmt
from icl.analyse.claims.judge import Band, Choices, DEFAULT, join, judge, too_few_seeds
from icl.analyse.claims.ldl.clock import on_one_clock
from icl.analyse.claims.ldl.flow import THEOREM
from icl.analyse.claims.ldl.flow_domain import BOUND_GROUP
from icl.analyse.fits import probs_of
from icl.analyse.claims.ldl.setting import Setting
from icl.analyse.collapse import sampled_flow_time
from icl.stats import MIN_SEEDS, mean_interval
from icl.theory.ldl import delta_conc

CID = "ldl.time_vs_eps"
GROUP = BOUND_GROUP
DELTA_SHARE = 0.5        # δ = this × min p_k: N = 20K/δ², inside the hypothesis at its constants ×½ and ×2
SEEDS = MIN_SEEDS        # draws of the feature counts: the seed is the unit
MIN_PROMPTS = 64         # the flow's prompts: the runs' own, at least this many (a smoke run's 4 leave most of
                         # K = 64's features unqueried, and its loss then takes ten times the epochs to fall)


def needed_constant(T: float, eta: float, delta: float, L: float, Delta: float, K: int, eps: float) -> float:
    """C = T·ηδ²L²Δ²/(K·log(K/ε)): the constant Theorem 1's bound needs to cover a time T (δ the counts'
    concentration width, Δ the features' distance)."""
    return T * eta * delta ** 2 * L ** 2 * Delta ** 2 / (K * math.log(K / eps))


def bound_along_K(s: Setting, choices: Choices = DEFAULT) -> list[dict]:
    """Theorem 1's needed constant against K on the sampled-count flow inside its hypotheses (see the
    module): one row for a setting whose runs span at least three K on one clock; nothing elsewhere."""
    df = s.runs
    if df.empty or "K" not in df or df["K"].isna().any() or df["K"].nunique() < 3:
        return []
    if not all(on_one_clock(g) for _, g in df.groupby("K")):
        return []
    pred = (f"the constant C = T·ηδ²L²Δ²/(K·log(K/ε)) that the theory's own dynamics need at ε = 1/K, δ = "
            f"{DELTA_SHARE:g}·min p_k, bounded as K grows: the slope of log C on log K")
    Ks = sorted(int(k) for k in df["K"].unique())
    key = ("bound", tuple(df["run_id"]))        # measured once per setting: robust() re-judges it under other bands
    if key not in s.flows:
        s.flows[key] = _constants(df, Ks)
    C, at = s.flows[key]
    logK = np.log(np.asarray(Ks, float))
    ok = np.isfinite(C).all(axis=1)
    slopes = np.array([fits._ols_slope(logK, np.log(C[i])) for i in range(SEEDS) if ok[i]])
    band = Band(-math.inf, 0.0, source="Theorem 1's bound, its log(K/ε) factor in C's denominator: a bounded C does not "
                                       "grow with K (without the factor it would have to fall faster still)")
    meas = (f"the sampled-count flow (feature counts drawn at N = 80K³, {max(int(df['M'].iloc[0]), MIN_PROMPTS)} prompts, the "
            f"fastest run's step on the clock; {SEEDS} draws): " + "; ".join(at)
            + (f"; slope per draw {', '.join(f'{x:+.3f}' for x in slopes)}" if len(slopes) else "")
            + ("; the runs inside the hypotheses are judged in the row beside" if (inside := _inside(df)).any()
               else f"; the runs (N = {int(df['N'].min())} to {int(df['N'].max())}) lie outside δ < min p_k and are not charged"))
    if (few := too_few_seeds(len(slopes))):
        r = s.row(CID, NOT_TESTABLE, group=GROUP, prediction=f"{pred} in {band.text(choices.band)}", measurement=meas, domain="",
                  reason=f"the flow reached ε = 1/K at every K in too few draws: {few}")
        r["_flow"] = True
        return [r]
    m, lo, hi = mean_interval(slopes)
    v, why = judge(lo, hi, band, choices, "the slope of the needed constant")
    r = s.row(CID, v, group=GROUP, prediction=f"{pred} in {band.text(choices.band)}", value=m, ci_lo=lo, ci_hi=hi,
              reason=why, domain="", measurement=meas + f"; mean {m:+.3f} [{fmt(lo)}, {fmt(hi)}] (95% Student-t interval over "
                                             f"{len(slopes)} draws)", eps=1.0 / max(Ks))
    r["flow_value"], r["flow_lo"], r["flow_hi"] = m, lo, hi
    r["seed_values"] = json.dumps({f"draw {i}": float(x) for i, x in zip(np.flatnonzero(ok), slopes)})
    r["curve"] = curve_json("K", "the needed constant C (sampled-count flow, ε = 1/K)", Ks,
                            {f"draw {i}": C[i] for i in np.flatnonzero(ok)}, log=True)
    r["_flow"] = True            # judged on the flow inside the hypotheses (icl.analyse.claims.ldl.hypotheses skips it)
    r["hypotheses"] = (f"K ≥ 1/ε: ε = 1/K, met (1×); N ≥ K³: N = 80K³, met (80×); δ < min p_k: δ = {DELTA_SHARE:g}·min "
                       f"p_k, met ({fmt(1 / DELTA_SHARE)}×)")
    if v == FAILS:
        r["against"] = THEOREM
        r["reason"] += "; the theory's own dynamics inside every hypothesis need a constant that grows with K"
    return [r, *_on_runs(s, df[inside], Ks, pred, band, choices)]


def _on_runs(s: Setting, inside: pd.DataFrame, Ks: list[int], pred: str, band: Band, choices: Choices) -> list[dict]:
    """The same bound on the runs themselves where they are inside its hypotheses (δ ≤ DELTA_SHARE·min
    p_k, which count-drawn prompts reach at N = 80K³): per run the constant its own time to ε = 1/K
    needs (`t_one_over_K`, read every epoch, resolved at ≥ RESOLUTION steps), per seed the mean of
    log C over its runs at each K (L moves only the step on one clock) and the slope of that on log K;
    the mean slope over seeds judged as the flow's. The same at ε = 2/K (`t_two_over_K`: K ≥ 1/ε at its
    constant ×2) is given beside it. No row where fewer than three K have runs inside (`inside`: the
    setting's runs that are)."""
    if inside["K"].nunique() < 3 or "t_one_over_K" not in inside:
        return []
    per, slopes, lost = _run_slopes(inside, Ks, "t_one_over_K", 1.0)
    meas = (f"the runs inside the hypotheses (prompts drawn as feature counts, N = {int(inside['N'].min())} to "
            f"{int(inside['N'].max())}, δ ≤ {DELTA_SHARE:g}·min p_k; {len(inside)} runs, {inside['seed'].nunique()} seeds): "
            + "; ".join(f"K = {K}: C = {fmt(float(np.exp(per[K].median())))}" for K in Ks if per[K].notna().any())
            + (f"; left out: {lost}" if lost else "")
            + (f"; at ε = 1/K the slope per seed {', '.join(f'{x:+.3f}' for x in slopes)}" if len(slopes) else ""))
    if "t_two_over_K" in inside:
        _, twice, _ = _run_slopes(inside, Ks, "t_two_over_K", 2.0)
        if len(twice) >= MIN_SEEDS:
            m2, lo2, hi2 = mean_interval(twice)
            meas += (f"; at ε = 2/K (K ≥ 1/ε at its constant ×2) the slope is {m2:+.3f} [{fmt(lo2)}, {fmt(hi2)}] over "
                     f"{len(twice)} seeds")
        else:
            meas += (f"; at ε = 2/K (K ≥ 1/ε at its constant ×2) {len(twice)} seed(s) crossed at every K in "
                     f"{fits.RESOLUTION} steps or more, too few for a slope")
    hyp = (f"K ≥ 1/ε: ε = 1/K, met (1×); N ≥ K³: met ({fmt(float((inside['N'] / inside['K'].astype(float) ** 3).min()))}× "
           f"at least); δ < min p_k: δ ≤ {DELTA_SHARE:g}·min p_k, met ({fmt(1 / DELTA_SHARE)}×)")
    run_pred = f"{pred} in {band.text(choices.band)}, on the runs"
    if (few := too_few_seeds(len(slopes))):
        r = s.row(CID, NOT_TESTABLE, group=join(GROUP, "runs"), prediction=run_pred, measurement=meas, domain="",
                  reason=f"the runs reached ε = 1/K at every K in too few seeds: {few}")
        r["hypotheses"] = hyp
        return [r]
    m, lo, hi = mean_interval(slopes)
    v, why = judge(lo, hi, band, choices, "the slope of the needed constant")
    r = s.row(CID, v, group=join(GROUP, "runs"), prediction=run_pred, value=m, ci_lo=lo, ci_hi=hi, reason=why, domain="",
              measurement=meas + f"; mean at ε = 1/K {m:+.3f} [{fmt(lo)}, {fmt(hi)}] (95% Student-t interval over {len(slopes)} seeds)",
              eps=1.0 / max(Ks))
    r["hypotheses"] = hyp
    full = per.dropna()
    r["seed_values"] = json.dumps({f"seed {k}": float(x) for k, x in zip(full.index, slopes)})
    r["curve"] = curve_json("K", "the needed constant C (runs, ε = 1/K; the mean of log C over L)", Ks,
                            {f"seed {k}": np.exp(row.to_numpy(float)) for k, row in full.iterrows()}, log=True)
    r["_flow"] = True            # inside by construction, the statement above says so (hypotheses.charge skips it)
    if v == FAILS:
        r["against"] = THEOREM
        r["reason"] += "; runs inside every hypothesis need a constant that grows with K"
    return [r]


def _run_slopes(inside: pd.DataFrame, Ks: list[int], tcol: str, k_eps: float) -> tuple[pd.DataFrame, np.ndarray, str]:
    """Per seed and K the mean log C of the runs' times `tcol` to ε = k_eps/K (runs crossing in fewer than
    RESOLUTION steps, or never, left out), per seed with every K the slope of log C on log K, and what was
    left out, in words."""
    T = inside[tcol].astype(float).to_numpy()
    res = fits.resolved(inside, tcol).to_numpy()
    ok = inside[np.isfinite(T) & res]
    logC = pd.Series([math.log(needed_constant(float(r[tcol]), float(r["lr"]), delta_conc(int(r["K"]), float(r["N"])),
                                               float(r["L"]), float(r["delta"]), int(r["K"]), k_eps / int(r["K"])))
                      for _, r in ok.iterrows()],
                     index=ok.index, dtype=float)
    per = logC.groupby([ok["seed"], ok["K"].astype(int)]).mean().unstack().reindex(columns=Ks)
    logK = np.log(np.asarray(Ks, float))
    slopes = np.array([fits._ols_slope(logK, row.to_numpy(float)) for _, row in per.dropna().iterrows()])
    fast, never = int((np.isfinite(T) & ~res).sum()), int((~np.isfinite(T)).sum())
    eps = "1/K" if k_eps == 1 else f"{k_eps:g}/K"
    lost = "; ".join(x for x in (f"{fast} run{'s' if fast != 1 else ''} crossed in fewer than {fits.RESOLUTION} steps "
                                 "(the step's, not resolved)" if fast else "",
                                 f"{never} run{'s' if never != 1 else ''} did not reach ε = {eps} by the last epoch"
                                 if never else "") if x)
    return per, slopes, lost


def _inside(df: pd.DataFrame) -> pd.Series:
    """Per run, whether it meets δ = sqrt(20K/N) ≤ DELTA_SHARE·min p_k (with room for N's rounding up),
    p read once per K."""
    out = pd.Series(False, index=df.index)
    for _, g in df.groupby(df["K"].astype(int)):
        p = probs_of(g)
        dc = np.array([delta_conc(int(k), float(n)) for k, n in zip(g["K"], g["N"])])
        out[g.index] = dc <= DELTA_SHARE * float(p.min() / p.sum()) * (1 + 1e-9)
    return out


def _constants(df: pd.DataFrame, Ks: list[int]) -> tuple[np.ndarray, list[str]]:
    """The needed constant per draw and K (SEEDS × len(Ks)), on the sampled-count flow at N = 20K/δ²,
    δ = DELTA_SHARE·min p_k, at the step of each K's fastest run; and a phrase per K."""
    C = np.full((SEEDS, len(Ks)), np.nan)
    at = []
    for j, K in enumerate(Ks):
        g = df[df["K"].astype(int) == K]
        r = g.loc[g["clock_per_epoch"].astype(float).idxmax()]        # the fastest run's step: fewest epochs
        p = probs_of(g)
        dc = DELTA_SHARE * float(p.min() / p.sum())
        N = int(math.ceil(20 * K / dc ** 2))
        eps = 1.0 / K
        for i in range(SEEDS):
            T = sampled_flow_time(K, p, float(r["clock_per_epoch"]), N, max(int(r["M"]), MIN_PROMPTS), i, eps ** 2)
            if np.isfinite(T):
                C[i, j] = needed_constant(T, float(r["lr"]), delta_conc(K, N), float(r["L"]), float(r["delta"]),
                                          K, eps)
        at.append(f"K = {K}: C = {fmt(float(np.nanmedian(C[:, j])))} (N = {N}, L = {float(r['L']):g})")
    return C, at
