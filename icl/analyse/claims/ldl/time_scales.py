"""Time-scale claims under GD: T against L and against ε, and Phase I's end."""
from __future__ import annotations

import math

import numpy as np
import pandas as pd

from icl.analyse import fits
from icl.analyse.claims import NOT_TESTABLE, UNSURE, count, fmt
from icl.analyse.claims.judge import Band, Choices, DEFAULT, boot, join, judge, too_few_seeds
from icl.analyse.claims.ldl import clock
from icl.analyse.claims.ldl.clock import identity_of_L
from icl.analyse.claims.ldl.identities import design_fixed, gap_readings, regimes, scale_identity, steps
from icl.analyse.claims.ldl.setting import RESOLUTION, Setting, TIME_COLS, _empty, _not_gd
from icl.stats import MIN_SEEDS


def eps_loss(g: pd.DataFrame, tcol: str) -> np.ndarray:
    """ε of each run at a threshold, read from the loss: sqrt(x·loss₀) (relative) or sqrt(x) (absolute)."""
    return fits.eps_of(g, tcol)


def eps_attention(g: pd.DataFrame, tcol: str) -> np.ndarray:
    """ε of each run at a threshold, read from attention: 1 − Attn_own = εδ at the crossing."""
    dc = np.sqrt(20.0 * g["K"].to_numpy(float) / g["N"].to_numpy(float))
    return np.clip(1.0 - g[f"attn_at_{tcol}"].to_numpy(float), 1e-12, None) / dc


EPS_READINGS = {"loss": eps_loss, "attention": eps_attention}


def _timing_tol(T: np.ndarray, x: np.ndarray) -> float:
    """How far a slope of log T on x can move when every crossing time is off by half an epoch
    (the resolution of an interpolated crossing): the band's tolerance, measured per group."""
    dx = x - x.mean()
    den = float((dx * dx).sum())
    return float(np.sqrt(((dx / den) ** 2 * (0.5 / T) ** 2).sum())) * 2 if den > 0 else math.nan


def _both_readings(s, cid, group, pred_of, lo, hi, choices, what, value, measurement, domain_eps,
                   too_few: str = "") -> dict:
    """One row judged with ε read from the loss and from attention: where the two disagree it is
    inconclusive and says which reading gives what. `too_few` (why the spread over seeds is no
    interval, icl.analyse.claims.judge.too_few_seeds): the row states both predictions and the value but
    reads inconclusive for that reason, with no interval."""
    if too_few:
        (_, tl), (_, ta) = pred_of("loss"), pred_of("attention")
        return s.row(cid, UNSURE, group=group, prediction=f"ε from the loss: {tl}; ε from attention: {ta}", value=value,
                     reason=too_few, measurement=measurement, eps=domain_eps)
    out = {}
    for reading in ("loss", "attention"):
        band, text = pred_of(reading)
        out[reading] = (band, text, *judge(lo, hi, band, choices, what))
    (bl, tl, vl, wl), (ba, ta, va, wa) = out["loss"], out["attention"]
    if vl == va:
        v, why = vl, wl
    else:
        v, why = UNSURE, (f"the two readings of ε disagree: with ε² = the loss reached it reads '{vl}' (band "
                          f"{bl.text(choices.band)}), with 1 − Attn_own = εδ it reads '{va}' (band {ba.text(choices.band)})")
    return s.row(cid, v, group=group, prediction=f"ε from the loss: {tl}; ε from attention: {ta}", value=value,
                 ci_lo=lo, ci_hi=hi, reason=why, measurement=measurement, eps=domain_eps)


def _time_ready(s: Setting, cid: str) -> list[dict] | None:
    if not (s.runs["optimizer"] == "gd").all():
        return [_not_gd(s, cid)]
    if (why := scale_identity(s.runs)):
        return [s.row(cid, NOT_TESTABLE, prediction="—", measurement="—", reason=why)]
    if "K" not in s.runs or s.runs["K"].isna().any():
        return [s.row(cid, NOT_TESTABLE, prediction="—", measurement="—",
                      reason="the theorems' time scales are stated for K discrete features at distance Δ; continuous "
                             "tokens have neither (App. A's order in L is ldl.faster_with_L)")]
    return None


def time_vs_L(s: Setting, choices: Choices = DEFAULT, tcols=TIME_COLS) -> list[dict]:
    """Theorems 1-2: the log-log slope of the crossing time against L, per regime and threshold,
    bootstrapped over seeds (at least 5; with fewer it reads inconclusive), against the slope of
    the theorems' T at each run's own ε and step η (absolute thresholds only on runs that started
    ≥ 10× above them) — the band spans T with and without its log factor (the constant inside it
    is unknown) and with Eq. 4's unknown constant both at its small-LΔ value (the theorems' L²Δ²)
    and as the task has it (L²Δ² → each run's measured label gap², gap_L), widened by the slope's
    timing resolution — once with ε read from the loss (ε² = the loss reached, or that over loss₀:
    Lemma 1's L²Δ² prefactor inside the O, as loss₀ grows with L) and once from attention. Runs whose step
    follows the measured clock are not failed for the constant inside Θ; a slope outside both
    readings still fails. On runs that follow one collapse clock (icl.analyse.claims.ldl.clock) the
    slope is the clock's rate in L and the row reads not testable, naming it; runs that depart are
    judged, the departure said."""
    cid = "ldl.time_vs_L"
    if (early := _time_ready(s, cid)):
        return early
    rows, df = [], s.runs
    reg = regimes(df, choices.lstar)
    for tcol in tcols:
        kind = "relative" if tcol.startswith("t_rel") else "absolute"
        for rg in ("flat", "sharp"):
            group = f"{rg}, {kind} {tcol.split('_')[-1]}"
            pred = "slope of log T on log L"
            here = df[reg == rg]
            if here.empty:
                rows.append(s.row(cid, NOT_TESTABLE, group=group, prediction=pred, measurement="no run in this regime",
                                  reason=f"no value of L of this setting lies in the {rg} regime"))
                continue
            # every run left out is counted: started within 10× of an absolute threshold, never reached it, or
            # crossed it within RESOLUTION steps (fits.timing_runs, which slopes.parquet reads the same way)
            g, out = fits.timing_runs(here, tcol)
            note = fits.left_out(out)
            if g.empty and not any(w.startswith("never") for w in out):
                rows.append(s.row(cid, NOT_TESTABLE, group=group, prediction=pred, measurement=note,
                                  reason=f"every {rg} run was left out ({note}): none times this crossing inside the "
                                         f"theorem's domain"))
                continue
            if g["L"].nunique() < 2:
                rows.append(s.row(cid, UNSURE, group=group, prediction=pred, measurement=join(
                    f"{g['L'].nunique()} value(s) of L crossed {tcol} in this regime", note),
                    reason="fewer than two values of L reached this loss in this regime"))
                continue
            if (why := design_fixed(g, "the crossing time's slope against L")):
                slope = fits._ols_slope(np.log(g["L"].to_numpy(float)), np.log(g[tcol].to_numpy(float)))
                rows.append(s.row(cid, NOT_TESTABLE, group=group, prediction=pred, value=slope, reason=why,
                                  measurement=join(f"slope in epochs {slope:.2f} over {len(g)} runs, "
                                                   f"{g['L'].nunique()} values of L", note)))
                continue
            if (why := identity_of_L(g, tcol, "the crossing time's dependence on L",
                                         "t_rel_1e-1" if "t_rel_1e-1" in g else tcol)):
                rows.append(s.row(cid, NOT_TESTABLE, group=group, prediction=pred, reason=why, measurement=note or "—"))
                continue
            slope, lo, hi, n, _ = fits.slope_with_bootstrap(g.astype({"L": float, tcol: float}), tcol)
            logL = np.log(g["L"].to_numpy(float))
            tol = _timing_tol(g[tcol].to_numpy(float), logL)

            def pred_of(reading, g=g, rg=rg, tcol=tcol, logL=logL, tol=tol):
                eps = EPS_READINGS[reading](g, tcol)
                # the loss reading: ε² = the loss, or the loss over loss₀ (Lemma 1's L²Δ² prefactor inside the O:
                # loss₀ grows with L, so at one absolute threshold the larger L must reach a smaller share of it)
                epss = {"": eps} if reading != "loss" else \
                    {"ε² = the loss": eps, "ε² = the loss / loss₀": eps / np.sqrt(g["loss0"].to_numpy(float))}
                ends = {}
                for gap, gg in gap_readings(g).items():     # Eq. 4's constant: small-LΔ value, measured gap
                    for how, e in epss.items():
                        th = fits._ols_slope(logL, np.log(fits.theory_time(gg, [rg] * len(gg), e)))
                        power = fits._ols_slope(logL, -np.log(gg["lr"].to_numpy(float))       # at each run's η
                                                - 2 * np.log(gg["L"].to_numpy(float))
                                                - (np.log(e) if rg == "sharp" else 0.0))
                        ends[gap, how] = sorted((th, power))
                span = lambda keys: (min(ends[k][0] for k in keys), max(ends[k][1] for k in keys))   # noqa: E731
                a, b = span(ends)
                (la, lb), (ga, gb) = (span([k for k in ends if k[0] == gap]) for gap in ("LΔ", "gap"))
                text = f"{a:.2f} to {b:.2f}"
                if not (np.isclose(la, ga) and np.isclose(lb, gb)):
                    text += f" (with L²Δ² {la:.2f} to {lb:.2f}, with the measured label gap² {ga:.2f} to {gb:.2f})"
                if len(epss) > 1:
                    parts = [f"{how} {p:.2f} to {q:.2f}" for how in epss
                             for p, q in [span([k for k in ends if k[1] == how])]]
                    if not all(np.isclose(ends[k], ends[next(iter(ends))]).all() for k in ends):
                        text += f" ({'; '.join(parts)})"
                return Band(a, b, tol), text

            n_seeds = g["seed"].nunique()
            rows.append(_both_readings(s, cid, group, pred_of, lo, hi, choices, "the slope", slope,
                                       join(f"slope {slope:.2f} [{fmt(lo)}, {fmt(hi)}] ({fits.interval_kind(n_seeds)}) "
                                            f"over {n} runs, {g['L'].nunique()} values of L", note,
                                            clock.departs(clock.check(g, tcol))),
                                       float(np.median(eps_loss(g, tcol))), too_few_seeds(n_seeds)))
    return rows


def time_vs_eps(s: Setting, choices: Choices = DEFAULT, t_hi="t_rel_1e-1", t_lo="t_rel_1e-3") -> list[dict]:
    """β = dlog T / dlog(1/ε) between two thresholds, per regime, against the theorems' (flat:
    T ∝ log(K/ε), β ≈ 1/log(K/ε); sharp: T ∝ log(KLΔ/ε)/ε, β ≈ 1): the median over runs,
    bootstrapped over seeds (at least 5: a run's seed is its training set), against the band
    between T with and without its log factor, under both readings of ε. The late-time decay
    exponent a of the loss is reported beside it (a power law t^−a gives β = 2/a). This is the paper's
    reading of its bounds as rates (§4): on runs that follow one collapse clock (icl.analyse.claims.ldl.
    clock, checked at both crossings) it reads not testable, β an observation (one curve in τ has one
    β at every L; Theorem 1 as a bound is icl.analyse.claims.ldl.bound's row)."""
    cid = "ldl.time_vs_eps"
    if (early := _time_ready(s, cid)):
        return early
    rows, df = [], s.runs
    reg = regimes(df, choices.lstar)
    for rg in ("flat", "sharp"):
        here = df[reg == rg]
        if here.empty:
            rows.append(s.row(cid, NOT_TESTABLE, group=rg, prediction="β = dlog T/dlog(1/ε)",
                              measurement="no run in this regime",
                              reason=f"no value of L of this setting lies in the {rg} regime"))
            continue
        g, out = fits.timing_runs(here, t_hi)          # every run left out is counted
        reached = g[t_lo].astype(float) > 0
        if (~reached).any():
            out[f"never reached {t_lo}"] = int((~reached).sum())
        g = g[reached]
        note = fits.left_out(out)
        if g.empty and not any(w.startswith("never") for w in out):
            rows.append(s.row(cid, NOT_TESTABLE, group=rg, prediction="β = dlog T/dlog(1/ε)", measurement=note,
                              reason=f"every {rg} run was left out ({note}): none times this crossing inside the "
                                     f"theorem's domain"))
            continue
        if len(g) < 3:
            rows.append(s.row(cid, UNSURE, group=rg, prediction="β = dlog T/dlog(1/ε)",
                              measurement=join(f"{count(len(g), 'run')} reached {t_lo.split('_')[-1]} of their initial loss", note),
                              reason=f"fewer than three {rg} runs reached both thresholds"))
            continue
        T_hi, T_lo = g[t_hi].to_numpy(float), g[t_lo].to_numpy(float)

        def beta(reading, g=g):
            e_hi, e_lo = EPS_READINGS[reading](g, t_hi), EPS_READINGS[reading](g, t_lo)
            return np.log(e_hi / e_lo), e_lo, e_hi

        d, _, _ = beta("loss")
        b = np.log(T_lo / T_hi) / d
        med = float(np.median(b))
        n_seeds = g["seed"].nunique()
        lo, hi = boot(b, np.median, clusters=g["seed"].to_numpy(), min_units=MIN_SEEDS)
        tol = float(np.median(np.sqrt((0.5 / T_hi) ** 2 + (0.5 / T_lo) ** 2) / d))

        def pred_of(reading, g=g, rg=rg):
            dd, e_lo, e_hi = beta(reading)
            th = np.log(fits.theory_time(g, [rg] * len(g), e_lo) / fits.theory_time(g, [rg] * len(g), e_hi)) / dd
            power = np.zeros(len(g)) if rg == "flat" else np.ones(len(g))      # no log factor: β = 0 or 1
            a, bb = float(min(np.median(th), np.median(power))), float(max(np.median(th), np.median(power)))
            return Band(a, bb, tol), f"{a:.2f} to {bb:.2f}"

        a = g["late_exponent"].astype(float).dropna() if "late_exponent" in g else pd.Series(dtype=float)
        late = (f"; late-time loss ∝ t^−a with a = {a.median():.2f} (so β = 2/a = {2 / a.median():.2f})"
                if len(a) and a.median() > 0 else "")
        why, _ = clock.decides(g, "β at every L, so its difference between the regimes (one curve in τ has one β)",
                               (t_hi, t_lo))
        if why:
            rows.append(s.row(cid, NOT_TESTABLE, group=rg, prediction="β = dlog T/dlog(1/ε): the paper's reading of "
                              "its bounds as rates (§4)", value=med, eps=float(np.median(eps_loss(g, t_lo))),
                              measurement=join(f"β from {t_hi} to {t_lo} (every epoch): median {med:.2f} [{fmt(lo)}, "
                                               f"{fmt(hi)}] over {len(g)} runs, {n_seeds} seeds, an observation{late}",
                                               note),
                              reason=why + "; β is an observation: Theorems 1-2 are upper bounds, judged by the constant "
                                           "a run needs along their limit (K growing, ε = 1/K), never by a local exponent"))
            continue
        rows.append(_both_readings(s, cid, rg, pred_of, lo, hi, choices, "the median β", med,
                                   join(f"β from {t_hi} to {t_lo}: median {med:.2f} [{fmt(lo)}, {fmt(hi)}] over "
                                        f"{len(g)} runs, {n_seeds} seeds{late}", note), float(np.median(eps_loss(g, t_lo))),
                                   too_few_seeds(n_seeds)))
    return rows


def phase_one(s: Setting, choices: Choices = DEFAULT) -> list[dict]:
    """Prop. 2: Phase I ends at T1 = Θ(K log K/(ηL²Δ²)), with own attention Ω(1/(1+δ)) by then.
    Measured as the epoch own attention first reaches 1/(1+δ) (every epoch's trace), its log-log
    slope against L (seeds bootstrapped, at least 5) against T1's at each run's step η (−2 at one
    η), the band spanning Eq. 4's unknown constant — at its small-LΔ value (L²Δ²) and as the task
    has it (each run's measured label gap², gap_L) — within the timing resolution."""
    cid = "ldl.phase_one"
    pred = "slope of log T1 on log L = −2 (T1 ∝ 1/(ηL²Δ²))"
    df = s.runs
    if not (df["optimizer"] == "gd").all():
        return [_not_gd(s, cid)]
    if "t_phase_one" not in df or not df["token_kind"].eq("discrete").all() or df["attn_own_final"].isna().all():
        return [s.row(cid, NOT_TESTABLE, prediction=pred, measurement="no own attention traced",
                      reason="the end of Phase I is read from the own attention of discrete features")]
    if df["t_phase_one"].isna().all():
        return [s.row(cid, UNSURE, prediction=pred, measurement=f"final Attn_own: median {df['attn_own_final'].median():.2f}",
                      reason="no run's own attention reached 1/(1+δ), the end of Phase I, within its training")]
    if (why := scale_identity(df)):
        return [s.row(cid, NOT_TESTABLE, prediction=pred, measurement="—", reason=why)]
    g = df[df["t_phase_one"].notna()]
    fast = ~((g["t_phase_one"].astype(float) * steps(g)) >= RESOLUTION)
    g = g[~fast]
    note = join(f"{count(fast.sum(), 'run')} reached 1/(1+δ) within {RESOLUTION} steps and are left out" if fast.any() else "",
                f"{count(df['t_phase_one'].isna().sum(), 'run')} never reached it" if df["t_phase_one"].isna().any() else "")
    if g["L"].nunique() < 2:
        return [_empty(s, cid, "fewer than two values of L reached the end of Phase I", pred)]
    if (why := design_fixed(g, "the end of Phase I's slope against L")):
        slope = fits._ols_slope(np.log(g["L"].to_numpy(float)), np.log(g["t_phase_one"].to_numpy(float)))
        return [s.row(cid, NOT_TESTABLE, prediction=pred, value=slope, reason=why,
                      measurement=join(f"slope in epochs {slope:.2f} over {len(g)} runs, {g['L'].nunique()} values of L",
                                       note))]
    if (why := identity_of_L(g, "t_phase_one", "Phase I's end against L")):
        return [s.row(cid, NOT_TESTABLE, prediction=pred, reason=why, measurement=note or "—")]
    slope, lo, hi, n, _ = fits.slope_with_bootstrap(g.astype({"L": float, "t_phase_one": float}), "t_phase_one")
    logL = np.log(g["L"].to_numpy(float))
    # −2 at one η; at each run's η; once with L²Δ², once with the measured label gap² (Eq. 4's Θ-constant)
    want = {gap: fits._ols_slope(logL, -np.log(gg["lr"].to_numpy(float)) - 2 * np.log(gg["L"].to_numpy(float)))
            for gap, gg in gap_readings(g).items()}
    a, b = sorted(want.values())
    band = Band(a, b, _timing_tol(g["t_phase_one"].to_numpy(float), logL))
    at = " at each run's step η" if g["lr"].nunique() > 1 else ""
    if not np.isclose(a, b):
        pred = (f"slope of log T1 on log L = {want['LΔ']:.2f} with L²Δ² (T1 ∝ 1/(ηL²Δ²){at}) to {want['gap']:.2f} "
                f"with the measured label gap² (Eq. 4's constant inside Θ as the task has it)")
    elif at:
        pred = f"slope of log T1 on log L = {a:.2f} (T1 ∝ 1/(ηL²Δ²){at})"
    n_seeds = g["seed"].nunique()
    meas = join(f"slope {slope:.2f} [{fmt(lo)}, {fmt(hi)}] ({fits.interval_kind(n_seeds)}) over {n} runs, "
                f"{g['L'].nunique()} values of L", note)
    if (few := too_few_seeds(n_seeds)):
        return [s.row(cid, UNSURE, prediction=f"{pred}: {band.text(choices.band)}", value=slope, reason=few,
                      measurement=meas)]
    v, why = judge(lo, hi, band, choices, "the slope")
    return [s.row(cid, v, prediction=f"{pred}: {band.text(choices.band)}", value=slope, ci_lo=lo, ci_hi=hi, reason=why,
                  measurement=meas)]
