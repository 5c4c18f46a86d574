"""The error and slope claims: Theorem 4.2, covariate scaling, query shifts, random covariances, longer prompts."""
from __future__ import annotations

import math

import numpy as np

from icl.analyse.claims import FAILS, NOT_TESTABLE, fmt
from icl.analyse.claims.judge import Band, Choices, DEFAULT, join, judge
from icl.analyse.claims.zfb.checks import _error_rows, _lsa_cells, _ratio_rows, _slope_rows
from icl.analyse.claims.zfb.inputs import INDEP, OWN
from icl.analyse.claims.zfb.setting import Setting, _agg, _ratio_ci


def thm42(s: Setting, choices: Choices = DEFAULT) -> list[dict]:
    """Trained LSA on a fixed covariance, in distribution, test lengths M ≥ d, against the exact
    error (Thm 4.2 with its 1/M term) at each run's learned matrix (formula) and at Γ⁻¹
    (optimisation): per M the deviation (measured − predicted)/(error at Λ⁻¹ − error at Γ⁻¹), means
    over the runs; its root-mean-square over M, test noise taken out, with a 95% interval from the
    test prompts' standard errors, within [0, ½]: nearer the finite-N error than halfway to the
    slides' large-N reading Λ⁻¹. An optimisation row outside does not hold once the runs have
    levelled off, and is inconclusive while one still approaches Γ⁻¹."""
    c = _lsa_cells(s, "none", gaussian_only=True)
    if c.empty:
        return [s.row("zfb.thm42", NOT_TESTABLE, prediction="exact error at training N and test M (Thm 4.2)",
                      reason="no in-distribution test of an LSA trained on a fixed covariance with a linear task at M ≥ d")]
    return _error_rows(s, "zfb.thm42", c, "exact error at training N and test M (Thm 4.2 with its 1/M term)", "error",
                       choices)


def scaling(s: Setting, choices: Choices = DEFAULT) -> list[dict]:
    """Trained LSA, covariates x → c·x (c ≠ 1), M ≥ d, at the learned matrix (formula) and at
    Γ⁻¹ (optimisation). Slope of ŷ on y: measured/predicted c²·tr(BΛ²)/trΛ, inverse-variance mean
    over the (run, c, M) cells with a 95% interval from the test prompts' standard errors, within
    1 ± half the relative distance to the N → ∞ value c². Error: the root-mean-square over (c, M)
    of (measured − predicted)/(error at Λ⁻¹ − error at Γ⁻¹), as zfb.thm42, within [0, ½] (the
    error at Λ⁻¹ → c²(c²−1)²·trΛ as M → ∞)."""
    return _shifted(s, "zfb.scaling", _lsa_cells(s, "scale"), choices,
                    untestable=("slope c²·tr(Γ⁻¹Λ²)/trΛ, error at c·x",
                                "no shift of kind 'scale' (every covariate x → c·x) with c ≠ 1 evaluated on a trained LSA at M ≥ d; "
                                "a random covariance scaled by c is another shift, judged by zfb.random_covariance"),
                    slope="slope of ŷ on y = c²·tr(BΛ²)/trΛ",
                    error="exact error at c·x (→ c²(c²−1)²·trΛ as M, N → ∞)")


def query_shift(s: Setting, choices: Choices = DEFAULT) -> list[dict]:
    """Trained LSA, the query alone scaled x_q → c·x_q (c ≠ 1), M ≥ d, at the learned matrix
    (formula) and at Γ⁻¹ (optimisation). Slope of ŷ on y_q: measured/predicted tr(BΛ²)/trΛ,
    inverse-variance mean over the cells with a 95% interval from the test prompts' standard
    errors, within 1 ± half the relative distance to the N → ∞ value 1 (eq. 4.8: query shifts are
    tolerated). Error: the root-mean-square over M of (measured − predicted)/(error at Λ⁻¹ − error
    at Γ⁻¹), as zfb.thm42, within [0, ½]."""
    return _shifted(s, "zfb.query_shift", _lsa_cells(s, "query_only", gaussian_only=True), choices,
                    untestable=("slope tr(Γ⁻¹Λ²)/trΛ → 1 under x_q → c·x_q",
                                "no shift of kind 'query_only' (the query alone x_q → c·x_q) with c ≠ 1 evaluated on an LSA "
                                "trained on a fixed covariance at M ≥ d"),
                    slope="slope of ŷ on y_q = tr(BΛ²)/trΛ under x_q → c·x_q",
                    error="exact error under x_q → c·x_q")


def _shifted(s: Setting, cid: str, cells, choices: Choices, untestable: tuple[str, str], slope: str,
             error: str) -> list[dict]:
    """A shift's slope and error rows on the cells with c ≠ 1 (c = 1 is no shift); not testable,
    with `untestable`'s (prediction, reason), where there are none."""
    cells = cells[cells["c"] != 1.0]
    if cells.empty:
        return [s.row(cid, NOT_TESTABLE, prediction=untestable[0], reason=untestable[1])]
    return _slope_rows(s, cid, cells, slope, "slope", choices) + _error_rows(s, cid, cells, error, "error", choices)


def random_covariance(s: Setting, choices: Choices = DEFAULT) -> list[dict]:
    """Trained on random covariances Λ = diag(λ), λ_i ~ Exp(1), tested on new ones at c = 1,
    M ≥ d, per query kind, at the learned matrix (formula) and at the optimum E[Λ²]E[ΓΛ²]⁻¹
    (optimisation). Slope of ŷ on y: measured/predicted, inverse-variance mean over the cells with
    a 95% interval from the test prompts' standard errors, within 1 ± half the relative distance to
    the N → ∞ value (⅔ with the prompt's own covariance, ⅓ with an independent query). Relative
    error E[(ŷ−y)²]/E[y²] at the largest M: measured/predicted (exact at finite N and M; → ⅓ and
    5/9 as M, N → ∞) within 1 ± ½, halfway to 0, the error of OLS, which adapts to each prompt."""
    cid = "zfb.random_covariance"
    c = s.cells[(s.cells["token_kind"] == "random_covariance") & (s.cells["M"] >= s.cells["d"])]
    if c.empty:
        return [s.row(cid, NOT_TESTABLE, prediction="slope → ⅔ (own-covariance query), ⅓ (independent query)",
                      reason="trained on a fixed covariance: Thm 4.5 is about training on random covariances")]
    rows = []
    for kind, what, lim_slope, lim_err in (("random_covariance", OWN, 2 / 3, 1 / 3),
                                           ("random_covariance_indep_query", INDEP, 1 / 3, 5 / 9)):
        r = c[(c["shift"] == kind) & (c["c"] == 1.0)]
        if r.empty:
            rows.append(s.row(cid, NOT_TESTABLE, group=what, prediction=f"slope → {lim_slope:.3g}",
                              reason=f"no '{kind}' shift at c = 1 in the evaluate section"))
            continue
        rows += _slope_rows(s, cid, r, f"slope of ŷ on y → {lim_slope:.3g} as N → ∞ ({what})", join(what, "slope"),
                            choices)
        big = r[r["M"] == r["M"].max()]
        label_power = big["d"].astype(float) * 1.0        # E[y²] = d·c on Exp(c) covariances, c = 1 here
        rel = lambda g, lp=label_power: (                # noqa: E731
            f"; relative error E[(ŷ−y)²]/E[y²] at M={int(big['M'].iloc[0])}: measured {fmt(float((g['mse'] / lp).mean()))}, "
            f"finite-(N, M) theory {fmt(float((g['theory_mse'] / lp).mean()))}, N → ∞ at this M "
            f"{fmt(float((g['limit_mse'] / lp).mean()))} (→ {lim_err:.3g} as M → ∞)")
        rows += _ratio_rows(s, cid, big, "mse", f"relative error at the largest M → {lim_err:.3g} as M, N → ∞ ({what}), "
                            "not 0 as for OLS", join(what, "relative error"), choices, scale_text=rel, to_zero=True)
    return rows


def longer_prompts(s: Setting, choices: Choices = DEFAULT) -> list[dict]:
    """Trained LSA, in distribution: at every test length M > N the error below its value at M = N
    (the theory's error falls in M for any matrix: its 1/M term); the worst M's ratio MSE(M)/MSE(N)
    (means over runs) with a 95% interval simultaneous over the lengths, from the test prompts'
    standard errors, against [0, 1]."""
    cid = "zfb.longer_prompts"
    pred = "MSE(M) < MSE(N) at every M > N (the 1/M term keeps falling)"
    m = s.cells[s.cells["shift"] == "none"]
    N = int(s.runs["N"].iloc[0]) if len(s.runs) else 0
    long, at_n = m[m["M"] > m["N"]], m[m["M"] == m["N"]]
    if m.empty or long.empty or at_n.empty:
        why = "no in-distribution test of a trained LSA" if m.empty else \
            "no test length beyond the training length N" if long.empty else "no test length equal to the training N"
        return [s.row(cid, NOT_TESTABLE, prediction=pred, reason=why)]
    a, b = _agg(long, ["mse"], by=("M",)), _agg(at_n, ["mse"])
    r, lo, hi, _ = _ratio_ci(a["mse"], a["mse_se"], float(b["mse"].iloc[0]), float(b["mse_se"].iloc[0]), k=len(a))
    i = int(np.argmax(r))
    band = Band(-math.inf, 1.0, floor=0.0, source="the order the theory states")
    st = s.over_seeds(cid, "", float(r[i]), float(lo.max()), float(hi.max()), ratio=True)
    v, why = judge(st.lo, st.hi, band, choices, "the largest MSE(M)/MSE(N)", no_interval=st.few)
    if v == FAILS:
        why += ": the error rises past the training length"
    meas = (f"largest MSE(M)/MSE(N={N}) {fmt(float(r[i]))} [{fmt(float(lo.max()))}, {fmt(float(hi.max()))}] at M="
            f"{int(a['M'].iloc[i])}; all M > N: {', '.join(f'{int(M)}: {fmt(float(x))}' for M, x in zip(a['M'], r))} "
            f"(means over {int(a['runs'].max())} runs; 95% interval simultaneous over {len(a)} lengths, delta method "
            "on the test prompts' standard errors)")
    return [s.row(cid, v, prediction=pred, measurement=meas + st.text, reason=why, value=st.value, ci_lo=st.lo,
                  ci_hi=st.hi)]
