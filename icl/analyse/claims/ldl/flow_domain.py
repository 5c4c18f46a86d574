"""Theorem 1's rate reading on its own dynamics: β on the balanced flow, an observation.

Runs cannot meet LDL's hypotheses at a CPU's sizes beyond K = 4 (N ≥ K³ and δ = sqrt(20K/N) < 1/K
ask for N > 20K³). Lemma 2's balanced flow is their δ → 0 limit (N → ∞, every feature at its share
p_k N), and there Theorem 1's bound T ≤ C·K·log(K/ε)/(ηδ²L²Δ²) is infinite: the balanced flow
charges no bound. `flow_beta` reads β = dlog T/dlog(1/ε) on the setting's balanced flows (one per
L: the seeds share it) between the relative thresholds 10⁻¹ and the finest one the flow reached with
ε = sqrt(x) ≥ 1/K, beside the rate reading's [0, β with log(K/ε)] (log(log(K/ε_lo)/log(K/ε_hi))/
log(ε_hi/ε_lo) with the log factor, 0 without it), as an observation that reads not testable: a
bound is judged by the constant it needs along its limit (icl.analyse.claims.ldl.bound), never by a
local exponent at one K.
"""
from __future__ import annotations

import math

import numpy as np

from icl.analyse.claims import NOT_TESTABLE, fmt
from icl.analyse.claims.judge import Band, Choices, DEFAULT, judge
from icl.analyse.claims.ldl.flow import flow_runs
from icl.analyse.claims.ldl.identities import _of
from icl.analyse.claims.ldl.setting import Setting

BOUND_GROUP = "Theorem 1 as a bound: the constant needed along K"   # icl.analyse.claims.ldl.bound's row

T_HI = "t_rel_1e-1"
FINER = ("t_rel_1e-3", "t_rel_1e-2")      # the finest first


def _x(tcol: str) -> float:
    return float(tcol.split("_")[-1])


def theorem_beta(K: int, x_hi: float, x_lo: float) -> float:
    """Theorem 1's β between two relative thresholds with its log factor: T ∝ log(K/ε), ε = sqrt(x)."""
    e_hi, e_lo = math.sqrt(x_hi), math.sqrt(x_lo)
    return math.log(math.log(K / e_lo) / math.log(K / e_hi)) / math.log(e_hi / e_lo)


def flow_beta(s: Setting, choices: Choices = DEFAULT) -> list[dict]:
    """Theorem 1 on its own dynamics inside its hypotheses: the balanced flow's β = dlog T/dlog(1/ε)
    between relative losses 10⁻¹ and the finest of 10⁻², 10⁻³ it reached at ε = sqrt(x) ≥ 1/K,
    one value per L (the seeds share the flow), their span judged against [0, β with log(K/ε)]
    widened by the crossings' half-epoch resolution; at least two L. Not testable where 1/ε > K at
    every finer threshold reached. Reads every run of the setting (the flow is the theory's, whatever
    the runs did: one that memorised its prompts has the same flow)."""
    cid = "ldl.time_vs_eps"
    group = "the flow inside the hypotheses (δ → 0)"
    df = s.runs
    if df.empty or not _of(df, "mean_field") or not (df["optimizer"] == "gd").all() or df["K"].isna().any():
        return []
    key = ("mean_field_loss", tuple(df["run_id"]))      # the reading icl.analyse.claims.ldl.flow.with_flow makes too
    if key not in s.flows:
        s.flows[key] = flow_runs(s)
    runs = s.flows[key]
    if runs is None:
        return []
    K = int(df["K"].iloc[0])
    one = runs.sort_values("seed").groupby("L", sort=True).head(1)          # one flow per L
    reached = [c for c in FINER if c in one and one[c].notna().all() and one[T_HI].notna().all()]
    inside = [c for c in reached if math.sqrt(_x(c)) >= 1.0 / K]
    pred0 = "β = dlog T/dlog(1/ε) on LDL's balanced flow, flat regime (Theorem 1: T ∝ log(K/ε))"
    if not inside:
        why = (f"K = {K} < 1/ε = {1 / math.sqrt(_x(reached[-1])):.3g} at the coarsest finer threshold the flow "
               f"reached ({reached[-1].split('_')[-1]} of its start)" if reached else
               "the flow did not reach 10⁻² of its start in the epochs trained")
        r = s.row(cid, NOT_TESTABLE, group=group, prediction=pred0, measurement="—", domain="",
                  reason=f"no accuracy inside Theorem 1's K ≥ 1/ε on this flow: {why}")
        r["_flow"], r["hypotheses"] = True, f"K ≥ 1/ε fails: {why}"
        return [r]
    t_lo = inside[0]
    x_hi, x_lo = _x(T_HI), _x(t_lo)
    T_hi, T_lo = one[T_HI].to_numpy(float), one[t_lo].to_numpy(float)
    beta = np.log(T_lo / T_hi) / math.log(math.sqrt(x_hi / x_lo))
    want = theorem_beta(K, x_hi, x_lo)
    tol = float(np.median(np.sqrt((0.5 / T_hi) ** 2 + (0.5 / T_lo) ** 2) / math.log(math.sqrt(x_hi / x_lo))))
    band = Band(0.0, want, tol, source="Theorem 1's T with and without its log(K/ε) factor")
    pred = (f"{pred0}: β from 10⁻¹ to {t_lo.split('_')[-1]} of the start (ε = sqrt(x) ≥ 1/K = {1 / K:.3g}) in "
            f"{band.text(choices.band)}")
    Ls = ", ".join(f"{L:g}: {b:.3f}" for L, b in zip(one["L"], beta))
    meas = f"the balanced flow's β by L: {Ls}; Theorem 1's with log(K/ε) {want:.3f}, without it 0"
    if len(beta) < 2:
        r = s.row(cid, NOT_TESTABLE, group=group, prediction=pred, value=float(beta[0]), measurement=meas, domain="",
                  eps=math.sqrt(x_lo), reason="one L, and a β on the balanced flow is an observation: this flow is the "
                                              "δ → 0 limit, where Theorem 1's bound is infinite and charges nothing")
        r["_flow"] = True
        return [r]
    lo, hi = float(beta.min()), float(beta.max())
    # an observation, not a verdict: Theorem 1 is an upper bound with an unknown constant, which a local
    # exponent at one K cannot contradict, and the balanced flow is its δ → 0 end, where the bound is infinite
    v, why = judge(lo, hi, band, choices, "the flow's β over L", at_bound=True)
    row = s.row(cid, NOT_TESTABLE, group=group, prediction=pred, value=float(np.median(beta)), ci_lo=lo, ci_hi=hi,
                reason=(f"a bound is judged as a bound: Theorem 1's T ≤ C·K·log(K/ε)/(ηδ²L²Δ²) with C unknown is "
                        f"contradicted only by the constant the dynamics need growing along the theorem's limit (the "
                        f"row '{BOUND_GROUP}'), never by a local exponent at one K, and this balanced flow is the δ → 0 "
                        f"limit, where the bound is infinite and charges nothing; read as a rate, β here would be "
                        f"'{v}' ({why or 'inside the band'}), an observation"),
                measurement=meas, eps=math.sqrt(x_lo), domain="")
    row["flow_value"], row["flow_lo"], row["flow_hi"] = float(np.median(beta)), lo, hi
    row["_flow"] = True          # judged on the flow, whose hypotheses these are (icl.analyse.claims.ldl.hypotheses skips it)
    row["hypotheses"] = (f"K ≥ 1/ε: K = {K}, 1/ε = {1 / math.sqrt(x_lo):.3g}, met ({fmt(K * math.sqrt(x_lo))}×); "
                         f"N ≥ K³ and δ = sqrt(20K/N) < min p_k: met in the δ → 0 limit the balanced flow is; "
                         f"flat regime: L* = 1/(Δδ) → ∞")
    return [row]
