"""The bootstrap, written once: every interval in the tables and verdicts resamples N_BOOT times
from numpy's PCG64 seeded with `seed`, so the same data and seed give the same interval."""
from __future__ import annotations

import math

import numpy as np

N_BOOT = 2000


def resamples(n: int, seed: int = 0) -> np.ndarray:
    """N_BOOT draws of n indices out of n, with replacement: (N_BOOT, n)."""
    return np.random.default_rng(seed).integers(0, n, size=(N_BOOT, n))


def cluster_weights(clusters, seed: int = 0) -> tuple[np.ndarray, int]:
    """Resampling whole clusters (seeds) as row weights: w[b, i] = how often resample b drew the
    cluster of row i; and the number of clusters. A weighted fit with w[b] is the fit to the
    rows of resample b stacked."""
    uniq, which = np.unique(np.asarray(clusters), return_inverse=True)
    n = len(uniq)
    counts = np.bincount((resamples(n, seed) + n * np.arange(N_BOOT)[:, None]).ravel(), minlength=N_BOOT * n)
    return counts.reshape(N_BOOT, n)[:, which].astype(float), n


def median_interval(x, seed: int = 0) -> tuple[float, float]:
    """95% percentile-bootstrap interval of the median of x (NaN with fewer than two values)."""
    x = np.asarray(x, float)
    if len(x) < 2:
        return math.nan, math.nan
    meds = np.median(x[resamples(len(x), seed)], axis=1)
    return tuple(np.percentile(meds, [2.5, 97.5]))


MIN_SEEDS = 5       # a statistic over seeds gets an interval from at least this many; fewer give a range


def _binom_tail(k: int, n: int, p: float, upper: bool) -> float:
    """P(X ≥ k) (upper) or P(X ≤ k) for X ~ Binomial(n, p), summed exactly in log space."""
    if p <= 0.0:
        return float((k <= 0) if upper else 1.0)
    if p >= 1.0:
        return float(1.0 if upper else k >= n)
    js = range(k, n + 1) if upper else range(0, k + 1)
    lp, lq = math.log(p), math.log1p(-p)
    return math.fsum(math.exp(math.lgamma(n + 1) - math.lgamma(j + 1) - math.lgamma(n - j + 1) + j * lp + (n - j) * lq)
                     for j in js)


def clopper_pearson(k: int, n: int, alpha: float = 0.05) -> tuple[float, float]:
    """The exact binomial (Clopper–Pearson) 1 − alpha interval of a share k/n: the p at which
    P(X ≥ k) = alpha/2 and at which P(X ≤ k) = alpha/2 (the beta quantiles B(alpha/2; k, n − k + 1)
    and B(1 − alpha/2; k + 1, n − k)), found by bisection. (NaN, NaN) without a trial."""
    k, n = int(k), int(n)
    if n <= 0:
        return math.nan, math.nan
    if not 0 <= k <= n:
        raise ValueError(f"{k} successes out of {n} trials")

    def root(f):                          # f increasing in p, f(0) < 0 < f(1)
        a, b = 0.0, 1.0
        for _ in range(200):
            m = (a + b) / 2
            if b - a < 1e-15:
                break
            a, b = (m, b) if f(m) < 0 else (a, m)
        return (a + b) / 2

    lo = 0.0 if k == 0 else root(lambda p: _binom_tail(k, n, p, upper=True) - alpha / 2)
    hi = 1.0 if k == n else root(lambda p: alpha / 2 - _binom_tail(k, n, p, upper=False))
    return lo, hi
