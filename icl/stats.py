"""The bootstrap, written once: every interval in the tables and verdicts resamples N_BOOT times
from numpy's PCG64 seeded with `seed`, so the same data and seed give the same interval."""
from __future__ import annotations

import functools
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


def percentile_interval(draws, n_units: int, level: float = 0.95,
                        bounds: tuple[float, float] = (-math.inf, math.inf)) -> tuple[float, float]:
    """The level interval of a statistic from its bootstrap draws over n_units independent units
    (values, runs or seeds): the draws' percentile interval widened about their median by
    √(n/(n−1))·t(1 − α/2; n−1)/z(1 − α/2), the factor that turns the percentile interval of a
    mean (z and the plug-in spread) into its Student-t interval. Unwidened, a "95 %" interval over
    five seeds covers about 85 %; the factor is 1.58 at n = 5, 1.06 at n = 30, and tends to 1.
    (Hesterberg's expanded percentiles cannot reach past the data's own extremes, and cover 92 %
    at n = 5.) Clipped to the statistic's natural `bounds` (a correlation's [−1, 1], a share's
    [0, 1]), where the truth lies. NaN without a finite draw or with fewer than two units."""
    x = np.asarray(draws, float)
    x = x[np.isfinite(x)]
    if not len(x) or n_units < 2:
        return math.nan, math.nan
    p = 0.5 + level / 2
    widen = math.sqrt(n_units / (n_units - 1)) * t_quantile(p, n_units - 1) / normal_quantile(p)
    lo, mid, hi = np.percentile(x, [100 * (1 - p), 50, 100 * p])
    return float(max(mid - widen * (mid - lo), bounds[0])), float(min(mid + widen * (hi - mid), bounds[1]))


def normal_quantile(p: float) -> float:
    """The p-quantile of the standard normal, by bisection on math.erfc's CDF."""
    a, b = -40.0, 40.0
    for _ in range(100):
        m = (a + b) / 2
        a, b = (m, b) if 0.5 * math.erfc(-m / math.sqrt(2)) < p else (a, m)
    return (a + b) / 2


def median_interval(x, seed: int = 0, bounds: tuple[float, float] = (-math.inf, math.inf)) -> tuple[float, float]:
    """95% bootstrap interval of the median of x (percentile_interval, within the values' natural
    `bounds`; NaN with fewer than two values)."""
    x = np.asarray(x, float)
    if len(x) < 2:
        return math.nan, math.nan
    return percentile_interval(np.median(x[resamples(len(x), seed)], axis=1), len(x), bounds=bounds)


MIN_SEEDS = 5       # a statistic over seeds gets an interval from at least this many; fewer give a range


@functools.lru_cache(maxsize=256)
def t_quantile(p: float, df: int) -> float:
    """The p-quantile of Student's t with df degrees of freedom, by bisection on its CDF (the
    density integrated by Simpson's rule from 0): numpy has no t distribution and scipy is no
    dependency. Cached: a table asks for the same few quantiles again and again."""
    if not 0 < p < 1 or df < 1:
        raise ValueError(f"t quantile needs 0 < p < 1 and df ≥ 1, got p={p}, df={df}")
    c = math.exp(math.lgamma((df + 1) / 2) - math.lgamma(df / 2)) / math.sqrt(df * math.pi)

    def cdf(t: float) -> float:
        x = np.linspace(0.0, abs(t), 4001)
        f = c * (1 + x ** 2 / df) ** (-(df + 1) / 2)
        area = (x[1] - x[0]) / 3 * (f[0] + f[-1] + 4 * f[1:-1:2].sum() + 2 * f[2:-1:2].sum())
        return 0.5 + math.copysign(area, t)

    a, b = -1.0, 1.0
    while cdf(a) > p:
        a *= 2
    while cdf(b) < p:
        b *= 2
    for _ in range(60):
        m = (a + b) / 2
        a, b = (m, b) if cdf(m) < p else (a, m)
    return (a + b) / 2


def mean_interval(x, level: float = 0.95) -> tuple[float, float, float]:
    """(mean, lo, hi): the mean of a few independent values (one per seed) and its Student-t
    interval, mean ± t·s/√n. A percentile bootstrap of five values is about a third too narrow
    (it uses z and the plug-in spread); the t interval keeps its coverage at n = 5. NaN bounds
    with fewer than two values."""
    x = np.asarray(x, float)
    if len(x) < 2:
        return (float(x.mean()) if len(x) else math.nan), math.nan, math.nan
    m, h = float(x.mean()), t_quantile(0.5 + level / 2, len(x) - 1) * float(x.std(ddof=1)) / math.sqrt(len(x))
    return m, m - h, m + h


def welch_interval(x, y, level: float = 0.95) -> tuple[float, float, float]:
    """(mean(x) - mean(y), lo, hi): the difference of two groups' means (two sets of seeds, each
    its own) with Welch's interval, ± t·se at the Welch-Satterthwaite degrees of freedom, which
    keeps its coverage where the groups' spreads differ. NaN bounds where a group has fewer than two."""
    x, y = np.asarray(x, float), np.asarray(y, float)
    d = float(x.mean() - y.mean()) if len(x) and len(y) else math.nan
    if len(x) < 2 or len(y) < 2:
        return d, math.nan, math.nan
    vx, vy = x.var(ddof=1) / len(x), y.var(ddof=1) / len(y)
    se = math.sqrt(vx + vy)
    if se == 0:
        return d, d, d
    df = (vx + vy) ** 2 / (vx ** 2 / (len(x) - 1) + vy ** 2 / (len(y) - 1))
    h = t_quantile(0.5 + level / 2, max(1.0, math.floor(df * 100) / 100)) * se    # rounded down: cached, conservative
    return d, d - h, d + h


def equivalence_seeds(sd: float, margin: float, arms: int = 2, power: float = 0.8, alpha: float = 0.05) -> int:
    """Seeds (per arm) that two one-sided tests at level `alpha` each need to show, with probability
    `power`, that a true difference of 0 lies within ±`margin`, the seeds' standard deviation `sd`
    n = arms·sd²·(t_{1−α} + t_{1−(1−power)/2})²/margin², arms = 2 for two independent sets of seeds (a
    difference of means, df = 2(n − 1)), 1 for paired differences (df = n − 1); the t quantiles at
    the n they give, from the normal approximation on (at five seeds they need a third more)."""
    q = lambda f: normal_quantile(1 - alpha) + normal_quantile(1 - (1 - power) / 2) if f is None else \
        t_quantile(1 - alpha, f) + t_quantile(1 - (1 - power) / 2, f)                 # noqa: E731
    n = max(2, int(math.ceil(arms * sd ** 2 * q(None) ** 2 / margin ** 2)))
    for _ in range(50):
        new = max(2, int(math.ceil(arms * sd ** 2 * q(arms * (n - 1)) ** 2 / margin ** 2)))
        if new == n:
            break
        n = new
    return n


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


def clustered_share_interval(hits, clusters, alpha: float = 0.05) -> tuple[float, float, float]:
    """(ρ, lo, hi): the exact binomial interval of a share of runs that come in clusters (the
    runs of one seed share its draws), over the effective number of independent runs N/deff,
    deff = 1 + (m̄ − 1)ρ (Kish's design effect, m̄ the mean cluster size), ρ the one-way ANOVA
    estimate of the intra-cluster correlation clipped to [0, 1] and moved toward 1 by (1 − ρ)/G for
    G clusters (the estimate is biased low with few: at 6 seeds uncorrected it covers 92%, corrected
    ≥ 95%, tests/test_hypotheses.py's Monte Carlo). Where the runs show no variation
    from which to estimate it (all alike) ρ is taken as 1: each cluster counts once. The share's
    count over the effective runs is rounded down for the lower end and up for the upper, so the
    interval is never narrower than the exact one at the effective size."""
    x = np.asarray(hits, float)
    _, g = np.unique(np.asarray(clusters), return_inverse=True)
    n, G = len(x), int(g.max()) + 1 if len(x) else 0
    if not n:
        return math.nan, math.nan, math.nan
    m = np.bincount(g, minlength=G).astype(float)
    p_i = np.bincount(g, weights=x, minlength=G) / m
    p = float(x.mean())
    if G < 2 or n == G:
        rho = 0.0 if n == G else 1.0
    else:
        n0 = (n - (m * m).sum() / n) / (G - 1)
        msb = float((m * (p_i - p) ** 2).sum() / (G - 1))
        msw = float((m * p_i * (1 - p_i)).sum() / (n - G))
        den = msb + (n0 - 1) * msw
        rho = 1.0 if den <= 0 else float(np.clip((msb - msw) / den, 0.0, 1.0))
        rho += (1.0 - rho) / G        # the ANOVA estimate is biased low with few clusters (tests: coverage)
    n_eff = max(1, int(math.floor(n / (1 + (n / G - 1) * rho) + 1e-9)))
    lo, _ = clopper_pearson(int(math.floor(p * n_eff + 1e-9)), n_eff, alpha)
    _, hi = clopper_pearson(int(math.ceil(p * n_eff - 1e-9)), n_eff, alpha)
    return rho, lo, hi
