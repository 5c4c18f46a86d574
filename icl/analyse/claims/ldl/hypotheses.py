"""A theorem is charged only inside its hypotheses.

LDL's Theorems 1-2 and Propositions 1-4 assume K ≥ Θ(1/ε) for the accuracy ε they speak of,
N ≥ Θ(K³), Eq. 9's concentration width δ = sqrt(20K/N) below every p_k (else its set admits
prompts missing a feature), Eq. 4's label gap |f(v_k) − f(v_k')| = Θ(L)Δ, and a step that follows
the dynamics (GD within the population loss's curvature scale). `hypotheses` states each at a
setting with unit constants and how far it is met (its slack: met where ≥ the constant); `charge`
turns a theorem's row outside them into not testable, naming the hypothesis and by how much it
fails, keeping what the runs read (value, interval, the flow's column) and saying whether the runs
follow Lemma 2's flow, which needs no such hypothesis; the constants ×½ and ×2 that would move the
row in or out are its fragility.
"""
from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np
import pandas as pd

from icl.analyse.claims import NOT_TESTABLE, base_id, fmt
from icl.analyse.claims.judge import join
from icl.analyse.claims.ldl.flow import AGREE, agrees
from icl.analyse.claims.ldl.identities import eq4_where, regime_of
from icl.analyse.fits import probs_of
from icl.analyse.claims.ldl.setting import ATTN_TOL
from icl.theory import ldl

# the claims that are statements of a theorem or proposition, and which
STATEMENTS = {"ldl.attention_to_one": "Prop. 1", "ldl.unseen_functions": "Prop. 1",
              "ldl.offdiag_logits": "Props. 2-4", "ldl.phase_one": "Prop. 2", "ldl.phases": "Props. 2-4",
              "ldl.transition_at_Lstar": "Theorems 1-2", "ldl.time_vs_L": "Theorems 1-2",
              "ldl.time_vs_eps": "Theorems 1-2"}
NO_EPS = ("ldl.phase_one",)          # Prop. 2 (Phase I) speaks of no accuracy ε
CONSTANTS = (0.5, 2.0)               # the unknown constants inside Θ tried beside 1
STEP_MAX = 1.0                       # one GD step within the population loss's curvature scale (theory's mf_step)


class Hypothesis(NamedTuple):
    name: str        # 'K ≥ 1/ε'
    values: str      # 'K = 4, 1/ε = 10'
    slack: float     # the factor by which it is met: met with constant c where slack ≥ c


def hypotheses(df: pd.DataFrame, eps: float | None) -> list[Hypothesis]:
    """The theorems' hypotheses at these runs (the worst over their (K, N) if several), each with
    its slack at unit constants; `eps`, the accuracy the row reads (None: a statement without one).
    Empty for runs without discrete features (the theorems do not speak of them)."""
    if df.empty or "K" not in df or df["K"].isna().any():
        return []
    out: list[Hypothesis] = []
    worst = {}
    for (K, N), g in df.groupby(["K", "N"]):
        K, N = int(K), int(N)
        p = probs_of(g)
        dc, pmin = ldl.delta_conc(K, N), float(p.min() / p.sum())
        cands = [Hypothesis("N ≥ K³", f"N = {N}, K³ = {K ** 3}", N / K ** 3),
                 Hypothesis("δ < min p_k", f"δ = sqrt(20K/N) = {dc:.3g}, min p_k = {pmin:.3g}", pmin / dc)]
        if eps is not None and math.isfinite(eps) and eps > 0:
            cands.insert(0, Hypothesis("K ≥ 1/ε", f"K = {K}, 1/ε = {1 / eps:.3g}", K * eps))
        for h in cands:
            if h.name not in worst or h.slack < worst[h.name].slack:
                worst[h.name] = h
    out += worst.values()
    if "eq4_ratio" in df and df["eq4_ratio"].notna().any():
        r = float(df["eq4_ratio"].astype(float).min())
        out.append(Hypothesis("Eq. 4", f"label gap per unit LΔ {r:.2f} of its small-LΔ value, "
                                       f"≥ {ldl.EQ4_MIN:g}", r / ldl.EQ4_MIN))
    if "mf_step" in df and df["mf_step"].notna().any() and (df["optimizer"] == "gd").all():
        st = float(df["mf_step"].astype(float).max())
        out.append(Hypothesis("step", f"η‖v‖⁴λ_max = {st:.3g} ≤ {STEP_MAX:g}", STEP_MAX / st if st > 0 else math.inf))
    return out


def setting_statement(df: pd.DataFrame) -> str:
    """The theorems' hypotheses at one setting's runs, said once for every row, figure and banner of
    it (issue 62.3): each with its values and met or not at unit constants; K ≥ 1/ε as the accuracies
    it admits (ε ≥ 1/K), since each claim reads its own ε; Eq. 4 with the runs it leaves out. Empty
    for runs without discrete features."""
    if df.empty or "K" not in df or df["K"].isna().any():
        return ""
    parts = []
    for h in hypotheses(df, None):
        if h.name == "Eq. 4" and h.slack < 1:
            out = df[(df["eq4_ratio"].astype(float) < ldl.EQ4_MIN).fillna(False)]
            parts.append(f"Eq. 4 (label gap = Θ(L)Δ) fails at {eq4_where(out)}: the gap per unit LΔ is "
                         f"{out['eq4_ratio'].astype(float).min():.2f} of its small-LΔ value, below {ldl.EQ4_MIN:g}; "
                         "the L-claims leave those runs out")
        else:
            parts.append(f"{h.name}: {h.values}, {'met' if h.slack >= 1 else 'fails'} ({fmt(h.slack)}×)" + (
                ": Eq. 9's lower bound (p_k − δ)N ≤ 0 is vacuous, its set admits prompts missing a feature"
                if h.name == "δ < min p_k" and h.slack < 1 else ""))
    Ks = sorted({int(k) for k in df["K"]})
    parts.insert(0, f"K ≥ 1/ε: met for accuracies ε ≥ 1/K = {fmt(1 / Ks[0])}" + (
        f" (K = {Ks[0]})" if len(Ks) == 1 else f" (K = {Ks[0]}, larger K admitting smaller ε)")
        + f", so a claim read at ε = {ATTN_TOL:g} is {'inside' if Ks[0] * ATTN_TOL >= 1 else 'outside'}")
    return "; ".join(parts)


def inside(hyps: list[Hypothesis], c: float = 1.0) -> bool:
    return all(h.slack >= c for h in hyps)


def describe(hyps: list[Hypothesis]) -> str:
    """'K ≥ 1/ε: K = 4, 1/ε = 10, fails (met at 0.4×); N ≥ K³: N = 100, K³ = 64, met (1.56×); …'."""
    return "; ".join(f"{h.name}: {h.values}, {'met' if h.slack >= 1 else 'fails'} ({fmt(h.slack)}×)" for h in hyps)


def _failing(hyps: list[Hypothesis]) -> str:
    return "; ".join(f"{h.name} fails ({h.values}: met to {fmt(h.slack)}×, short by {fmt(1 / h.slack)}×)"
                     if h.slack > 0 else f"{h.name} fails ({h.values})" for h in hyps if h.slack < 1)


def _regime_runs(r: dict, runs: pd.DataFrame) -> pd.DataFrame:
    """The runs a row read, as far as its group names them: a regime's (flat/sharp) where it names one."""
    rg = regime_of(r["group"])
    return runs[runs["regime"] == rg] if rg and "regime" in runs else runs


def charge(rows: list[dict], runs: pd.DataFrame, split=None) -> list[dict]:
    """`rows` with every theorem's row (STATEMENTS) stating its hypotheses at these runs, and
    those outside them (unit constants) not testable: the reason names each failing hypothesis and
    by how far, and quotes what the runs read; value, interval and the flow's column are kept, and
    whether the runs follow the flow is said. `split`: each run's regime (flat/sharp), so a regime's
    row is held to its own runs' Eq. 4 and step. Fragility: the constants ×½ and ×2 that move the
    row across the hypotheses' edge."""
    runs = runs.assign(regime=split) if split is not None else runs
    for r in rows:
        cid = base_id(r["claim_id"])
        if cid not in STATEMENTS or r.get("scope", "setting") != "setting" or r.get("_flow"):
            continue
        eps = None if cid in NO_EPS else r.get("_eps", ATTN_TOL)
        hyps = hypotheses(_regime_runs(r, runs), eps)
        if not hyps:
            continue
        r["hypotheses"] = describe(hyps)
        v = r["verdict"]
        if v == NOT_TESTABLE:
            continue
        alt = [c for c in CONSTANTS if inside(hyps, c) != inside(hyps, 1.0)]
        if inside(hyps, 1.0):
            flips = [f"the hypotheses' constants ×{c:g}: {NOT_TESTABLE}" for c in alt]
        else:
            flips = [f"the hypotheses' constants ×{c:g}: {v}" for c in alt]
            said = r["reason"] or "its interval lies inside the band"
            r["reason"] = (f"outside {STATEMENTS[cid]}'s hypotheses (unit constants): {_failing(hyps)}; the runs "
                           f"read '{v}' ({said}), which charges the statement nothing here{_flow_sentence(r)}")
            r["verdict"], r["against"] = NOT_TESTABLE, None
            r["fragile"] = ""        # the other analysis choices read the same runs, as far outside
        if flips:
            r["fragile"] = join(*(r.get("fragile") or "").split("; "), *flips)
    return rows


def _flow_sentence(r: dict) -> str:
    """Whether the runs follow Lemma 2's flow on this row's statistic (the dynamics need no theorem's
    hypotheses), where the row has both: within icl.analyse.claims.ldl.flow's tolerance or not."""
    v, lo, hi = r.get("flow_value", math.nan), r.get("ci_lo", math.nan), r.get("ci_hi", math.nan)
    if not all(np.isfinite(x) for x in (v, lo, hi)) or "Lemma 2's flow" in r["reason"]:
        return ""
    near = agrees(lo, hi, r["flow_lo"], r["flow_hi"], v)
    return (f"; the runs {'follow' if near else 'depart from'} Lemma 2's flow, which needs no such hypothesis: it reads "
            f"{fmt(v)}, {'within' if near else 'more than'} {AGREE:.0%} of the runs' interval [{fmt(lo)}, {fmt(hi)}]")

