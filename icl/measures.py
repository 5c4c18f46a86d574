"""Per-run measurements of the training dynamics, made once by the tables step from a shard's
logged arrays and stored in summary.parquet: crossing times of loss thresholds, phases
(icl.phases), final attention, divergence and the dynamics of softmax_q's feature logits. The
claims (icl.claims) read these columns; they never recompute them.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from icl.phases import phases

REL_THRESHOLDS = (1e-1, 1e-2, 1e-3)
ABS_THRESHOLDS = (1e-2, 1e-3, 1e-4)   # on the loss itself: the theorems' loss ≤ ε² (icl.fits.eps_of)


def _tname(prefix: str, x: float) -> str:
    return f"{prefix}_{x:.0e}".replace("e-0", "e-")


def crossing_time(ratio: np.ndarray, epochs: np.ndarray, x: float) -> pd.array:
    """t_x: when train_loss / loss0 (or the loss itself) first falls to x, per run, interpolated
    in log-loss between the two logged epochs around the crossing (null if never). The first
    logged epoch at or below x would quantise times to the logging grid: on a 4-epoch grid a
    run crossing at epoch 1.3 reads 4, and slopes over L come out of the grid, not the run."""
    r = np.nan_to_num(np.asarray(ratio, float), nan=np.inf)
    hit = r <= x
    i = hit.argmax(1)
    rows = np.arange(len(r))
    prev = np.maximum(i - 1, 0)
    a, b = r[rows, prev], r[rows, i]
    with np.errstate(divide="ignore", invalid="ignore"):
        frac = np.where((i > 0) & (a > x) & (b > 0) & np.isfinite(a),
                        (np.log(a) - np.log(x)) / (np.log(a) - np.log(np.maximum(b, 1e-300))), 1.0)
    t = epochs[prev] + np.clip(frac, 0.0, 1.0) * (epochs[i] - epochs[prev])
    return pd.array(np.where(hit.any(1), t, np.nan), dtype="Float64")


def logit_dynamics(q: np.ndarray) -> dict:
    """Per run, from its feature logits q (R, E, K, K) over the logged epochs (q[r, e, i, j] =
    v_jᵀ Q v_i, i the query's feature): `qoff_rate`, the median over off-diagonal logits of
    −Δq_(i,j) / Δq_(i,i) over training (where the own logit rose); `qoff_fell`, the share of
    off-diagonal logits that fell; `qoff_oscillates`, the share whose increments change sign at
    least once (steps below 1e-6 of the largest left out). Computed by the tables step."""
    R, E, K, _ = q.shape
    off = ~np.eye(K, dtype=bool)
    total = q[:, -1] - q[:, 0]
    rise = np.broadcast_to(np.diagonal(total, axis1=1, axis2=2)[:, :, None], (R, K, K))[:, off]
    change = total[:, off]                                         # (R, K(K-1))
    ratio = np.where(rise > 0, -change / np.where(rise > 0, rise, 1.0), np.nan)
    some = (rise > 0).any(1)                                       # runs whose own logits rose at all
    rate = np.full(R, np.nan)
    rate[some] = np.nanmedian(ratio[some], axis=1)
    inc = np.diff(q, axis=1)[:, :, off]                            # (R, E-1, K(K-1))
    tol = 1e-6 * (np.abs(inc).max(axis=1, keepdims=True) + 1e-30)
    sgn = np.where(np.abs(inc) > tol, np.sign(inc), 0.0)
    last = np.zeros_like(sgn[:, 0])                                # the last nonzero sign so far
    flips = np.zeros(last.shape, dtype=bool)
    for e in range(sgn.shape[1]):
        s = sgn[:, e]
        flips |= (s != 0) & (last != 0) & (s != last)
        last = np.where(s != 0, s, last)
    return {"qoff_rate": rate, "qoff_fell": (change < 0).mean(1), "qoff_oscillates": flips.mean(1)}


def summary_table(sh: dict) -> pd.DataFrame:
    """One summary row per run of a shard: losses, crossing times, phases, attention and logit dynamics."""
    rid, ep = sh["run_id"].astype(str), sh["epoch"]
    R, K = len(rid), sh["attn"].shape[-1]
    tl = sh["train_loss"]
    loss0 = tl[:, 0]
    ratio = tl / loss0[:, None]
    summ = pd.DataFrame({
        "run_id": rid, "loss0": loss0, "final_train_loss": tl[:, -1], "final_test_loss": sh["test_loss"][:, -1],
        "attn_own_final": sh["attn_own"][:, -1] if K else np.full(R, np.nan),
        "diverged": sh["diverged_at"] >= 0,
        "diverged_epoch": pd.array(np.where(sh["diverged_at"] >= 0, sh["diverged_at"], None), dtype="Int64"),
    })
    for x in REL_THRESHOLDS:
        summ[_tname("t_rel", x)] = crossing_time(ratio, ep, x)
    for x in ABS_THRESHOLDS:
        summ[_tname("t_abs", x)] = crossing_time(tl, ep, x)
    found = [phases(ep, tl[r]) for r in range(R)]
    summ["n_phases"] = pd.array([f[0] for f in found], dtype="Int64")
    summ["phase_ends"] = pd.Series([list(f[1]) for f in found], dtype="object")
    summ["test_loss0"] = sh["test_loss"][:, 0]
    summ["attn_knn_final"] = sh["attn_knn"][:, -1] if "attn_knn" in sh else np.nan
    summ["dist_target_final"] = sh["dist_target"][:, -1] if "dist_target" in sh else np.nan
    summ["attn_off_final"] = np.nan
    summ["attn_off_oscillates"] = pd.array([None] * R, dtype="boolean")
    if K:
        off = (sh["attn"].sum(axis=(2, 3)) - np.trace(sh["attn"], axis1=2, axis2=3)) / (K * (K - 1))
        summ["attn_off_final"] = off[:, -1]
        # oscillation: the mean off-diagonal attention turns from falling to rising at least once
        d = np.diff(off, axis=1)
        summ["attn_off_oscillates"] = pd.array(((d[:, :-1] < -1e-4) & (d[:, 1:] > 1e-4)).any(1), dtype="boolean")
    q = sh.get("q_features")
    dyn = logit_dynamics(q) if q is not None and q.size and q.shape[1] > 1 else {}
    for col in ("qoff_rate", "qoff_fell", "qoff_oscillates"):
        summ[col] = dyn.get(col, np.full(R, np.nan))
    summ["train_seconds"] = float(sh["seconds"]) / R
    summ["device"] = str(sh["device"])
    summ["code_version"] = str(sh["code_version"]) if "code_version" in sh else "unknown"
    summ["code_hash"] = str(sh["code_hash"]) if "code_hash" in sh else "unknown"
    return summ
