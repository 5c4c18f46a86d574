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
