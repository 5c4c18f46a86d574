"""The learned matrices of trained LSA runs and their distances to the theory's optimum."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from icl.analyse.claims.zfb.inputs import LAST, LINEAR_ATTENTION, STILL_FALLING, _spec
from icl.theory import lsa as lsa_theory


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
