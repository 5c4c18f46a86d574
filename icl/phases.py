"""Phases of a loss curve: a piecewise-linear fit of log-loss against log(1 + epoch).

The number of segments is chosen by BIC with a noise floor: a curve from deterministic GD has
no sampling noise, so plain BIC would keep adding segments to fit smooth curvature. With the
floor `tol` (in natural-log units of the loss), a fit whose RMS residual is already below tol
gains nothing from more segments, so a phase is a stretch over which the loss decays at a
visibly different power-law rate.
"""
from __future__ import annotations

import functools

import numpy as np


@functools.lru_cache(maxsize=8)
def _pairs(n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(i, j, j - i) for every segment i..j-1 of n points: the same for every curve of a sweep."""
    i, j = np.triu_indices(n + 1, k=1)
    return i, j, (j - i).astype(float)


def _seg_cost(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """cost[i, j] = residual sum of squares of the least-squares line through points i..j-1."""
    n = len(x)
    cx, cy = np.concatenate([[0], np.cumsum(x)]), np.concatenate([[0], np.cumsum(y)])
    cxx, cxy = np.concatenate([[0], np.cumsum(x * x)]), np.concatenate([[0], np.cumsum(x * y)])
    cyy = np.concatenate([[0], np.cumsum(y * y)])
    i, j, m = _pairs(n)
    sx, sy, sxx, sxy, syy = cx[j] - cx[i], cy[j] - cy[i], cxx[j] - cxx[i], cxy[j] - cxy[i], cyy[j] - cyy[i]
    vx = sxx - sx * sx / m
    cov = sxy - sx * sy / m
    vy = syy - sy * sy / m
    rss = np.where(vx > 1e-300, vy - cov * cov / np.where(vx > 1e-300, vx, 1), vy)
    cost = np.full((n + 1, n + 1), np.inf)
    cost[i, j] = np.maximum(rss, 0.0)
    return cost


def segments(x: np.ndarray, y: np.ndarray, max_k: int, min_len: int = 3) -> dict:
    """Best split of (x, y) into k contiguous segments, for every k up to max_k, from one
    dynamic programme: {k: (rss, list of start indices of segments 2..k)}."""
    n = len(x)
    cost = _seg_cost(x, y)
    idx = np.arange(n + 1)
    cost = np.where((idx[None, :] - idx[:, None]) < min_len, np.inf, cost)
    best = np.full((max_k + 1, n + 1), np.inf)
    arg = np.zeros((max_k + 1, n + 1), dtype=int)
    best[0, 0] = 0.0
    out = {}
    for k in range(1, max_k + 1):
        tot = best[k - 1][:, None] + cost                      # (start, end)
        arg[k] = tot.argmin(0)
        best[k] = tot.min(0)
        cuts, end = [], n
        for s in range(k, 0, -1):
            end = arg[s, end]
            cuts.append(end)
        out[k] = (best[k, n], sorted(cuts)[1:])
    return out


def segment(x: np.ndarray, y: np.ndarray, k: int, min_len: int = 3):
    """Best split of (x, y) into k contiguous segments: (rss, list of start indices of segments 2..k)."""
    return segments(x, y, k, min_len)[k]


def phases(epochs, loss, max_phases: int = 4, tol: float = 0.05, min_len: int = 3, max_points: int = 400):
    """(n_phases, phase_ends): phase_ends are the epochs where each phase but the last ends.

    Non-positive or non-finite losses (a run that diverged, or reached exact zero) end the
    curve; a curve with fewer than 2*min_len usable points has one phase.
    """
    epochs, loss = np.asarray(epochs, float), np.asarray(loss, float)
    ok = np.isfinite(loss) & (loss > 0)
    if not ok.all():
        stop = np.argmin(ok)
        epochs, loss = epochs[:stop], loss[:stop]
    if len(loss) > max_points:   # the fit is O(n²) in memory: thin long curves evenly in log-epoch
        keep = np.unique(np.searchsorted(np.log1p(epochs), np.linspace(0, np.log1p(epochs[-1]), max_points)))
        keep = keep[keep < len(loss)]
        epochs, loss = epochs[keep], loss[keep]
    n = len(loss)
    if n < 2 * min_len:
        return 1, []
    x, y = np.log1p(epochs), np.log(loss)
    best_bic, best = np.inf, (1, [])
    fits = segments(x, y, min(max_phases, n // min_len), min_len)
    for k, (rss, cuts) in fits.items():
        sigma2 = max(rss / n, tol * tol)
        bic = n * np.log(sigma2) + (3 * k - 1) * np.log(n)
        if bic < best_bic - 1e-9:
            best_bic, best = bic, (k, [int(epochs[c - 1]) for c in cuts])
    return best
