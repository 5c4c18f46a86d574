"""Phases of training: stretches over which the own-feature logit grows by one law.

LDL (Props. 2-4) describes training through the own logit q_k: it grows at one rate in Phase I,
at a smaller one in Phase II and, in the sharp regime, at a rate ∝ ε in Phase III. What every
model with attention maps shows of this is z(t) = logit(Attn_own(t)), measured every epoch
(train.py's trace, whatever `log_every` is). A *phase* is a stretch of z(t) that one law of
growth follows to within `tol`: z = α + β·log(1 + (t − t₀)/θ), t₀ the phase's first epoch,
θ ∈ (0, ∞]. θ = ∞ is growth at a constant rate (a loss decaying exponentially, late); small θ
is logarithmic growth (a loss decaying as a power law); between them one smooth transition
from the first to the second. So a constant-rate run, a power law and an exponential are one
phase each, and a phase ends where the growth rate changes faster than any one such law
bends: a kink, as between LDL's phases.

The count is the fewest such stretches that cover the run's window, found left to right, each
stretch as long as it can be. It depends on the run alone (never on other runs, nor on the
logging grid), and it has no rule about the number of points: `resolved` says whether the
window could show phases at all (icl.analyse.claims.ldl decides what to do with runs that cannot).
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

TOL = 0.1            # logit units: a law that misses z by more than this somewhere is a different law
MAX_PHASES = 6       # more than this: the curve is irregular, not a sequence of phases
MIN_LEN = 3          # a phase spans at least three epochs of the trace
MAX_POINTS = 160     # the fit sees at most this many epochs of a window (thinned, start kept whole)
_THETA = np.logspace(-3, 3, 37)      # θ in units of the stretch's length, plus ∞ (constant rate)


class Phases(NamedTuple):
    n: int | None          # number of phases (None: more than MAX_PHASES, or nothing to fit)
    ends: list[float]      # epochs at which each phase but the last ends
    tol: float             # the tolerance used (TOL, or more where the trace is noisy)
    noise: float = 0.0     # the trace's epoch-to-epoch noise (noise_level), what its power is measured at


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


def thin(t: np.ndarray, n: int = MAX_POINTS) -> np.ndarray:
    """Indices of at most n epochs of a trace: the first 20 all, then evenly in log(1+t) and in t."""
    if len(t) <= n:
        return np.arange(len(t))
    span = t[-1] - t[0]
    want = np.concatenate([t[:20], t[0] + np.expm1(np.linspace(0, np.log1p(span), n // 2)),
                           np.linspace(t[0], t[-1], n // 2)])
    return np.unique(np.clip(np.searchsorted(t, want), 0, len(t) - 1))


def _worst_residual(t: np.ndarray, z: np.ndarray) -> float:
    """The smallest, over the laws z = α + β·g(t − t₀), of the largest |residual| of their
    least-squares fit to (t, z)."""
    u = (t - t[0]) / max(t[-1] - t[0], 1e-12)
    g = np.vstack([np.log1p(u[None, :] / _THETA[:, None]), u[None, :]])        # (laws, points)
    gm = g - g.mean(1, keepdims=True)
    var = (gm * gm).sum(1)
    beta = np.where(var > 1e-300, (gm * (z - z.mean())).sum(1) / np.where(var > 0, var, 1), 0.0)
    res = (z - z.mean())[None, :] - beta[:, None] * gm
    return float(np.abs(res).max(1).min())


def _longest(t, z, i, tol) -> int:
    """The last index j such that points i..j follow one law within tol (at least i + MIN_LEN - 1)."""
    n = len(t)
    ok = lambda j: _worst_residual(t[i:j + 1], z[i:j + 1]) <= tol
    lo = min(i + MIN_LEN - 1, n - 1)
    if ok(n - 1):
        return n - 1
    hi, step = lo, 1                                  # gallop, then bisect: lo is feasible, hi not
    while hi < n - 1 and ok(hi):
        lo, hi = hi, min(hi + step, n - 1)
        step *= 2
    if ok(hi):
        return hi
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if ok(mid) else (lo, mid)
    return lo


def phases(epochs, z, tol: float | None = None) -> Phases:
    """Phases of a trace z(t) (the own logit, every epoch) over the epochs given: the fewest
    stretches, each following one law of growth within tol, found left to right. Non-finite
    values end the trace (a run that diverged)."""
    t, z = np.asarray(epochs, float), np.asarray(z, float)
    ok = np.isfinite(z)
    if not ok.all():
        t, z = t[:np.argmin(ok)], z[:np.argmin(ok)]
    tol = TOL if tol is None else tol
    noise = noise_level(z)
    tol = max(tol, 4.0 * noise)
    if len(t) < MIN_LEN:
        return Phases(None, [], tol, noise)
    keep = thin(t)
    t, z = t[keep], z[keep]
    starts, i = [], 0
    while i < len(t) - 1:
        starts.append(i)
        if len(starts) > MAX_PHASES:
            return Phases(None, [], tol, noise)
        j = _longest(t, z, i, tol)
        if j >= len(t) - 1:
            break
        i = j                                         # phases share their boundary epoch
    return Phases(len(starts), [float(t[s]) for s in starts[1:]], tol, noise)
