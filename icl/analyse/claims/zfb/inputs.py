"""What the ZFB claims share: the kinds they read (by trait), their thresholds, and their inputs (the shift cells with the theory's limits)."""
from __future__ import annotations

import json
from statistics import NormalDist

import numpy as np
import pandas as pd

from icl.evaluate import shifts
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



def healthy_shift(tabs) -> pd.DataFrame:
    """shift.parquet without diverged runs, trained LSA rows relabelled 'lsa' (whatever the
    model's name), so figures and verdicts compare healthy runs only."""
    sh = tabs["shift"]
    gone = set(tabs["summary"].loc[tabs["summary"]["diverged"], "run_id"])
    sh = sh[~sh["run_id"].isin(gone)].copy()
    sh.loc[sh["model_kind"].isin(LINEAR_ATTENTION), "predictor"] = TRAINED_LSA
    return sh


RUN_COLS = ["model", "seed", "d", "token_kind", "covariance", "scale", "task_kind", "data_id", "positional", "optimizer"]


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
