"""Step size: the flat regime tolerates larger steps."""
from __future__ import annotations

import numpy as np
import pandas as pd

from icl import stats
from icl.analyse.claims import NOT_TESTABLE, UNSURE, fmt
from icl.analyse.claims.judge import Band, Choices, DEFAULT, judge, too_few_seeds
from icl.analyse.claims.ldl.identities import _kind, _of
from icl.analyse.claims.ldl.setting import Setting, _not_gd
from icl.stats import MIN_SEEDS


def _seed_counts(n_seeds: int) -> np.ndarray:
    """How often each seed is drawn in each of icl.stats' resamples of the seeds: (N_BOOT, seeds);
    none with fewer than MIN_SEEDS seeds (a statistic over fewer is not judged: judge.too_few_seeds)."""
    if n_seeds < MIN_SEEDS:
        return np.zeros((0, n_seeds))
    draws = stats.resamples(n_seeds)
    return np.stack([(draws == k).sum(1) for k in range(n_seeds)], axis=1).astype(float)


def _seed_cube(df: pd.DataFrame, axis: str, col: str) -> tuple[np.ndarray, list, list]:
    """df[col] as an array [axis value, L, seed] (NaN where a run is missing)."""
    cube = df.assign(_v=df[col].astype(float)).pivot_table(index=[axis, "L"], columns="seed", values="_v",
                                                           aggfunc="mean")
    Ds, Ls = sorted(df[axis].astype(float).unique()), sorted(df["L"].astype(float).unique())
    cube = cube.reindex(pd.MultiIndex.from_product([Ds, Ls]))
    return cube.to_numpy(float).reshape(len(Ds), len(Ls), -1), Ds, Ls


def _boundary_slopes(vals: np.ndarray, Ds: list, Ls: list, counts: np.ndarray):
    """Per seed resample (rows of counts): the boundary L of each axis value (the first L whose
    mean phase count, over the drawn seeds, reaches 2.5; geometric mean with the L before) and
    the slope of log boundary on log value. Returns (slopes (B,), boundaries (B, values))."""
    present = np.isfinite(vals)
    num = np.einsum("bs,dls->bdl", counts, np.where(present, vals, 0.0))
    den = np.einsum("bs,dls->bdl", counts, present.astype(float))
    mean = np.where(den > 0, num / np.where(den > 0, den, 1), np.nan)
    up = mean >= 2.5
    first = np.where(up.any(-1), up.argmax(-1), -1)
    Lg = np.asarray(Ls, float)
    ok = first > 0
    bound = np.where(ok, np.sqrt(Lg[np.maximum(first - 1, 0)] * Lg[np.maximum(first, 0)]), np.nan)
    x = np.log(np.asarray(Ds, float))[None, :]
    y = np.log(bound)
    w = np.isfinite(y).astype(float)
    nw = w.sum(1)
    xm = (w * x).sum(1) / np.maximum(nw, 1)
    ym = (w * np.nan_to_num(y)).sum(1) / np.maximum(nw, 1)
    dx = (x - xm[:, None]) * w
    sxx = (dx * dx).sum(1)
    slope = np.where((nw >= 2) & (sxx > 0), (dx * (np.nan_to_num(y) - ym[:, None])).sum(1) / np.where(sxx > 0, sxx, 1),
                     np.nan)
    return slope, bound


def _spearman_rows(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Spearman ρ of x (n,) with each row of y (B, n) over the row's finite entries (average ranks
    for ties); 0 where fewer than two are finite or they are all equal."""
    def ranks(a, m):
        less = ((a[:, :, None] > a[:, None, :]) & m[:, None, :]).sum(-1)
        same = ((a[:, :, None] == a[:, None, :]) & m[:, None, :]).sum(-1)
        return np.where(m, less + (same + 1) / 2.0, np.nan)
    m = np.isfinite(y)
    X = np.broadcast_to(x, y.shape)
    rx, ry = ranks(np.where(m, X, 0), m), ranks(np.where(m, y, 0), m)
    n = m.sum(1)
    rxm = np.nansum(rx, 1) / np.maximum(n, 1)
    rym = np.nansum(ry, 1) / np.maximum(n, 1)
    dx, dy = np.nan_to_num(rx - rxm[:, None]), np.nan_to_num(ry - rym[:, None])
    den = np.sqrt((dx * dx).sum(1) * (dy * dy).sum(1))
    return np.where((n >= 2) & (den > 0), (dx * dy).sum(1) / np.where(den > 0, den, 1), 0.0)


def step_size(s: Setting, choices: Choices = DEFAULT) -> list[dict]:
    """The flat regime tolerates larger steps: Spearman ρ between L and the largest stable GD
    learning rate (no seed diverged or ended above its loss₀), bootstrapped over seeds (at least
    5), in [−1, −½]."""
    cid = "ldl.step_size"
    band = Band(-1.0, -1.0, 0.5, floor=-1.0, ceil=1.0)
    pred = f"largest stable lr falls with L: Spearman ρ {band.text(choices.band)}"
    df = s.runs
    if not (df["optimizer"] == "gd").all():
        return [_not_gd(s, cid)]
    if _of(df, "label_average"):
        return [s.row(cid, NOT_TESTABLE, prediction=pred, measurement="—",
                      reason=f"{_kind(df)} predicts a convex combination of the context labels, so its loss is "
                             "bounded and GD cannot diverge at any step size")]
    runs = s.runs
    if runs.empty or runs["lr"].nunique() < 2 or runs["L"].nunique() < 2:
        return [s.row(cid, NOT_TESTABLE, prediction=pred, measurement="—",
                      reason="this setting does not sweep the learning rate over two or more values of L")]
    bad = runs.assign(bad=(runs["diverged"].astype(bool) | (runs["final_train_loss"] > runs["loss0"])).astype(float))
    cube = bad.pivot_table(index=["L", "lr"], columns="seed", values="bad", aggfunc="max")
    Ls, lrs = sorted(runs["L"].unique()), sorted(runs["lr"].unique())
    cube = cube.reindex(pd.MultiIndex.from_product([Ls, lrs])).to_numpy(float).reshape(len(Ls), len(lrs), -1)

    def rho(counts):
        """ρ(L, largest lr at which no drawn seed diverged or ended above its loss₀), per resample."""
        drawn = (counts > 0).astype(float)
        n_bad = np.einsum("bs,kls->bkl", drawn, np.nan_to_num(cube))
        seen = np.einsum("bs,kls->bkl", drawn, np.isfinite(cube).astype(float))
        stable = (n_bad == 0) & (seen > 0)
        best = np.where(stable.any(-1), np.asarray(lrs, float)[np.where(stable, np.arange(len(lrs)), -1).max(-1)], np.nan)
        return _spearman_rows(np.asarray(Ls, float), np.log(best))

    value = float(rho(np.ones((1, cube.shape[-1])))[0])
    lo, hi = stats.percentile_interval(rho(_seed_counts(cube.shape[-1])), cube.shape[-1], bounds=(-1.0, 1.0))
    meas = (f"Spearman ρ(L, largest stable lr) = {value:.2f} [{fmt(lo)}, {fmt(hi)}] over {runs['L'].nunique()} L × "
            f"{runs['lr'].nunique()} learning rates × {cube.shape[-1]} seeds")
    if (few := too_few_seeds(cube.shape[-1])):
        return [s.row(cid, UNSURE, prediction=pred, value=value, reason=few, measurement=meas)]
    v, why = judge(lo, hi, band, choices, "ρ")
    return [s.row(cid, v, prediction=pred, value=value, ci_lo=lo, ci_hi=hi, reason=why, measurement=meas)]
