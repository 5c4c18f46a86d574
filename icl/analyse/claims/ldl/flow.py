"""The third column: LDL's own dynamics beside the theorem and the runs.

Lemma 2's mean-field flow (theory_curves.parquet: the balanced |V_k| = p_k N flow at each run's
own step, and the same flow on the run's sampled feature counts) is a trajectory of its own, so a
claim about the dynamics can be measured on it exactly as on the runs: `flow_runs` puts the
flow's loss₀, crossing times, own attention at them, end of Phase I and phase count where the
runs' summary holds them, and `with_flow` calls the claim's own function on those "runs". The
balanced flow's statistic is `flow_value`; `flow_lo`/`flow_hi` span it and the sampled-count
flow's (the balanced approximation's measured bias). A row that does not hold then says who
disagrees (`against`): the theorem with its own dynamics, where the runs follow the flow, or the
runs with the dynamics, where they do not.
"""
from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pandas as pd

from icl.tables import measures
from icl.tables.phases import choose
from icl.analyse.claims import FAILS, fmt
from icl.analyse.claims.judge import Choices, DEFAULT
from icl.analyse.claims.ldl.setting import Setting
from icl.theory.ldl import delta_conc

# the runs follow the flow when the flow's span and the runs' interval overlap once the span is
# widened by this share of the flow's value: the balanced flow is Lemma 2's population dynamics, and
# the runs' finite prompts sit a few per cent off it (ldl.mean_field measures +0.5 to +7 % in loss)
AGREE = 0.05
THEOREM, DYNAMICS = "theorem", "dynamics"


def _curves(tc: pd.DataFrame, metric: str, ids) -> tuple[np.ndarray, np.ndarray] | None:
    """(epochs, values[run, epoch]) of one theory_curves metric for the runs `ids`, None where a run lacks it."""
    m = tc[(tc["metric"] == metric) & tc["run_id"].isin(ids)]
    if m.empty:
        return None
    wide = m.pivot_table(index="run_id", columns="epoch", values="value", aggfunc="first").reindex(list(ids))
    if wide.isna().all(axis=1).any():
        return None
    return wide.columns.to_numpy(float), wide.to_numpy(float)


def flow_runs(s: Setting, loss: str = "mean_field_loss") -> pd.DataFrame | None:
    """The setting's runs with every column a dynamics claim reads measured on the flow instead
    (icl.tables.measures, as the tables step measures the runs, on the flow's logged epochs): loss₀ and
    the uniform-attention loss (the flow's start, S = 0), final loss, relative and absolute
    crossing times and the own attention there, the end of Phase I (own attention at 1/(1+δ)), the
    phase count (the theory step's every-epoch fits of the flow, counted within the runs' seeds'
    spread: flow_counts) and the late decay exponent; the LLC's columns left out (the flow has none). `loss`:
    the balanced flow or the sampled-count one
    (`mean_field_loss_sampled`; its attention is the balanced flow's, the only one written). None
    where the setting's runs have no flow."""
    df = s.runs
    if df.empty or s.theory_curves.empty:
        return None
    got, own = _curves(s.theory_curves, loss, df["run_id"]), _curves(s.theory_curves, "mean_field_attn_own", df["run_id"])
    if got is None or own is None:
        return None
    ep, L = got
    A = own[1]
    # the flow has no weights to sample: the runs' LLC columns (train.llc) are not the flow's, and a
    # claim that reads them would read the runs' own numbers as the flow's
    out = df.drop(columns=list(measures.llc_summary({"run_id": df["run_id"].to_numpy()})), errors="ignore")
    loss0 = L[:, 0]
    out["loss0"] = out["uniform_train_loss"] = loss0
    out["final_train_loss"] = L[:, -1]
    out["diverged"], out["memorises"] = False, False
    for prefix, xs, series in (("t_rel", measures.REL_THRESHOLDS, L / loss0[:, None]),
                               ("t_abs", measures.ABS_THRESHOLDS, L)):
        for x in xs:
            col = measures._tname(prefix, x)
            t = measures.crossing_time(series, ep, x).to_numpy(float, na_value=np.nan)
            out[col] = t
            out[f"attn_at_{col}"] = measures.at_times(A, ep, t)
    for x in measures.UNIF_THRESHOLDS:             # the flow starts at uniform attention (S = 0): its loss₀ is that loss
        out[measures._tname("t_unif", x)] = measures.crossing_time(L / loss0[:, None], ep, x).to_numpy(float, na_value=np.nan)
    level = np.array([1.0 / (1.0 + delta_conc(int(K), int(N))) for K, N in zip(df["K"], df["N"])])
    out["t_phase_one"] = measures.level_time(A, ep, level)
    out["n_phases"] = flow_counts(df, "flow_phase_rms_sampled" if loss.endswith("_sampled") else "flow_phase_rms")
    out["late_exponent"] = measures.late_exponent(L, ep)
    out["attn_own_final"] = A[:, -1]
    return out


def flow_counts(df: pd.DataFrame, col: str) -> pd.Series:
    """The phase count of each run's flow (`col`: theory.parquet's fits of the balanced flow,
    flow_phase_rms, or of the sampled-count one), chosen as the runs' own are: the fewest pieces
    that fit it within the run's seeds' spread (summary's phase_spread, icl.tables.phases.choose)."""
    if col not in df or "phase_spread" not in df:
        return pd.Series(pd.array([None] * len(df), dtype="Int64"), index=df.index)
    n = [choose(r, w) if isinstance(r, (list, np.ndarray)) else None for r, w in zip(df[col], df["phase_spread"])]
    return pd.Series(pd.array(n, dtype="Int64"), index=df.index)


def _values(fn, s: Setting, runs: pd.DataFrame | None, choices: Choices) -> dict:
    """The claim's value per row group, measured by its own function on flow "runs"."""
    if runs is None:
        return {}
    flow = replace(s, runs=runs, left_out="")
    return {r["group"]: r["value"] for r in fn(flow, choices=choices)}


def agrees(lo: float, hi: float, flo: float, fhi: float, value: float) -> bool:
    """The runs' interval [lo, hi] meets the flow's span [flo, fhi] widened by AGREE × |value|."""
    w = AGREE * abs(value)
    return hi >= flo - w and lo <= fhi + w


def with_flow(rows: list[dict], fn, s: Setting, choices: Choices = DEFAULT) -> list[dict]:
    """`rows` (fn's on the runs of s) with the flow's column: flow_value (the balanced flow),
    flow_lo/flow_hi (it and the sampled-count flow), and on a row that does not hold `against` and
    a reason saying who disagrees. verdicts() calls it for the claims whose statistic the flow gives
    (loss, own attention and their crossings); not for step_size, which needs a divergence the
    bounded loss of a label average never has, nor offdiag_logits, which reads the off-diagonal
    logits per phase while theory_curves keeps only the flow's loss and own attention."""
    key = tuple(s.runs["run_id"])
    for loss in ("mean_field_loss", "mean_field_loss_sampled"):
        if (loss, key) not in s.flows:
            s.flows[loss, key] = flow_runs(s, loss)
    bal = _values(fn, s, s.flows["mean_field_loss", key], choices)
    smp = _values(fn, s, s.flows["mean_field_loss_sampled", key], choices) if bal else {}
    for r in rows:
        v = bal.get(r["group"], math.nan)
        w = smp.get(r["group"], math.nan)
        if not np.isfinite(v):
            continue
        w = w if np.isfinite(w) else v
        r["flow_value"], r["flow_lo"], r["flow_hi"] = float(v), float(min(v, w)), float(max(v, w))
        if r["verdict"] != FAILS or not (np.isfinite(r["ci_lo"]) and np.isfinite(r["ci_hi"])):
            continue
        span = fmt(v) if np.isclose(v, w) else f"{fmt(v)} (the sampled-count flow {fmt(w)})"
        runs = f"[{fmt(r['ci_lo'])}, {fmt(r['ci_hi'])}]"
        if agrees(r["ci_lo"], r["ci_hi"], r["flow_lo"], r["flow_hi"], v):
            r["against"] = THEOREM
            r["reason"] += (f"; the theorem's statement disagrees with its own mean-field dynamics, which the runs "
                            f"follow: Lemma 2's flow at the runs' own step reads {span}, measured the same way, "
                            f"within {AGREE:.0%} of the runs' interval {runs}")
        else:
            r["against"] = DYNAMICS
            r["reason"] += (f"; the runs disagree with the theory's own mean-field dynamics too: Lemma 2's flow at "
                            f"the runs' own step reads {span}, measured the same way, more than {AGREE:.0%} from the "
                            f"runs' interval {runs}")
    return rows
