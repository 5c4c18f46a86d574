"""Phases of training: how many laws of growth the own-feature logit follows, chosen by the data.

LDL (Props. 2-4) describes training through the own logit q_k: it grows at one rate in Phase I,
at a smaller one in Phase II and, in the sharp regime, at a rate ∝ ε in Phase III. What every
model with attention maps shows of this is z(t) = logit(Attn_own(t)), measured every epoch
(train.py's trace, whatever `log_every` is). A phase is a stretch of z(t) that one law of growth
follows, z = α + β·log(1 + (t − t₀)/θ), t₀ the stretch's first epoch, θ ∈ (0, ∞]: θ = ∞ is growth
at a constant rate, small θ logarithmic growth (a loss decaying as a power law), between them one
smooth bend. For every number of pieces k ≤ MAX_PHASES, `fit` finds the k stretches whose laws fit
the run's trace best (least squares, every split tried) and keeps the fit's root-mean-square miss.

A smooth trace is fitted ever closer by more pieces (a full-batch GD trace has no noise of its
own), so no fit of one run alone says how many pieces are laws and how many fit the run's own
prompts. What does is a replicate: the run's seeds draw other prompts of the same setting, and
their traces sit apart by `spread` (the seeds' root-mean-square distance from their mean). The
count (`choose`) is the fewest pieces that fit the run as closely as its replicates agree: a
further piece fits this seed, not the law. The same fits and the same rule count the flows.
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

MAX_PHASES = 6       # more than this many laws: the curve is irregular, not a sequence of phases
MIN_LEN = 3          # a phase spans at least three points of the trace
MAX_POINTS = 160     # the fit sees at most this many epochs of a window (thinned, start kept whole)
PHASE_WINDOW = 1e-3  # phases are counted until the loss first falls to this share of uniform attention's
_THETA = np.logspace(-3, 3, 37)      # θ in units of the window's length, plus ∞ (constant rate)


class Fits(NamedTuple):
    rms: list[float]          # the best k-piece fit's root-mean-square miss, k = 1..MAX_PHASES (NaN: too short)
    ends: list[list[float]]   # the epochs at which each of its pieces but the last ends, per k


def logit(attn) -> np.ndarray:
    a = np.clip(np.asarray(attn, float), 1e-12, 1 - 1e-12)
    return np.log(a) - np.log1p(-a)


def noise_level(z: np.ndarray) -> float:
    """Robust standard deviation of the trace's epoch-to-epoch noise, from the median absolute
    second difference (a smooth curve's second differences are its curvature, far smaller)."""
    d2 = np.diff(z, 2)
    if len(d2) < 5:
        return 0.0
    return float(np.median(np.abs(d2 - np.median(d2))) / 0.6745 / np.sqrt(6.0))


def phase_window(loss: np.ndarray, ref: float) -> int:
    """The index of the last epoch the phases are counted over: where the loss first falls to
    PHASE_WINDOW of `ref` (the uniform-attention loss: what a model that learned nothing in
    context reaches), or the end of training if it never does."""
    below = np.asarray(loss, float) / ref <= PHASE_WINDOW
    return int(np.argmax(below)) if below.any() else len(loss) - 1


def thin(t: np.ndarray, n: int = MAX_POINTS) -> np.ndarray:
    """Indices of at most n epochs of a trace: the first 20 all, then evenly in log(1+t) and in t."""
    if len(t) <= n:
        return np.arange(len(t))
    span = t[-1] - t[0]
    want = np.concatenate([t[:20], t[0] + np.expm1(np.linspace(0, np.log1p(span), n // 2)),
                           np.linspace(t[0], t[-1], n // 2)])
    return np.unique(np.clip(np.searchsorted(t, want), 0, len(t) - 1))


def finite_part(epochs, z) -> tuple[np.ndarray, np.ndarray]:
    """The trace up to its first non-finite value (a run that diverged ends there)."""
    t, z = np.asarray(epochs, float), np.asarray(z, float)
    ok = np.isfinite(z)
    return (t, z) if ok.all() else (t[:np.argmin(ok)], z[:np.argmin(ok)])


def stretch_costs(t: np.ndarray, z: np.ndarray) -> np.ndarray:
    """cost[i, j]: the least squared miss of one law fitted to points i..j (inf where j − i + 1 <
    MIN_LEN), from running sums over the points after i, per law."""
    n = len(t)
    cost = np.full((n, n), np.inf)
    span = max(t[-1] - t[0], 1e-12)
    for i in range(n - MIN_LEN + 1):
        u, y = t[i:] - t[i], z[i:]
        g = np.vstack([np.log1p(u[None, :] / (_THETA[:, None] * span)), u[None, :]])      # (laws, points)
        m = np.arange(1, len(u) + 1)
        sy, syy = np.cumsum(y), np.cumsum(y * y)
        sg, sgg, sgy = np.cumsum(g, 1), np.cumsum(g * g, 1), np.cumsum(g * y, 1)
        vy, vg, cgy = syy - sy ** 2 / m, sgg - sg ** 2 / m, sgy - sg * sy / m
        with np.errstate(divide="ignore", invalid="ignore"):
            miss = vy - np.where(vg > 1e-12 * (1.0 + sgg), cgy ** 2 / vg, 0.0)
        cost[i, i + MIN_LEN - 1:] = np.maximum(miss.min(0), 0.0)[MIN_LEN - 1:]
    return cost


def fit(epochs, z) -> Fits:
    """The best fit of the trace z(t) (the own logit, every epoch) by k = 1..MAX_PHASES laws, each
    over its own stretch (neighbours share their boundary epoch), by dynamic programming over the
    (thinned) epochs."""
    t, z = finite_part(epochs, z)
    if len(t) < MIN_LEN:
        return Fits([float("nan")] * MAX_PHASES, [[] for _ in range(MAX_PHASES)])
    keep = thin(t)
    t, z = t[keep], z[keep]
    n = len(t)
    cost = stretch_costs(t, z)
    best, back = [cost[0]], [None]
    for _ in range(1, MAX_PHASES):
        total = best[-1][:, None] + cost                    # the last stretch i..j after the best up to i
        arg = np.argmin(total, 0)
        best.append(total[arg, np.arange(n)])
        back.append(arg)
    rms, ends = [], []
    for k in range(1, MAX_PHASES + 1):
        miss, cuts, j = best[k - 1][n - 1], [], n - 1
        for kk in range(k - 1, 0, -1):
            j = int(back[kk][j])
            cuts.append(float(t[j]))
        rms.append(float(np.sqrt(miss / n)) if np.isfinite(miss) else float("nan"))
        ends.append(sorted(cuts))
    return Fits(rms, ends)


def spread(traces: list[np.ndarray]) -> float:
    """How far replicate traces (one setting's seeds, each from epoch 0) sit apart: the root-mean-
    square distance of each from their mean over the epochs all of them reach (thinned as the fit
    is), with the n/(n − 1) of an unbiased variance. NaN for fewer than two traces."""
    traces = [finite_part(np.arange(len(z)), z)[1] for z in traces]
    n = min((len(z) for z in traces), default=0)
    if len(traces) < 2 or n < MIN_LEN:
        return float("nan")
    Z = np.stack([z[:n] for z in traces])[:, thin(np.arange(n, dtype=float))]
    return float(np.sqrt(((Z - Z.mean(0)) ** 2).mean() * len(Z) / (len(Z) - 1)))


def choose(rms, within: float) -> int | None:
    """The number of phases: the fewest pieces whose fit misses the trace by no more than `within`
    (the replicates' spread); None where there is no spread to judge by or no count up to
    MAX_PHASES fits (an irregular curve)."""
    r = np.asarray(rms, float)
    if not (np.isfinite(within) and within > 0) or not len(r):
        return None
    ok = np.flatnonzero(r <= within)
    return int(ok[0]) + 1 if len(ok) else None
