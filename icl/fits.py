"""Measurements that compare runs with each other: convergence-time slopes against L with a
bootstrap over seeds, the theory-clock collapse, and step-size stability classes.

All functions take the tidy tables (runs, summary, curves) and return tidy frames. Diverged runs
are excluded explicitly, and how many were excluded is part of the output.
"""
from __future__ import annotations

import math

import numpy as np
import pandas as pd

from icl.stats import cluster_weights
from icl.theory import ldl

IDENTITY = {"run_id", "shard", "data_id", "experiment", "config_hash", "code_version", "seed", "L"}


def swept_columns(runs: pd.DataFrame, base: list[str]) -> list[str]:
    """Run settings besides `base` that vary within one model (every other swept setting: noise,
    c, width, probs, ...). Comparisons across L are made within each combination of these."""
    extra = []
    for col in runs.columns:
        if col in IDENTITY or col in base or col == "model":
            continue
        values = runs[col].astype(str)
        # a setting zipped to L (the cosine's c tied to L in ldl_shape) moves along the L axis: not a group
        tied_to_L = (values.groupby([runs["model"], runs["L"].astype(str)]).nunique() <= 1).all()
        if (values.groupby(runs["model"]).nunique() > 1).any() and not tied_to_L:
            extra.append(col)
    return extra


def groupable(df: pd.DataFrame, cols: list[str]) -> pd.DataFrame:
    """List-valued settings (probs, a covariance spectrum) as strings, so they can be group keys."""
    df = df.copy()
    for col in cols:
        if df[col].dtype == object:
            df[col] = df[col].astype(str)
    return df


def group_label(rec: dict, cols: list[str]) -> str:
    return ", ".join(f"{c}={rec[c]:g}" if isinstance(rec[c], float) else f"{c}={rec[c]}" for c in cols)


def matching(df: pd.DataFrame, rec, cols: list[str]) -> pd.Series:
    """Rows of df whose values in cols equal rec's (NaN equal to NaN)."""
    mask = pd.Series(True, index=df.index)
    for col in cols:
        v = rec[col]
        mask &= df[col].isna() if pd.isna(v) else (df[col].astype(str) == str(v)) if df[col].dtype == object \
            else (df[col] == v).fillna(False)
    return mask


def _ols_slope(x: np.ndarray, y: np.ndarray) -> float:
    xm = x - x.mean()
    den = (xm * xm).sum()
    return float((xm * (y - y.mean())).sum() / den) if den > 0 else float("nan")


def slope_with_bootstrap(df: pd.DataFrame, tcol: str, seed: int = 0):
    """log-log slope of convergence time against L; 95% interval resampling seeds (clusters).

    Runs that never reached the threshold are dropped (their count is returned). Resampling whole
    seeds keeps the pairing of one seed's runs across L, as a rerun of the sweep would; fewer
    than three seeds give no interval (NaN).
    """
    ok = df[df[tcol].notna() & (df[tcol] > 0)]
    n_missing = len(df) - len(ok)
    if ok["L"].nunique() < 2:
        return np.nan, np.nan, np.nan, len(ok), n_missing
    x, y = np.log(ok["L"].to_numpy(float)), np.log(ok[tcol].to_numpy(float))
    slope = _ols_slope(x, y)
    # a resample of whole seeds is a weighted fit: row weight = how often its seed was drawn
    w, n_seeds = cluster_weights(ok["seed"].to_numpy(), seed)
    sw, sx, sy = w.sum(1), w @ x, w @ y
    xc = x[None, :] - (sx / sw)[:, None]          # x centred on each resample's weighted mean
    den = (w * xc * xc).sum(1)
    num = (w * xc * (y[None, :] - (sy / sw)[:, None])).sum(1)
    has_slope = den > 1e-12 * (w * x * x).sum(1)            # a resample of a single L has none
    boots = num[has_slope] / den[has_slope]
    # two seeds give three distinct resamples: no interval worth the name
    lo, hi = (np.percentile(boots, [2.5, 97.5]) if n_seeds >= 3 else (np.nan, np.nan))
    return slope, float(lo), float(hi), len(ok), n_missing


def theory_time(df: pd.DataFrame, reg, eps: np.ndarray) -> np.ndarray:
    """T of Theorem 1 (flat) or 2 (sharp) for each run at its own ε (unit constants)."""
    cols = df[["K", "N", "lr", "L", "delta"]].itertuples(index=False)     # not the text columns: slow to iterate
    return np.array([(ldl.T_flat if rg == "flat" else ldl.T_sharp)(int(r.K), int(r.N), float(r.lr), float(r.L),
                                                                    float(r.delta), float(e))
                     for r, rg, e in zip(cols, reg, eps)])


def eps_of(df: pd.DataFrame, tcol: str) -> np.ndarray:
    """ε of each run for a threshold column: sqrt(x · loss₀) (relative) or sqrt(x) (absolute)."""
    x = float(tcol.split("_")[-1])
    return np.sqrt(x * df["loss0"].to_numpy(float)) if tcol.startswith("t_rel") else np.full(len(df), math.sqrt(x))


def theory_slope(df: pd.DataFrame, reg: str, tcol: str) -> float:
    """Slope of log T_theory against log L over the runs of df, each at its own ε (unit constants
    cancel in the slope)."""
    if df["L"].nunique() < 2:
        return float("nan")
    T = theory_time(df, [reg] * len(df), eps_of(df, tcol))
    return _ols_slope(np.log(df["L"].to_numpy(float)), np.log(T))


SLOPE_KEYS = ["model", "model_kind", "lr", "delta", "K", "N", "regime"]


def convergence_slopes(runs: pd.DataFrame, summary: pd.DataFrame, theory: pd.DataFrame,
                       tcols=("t_rel_1e-1", "t_rel_1e-2", "t_rel_1e-3")) -> pd.DataFrame:
    """One row per (model, lr, Δ, K, N, regime, any other swept setting, threshold): the measured
    slope of log t against log L, its interval, and the theory's slope.

    The theorems bound the loss by O(ε²): a run that had to reach loss/loss₀ ≤ x has ε = sqrt(x·loss₀)."""
    extra = swept_columns(runs, SLOPE_KEYS)
    keys = SLOPE_KEYS + extra
    df = groupable(runs, extra).merge(summary, on="run_id").merge(theory[["run_id", "regime"]], on="run_id")
    vary = [k for k in keys[2:] if df[k].astype(str).nunique() > 1 and k != "regime"]
    rows = []
    for key, g in df.groupby(keys, dropna=False):
        rec = dict(zip(keys, key))
        n_div = int(g["diverged"].sum())
        g = g[~g["diverged"]]
        for t in tcols:
            s, lo, hi, n, miss = slope_with_bootstrap(g, t)
            rows.append({**rec, "group": group_label(rec, vary), "threshold": t, "slope": s, "ci_lo": lo,
                         "ci_hi": hi, "n_runs": n, "n_not_reached": miss, "n_diverged": n_div,
                         "n_L": g["L"].nunique(),
                         "theory_slope": theory_slope(g, rec["regime"], t)
                         if pd.notna(rec["K"]) and pd.notna(rec["regime"]) and len(g) else np.nan})
    return pd.DataFrame(rows, columns=[*keys, "group", "threshold", "slope", "ci_lo", "ci_hi", "n_runs",
                                       "n_not_reached", "n_diverged", "n_L", "theory_slope"])


def stability_class(summary: pd.DataFrame, converged_rel: float = 1e-2) -> pd.Series:
    """diverged (the loss became NaN/inf), unstable (finite, but ended above its initial loss),
    converged (loss/loss0 <= 1e-2), else stalled."""
    ratio = summary["final_train_loss"] / summary["loss0"]
    blown = summary["diverged"].to_numpy(bool) | ~np.isfinite(ratio.to_numpy(float))
    out = np.where(blown, "diverged", np.where(ratio > 1.0, "unstable",
                                               np.where(ratio <= converged_rel, "converged", "stalled")))
    return pd.Series(out, index=summary.index, name="stability")


def max_stable_lr(runs: pd.DataFrame, summary: pd.DataFrame) -> pd.DataFrame:
    """Per (model, any other swept setting, L): the largest learning rate at which no seed
    diverged or ended above its initial loss, and the largest at which every seed converged."""
    extra = swept_columns(runs, ["lr"])
    keys = ["model", *extra, "L"]
    df = groupable(runs, extra).merge(summary, on="run_id")
    df["stability"] = stability_class(df)
    vary = [k for k in extra if df[k].astype(str).nunique() > 1]
    rows = []
    for key, g in df.groupby(keys, dropna=False):
        rec = dict(zip(keys, key))
        per_lr = g.groupby("lr")["stability"].agg(lambda s: set(s))
        stable = [lr for lr, s in per_lr.items() if not s & {"diverged", "unstable"}]
        conv = [lr for lr, s in per_lr.items() if s == {"converged"}]
        rows.append({**rec, "group": group_label(rec, vary), "max_stable_lr": max(stable) if stable else np.nan,
                     "max_converged_lr": max(conv) if conv else np.nan, "lrs_tried": len(per_lr)})
    return pd.DataFrame(rows, columns=[*keys, "group", "max_stable_lr", "max_converged_lr", "lrs_tried"])
