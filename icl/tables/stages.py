"""Stages of a run by its learning coefficient, counted only past their null.

Hoogland et al. read a model's developmental stages off λ̂(t) as its critical points against log t.
λ̂ is an estimate: a few SGLD chains per checkpoint, each with its own error, so a flat λ̂ turns by
chance. A boundary here is a turn of the smoothed λ̂ that moves back from its extreme by more than
`swing` standard errors of the difference (a zigzag filter), and the swing is not a fixed number:
for each run it is the smallest that finds a boundary in at most NULL_RATE of flat λ̂ traces drawn
with that run's own chains (its checkpoints, its chains per checkpoint, each chain's spread as the
run's standard error implies, the error re-estimated from the drawn chains as it is from the real
ones). With two chains the error is itself a two-sample guess and the swing must be large; where
no swing up to MAX_SWING holds the null, the run has no stages.
"""
from __future__ import annotations

import math
import zlib

import numpy as np

SMOOTH = 0.1          # decades: λ̂ is smoothed against log10 t by a Gaussian kernel of this width
NULL_RATE = 0.05      # a flat λ̂ may show a boundary in at most this share of draws
NULL_DRAWS = 2000     # flat traces drawn per run to measure it
SWINGS = np.geomspace(1.0, 50.0, 60)   # the swings tried, in standard errors of a difference
MAX_SWING = float(SWINGS[-1])


def smoothed(llc: np.ndarray, epochs: np.ndarray) -> np.ndarray:
    """λ̂ smoothed against log10 t (the last axis over `epochs`)."""
    x = np.log10(np.asarray(epochs, float))
    w = np.exp(-0.5 * ((x[:, None] - x[None, :]) / SMOOTH) ** 2)
    return (np.asarray(llc, float) @ w.T) / w.sum(1)


def boundaries(llc: np.ndarray, se: np.ndarray, epochs: np.ndarray, swing: float) -> list[int]:
    """The epochs at which the smoothed λ̂ of one run turns by more than `swing` standard errors of
    the difference between the two checkpoints (λ̂, se over `epochs`, all usable)."""
    smooth, e, t = smoothed(llc, epochs), np.nan_to_num(se, nan=0.0), np.asarray(epochs)
    past = lambda i, j: abs(smooth[i] - smooth[j]) > swing * math.hypot(e[i], e[j])   # noqa: E731
    out, direction, ext = [], 0, 0          # which way λ̂ goes (0: not yet far from the start), its extreme
    for i in range(1, len(smooth)):
        move = smooth[i] - smooth[ext]
        if direction == 0:
            if past(i, ext):
                direction, ext = (1 if move > 0 else -1), i
        elif move * direction > 0:
            ext = i                                          # still going the same way
        elif past(i, ext):                                   # turned, and far enough: ext was a critical point
            out.append(int(t[ext]))
            direction, ext = -direction, i
    return out


def any_boundary(smooth: np.ndarray, se: np.ndarray, swings: np.ndarray) -> np.ndarray:
    """(D, S): whether `boundaries` finds one in each of D smoothed traces (D, P) with their errors
    (D, P), at each of the swings (S,): the same filter, every trace and swing at once."""
    D, P = smooth.shape
    S = len(swings)
    direction = np.zeros((D, S), int)
    ext = np.zeros((D, S), int)
    found = np.zeros((D, S), bool)
    rows = np.arange(D)[:, None]
    for i in range(1, P):
        at_ext, e_ext = smooth[rows, ext], se[rows, ext]
        move = smooth[:, i:i + 1] - at_ext
        past = np.abs(move) > swings[None, :] * np.hypot(se[:, i:i + 1], e_ext)
        start = (direction == 0) & past
        same = (direction != 0) & (move * direction > 0)
        turn = (direction != 0) & ~same & past
        found |= turn
        direction = np.where(start, np.sign(move).astype(int), np.where(turn, -direction, direction))
        ext = np.where(start | same | turn, i, ext)
    return found


def null_swing(se: np.ndarray, epochs: np.ndarray, chains: int, seed: int = 0) -> tuple[float, float]:
    """(swing, its false-boundary rate): the smallest swing of SWINGS at which flat λ̂ traces drawn with
    the run's chains (NULL_DRAWS of them) show a boundary in at most NULL_RATE, at it and every larger
    one; (inf, the rate at MAX_SWING) where none does, and (inf, nan) without two chains."""
    se = np.asarray(se, float)
    if chains < 2 or len(se) < 3 or not np.isfinite(se).all():
        return math.inf, math.nan
    rng = np.random.default_rng(seed)
    sd = se * math.sqrt(chains)                                  # one chain's spread at each checkpoint
    draws = rng.standard_normal((NULL_DRAWS, len(se), chains)) * sd[None, :, None]
    est, err = draws.mean(2), draws.std(2, ddof=1) / math.sqrt(chains)
    rate = any_boundary(smoothed(est, epochs), err, SWINGS).mean(0)
    ok = np.flatnonzero(np.maximum.accumulate(rate[::-1])[::-1] <= NULL_RATE)   # this swing and every larger one
    return (float(SWINGS[ok[0]]), float(rate[ok[0]])) if len(ok) else (math.inf, float(rate[-1]))


def run_seed(run_id: str) -> int:
    """A run's own stream for its null draws, stable across processes."""
    return zlib.crc32(str(run_id).encode())


def stages(llc: np.ndarray, se: np.ndarray, epochs: np.ndarray, chains: int, run_id: str = "") -> tuple:
    """(boundaries or None, swing, null rate) of one run: its usable checkpoints (finite, after epoch 0,
    λ̂ ≥ 0: a learning coefficient is never negative, so a negative estimate measured nothing) judged
    at the swing its own null allows. None with fewer than three usable checkpoints or no swing that
    holds the null."""
    llc, se, epochs = np.asarray(llc, float), np.asarray(se, float), np.asarray(epochs)
    ok = np.isfinite(llc) & np.isfinite(se) & (epochs > 0) & (llc >= 0)
    if ok.sum() < 3:
        return None, math.nan, math.nan
    swing, rate = null_swing(se[ok], epochs[ok], chains, run_seed(run_id))
    if not math.isfinite(swing):
        return None, swing, rate
    return boundaries(llc[ok], se[ok], epochs[ok], swing), swing, rate
