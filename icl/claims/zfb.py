"""The claims of Zhang, Frei & Bartlett (ZFB), one function per claim id, on the rules of
icl.claims.judge.

`verdicts(tabs)` groups each trained model's runs by every swept setting other than the seed
(judge.settings: N, and for the GPT model its positions, layers, ...), leaves out the runs that
diverged or ended above their initial loss (judge.exclude) and those that have not learned
(icl.claims.learned: in distribution at M = N, less than half the gap closed from uniform
attention's error to the best reachable, the LSA's optimum for an LSA, 0 otherwise), both counted
in each row's measurement; a setting where no run learned reads not testable for every claim,
with the numbers. It calls every claim on each setting (`Setting`); judge.robust re-judges each row with its band
half as wide and half again as wide and lists in `fragile` the choices that flip it.

Conventions that hold throughout:
- intervals: 95%, from the standard errors that evaluation measured on its test prompts
  (shift.parquet's mse_se, slope_se: 1000 prompts per cell by default), combined over a
  setting's runs and test lengths (ratios by the delta method), or from a bootstrap over the
  logged epochs of the last fifth of training (zfb.optimum); the worst of several test lengths
  (zfb.longer_prompts) has intervals simultaneous over them (Bonferroni);
- test lengths M ≥ d only: below d the errors' tails are too heavy for a standard error from the
  test prompts to hold;
- bands, each from the theory or from measurements: the exact finite-(N, M) prediction ± half its
  distance to the same quantity at the optimum's N → ∞ limit (Λ⁻¹, or I/3 for Exp(1)
  covariances: the slides' large-N reading), for zfb.optimum on the exact excess population risk
  of the learned matrix in units of that same gap; halfway to a measured reference (OLS, on the same prompts); or the order the
  claim states (below the LSA, above the error at M = N: no tolerance);
- errors are not pooled by their signed deviations (a wrong matrix raises the error at some M and
  lowers it at others): their statistic is the root-mean-square deviation over the test cells in
  units of the N → ∞ gap, the test noise taken out; slopes, which do not depend on M, pool;
- error and slope claims are judged twice, against the theory at each run's *learned* matrix
  (group "formula": is the closed form right?) and at the optimum (group "optimisation": did
  training reach it?). An optimisation row whose interval lies outside its band does not hold
  when the runs have levelled off, and is inconclusive while a run is still approaching its
  optimum (STILL_FALLING, the same test zfb.optimum uses).
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from statistics import NormalDist

import numpy as np
import pandas as pd

from icl import shifts, stats
from icl.theory import lsa as lsa_theory
from icl.claims import CLAIMS, FAILS, NOT_TESTABLE, UNSURE, fmt, verdict
from icl.claims.judge import DEFAULT, Band, Choices, by_setting, exclude, join, judge, robust, settings
from icl.claims.learned import below, gate, reached
from icl.models import MODELS, kinds

# What a claim reads is asked of the model kinds' traits (icl.models.Model), never their names:
LINEAR_ATTENTION = kinds("linear_attention")   # ZFB's LSA, which its closed forms describe
WITH_POSITIONS = kinds("has_positions")        # ZFB §5's GPT-2 (Garg et al.): positions, layers, heads
# zfb.beyond_lsa's models, and the report's "other trained models": ŷ not linear in the context
# labels (for those that are, softmax_q and the LSA itself, the LSA's limit binds)
BEYOND_LINEAR = set(MODELS) - kinds("linear_in_labels")
TRAINED_LSA = "lsa"   # shift.parquet's predictor of trained LSA rows (healthy_shift), beside 'lsa_limit', 'ols'
HALF = 0.5            # a band reaches halfway from the finite-N value to its N → ∞ reading
LEARNED = 0.5         # learned in context: in distribution at M = N, at most this share of uniform attention's error
LAST = 0.8            # the last fifth of training: logged epochs ≥ LAST × the last one
STILL_FALLING = 0.1   # the last fifth of training still brought this share of the whole decline
LEVEL = 0.95          # every interval's confidence

OWN, INDEP = "query from the prompt's covariance", "query independent of it"


def _z(k: int = 1) -> float:
    """The normal quantile of a two-sided LEVEL interval, simultaneous over k (Bonferroni)."""
    return NormalDist().inv_cdf(1 - (1 - LEVEL) / 2 / max(k, 1))


# ----------------------------------------------------------------------------- inputs

def healthy_shift(tabs) -> pd.DataFrame:
    """shift.parquet without diverged runs, trained LSA rows relabelled 'lsa' (whatever the
    model's name), so figures and verdicts compare healthy runs only."""
    sh = tabs["shift"]
    gone = set(tabs["summary"].loc[tabs["summary"]["diverged"], "run_id"])
    sh = sh[~sh["run_id"].isin(gone)].copy()
    sh.loc[sh["model_kind"].isin(LINEAR_ATTENTION), "predictor"] = TRAINED_LSA
    return sh


RUN_COLS = ["model", "seed", "d", "token_kind", "data_id", "positional", "optimizer"]


def _spec(r) -> dict:
    """The part of a run's spec the LSA theory reads, from its runs.parquet row."""
    tok = {"kind": r["token_kind"], "d": int(r["d"])}
    cov = r.get("covariance")
    if isinstance(cov, str):
        tok["covariance"] = json.loads(cov) if cov[:1] in "[{" else cov
    if r.get("scale") is not None and pd.notna(r.get("scale")):
        tok["scale"] = float(r["scale"])
    return {"tokens": tok, "task": {"kind": r["task_kind"]}, "prompts": {"N": int(r["N"])}}


def with_limits(cells: pd.DataFrame, runs: pd.DataFrame) -> pd.DataFrame:
    """limit_mse, limit_slope: on each trained LSA cell, the theory at the optimum's N → ∞ limit
    (Λ⁻¹ for a fixed covariance, I/(3·scale) for Exp covariances: the slides' large-N reading),
    exact at the cell's M and shift; NaN where there is no closed form. Each band reaches halfway
    from the finite-N prediction to this value. Computed once per (training law, shift, c, M)."""
    from icl.theory.table import lsa_optimum, lsa_target_limit
    out = cells.assign(limit_mse=np.nan, limit_slope=np.nan)
    if not cells["model_kind"].isin(LINEAR_ATTENTION).any() or "task_kind" not in runs:
        return out
    keys = ["token_kind", "d", "covariance", "scale", "task_kind", "N"]
    lsa_runs = runs[runs["model_kind"].isin(LINEAR_ATTENTION)].drop_duplicates("run_id")
    records = lsa_runs.to_dict("records")
    law_key = ["|".join(str(r.get(k)) for k in keys) for r in records]
    laws = {}
    for k, row in zip(law_key, records):
        if k in laws:
            continue
        spec = _spec(row)
        B_inf = lsa_target_limit(spec) if spec["tokens"]["kind"] in ("gaussian", "random_covariance") else None
        if B_inf is None:
            laws[k] = None
            continue
        _, tk, par = lsa_optimum(spec)
        laws[k] = (B_inf, ("fixed", par, None) if tk == "gaussian" else ("random", par, None))
    c = cells[["run_id", "shift", "c", "M"]].assign(law=cells["run_id"].map(dict(zip(lsa_runs["run_id"], law_key))))
    c = c.assign(c1=c["c"].fillna(1.0).astype(float))
    combos = c.dropna(subset=["law"]).drop_duplicates(["law", "shift", "c1", "M"])
    vals = {}
    for k, kind, c1, M in combos[["law", "shift", "c1", "M"]].itertuples(index=False):
        if laws.get(k) is None:
            continue
        B_inf, train = laws[k]
        d = int(B_inf.shape[0])
        vals[(k, kind, c1, int(M))] = shifts.theory(B_inf, shifts.shifted_law(kind, train, c1, d), d, int(M))
    got = [vals.get((k, kind, c1, int(M)), (np.nan, np.nan)) if isinstance(k, str) else (np.nan, np.nan)
           for k, kind, c1, M in c[["law", "shift", "c1", "M"]].itertuples(index=False)]
    arr = np.array(got, float).reshape(-1, 2)
    return out.assign(limit_mse=arr[:, 0], limit_slope=arr[:, 1])


# ----------------------------------------------------------------------------- learned matrices

@dataclass
class Matrices:
    """One LSA run's logged effective matrices B_t (w22·W11ᵀ), its optimum B* and the optimum's
    N → ∞ limit B∞ (theory.parquet's target, target_limit)."""

    epochs: np.ndarray
    B: np.ndarray            # (epochs, d, d)
    opt: np.ndarray
    limit: np.ndarray        # NaN where theory.parquet has none
    risk: object = None      # stack of matrices -> exact population risk at M = N (icl.theory.lsa); None without

    def excess(self, Bs) -> np.ndarray:
        """(R(B) − R(B*)) / (R(B∞) − R(B*)) of each matrix (icl.theory.lsa.excess_ratio): the excess
        population risk over the optimum in units of the gap to its N → ∞ limit; NaN without a risk
        or a limit."""
        Bs = np.asarray(Bs, float)
        if self.risk is None or not np.isfinite(self.limit).all():
            return np.full(Bs.shape[:-2], np.nan)
        return lsa_theory.excess_ratio(Bs, self.opt, self.limit, self.risk)

    @property
    def scale(self) -> float:
        return float(np.linalg.norm(self.opt))

    def dist(self) -> np.ndarray:
        """‖B_t − B*‖/‖B*‖ at every logged epoch."""
        return np.linalg.norm(self.B - self.opt, axis=(1, 2)) / self.scale

    def last(self) -> np.ndarray:
        """The matrices of the last fifth of training."""
        return self.B[self.epochs >= LAST * self.epochs[-1]]

    def falling(self) -> bool:
        """Still approaching B*: the last fifth of training brought a fair share of the whole
        decline of the distance (a run at its noise floor does not beat its best distance of
        the first four fifths)."""
        ep, d = self.epochs, self.dist()
        before = d[ep <= LAST * ep[-1]].min() if len(d) > 1 else np.nan
        return bool(len(d) < 2 or (d[0] > d[-1] and before - d[-1] > STILL_FALLING * (d[0] - d[-1])))


def run_matrices(runs: pd.DataFrame, matrices: pd.DataFrame, theory: pd.DataFrame) -> dict[str, Matrices]:
    """Matrices of every LSA run with a closed-form optimum (linear task, gaussian or
    random-covariance tokens), from matrices.parquet ('effective') and theory.parquet."""
    lsa = runs.loc[runs["model_kind"].isin(LINEAR_ATTENTION), "run_id"]
    th = theory.set_index("run_id")
    laws = {r["run_id"]: _risk_at_N(r)
            for r in runs[runs["model_kind"].isin(LINEAR_ATTENTION)].drop_duplicates("run_id").to_dict("records")
            if {"token_kind", "d", "N"} <= set(r)}
    eff = matrices[(matrices["name"] == "effective") & matrices["run_id"].isin(lsa)]
    out = {}
    for rid, g in eff.groupby("run_id"):
        T = th.loc[rid, "target"] if rid in th.index else None
        if not isinstance(T, (list, np.ndarray)) or len(T) == 0:          # no closed form for this run
            continue
        Tinf = th.loc[rid, "target_limit"] if "target_limit" in th.columns else None
        g = g.sort_values(["epoch", "i", "j"])
        d = int(g["i"].max()) + 1
        T = np.asarray(T, float).reshape(d, d)
        Tinf = np.asarray(Tinf, float).reshape(d, d) if isinstance(Tinf, (list, np.ndarray)) and len(Tinf) \
            else np.full((d, d), np.nan)
        out[rid] = Matrices(np.unique(g["epoch"].to_numpy()), g["value"].to_numpy(float).reshape(-1, d, d), T, Tinf,
                            laws.get(rid))
    return out


def _risk_at_N(row) -> object:
    """The exact in-distribution population risk at the run's training length N, as a function of a
    stack of matrices (icl.theory.lsa: fixed or random covariances); None where there is none."""
    from icl.theory.table import lsa_optimum
    try:
        spec = _spec(row)
        _, kind, par = lsa_optimum(spec)
    except (KeyError, TypeError, ValueError):
        return None
    N, d = int(row["N"]), int(row["d"])
    if kind == "gaussian":
        return lambda Bs, lam=par: lsa_theory.risk_many(Bs, lam, N)
    if kind == "random_covariance":
        return lambda Bs, sc=par: lsa_theory.random_cov_risk_many(Bs, d, N, scale=sc)
    return None


def optimum_distances(runs: pd.DataFrame, matrices: pd.DataFrame, theory: pd.DataFrame) -> pd.DataFrame:
    """Per LSA run and logged epoch: the learned matrix's distance to the optimum (`dist_opt`),
    to its N → ∞ limit (`dist_limit`), and the two targets' distance (`sep`), relative to ‖B*‖."""
    cols = ["run_id", "epoch", "dist_opt", "dist_limit", "sep"]
    out = [pd.DataFrame({"run_id": rid, "epoch": m.epochs, "dist_opt": m.dist(),
                         "dist_limit": np.linalg.norm(m.B - m.limit, axis=(1, 2)) / m.scale,
                         "sep": np.linalg.norm(m.opt - m.limit) / m.scale})
           for rid, m in run_matrices(runs, matrices, theory).items()]
    return pd.concat(out, ignore_index=True)[cols] if out else pd.DataFrame(columns=cols)


def _names(token_kinds) -> tuple[str, str]:
    """How the optimum and its limit are written for this training law."""
    if set(token_kinds) == {"random_covariance"}:
        return "E[Λ²]E[ΓΛ²]⁻¹", "I/(3·scale)"
    return "Γ⁻¹", "Λ⁻¹"


# ----------------------------------------------------------------------------- one setting

@dataclass
class Setting:
    """One setting of one trained model: its runs (those a claim may read), the sentence counting
    the runs left out, its rows of shift.parquet (`cells`, with the runs' model, seed, d, token
    kind, data_id and positions), every healthy trained and baseline row of the experiment
    (`pool`, for claims that compare models), and its LSA runs' learned matrices."""

    model: str
    kind: str
    label: str
    runs: pd.DataFrame
    left_out: str = ""
    cells: pd.DataFrame = field(default_factory=pd.DataFrame)
    pool: pd.DataFrame = field(default_factory=pd.DataFrame)
    mats: dict = field(default_factory=dict)
    unlearned: str = ""      # where no run learned: why (icl.claims.learned), and every claim reads not testable

    def row(self, cid: str, v: str, *, group: str = "", measurement: str = "", **kw) -> dict:
        """A verdict row of this setting: its label joined to the claim's own group, the runs
        left out counted in the measurement."""
        meas = "; ".join(p for p in (measurement, self.left_out) if p)
        return verdict(cid, v, model=self.model, group=join(self.label, group), measurement=meas or "—", **kw)

    def falling(self, run_ids) -> list[str]:
        """The runs among `run_ids` still approaching their optimum."""
        return [r for r in run_ids if r in self.mats and self.mats[r].falling()]

    def domain(self) -> str:
        opt = set(self.runs["optimizer"]) if "optimizer" in self.runs else set()
        return "" if opt <= {"gd"} else \
            "trained with Adam on sampled prompts; the theorems are about gradient flow on the population loss"


# ----------------------------------------------------------------------------- statistics

def _agg(c: pd.DataFrame, cols: list[str], by=("shift", "c", "M")) -> pd.DataFrame:
    """Per test cell: the mean over the setting's runs of `cols`, and of each `<x>_se` column the
    standard error of that mean (runs are independent: their test prompts differ)."""
    g = c.groupby(list(by), dropna=False, sort=True)
    out = g[cols].mean()
    for col in cols:
        if f"{col}_se" in c:
            out[f"{col}_se"] = np.sqrt((c[f"{col}_se"] ** 2).groupby([c[b] for b in by], dropna=False).sum()) / g.size()
    out["runs"] = g.size()
    return out.reset_index()


def _pooled(ratio: np.ndarray, se: np.ndarray) -> tuple[float, float, float]:
    """Inverse-variance weighted mean of per-cell ratios and its LEVEL interval."""
    ok = np.isfinite(ratio) & np.isfinite(se) & (se > 0)
    if not ok.any():
        return math.nan, math.nan, math.nan
    w = 1 / se[ok] ** 2
    m = float(np.sum(w * ratio[ok]) / w.sum())
    h = _z() / math.sqrt(w.sum())
    return m, m - h, m + h


def _ratio_ci(num, num_se, den, den_se, k: int = 1):
    """num/den with a LEVEL interval (simultaneous over k) by the delta method on the log."""
    r = np.asarray(num, float) / np.asarray(den, float)
    s = np.sqrt((np.asarray(num_se, float) / num) ** 2 + (np.asarray(den_se, float) / den) ** 2)
    z = _z(k)
    return r, r * np.exp(-z * s), r * np.exp(z * s), s


def _err_sentence(v: str, why: str, s: Setting, runs, opt_name: str) -> tuple[str, str]:
    """An optimisation row outside its band does not hold when its runs have levelled off; while
    one is still approaching the optimum it is inconclusive."""
    if v != FAILS:
        return v, why
    still = s.falling(runs)
    if still:
        return UNSURE, (f"{why}; but {len(still)} of {len(set(runs))} runs are still approaching {opt_name} "
                        f"(the last fifth of training still brought ≥ {STILL_FALLING:.0%} of the distance's decline): "
                        "under-trained, train longer")
    return FAILS, f"{why}: the runs have levelled off away from the optimum"


# ----------------------------------------------------------------------------- the two checks

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
        v, why = judge(lo, hi, band, choices, f"measured/predicted {what}")
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
        rows.append(s.row(cid, v, group=join(group, check), prediction=text, measurement=meas, reason=why, value=r,
                          ci_lo=lo, ci_hi=hi, domain=s.domain() if check == "optimisation" else ""))
    return rows


def _rms(p: np.ndarray, se: np.ndarray, w: np.ndarray) -> tuple[float, float, float]:
    """The weighted root-mean-square of the true per-cell deviations p_i from their estimates and
    standard errors: T² = Σw(p̂² − se²)/Σw (E[se²] is the variance of p̂, so the test noise comes out
    unbiased), with a 95% interval from the normal approximation Var(p̂²) ≈ 4p̂²se² + 2se⁴, clipped
    at 0. The weights come from the theory, not from the measured se: weighting by 1/se² would
    favour the cells whose se came out small by chance, and bias T² up."""
    ok = np.isfinite(p) & np.isfinite(se) & (se > 0) & np.isfinite(w)
    if not ok.any():
        return math.nan, math.nan, math.nan
    p, se, w = p[ok], se[ok], w[ok] / w[ok].sum()
    t2 = float(np.sum(w * (p ** 2 - se ** 2)))
    sd = float(np.sqrt(np.sum(w ** 2 * (4 * p ** 2 * se ** 2 + 2 * se ** 4))))
    root = lambda x: math.sqrt(max(x, 0.0))                   # noqa: E731
    return root(t2), root(t2 - _z() * sd), root(t2 + _z() * sd)


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
        val, lo, hi = _rms(p, se, (gap / a["exact"].to_numpy(float)) ** 2)
        v, why = judge(lo, hi, band, choices, "the RMS deviation (in units of the N → ∞ gap)")
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
        rows.append(s.row(cid, v, group=join(group, check), prediction=text, measurement=meas, reason=why, value=val,
                          ci_lo=lo, ci_hi=hi, domain=s.domain() if check == "optimisation" else ""))
    return rows


def _lsa_cells(s: Setting, shift, gaussian_only=False) -> pd.DataFrame:
    c = s.cells
    c = c[c["shift"].isin([shift] if isinstance(shift, str) else shift) & (c["M"] >= c["d"])]
    return c[c["token_kind"] == "gaussian"] if gaussian_only else c


# ----------------------------------------------------------------------------- zfb.optimum

def _boot_mean(B: np.ndarray, f) -> tuple[float, float]:
    """95% percentile interval of f(mean of the matrices B) over icl.stats' resamples of them (the
    bootstrap of judge.boot, vectorised); none with fewer than 3 matrices."""
    if len(B) < 3:
        return math.nan, math.nan
    vals = f(B[stats.resamples(len(B))].mean(1))
    vals = vals[np.isfinite(vals)]
    if not len(vals):
        return math.nan, math.nan
    lo, hi = np.percentile(vals, [2.5, 97.5])
    return float(lo), float(hi)


def optimum(s: Setting, choices: Choices = DEFAULT) -> list[dict]:
    """Per LSA setting, two rows. At the optimum: every run's exact excess population risk at its
    mean matrix B̄ over the last fifth of training, (R(B̄) − R(B*))/(R(B∞) − R(B*)) at the training
    length (icl.theory.lsa, fixed or random covariances; B* = Γ⁻¹ or E[Λ²]E[ΓΛ²]⁻¹, B∞ its N → ∞ limit
    Λ⁻¹ or I/3), 95% interval by a bootstrap over those logged epochs, the worst run's within
    [0, ½], the band of zfb.thm42: nearer the optimum's risk than halfway to its limit's. Nearer B*
    than B∞: every run's ‖B̄ − B*‖/‖B̄ − B∞‖ below 1. Outside the band does not hold once the runs
    have levelled off, and is inconclusive while one still approaches B* (the last fifth of training
    still brought ≥ 10% of the distance's decline)."""
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
    text = (f"w22·W11ᵀ → {opt}: every run's excess risk (R(B̄) − R({opt}))/(R({lim}) − R({opt})) at M = N in "
            f"{band.text(choices.band)}")
    n_last = min(len(m.last()) for m in mats)
    if not np.isfinite(ex).all():
        rows.append(s.row(cid, UNSURE, group="at the optimum", prediction=text, domain=s.domain(),
                          measurement=f"‖B̄ − {opt}‖/‖{opt}‖ = {', '.join(fmt(x) for x in dG)}",
                          reason=f"no exact risk for these runs: theory.parquet has no N → ∞ limit ({lim}) or runs.parquet "
                                 "no training law (written by an older version): rerun the theory step"))
    else:
        i = int(np.argmax(ex))
        lo, hi = float(np.max(ex_lo)), float(np.max(ex_hi))          # NaN where a run has no interval
        v, why = judge(lo, hi, band, choices, "the worst run's excess risk")
        if v == FAILS and still:
            v, why = UNSURE, (f"training has not converged: {len(still)} of {len(runs)} runs were still approaching {opt} in "
                              f"the last fifth of training ({why}); train longer")
        elif v == FAILS:
            why = (f"training levelled off with {fmt(ex[i])} of the risk gap from {opt} to {lim} left: further than "
                   f"halfway to the N → ∞ answer ({why})")
        m = mats[i]
        r_opt, r_lim = float(m.risk(m.opt)), float(m.risk(m.limit))
        meas = (f"worst run {fmt(ex[i])} [{fmt(lo)}, {fmt(hi)}] of the gap: R(B̄) − R({opt}) = "
                f"{fmt(ex[i] * (r_lim - r_opt))} against R({lim}) − R({opt}) = {fmt(r_lim - r_opt)} (R({opt}) = "
                f"{fmt(r_opt)}; exact population risk at M = N; B̄: mean matrix over the last fifth of training; 95% "
                f"interval: bootstrap over its ≥ {n_last} logged epochs there); all runs {', '.join(fmt(x) for x in ex)}; "
                f"‖B̄ − {opt}‖/‖{opt}‖ = {', '.join(fmt(x) for x in dG)}")
        rows.append(s.row(cid, v, group="at the optimum", prediction=text, measurement=meas, value=float(ex[i]),
                          ci_lo=lo, ci_hi=hi, reason=why, domain=s.domain()))
    j = int(np.nanargmax(rho)) if np.isfinite(rho).any() else 0
    band2 = Band(-math.inf, 1.0, floor=0.0, source="the order the claim states")
    text2 = f"every run nearer {opt} than its N → ∞ limit {lim}: ‖B̄ − {opt}‖/‖B̄ − {lim}‖ < 1"
    lo2, hi2 = float(np.max(rho_lo)), float(np.max(rho_hi))
    meas2 = (f"worst run's ratio {fmt(rho[j])} [{fmt(lo2)}, {fmt(hi2)}] (95% interval: bootstrap over the logged epochs "
             f"of the last fifth of training); {opt} and {lim} differ by {fmt(sep)} (relative)")
    if not np.isfinite(rho).all():
        rows.append(s.row(cid, UNSURE, group=f"nearer {opt} than {lim}", prediction=text2, measurement=meas2,
                          reason=f"theory.parquet has no N → ∞ limit ({lim}) for these runs (written by an older "
                                 "version): rerun the theory step", domain=s.domain()))
    else:
        v, why = judge(lo2, hi2, band2, choices, "the worst run's distance ratio")
        if v == FAILS and still:
            v, why = UNSURE, f"{why}; but {len(still)} of {len(runs)} runs are still approaching {opt}: train longer"
        elif v == UNSURE and sep < 2 * np.median(dG):
            why += (f"; {opt} and {lim} differ by only {fmt(sep)}, about the runs' distance from {opt}: at this N the "
                    "runs cannot tell them apart")
        rows.append(s.row(cid, v, group=f"nearer {opt} than {lim}", prediction=text2, measurement=meas2, value=rho[j],
                          ci_lo=lo2, ci_hi=hi2, reason=why, domain=s.domain()))
    return rows


# ----------------------------------------------------------------------------- error and slope claims

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
    c = _lsa_cells(s, "scale")
    c = c[c["c"] != 1.0]
    if c.empty:
        return [s.row("zfb.scaling", NOT_TESTABLE, prediction="slope c²·tr(Γ⁻¹Λ²)/trΛ, error at c·x",
                      reason="no scale shift with c ≠ 1 evaluated on a trained LSA at M ≥ d")]
    return (_slope_rows(s, "zfb.scaling", c, "slope of ŷ on y = c²·tr(BΛ²)/trΛ", "slope", choices)
            + _error_rows(s, "zfb.scaling", c, "exact error at c·x (→ c²(c²−1)²·trΛ as M, N → ∞)", "error", choices))


def query_shift(s: Setting, choices: Choices = DEFAULT) -> list[dict]:
    """Trained LSA, the query alone scaled x_q → c·x_q (c ≠ 1), M ≥ d, at the learned matrix
    (formula) and at Γ⁻¹ (optimisation). Slope of ŷ on y_q: measured/predicted tr(BΛ²)/trΛ,
    inverse-variance mean over the cells with a 95% interval from the test prompts' standard
    errors, within 1 ± half the relative distance to the N → ∞ value 1 (eq. 4.8: query shifts are
    tolerated). Error: the root-mean-square over M of (measured − predicted)/(error at Λ⁻¹ − error
    at Γ⁻¹), as zfb.thm42, within [0, ½]."""
    c = _lsa_cells(s, "query_only", gaussian_only=True)
    c = c[c["c"] != 1.0]
    if c.empty:
        return [s.row("zfb.query_shift", NOT_TESTABLE, prediction="slope tr(Γ⁻¹Λ²)/trΛ → 1 under x_q → c·x_q",
                      reason="no query_only shift with c ≠ 1 evaluated on an LSA trained on a fixed covariance at M ≥ d")]
    return (_slope_rows(s, "zfb.query_shift", c, "slope of ŷ on y_q = tr(BΛ²)/trΛ under x_q → c·x_q", "slope", choices)
            + _error_rows(s, "zfb.query_shift", c, "exact error under x_q → c·x_q", "error", choices))


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
    v, why = judge(float(lo.max()), float(hi.max()), band, choices, "the largest MSE(M)/MSE(N)")
    if v == FAILS:
        why += ": the error rises past the training length"
    meas = (f"largest MSE(M)/MSE(N={N}) {fmt(float(r[i]))} [{fmt(float(lo.max()))}, {fmt(float(hi.max()))}] at M="
            f"{int(a['M'].iloc[i])}; all M > N: {', '.join(f'{int(M)}: {fmt(float(x))}' for M, x in zip(a['M'], r))} "
            f"(means over {int(a['runs'].max())} runs; 95% interval simultaneous over {len(a)} lengths, delta method "
            "on the test prompts' standard errors)")
    return [s.row(cid, v, prediction=pred, measurement=meas, reason=why, value=float(r[i]), ci_lo=float(lo.max()),
                  ci_hi=float(hi.max()))]


# ----------------------------------------------------------------------------- models beyond the LSA

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
    of the same training data and test prompts (paired by N and seed); the geometric mean over M of
    the ratio of mean errors, 95% interval from the test prompts' standard errors, against [0, 1]."""
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
    v, why = judge(lo, hi, band, choices, "the error ratio")
    if v == FAILS:
        why += f": the {s.kind} does not beat the LSA's limit"
    meas = (f"{s.kind}/LSA error: geometric mean {fmt(g)} [{fmt(lo)}, {fmt(hi)}] over M = "
            f"{', '.join(f'{int(M)}: {fmt(float(x))}' for M, x in zip(per['M'], per['ratio']))} "
            f"({int(per['n'].max())} (N, seed) pairs; 95% interval from the test prompts' standard errors)")
    return [s.row(cid, v, prediction=pred, measurement=meas, reason=why, value=g, ci_lo=lo, ci_hi=hi)]


def gpt_in_distribution(s: Setting, choices: Choices = DEFAULT) -> list[dict]:
    """GPT trained on a fixed covariance, in distribution, d ≤ M ≤ N, paired with the trained LSA
    of the same data and with OLS on the same prompts: its error below the LSA's (geometric mean
    over M of the ratio, against [0, 1]); and OLS-level: (GPT − OLS)/(LSA − OLS), inverse-variance
    mean over M, within ±½ (nearer OLS than the trained LSA: the midpoint between the two
    references, measured on the same prompts). 95% intervals from the test prompts' standard errors."""
    cid = "zfb.gpt_in_distribution"
    pred = "GPT matches OLS in distribution (ZFB §5, Garg et al.), below the LSA"
    c = s.cells[s.cells["token_kind"] == "gaussian"]
    if c.empty:
        return [s.row(cid, NOT_TESTABLE, prediction=pred,
                      reason="not trained on a fixed covariance (random covariances: zfb.beyond_lsa)")]
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
    v, why = judge(lo, hi, band, choices, "the GPT/LSA error ratio")
    rows.append(s.row(cid, v, group="below the LSA", prediction="GPT's error below the trained LSA's (d ≤ M ≤ N)",
                      measurement=(f"GPT/LSA error: geometric mean {fmt(g)} [{fmt(lo)}, {fmt(hi)}] over M = "
                                   f"{', '.join(f'{int(M)}: {fmt(float(x))}' for M, x in zip(per['M'], per['ratio']))} "
                                   f"({int(per['n'].max())} paired runs; 95% interval from the test prompts' standard errors)"),
                      reason=why, value=g, ci_lo=lo, ci_hi=hi))
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
    v, why = judge(lo, hi, band2, choices, "(GPT − OLS)/(LSA − OLS)")
    if v == FAILS:
        why += ": GPT's error is nearer the LSA's than OLS's" if m > 0 else ": GPT is below OLS by more than the band"
    rows.append(s.row(cid, v, group="OLS-level", prediction=pred2, value=m, ci_lo=lo, ci_hi=hi, reason=why,
                      measurement=(f"(GPT − OLS)/(LSA − OLS) {fmt(m)} [{fmt(lo)}, {fmt(hi)}] (inverse-variance mean over "
                                   f"M = {', '.join(str(int(x)) for x in per['M'])}; OLS error {fmt(float(per['o'].max()))} "
                                   "at most; 95% interval from the test prompts' standard errors)")))
    return rows


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


def _positional(s: Setting) -> str:
    p = s.runs["positional"] if "positional" in s.runs else pd.Series(dtype=object)
    return str(p.iloc[0]) if len(p) and p.notna().all() and p.nunique() == 1 else ""


def length_spike(s: Setting, choices: Choices = DEFAULT) -> list[dict]:
    """GPT with learned positions, in distribution: the error at the longest test length M* in
    (N, 2N] above its value at M = N (ratio of means over runs > 1); and that spike larger than
    with positional: none on the same training data (ratio of the two spikes > 1, paired by N,
    seed and training law). 95% intervals by the delta method on the test prompts' standard errors."""
    cid = "zfb.length_spike"
    pred = "error at M > N above its value at M = N with learned positions (random beyond N), not (or less) without"
    pos = _positional(s)
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
    v, why = judge(lo, hi, band, choices, "MSE(M*)/MSE(N)")
    rows = [s.row(cid, v, group="learned positions", prediction=f"MSE({Ms})/MSE({N}) > 1", value=r, ci_lo=lo, ci_hi=hi,
                  reason=why + (": no spike past the training length" if v == FAILS else ""),
                  measurement=(f"MSE(M={Ms})/MSE(N={N}) {fmt(r)} [{fmt(lo)}, {fmt(hi)}] (means over "
                               f"{c['run_id'].nunique()} runs; 95% interval: delta method on the test prompts' standard errors)"))]
    other = s.pool[(s.pool["model_kind"].isin(WITH_POSITIONS)) & (s.pool.get("positional", pd.Series(index=s.pool.index)) == "none")
                   & (s.pool["shift"] == "none") & s.pool["data_id"].isin(c["data_id"])]
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
    v, why = judge(lo, hi, band, choices, "the ratio of the two spikes")
    rows.append(s.row(cid, v, group=group, prediction=pred2, value=q, ci_lo=lo, ci_hi=hi,
                      reason=why + (": removing the positions does not shrink the spike" if v == FAILS else ""),
                      measurement=(f"spike with learned positions {fmt(sp_l[0])}, without {fmt(sp_n[0])} "
                                   f"(model {', '.join(sorted(other['model'].unique()))}); ratio {fmt(q)} [{fmt(lo)}, {fmt(hi)}] "
                                   f"over {mine['data_id'].nunique()} shared training sets; 95% interval: delta method "
                                   "on the test prompts' standard errors")))
    return rows


def spike_vs_variance(s: Setting, choices: Choices = DEFAULT) -> list[dict]:
    """GPT with learned positions, under each shift with a test variance c (random_covariance, scale):
    the spike MSE(M*)/MSE(N) at c > 1 smaller than at c = 1 (M* the longest test length in
    (N, 2N]); the ratio of the two spikes against [0, 1], 95% interval by the delta method on the
    test prompts' standard errors."""
    cid = "zfb.spike_vs_variance"
    pred = "the spike at M > N smaller on prompts with higher variance (c = 4, 9 vs 1)"
    if _positional(s) != "learned":
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
            v, why = judge(lo, hi, band, choices, "the ratio of the spikes")
            rows.append(s.row(cid, v, group=f"{kind}, c={cv:g} vs 1", prediction=f"spike at c={cv:g} below the spike at c=1",
                              value=q, ci_lo=lo, ci_hi=hi,
                              reason=why + (": the spike does not shrink at higher variance" if v == FAILS else ""),
                              measurement=(f"MSE({sp[2]})/MSE({N}): {fmt(sp[0])} at c={cv:g}, {fmt(base[0])} at c=1; ratio "
                                           f"{fmt(q)} [{fmt(lo)}, {fmt(hi)}] (95% interval: delta method on the test "
                                           "prompts' standard errors)")))
    if not rows:
        rows.append(s.row(cid, NOT_TESTABLE, prediction=pred,
                          reason="no random_covariance or scale shift at c = 1 and c > 1 with test lengths M = N and M > N"))
    return rows


# ----------------------------------------------------------------------------- the whole table

# claim, the model kinds it reads (by their traits), and why it is not testable where the experiment has none
CLAIM_KINDS = [
    (optimum, LINEAR_ATTENTION, "no trained LSA"),
    (thm42, LINEAR_ATTENTION, "no trained LSA"),
    (scaling, LINEAR_ATTENTION, "no trained LSA"),
    (query_shift, LINEAR_ATTENTION, "no trained LSA"),
    (random_covariance, LINEAR_ATTENTION, "no trained LSA"),
    (longer_prompts, LINEAR_ATTENTION, "no trained LSA"),
    (beyond_lsa, BEYOND_LINEAR, "no trained model whose prediction is nonlinear in the labels "
                                f"(only {', '.join(sorted(kinds('linear_in_labels')))})"),
    (gpt_in_distribution, WITH_POSITIONS, "no trained gpt model"),
    (length_spike, WITH_POSITIONS, "no trained gpt model"),
    (spike_vs_variance, WITH_POSITIONS, "no trained gpt model"),
]


RULES = {f"zfb.{fn.__name__}": fn for fn, _, _ in CLAIM_KINDS}     # claim id -> function (icl claims)


def model_settings(tabs) -> list[Setting]:
    """Every trained model's settings: runs grouped by every swept setting other than the seed,
    each with its shift.parquet rows and learned matrices, the runs that diverged, ended above their
    initial loss or did not learn (the learning gate, `LEARNING`) left out and counted; the pool
    (for claims that compare models) holds the runs that learned and the baselines."""
    runs = tabs["runs"]
    summ = tabs["summary"]
    keep = [c for c in ("diverged", "loss0", "final_train_loss", "memorises", "t_escape") if c in summ]
    merged = runs.merge(summ[["run_id", *keep]], on="run_id", how="left")
    gone = set(summ.loc[summ["diverged"].astype(bool), "run_id"])
    sh = tabs["shift"][~tabs["shift"]["run_id"].isin(gone)]
    cols = [c for c in RUN_COLS if c in runs]
    trained = sh[sh["run_id"].notna()]
    trained = trained.drop(columns=[c for c in cols if c in trained]).merge(runs[["run_id", *cols]], on="run_id")
    trained = with_limits(trained, runs)
    mats = run_matrices(runs[~runs["run_id"].isin(gone)], tabs["matrices"], tabs["theory"]) \
        if "matrices" in tabs and "theory" in tabs else {}
    merged = merged.merge(at_length_N(trained, sh), on="run_id", how="left")
    out, kept_all = [], []
    for model, g in runs.groupby("model", sort=True):
        kind = str(g["model_kind"].iloc[0])
        cols_s = settings(g, axis=("seed",))
        for label, rg in by_setting(merged[merged["model"] == model], cols_s):
            kept, note = exclude(rg)
            learned = gate(kept, learning_criteria(kind))   # icl.claims.learned: runs that did not learn are counted and left out
            kept = learned.kept if not learned.none else kept
            kept_all.append(learned.kept["run_id"])
            out.append(Setting(model=model, kind=kind, label=label, runs=kept,
                               left_out="; ".join(p for p in (note, learned.note) if p),
                               cells=trained[trained["run_id"].isin(kept["run_id"])],
                               mats={r: mats[r] for r in kept["run_id"] if r in mats}, unlearned=learned.none))
    ok = set(pd.concat(kept_all)) if kept_all else set()
    pool = pd.concat([trained[trained["run_id"].isin(ok)], sh[sh["run_id"].isna()]], ignore_index=True)
    for s in out:
        s.pool = pool
    return out


def _collapse(rows: list[dict]) -> list[dict]:
    """A claim that is not testable on every setting of a model for one reason: one row, not one per setting."""
    out, seen = [], set()
    for r in rows:
        if r["verdict"] == NOT_TESTABLE and all(x["verdict"] == NOT_TESTABLE and x["reason"] == r["reason"]
                                                for x in rows if x["model"] == r["model"]):
            if r["model"] in seen:
                continue
            seen.add(r["model"])
            r = {**r, "group": ""}
        out.append(r)
    return out


def verdicts(tabs) -> list[dict]:
    """Every ZFB verdict row from the report's tables (runs, summary, shift, theory, matrices);
    [] for an experiment without an evaluation under shift."""
    if tabs["shift"].empty:
        return []
    rows = []
    sets = model_settings(tabs)
    for fn, reads, none_reason in CLAIM_KINDS:
        mine = [s for s in sets if s.kind in reads]
        if not mine:
            cid = f"zfb.{fn.__name__}"
            rows.append(verdict(cid, NOT_TESTABLE, prediction=CLAIMS[cid], measurement="—", reason=none_reason))
            continue
        rows += _collapse([r for s in mine for r in
                           ([_unlearned_row(fn, s)] if s.unlearned else robust(fn, s, uses=("band",)))])
    return rows


def _unlearned_row(fn, s: Setting) -> dict:
    """A claim about a trained model on a setting where no run learned: not testable, with the numbers."""
    cid = f"zfb.{fn.__name__}"
    return s.row(cid, NOT_TESTABLE, prediction=CLAIMS[cid], reason=s.unlearned)
