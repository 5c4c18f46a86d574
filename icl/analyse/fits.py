"""Measurements that compare runs with each other: convergence-time slopes against L with a
bootstrap over seeds, the theory-clock collapse, and step-size stability classes.

All functions take the tidy tables (runs, summary, curves) and return tidy frames. The runs the
verdicts leave out of a time claim are left out here too, and counted in the output: diverged,
ended above their initial loss or memorised (`exclude`, the claims' rule too: icl.analyse.claims.judge
hands it on), never reached the threshold, crossed it within RESOLUTION optimisation steps (the
step, not the dynamics, sets such a time), or, for an absolute threshold, started less than
START_MARGIN times above it.
"""
from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd

from icl.data import feature_probs
from icl.stats import MIN_SEEDS, cluster_weights, percentile_interval
from icl.theory import ldl

RESOLUTION = 5            # optimisation steps: a crossing sooner than this is set by the step, not the dynamics
START_MARGIN = 10.0       # an absolute threshold is read only on runs whose loss₀ is at least this times it
IDENTITY = {"run_id", "shard", "data_id", "experiment", "config_hash", "code_version", "seed", "L"}


def swept_columns(runs: pd.DataFrame, base: list[str]) -> list[str]:
    """Run settings besides `base` that vary within one model (every other swept setting: noise,
    c, width, probs, ...). Comparisons across L are made within each combination of these."""
    cols = [c for c in runs.columns if c not in IDENTITY and c not in base and c != "model"]
    if not cols:
        return []
    values = runs[cols].astype(str)
    varies = (values.groupby(runs["model"]).nunique() > 1).any()
    # a setting zipped to L (the cosine's c tied to L in ldl_shape) moves along the L axis: not a group
    tied_to_L = (values.groupby([runs["model"], runs["L"].astype(str)]).nunique() <= 1).all()
    return [c for c in cols if varies[c] and not tied_to_L[c]]


def step_key(df: pd.DataFrame) -> pd.Series:
    """The learning rate that names a run's group: its lr, or with lr_rule: clock (the plan sets
    each run's step from its Δ and L, icl.plan.shards.with_step) the configured one, lr_ref."""
    if "lr_rule" not in df or "lr_ref" not in df:
        return df["lr"]
    clock = df["lr_rule"].astype(str).eq("clock").to_numpy()
    return pd.Series(np.where(clock, df["lr_ref"].astype(float), df["lr"].astype(float)), index=df.index)


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
    """log-log slope of convergence time against L, and its spread over seeds: with at least
    MIN_SEEDS seeds the 95% interval resampling seeds (clusters); with 3 to MIN_SEEDS − 1 the
    range of the slopes fitted to each seed alone (a range, not an interval: `interval_kind`
    names it); with fewer nothing (NaN).

    Runs that never reached the threshold are dropped (their count is returned). Resampling whole
    seeds keeps the pairing of one seed's runs across L, as a rerun of the sweep would.
    """
    ok = df[df[tcol].notna() & (df[tcol] > 0)]
    n_missing = len(df) - len(ok)
    if ok["L"].nunique() < 2:
        return np.nan, np.nan, np.nan, len(ok), n_missing
    x, y = np.log(ok["L"].to_numpy(float)), np.log(ok[tcol].to_numpy(float))
    slope = _ols_slope(x, y)
    # a resample of whole seeds is a weighted fit: row weight = how often its seed was drawn
    w, n_seeds = cluster_weights(ok["seed"].to_numpy(), seed)
    if n_seeds < 3:                     # two seeds give three distinct resamples: no spread worth the name
        return slope, np.nan, np.nan, len(ok), n_missing
    if n_seeds < MIN_SEEDS:             # the range of the seeds' own slopes
        sd = ok["seed"].to_numpy()
        own = np.array([_ols_slope(x[sd == k], y[sd == k]) for k in np.unique(sd)])
        own = own[np.isfinite(own)]
        lo, hi = (own.min(), own.max()) if len(own) else (np.nan, np.nan)
        return slope, float(lo), float(hi), len(ok), n_missing
    sw, sx, sy = w.sum(1), w @ x, w @ y
    xc = x[None, :] - (sx / sw)[:, None]          # x centred on each resample's weighted mean
    den = (w * xc * xc).sum(1)
    num = (w * xc * (y[None, :] - (sy / sw)[:, None])).sum(1)
    has_slope = den > 1e-12 * (w * x * x).sum(1)            # a resample of a single L has none
    lo, hi = percentile_interval(num[has_slope] / den[has_slope], n_seeds)
    return slope, lo, hi, len(ok), n_missing


def interval_kind(n_seeds: int) -> str:
    """What slope_with_bootstrap's (ci_lo, ci_hi) are for n_seeds seeds."""
    if n_seeds >= MIN_SEEDS:
        return f"95% bootstrap over {n_seeds} seeds"
    if n_seeds >= 3:
        return f"range of {n_seeds} seeds' slopes (fewer than {MIN_SEEDS} seeds: not an interval)"
    return f"none ({n_seeds} seed{'s' if n_seeds != 1 else ''})"


def steps(df: pd.DataFrame) -> np.ndarray:
    """Optimisation steps per epoch of each run: the training prompts over the batch size (NaN
    where the tables do not say how many prompts a run trained on)."""
    if "M" not in df:
        return np.full(len(df), np.nan)
    bs = df["batch_size"].astype("Float64").fillna(df["M"].astype(float)).to_numpy(float) if "batch_size" in df \
        else df["M"].to_numpy(float)
    return np.ceil(df["M"].to_numpy(float) / bs)


def probs_of(g: pd.DataFrame) -> np.ndarray:
    """The feature frequencies p of runs `g` (one K and p): the configured ones, else uniform."""
    raw = g["probs"].dropna().iloc[0] if "probs" in g and g["probs"].notna().any() else None
    return feature_probs({"K": int(g["K"].iloc[0]), "probs": json.loads(raw) if raw else None})


def resolved(df: pd.DataFrame, tcol: str = "t_rel_1e-1") -> pd.Series:
    """Runs whose loss took at least RESOLUTION optimisation steps to cross tcol (a run whose
    steps per epoch the tables do not give counts as resolved)."""
    st = steps(df)
    t = df[tcol].astype(float).to_numpy()
    return pd.Series(np.where(np.isnan(st), True, t * st >= RESOLUTION), index=df.index)


def timing_runs(df: pd.DataFrame, tcol: str) -> tuple[pd.DataFrame, dict[str, int]]:
    """The runs whose crossing of tcol carries a time, and how many of the others were left out
    and why: for an absolute threshold, those that started less than START_MARGIN times above it
    (a run that starts near ε² proves nothing about reaching it); those that never reached it;
    those that crossed within RESOLUTION optimisation steps. Each run is counted once, under the
    first reason that applies."""
    t = df[tcol].astype(float)
    low = pd.Series(False, index=df.index)
    if tcol.startswith("t_abs"):
        low = ~(df["loss0"].astype(float) >= START_MARGIN * float(tcol.split("_")[-1]))
    never = ~low & ~(t > 0)
    fast = ~low & ~never & ~resolved(df, tcol)
    why = {f"started less than {START_MARGIN:g}× above the threshold {tcol.split('_')[-1]}": int(low.sum()),
           f"never reached {tcol}": int(never.sum()), f"crossed within {RESOLUTION} steps": int(fast.sum())}
    return df[~(low | never | fast)], {w: n for w, n in why.items() if n}


def left_out(counts: dict[str, int]) -> str:
    """timing_runs' counts as a sentence of the measurement: '3 run(s) crossed within 5 steps and
    are left out; ...'."""
    return "; ".join(f"{n} run{'s' if n != 1 else ''} {w} and {'are' if n != 1 else 'is'} left out" for w, n in counts.items() if n)


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


def exclude(df: pd.DataFrame) -> tuple[pd.DataFrame, str]:
    """The runs a claim or a fit may read, and a sentence counting those left out: diverged, ended above
    their initial loss (unstable), or memorised their prompts (test loss rose while the train
    loss fell: evidence about memorising, not about the theory)."""
    why = {}
    diverged = df["diverged"].astype(bool) if "diverged" in df else pd.Series(False, index=df.index)
    above = ~diverged & (df["final_train_loss"].astype(float) > df["loss0"].astype(float))
    mem = ~diverged & ~above & (df["memorises"].fillna(False).astype(bool) if "memorises" in df
                                else pd.Series(False, index=df.index))
    for name, mask in (("diverged", diverged), ("ended above its initial loss", above),
                       ("memorised its training prompts", mem)):
        if mask.any():
            why[name] = int(mask.sum())
    kept = df[~(diverged | above | mem)]
    if not why:
        return kept, ""
    return kept, (f"{len(df) - len(kept)} of {len(df)} runs left out (" +
                  ", ".join(f"{n} {w}" for w, n in why.items()) + ")")


SLOPE_KEYS = ["model", "model_kind", "lr", "delta", "K", "N", "regime"]


def convergence_slopes(runs: pd.DataFrame, summary: pd.DataFrame, theory: pd.DataFrame,
                       tcols=("t_rel_1e-1", "t_rel_1e-2", "t_rel_1e-3")) -> pd.DataFrame:
    """One row per (model, lr, Δ, K, N, regime, any other swept setting, threshold): the measured
    slope of log t against log L, its interval (`interval` says which kind: a 95% bootstrap over
    ≥ MIN_SEEDS seeds, else the range of the seeds' slopes), and the theory's slope, on the runs
    the verdicts read (the rest are counted: `n_diverged`, `n_unstable` for those that ended
    above their initial loss or memorised, `n_not_reached`, `n_fast`, `n_low_start`).

    The theorems bound the loss by O(ε²): a run that had to reach loss/loss₀ ≤ x has ε = sqrt(x·loss₀)."""
    extra = swept_columns(runs, SLOPE_KEYS)
    keys = SLOPE_KEYS + extra
    df = groupable(runs, extra).merge(summary, on="run_id").merge(theory[["run_id", "regime"]], on="run_id")
    df = df.assign(step=df["lr"], lr=step_key(df))       # lr_rule: clock groups by the configured lr
    vary = [k for k in keys[2:] if df[k].astype(str).nunique() > 1 and k != "regime"]
    rows = []
    for key, g in df.groupby(keys, dropna=False):
        rec = dict(zip(keys, key))
        n_div = int(g["diverged"].astype(bool).sum()) if "diverged" in g else 0
        kept, _ = exclude(g)
        n_bad = len(g) - len(kept) - n_div
        for t in tcols:
            use, why = timing_runs(kept, t)
            never = sum(n for w, n in why.items() if w.startswith("never"))
            fast = sum(n for w, n in why.items() if w.startswith("crossed"))
            low = sum(n for w, n in why.items() if w.startswith("started"))
            s, lo, hi, n, miss = slope_with_bootstrap(use, t)
            n_seeds = int(use["seed"].nunique())
            rows.append({**rec, "group": group_label(rec, vary), "threshold": t, "slope": s, "ci_lo": lo,
                         "ci_hi": hi, "interval": interval_kind(n_seeds) if np.isfinite(s) else "",
                         "n_seeds": n_seeds, "n_runs": n, "n_not_reached": never + miss, "n_diverged": n_div,
                         "n_unstable": n_bad, "n_fast": fast, "n_low_start": low, "n_L": use["L"].nunique(),
                         "theory_slope": theory_slope(use.assign(lr=use["step"]), rec["regime"], t)
                         if pd.notna(rec["K"]) and pd.notna(rec["regime"]) and len(use) else np.nan})
    return pd.DataFrame(rows, columns=[*keys, "group", "threshold", "slope", "ci_lo", "ci_hi", "interval", "n_seeds",
                                       "n_runs", "n_not_reached", "n_diverged", "n_unstable", "n_fast", "n_low_start",
                                       "n_L", "theory_slope"])


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
