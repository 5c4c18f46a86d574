"""zfb.optimum: the trained LSA converges to the theory's optimum."""
from __future__ import annotations

import math

import numpy as np

from icl import stats
from icl.analyse.claims import FAILS, HOLDS, NOT_TESTABLE, UNSURE, fmt
from icl.analyse.claims.judge import Band, Choices, DEFAULT, judge
from icl.analyse.claims.zfb.inputs import HALF, STILL_FALLING
from icl.analyse.claims.zfb.matrices import _names
from icl.analyse.claims.zfb.setting import Setting


def _boot_mean(B: np.ndarray, f) -> tuple[float, float]:
    """95% interval of f(mean of the matrices B) over icl.stats' resamples of them (the
    bootstrap of judge.boot, vectorised); none with fewer than 3 matrices."""
    if len(B) < 3:
        return math.nan, math.nan
    return stats.percentile_interval(f(B[stats.resamples(len(B))].mean(1)), len(B))


def _still(still, runs, opt: str) -> str:
    """Why a row inside its band is inconclusive while runs still move: the claim is about where
    training ends, and a run still approaching has not ended anywhere yet."""
    return (f"inside the band, but {len(still)} of {len(runs)} runs are still approaching {opt} (the last fifth of "
            f"training still brought ≥ {STILL_FALLING:.0%} of the distance's decline): where training ends is not yet measured; train longer")


def optimum(s: Setting, choices: Choices = DEFAULT) -> list[dict]:
    """Per LSA setting, two rows. At the optimum: every run's exact excess population risk at its
    mean matrix B̄ over the last fifth of training, (R(B̄) − R(B*))/(R(B∞) − R(B*)) at the training
    length (icl.theory.lsa, fixed or random covariances; B* = Γ⁻¹ or E[Λ²]E[ΓΛ²]⁻¹, B∞ its N → ∞ limit
    Λ⁻¹ or I/3), 95% interval by a bootstrap over those logged epochs, each seed's worst run's
    (over seeds, their mean) within [0, ½], the band of zfb.thm42: nearer the optimum's risk than
    halfway to its limit's. Nearer B* than B∞: ‖B̄ − B*‖/‖B̄ − B∞‖ below 1, read the same way.
    While a run still approaches B* (the last fifth of training still brought ≥ 10% of the
    distance's decline) neither row is decided: where training ends is not yet measured."""
    cid = "zfb.optimum"
    runs = [r for r in s.runs["run_id"] if r in s.mats]
    if not runs:
        return [s.row(cid, NOT_TESTABLE, prediction="w22·W11ᵀ → the optimum",
                      reason="no trained LSA run with a closed-form optimum (linear task, gaussian or random-covariance tokens)")]
    opt, lim = _names(s.runs["token_kind"])
    mats = [s.mats[r] for r in runs]
    sep = float(np.median([np.linalg.norm(m.opt - m.limit) / m.scale for m in mats]))
    per = []
    for m in mats:
        last = m.last()
        d_opt = lambda b, m=m: np.linalg.norm(b - m.opt, axis=(-2, -1)) / m.scale                      # noqa: E731
        ratio = lambda b, m=m: np.linalg.norm(b - m.opt, axis=(-2, -1)) / np.linalg.norm(b - m.limit, axis=(-2, -1))  # noqa: E731
        per.append((float(m.excess(last.mean(0))), *_boot_mean(last, m.excess), d_opt(last.mean(0)),
                    ratio(last.mean(0)), *_boot_mean(last, ratio)))
    ex, ex_lo, ex_hi, dG, rho, rho_lo, rho_hi = (np.array(v, float) for v in zip(*per))
    still = s.falling(runs)
    rows = []
    band = Band(0.0, 0.0, HALF, floor=0.0, source=f"halfway from {opt}'s risk to its N → ∞ limit's (zfb.thm42's band)")
    text = (f"w22·W11ᵀ → {opt}: the excess risk (R(B̄) − R({opt}))/(R({lim}) − R({opt})) at M = N of each seed's worst "
            f"run (over seeds, their mean) in {band.text(choices.band)}")
    n_last = min(len(m.last()) for m in mats)
    if not np.isfinite(ex).all():
        rows.append(s.row(cid, UNSURE, group="at the optimum", prediction=text, domain=s.domain(),
                          measurement=f"‖B̄ − {opt}‖/‖{opt}‖ = {', '.join(fmt(x) for x in dG)}",
                          reason=f"no exact risk for these runs: theory.parquet has no N → ∞ limit ({lim}) or runs.parquet "
                                 "no training law (written by an older version): rerun the theory step"))
    else:
        i = int(np.argmax(ex))
        lo, hi = float(np.max(ex_lo)), float(np.max(ex_hi))          # NaN where a run has no interval
        st = s.over_seeds(cid, "at the optimum", float(ex[i]), lo, hi)
        v, why = judge(st.lo, st.hi, band, choices, "the worst run's excess risk", no_interval=st.few)
        if v == FAILS and still:
            v, why = UNSURE, (f"training has not converged: {len(still)} of {len(runs)} runs were still approaching {opt} in "
                              f"the last fifth of training ({why}); train longer")
        elif v == HOLDS and still:
            v, why = UNSURE, _still(still, runs, opt)
        elif v == FAILS:
            why = (f"training levelled off with {fmt(st.value)} of the risk gap from {opt} to {lim} left: further than "
                   f"halfway to the N → ∞ answer ({why})")
        m = mats[i]
        r_opt, r_lim = float(m.risk(m.opt)), float(m.risk(m.limit))
        meas = (f"worst run {fmt(ex[i])} [{fmt(lo)}, {fmt(hi)}] of the gap: R(B̄) − R({opt}) = "
                f"{fmt(ex[i] * (r_lim - r_opt))} against R({lim}) − R({opt}) = {fmt(r_lim - r_opt)} (R({opt}) = "
                f"{fmt(r_opt)}; exact population risk at M = N; B̄: mean matrix over the last fifth of training; 95% "
                f"interval: bootstrap over its ≥ {n_last} logged epochs there); all runs {', '.join(fmt(x) for x in ex)}; "
                f"‖B̄ − {opt}‖/‖{opt}‖ = {', '.join(fmt(x) for x in dG)}")
        rows.append(s.row(cid, v, group="at the optimum", prediction=text, measurement=meas + st.text, value=st.value,
                          ci_lo=st.lo, ci_hi=st.hi, reason=why, domain=s.domain()))
    j = int(np.nanargmax(rho)) if np.isfinite(rho).any() else 0
    band2 = Band(-math.inf, 1.0, floor=0.0, source="the order the claim states")
    text2 = (f"nearer {opt} than its N → ∞ limit {lim}: ‖B̄ − {opt}‖/‖B̄ − {lim}‖ < 1 for each seed's worst run (over "
             "seeds, their mean)")
    lo2, hi2 = float(np.max(rho_lo)), float(np.max(rho_hi))
    meas2 = (f"worst run's ratio {fmt(rho[j])} [{fmt(lo2)}, {fmt(hi2)}] (95% interval: bootstrap over the logged epochs "
             f"of the last fifth of training); {opt} and {lim} differ by {fmt(sep)} (relative)")
    if not np.isfinite(rho).all():
        rows.append(s.row(cid, UNSURE, group=f"nearer {opt} than {lim}", prediction=text2, measurement=meas2,
                          reason=f"theory.parquet has no N → ∞ limit ({lim}) for these runs (written by an older "
                                 "version): rerun the theory step", domain=s.domain()))
    else:
        st = s.over_seeds(cid, f"nearer {opt} than {lim}", float(rho[j]), lo2, hi2)
        v, why = judge(st.lo, st.hi, band2, choices, "the worst run's distance ratio", no_interval=st.few)
        if v == FAILS and still:
            v, why = UNSURE, f"{why}; but {len(still)} of {len(runs)} runs are still approaching {opt}: train longer"
        elif v == HOLDS and still:
            v, why = UNSURE, _still(still, runs, opt)
        elif v == UNSURE and sep < 2 * np.median(dG):
            why += (f"; {opt} and {lim} differ by only {fmt(sep)}, about the runs' distance from {opt}: at this N the "
                    "runs cannot tell them apart")
        rows.append(s.row(cid, v, group=f"nearer {opt} than {lim}", prediction=text2, measurement=meas2 + st.text,
                          value=st.value, ci_lo=st.lo, ci_hi=st.hi, reason=why, domain=s.domain()))
    return rows
