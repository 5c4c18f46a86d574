"""The two checks the error and slope claims make: against the theory at the learned matrix and at the optimum."""
from __future__ import annotations

import math

import numpy as np
import pandas as pd

from icl.analyse.claims import FAILS, NOT_TESTABLE, fmt
from icl.analyse.claims.judge import Band, Choices, join, judge
from icl.analyse.claims.zfb.inputs import HALF, _z
from icl.analyse.claims.zfb.matrices import _names
from icl.analyse.claims.zfb.setting import Setting, _agg, _err_sentence, _pooled


def _slope_rows(s: Setting, cid: str, c: pd.DataFrame, pred_text: str, group: str, choices: Choices) -> list[dict]:
    """Slope rows: the slope does not depend on M (for any matrix), so the cells pool."""
    return _ratio_rows(s, cid, c, "slope", pred_text, group, choices)


def _ratio_rows(s: Setting, cid: str, c: pd.DataFrame, what: str, pred_text: str, group: str, choices: Choices,
                scale_text=None, to_zero: bool = False) -> list[dict]:
    """measured/predicted pooled over the cells (inverse-variance mean, 95% interval from the test
    prompts' standard errors) against 1 ± half the relative distance from the finite-N prediction
    to its N → ∞ value, or with `to_zero` to 0 (the error of a predictor that adapts to each
    prompt, OLS at M ≥ d): 1 ± ½. Twice: at the learned matrix and at the optimum."""
    rows = []
    c = c[c[f"theory_{what}"].notna() & c[f"limit_{what}"].notna()]
    if c.empty:
        return [s.row(cid, NOT_TESTABLE, group=group, prediction=pred_text,
                      reason="no closed form for the N → ∞ limit of these cells (linear task, gaussian or "
                             "random-covariance tokens only)")]
    exact, alt = c[f"theory_{what}"].to_numpy(float), c[f"limit_{what}"].to_numpy(float)
    if to_zero:
        band = Band(1.0, 1.0, HALF, source="halfway from the prediction to 0, the error of OLS (which adapts to each prompt)")
    else:
        band = Band(1.0, 1.0, HALF * float(np.median(np.abs(alt - exact) / np.abs(exact))),
                    source="half the distance from the finite-N prediction to its N → ∞ value")
    opt, lim = _names(c["token_kind"])
    for check in ("formula", "optimisation"):
        pred_col = f"theory_{what}_learned" if check == "formula" else f"theory_{what}"
        g = c[c[pred_col].notna()] if pred_col in c else c.iloc[:0]
        text = f"{pred_text}, {'at each run' + chr(39) + 's learned matrix' if check == 'formula' else 'at ' + opt}: " \
               f"measured/predicted in {band.text(choices.band)}"
        if g.empty:
            rows.append(s.row(cid, NOT_TESTABLE, group=join(group, check), prediction=text,
                              reason="shift.parquet has no theory at the learned matrix (written by an older version): "
                                     "rerun the evaluation"))
            continue
        pred = g[pred_col].to_numpy(float)
        r, lo, hi = _pooled(g[what].to_numpy(float) / pred, g[f"{what}_se"].to_numpy(float) / np.abs(pred))
        st = s.over_seeds(cid, join(group, check), r, lo, hi, ratio=True)
        v, why = judge(st.lo, st.hi, band, choices, f"measured/predicted {what}", no_interval=st.few)
        if check == "optimisation":
            v, why = _err_sentence(v, why, s, g["run_id"], opt)
        elif v == FAILS:
            why += ": the closed form at the learned matrix misses the measurement (or the LSA's other weights, " \
                   "zero in the theory, matter)"
        extra = "" if scale_text is None else scale_text(g)
        meas = (f"measured/predicted {what} {fmt(r)} [{fmt(lo)}, {fmt(hi)}] (inverse-variance mean over {len(g)} "
                f"(run, M) cells, M = {', '.join(str(m) for m in sorted(g['M'].unique()))}; 95% interval from the "
                f"test prompts' standard errors); the N → ∞ value ({lim}) is {fmt(float(np.median(alt / exact)))}× "
                f"the finite-N one{extra}")
        if check == "optimisation" and f"theory_{what}_learned" in g and g[f"theory_{what}_learned"].notna().any():
            gap = float(np.nanmedian(g[f"theory_{what}_learned"] / g[f"theory_{what}"] - 1))
            meas += f"; theory at the learned matrices vs at {opt}: {gap:+.1%}"
        rows.append(s.row(cid, v, group=join(group, check), prediction=text, measurement=meas + st.text, reason=why,
                          value=st.value, ci_lo=st.lo, ci_hi=st.hi, domain=s.domain() if check == "optimisation" else ""))
    return rows


def _rms(p: np.ndarray, se: np.ndarray, w: np.ndarray) -> tuple[float, float, float, float]:
    """The weighted root-mean-square of the true per-cell deviations p_i from their estimates and
    standard errors: T² = Σw(p̂² − se²)/Σw (E[se²] is the variance of p̂, so the test noise comes out
    unbiased), with a 95% interval from the normal approximation Var(p̂²) ≈ 4p̂²se² + 2se⁴, clipped
    at 0. The weights come from the theory, not from the measured se: weighting by 1/se² would
    favour the cells whose se came out small by chance, and bias T² up. Fourth: T² itself, unclipped
    (what a seed contributes to a mean over seeds)."""
    ok = np.isfinite(p) & np.isfinite(se) & (se > 0) & np.isfinite(w)
    if not ok.any():
        return math.nan, math.nan, math.nan, math.nan
    p, se, w = p[ok], se[ok], w[ok] / w[ok].sum()
    t2 = float(np.sum(w * (p ** 2 - se ** 2)))
    sd = float(np.sqrt(np.sum(w ** 2 * (4 * p ** 2 * se ** 2 + 2 * se ** 4))))
    root = lambda x: math.sqrt(max(x, 0.0))                   # noqa: E731
    return root(t2), root(t2 - _z() * sd), root(t2 + _z() * sd), t2


def _error_rows(s: Setting, cid: str, c: pd.DataFrame, pred_text: str, group: str, choices: Choices) -> list[dict]:
    """Error rows: a wrong matrix moves the error up at some M and down at others, so signed
    deviations would cancel. Per test cell (M, c): p = (measured − predicted)/(N → ∞ value −
    finite-N value), means over the setting's runs; the statistic is the root-mean-square of p over
    the cells (weighted by the theory's precision of each, the test noise taken out: `_rms`),
    against [0, ½]: nearer the finite-N error than halfway to its N → ∞ reading."""
    rows = []
    c = c[c["theory_mse"].notna() & c["limit_mse"].notna()]
    band = Band(0.0, 0.0, HALF, floor=0.0, source="halfway from the finite-N prediction to its N → ∞ value")
    opt, lim = _names(c["token_kind"]) if len(c) else ("Γ⁻¹", "Λ⁻¹")
    for check in ("formula", "optimisation"):
        pred_col = "theory_mse_learned" if check == "formula" else "theory_mse"
        text = (f"{pred_text}, {'at each run' + chr(39) + 's learned matrix' if check == 'formula' else 'at ' + opt}: "
                f"RMS over the test cells of (measured − predicted)/(N → ∞ value − finite-N value) in "
                f"{band.text(choices.band)}")
        g = c[c[pred_col].notna()] if pred_col in c else c.iloc[:0]
        if g.empty:
            why = ("shift.parquet has no theory at the learned matrix (written by an older version): rerun the evaluation"
                   if len(c) else "no closed form for the N → ∞ limit of these cells")
            rows.append(s.row(cid, NOT_TESTABLE, group=join(group, check), prediction=text, reason=why))
            continue
        a = _agg(g.assign(pred=g[pred_col], exact=g["theory_mse"], alt=g["limit_mse"]), ["mse", "pred", "exact", "alt"])
        gap = (a["alt"] - a["exact"]).to_numpy(float)
        p = (a["mse"] - a["pred"]).to_numpy(float) / gap
        se = a["mse_se"].to_numpy(float) / np.abs(gap)
        # the theory's precision of each cell: a cell's relative s.e. is about the same everywhere, so
        # p's s.e. goes as finite-N value/gap
        val, lo, hi, t2 = _rms(p, se, (gap / a["exact"].to_numpy(float)) ** 2)
        st = s.over_seeds(cid, join(group, check), val, lo, hi, square=t2)
        v, why = judge(st.lo, st.hi, band, choices, "the RMS deviation (in units of the N → ∞ gap)", no_interval=st.few,
                       at_bound=st.at_bound)
        if check == "optimisation":
            v, why = _err_sentence(v, why, s, g["run_id"], opt)
        elif v == FAILS:
            why += ": the closed form at the learned matrix misses the measured error (or the LSA's other weights, " \
                   "zero in the theory, matter)"
        i = int(np.nanargmax(np.abs(p)))
        w = a.iloc[i]
        cell = f"M={int(w['M'])}" + ("" if pd.isna(w["c"]) else f", c={w['c']:g}")
        ratio = (a["mse"] / a["pred"]).to_numpy(float)
        meas = (f"RMS deviation {fmt(val)} [{fmt(lo)}, {fmt(hi)}] of the N → ∞ gap over {len(a)} test cells (M ≥ d, "
                f"means over {int(a['runs'].max())} runs; test noise taken out; 95% interval from "
                f"the test prompts' standard errors); measured/predicted {fmt(float(ratio.min()))}–"
                f"{fmt(float(ratio.max()))}, the worst cell {cell} at {p[i]:+.2f} ± {se[i]:.2f} of its gap; the N → ∞ "
                f"value ({lim}) is {fmt(float(np.min(a['alt'] / a['exact'])))}–{fmt(float(np.max(a['alt'] / a['exact'])))}"
                "× the finite-N one")
        rows.append(s.row(cid, v, group=join(group, check), prediction=text, measurement=meas + st.text, reason=why,
                          value=st.value, ci_lo=st.lo, ci_hi=st.hi, seed_value=st.seed_value,
                          domain=s.domain() if check == "optimisation" else ""))
    return rows


def _lsa_cells(s: Setting, shift, gaussian_only=False) -> pd.DataFrame:
    c = s.cells
    c = c[c["shift"].isin([shift] if isinstance(shift, str) else shift) & (c["M"] >= c["d"])]
    return c[c["token_kind"] == "gaussian"] if gaussian_only else c
