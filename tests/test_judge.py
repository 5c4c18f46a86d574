"""The rules every verdict obeys (icl.analyse.claims.judge), each shown to hold, fail and be inconclusive."""
import math

import numpy as np
import pandas as pd
import pytest

from icl.analyse import claims
from icl.analyse.claims import FAILS, HOLDS, UNSURE
from icl.analyse.claims.judge import Band, Choices, boot, by_setting, exclude, judge, robust, settings


def test_a_wide_interval_that_merely_overlaps_is_inconclusive():
    """Three seeds with slopes 0, −4 and −2: the interval [−4, 0] overlaps the band [−2.1, −1.9]
    but says nothing; it must not read holds."""
    slopes = np.array([0.0, -4.0, -2.0])
    lo, hi = slopes.min(), slopes.max()
    v, why = judge(lo, hi, Band(-2.0, -2.0, 0.1))
    assert v == UNSURE and "width 4" in why


@pytest.mark.parametrize("lo,hi,expect", [(-2.05, -1.95, HOLDS), (-3.0, -2.5, FAILS), (-2.2, -2.0, UNSURE),
                                          (math.nan, math.nan, UNSURE)])
def test_interval_against_band(lo, hi, expect):
    assert judge(lo, hi, Band(-2.0, -2.0, 0.1))[0] == expect


def test_bands_scale_about_their_centre_within_natural_bounds():
    b = Band(1.0, 1.0, 0.1, floor=0.0, ceil=1.0)
    assert b.edges() == (0.9, 1.0) and b.edges(0.5) == (0.95, 1.0) and b.edges(1.5) == pytest.approx((0.85, 1.0))
    one_sided = Band(0.04, math.inf, 0.02)
    assert one_sided.edges(0.5) == (0.03, math.inf) and one_sided.text() == "≥ 0.02"


def test_holds_needs_an_interval():
    with pytest.raises(ValueError, match="needs an interval"):
        claims.verdict("ldl.phases", HOLDS, prediction="p", measurement="m")
    assert claims.verdict("ldl.phases", HOLDS, prediction="p", measurement="m", ci_lo=1, ci_hi=2)["fragile"] == ""


def test_cluster_bootstrap_needs_three_units_and_resamples_whole_clusters():
    x = np.array([1.0, 1.1, 5.0, 5.2, 9.0, 9.1])
    assert np.isnan(boot(x[:4], np.mean, clusters=[0, 0, 1, 1])[0])
    lo, hi = boot(x, np.mean, clusters=[0, 0, 1, 1, 2, 2])
    from icl import stats
    whole = np.array([1.05, 5.1, 9.05])[stats.resamples(3)].mean(1)        # the clusters' means, drawn whole
    assert (lo, hi) == pytest.approx(stats.percentile_interval(whole, 3), rel=1e-12)
    assert (lo, hi) != pytest.approx(boot(x, np.mean), rel=1e-3)          # six units are another interval


def test_the_bootstrap_takes_every_resample_at_once_as_it_takes_them_one_by_one():
    """boot's array form (np.mean or np.median; single values, or clusters of one size, interleaved
    as seeds are in a runs table) against its loop over resamples (the same statistic wrapped, which
    the array form does not recognise): the same interval. Clusters of unequal size take the loop."""
    rng = np.random.default_rng(4)
    x = rng.lognormal(size=35)
    seeds = np.tile(np.arange(7), 5)
    for stat in (np.mean, np.median):
        one_by_one = lambda v, stat=stat: stat(v)
        assert boot(x, stat) == boot(x, one_by_one)
        assert boot(x, stat, clusters=seeds) == boot(x, one_by_one, clusters=seeds)
        uneven = np.r_[seeds[:-1], 0]
        assert boot(x, stat, clusters=uneven) == boot(x, one_by_one, clusters=uneven)


def runs_frame():
    return pd.DataFrame({"run_id": [f"r{i}" for i in range(8)], "model": "m", "lr": [1.0] * 4 + [5.0] * 4,
                         "L": [0.1, 0.1, 1.0, 1.0] * 2, "c": [0.1, 0.1, 1.0, 1.0] * 2, "seed": [0, 1] * 4,
                         "delta": 3.0, "shard": "s"})


def test_one_group_per_setting_named_by_every_swept_setting():
    """lr is swept: two groups; c moves with L (zipped): part of the L axis, not a setting."""
    df = runs_frame()
    assert settings(df) == ["lr"]
    labels = [lab for lab, _ in by_setting(df, settings(df))]
    assert labels == ["lr=1", "lr=5"]


def test_excluded_runs_are_counted():
    df = pd.DataFrame({"diverged": [False, True, False, False], "loss0": 1.0,
                       "final_train_loss": [0.1, np.nan, 1.5, 0.2], "memorises": [False, False, False, True]})
    kept, note = exclude(df)
    assert len(kept) == 1
    assert note == "3 of 4 runs left out (1 diverged, 1 ended above its initial loss, 1 memorised its training prompts)"


def test_fragile_lists_the_choices_that_flip_a_verdict():
    def claim(x, choices=Choices()):
        lo, hi = x - 0.01, x + 0.01
        v, why = judge(lo, hi, Band(1.0, 1.0, 0.1), choices)
        return [claims.verdict("ldl.phases", v, prediction="p", measurement="m", reason=why, ci_lo=lo, ci_hi=hi)]
    solid, edge = robust(claim, 1.0, uses=("band",))[0], robust(claim, 1.045, uses=("band",))[0]
    assert solid["verdict"] == HOLDS and solid["fragile"] == ""
    assert edge["verdict"] == HOLDS and edge["fragile"] == "band half as wide: inconclusive"


# ----------------------------------------------------------------------------- intervals that mean what they say

@pytest.mark.parametrize("k,n", [(0, 3), (3, 3), (1, 3), (7, 18), (18, 18), (5, 10), (29, 30), (3, 30)])
def test_clopper_pearson_against_the_beta_quantiles(k, n):
    """The exact binomial interval against an independent computation: the beta quantiles
    B(0.025; k, n − k + 1) and B(0.975; k + 1, n − k), solved with mpmath's regularised incomplete
    beta function."""
    import mpmath as mp
    from icl.stats import clopper_pearson
    lo, hi = clopper_pearson(k, n)
    q = lambda a, b, target: float(mp.findroot(lambda p: mp.betainc(a, b, 0, p, regularized=True) - target,  # noqa: E731
                                               (mp.mpf("1e-12"), 1 - mp.mpf("1e-12")), solver="bisect",
                                               tol=1e-30, verify=False))
    ref_lo = 0.0 if k == 0 else q(k, n - k + 1, 0.025)
    ref_hi = 1.0 if k == n else q(k + 1, n - k, 0.975)
    assert (lo, hi) == pytest.approx((ref_lo, ref_hi), abs=1e-9)
    # the closed forms at the ends: all or none of n runs
    if k == n:
        assert lo == pytest.approx(0.025 ** (1 / n), abs=1e-12)
    if k == 0:
        assert hi == pytest.approx(1 - 0.025 ** (1 / n), abs=1e-12)


def test_a_share_of_runs_gets_its_exact_interval():
    from icl.analyse.claims.judge import share
    sh, lo, hi = share(np.array([True] * 6 + [False] * 3))
    assert sh == pytest.approx(2 / 3) and 0.29 < lo < 0.30 and 0.92 < hi < 0.93
    assert all(map(math.isnan, share([])))


def test_a_zero_width_interval_from_resampling_decides_nothing():
    """The issue's case: three runs that all count 3 phases bootstrap to [3, 3], which read
    'holds' (or, as a difference of identical counts, 'does not hold'); a resampled interval of
    zero width is no evidence of precision, so it reads inconclusive."""
    from icl.analyse.claims.judge import boot_median
    lo, hi = boot_median(np.array([3.0, 3.0, 3.0]))
    assert lo == hi == 3.0
    v, why = judge(lo, hi, Band(3.0, 3.0, 0.5))
    assert v == UNSURE and "zero width" in why
    d = np.array([1.0, 1.0, 1.0]) - np.array([1.0, 1.0, 1.0])          # "+0.00 [0, 0]": did read does not hold
    assert judge(*boot(d, np.mean), Band(1.0, 1.0, 0.5))[0] == UNSURE
    # float rounding is no width either; real spread between runs is
    assert judge(0.1 + 0.2, 0.3, Band(0.0, 1.0))[0] == UNSURE
    g = np.random.default_rng(0)
    assert judge(*boot_median(3.0 + 0.01 * g.standard_normal(9)), Band(3.0, 3.0, 0.5))[0] == HOLDS


def test_fewer_than_five_seeds_give_no_interval_over_seeds():
    from icl.analyse.claims.judge import too_few_seeds
    assert too_few_seeds(3) == "3 seeds: an interval over seeds needs at least 5"
    assert too_few_seeds(1) == "1 seed: an interval over seeds needs at least 5"
    assert too_few_seeds(5) == "" and too_few_seeds(12) == ""


def test_the_index_and_the_report_count_per_setting_verdicts_with_per_run_rows_apart():
    """The issue's case: per-run mean-field rows were added into the index's counts ('170 holds'
    where 67 were per-setting verdicts)."""
    from icl.report.index import verdict_counts
    row = lambda v, scope: claims.verdict("ldl.mean_field", v, prediction="p", measurement="m", reason="r",  # noqa: E731
                                          ci_lo=0.0, ci_hi=1.0, scope=scope)
    rows = [row(HOLDS, "setting")] * 2 + [row(FAILS, "setting")] + [row(HOLDS, "run")] * 5 + [row(FAILS, "run")] * 2
    counts, per_run = verdict_counts(claims.table("e", rows))
    assert dict(counts) == {HOLDS: 2, FAILS: 1, UNSURE: 0, claims.NOT_TESTABLE: 0} and per_run == 7


def test_fragility_moves_the_band_edge_nearest_the_measurement():
    """Issue 35 item 3: a band half as wide keeps its natural bound and moves the edge a measurement
    can cross; a measurement above a band is tested at the upper edge, not at a centre-shrunk band."""
    share = Band(1.0, 1.0, 0.1, floor=0.0, ceil=1.0)            # [0.9, 1]: 1 is the share's natural bound
    assert share.edges(0.5, at=0.99) == pytest.approx((0.95, 1.0)) and share.edges(1.5, at=0.99) == pytest.approx((0.85, 1.0))
    beta = Band(0.99, 1.17)
    assert beta.edges(0.5, at=1.6) == pytest.approx((0.99, 1.125)) and beta.edges(1.5, at=1.6) == pytest.approx((0.99, 1.215))
    assert beta.edges(0.5, at=0.5) == pytest.approx((1.035, 1.17)) and beta.edges(0.5) == pytest.approx((1.035, 1.125))
    # a share of 1.0 [0.929, 1] (50 runs, all monotone): in [0.9, 1] and in its half-width version [0.95, 1]? no: flips
    assert judge(0.929, 1.0, share)[0] == HOLDS and judge(0.929, 1.0, share, Choices(band=0.5))[0] == UNSURE
    assert judge(0.96, 1.0, share, Choices(band=0.5))[0] == HOLDS      # 90 runs all monotone: decisive, not the band's
    # a β of 1.19-1.21 against [0.99, 1.17]: outside; 1.5× wider at the near edge (to 1.215) it is inside
    assert judge(1.19, 1.21, beta)[0] == FAILS and judge(1.19, 1.21, beta, Choices(band=1.5))[0] == HOLDS


def test_t_quantile_against_its_closed_forms():
    """Student's t with 1 degree of freedom is Cauchy, t = tan(π(p − ½)); with 2, t = (2p − 1)/√(2p(1 − p));
    for large df it tends to the normal quantile 1.959964."""
    from icl.stats import t_quantile
    for p in (0.6, 0.9, 0.975, 0.995, 0.025):
        assert t_quantile(p, 1) == pytest.approx(math.tan(math.pi * (p - 0.5)), rel=1e-7)
        assert t_quantile(p, 2) == pytest.approx((2 * p - 1) / math.sqrt(2 * p * (1 - p)), rel=1e-7)
    assert t_quantile(0.975, 100000) == pytest.approx(1.959964, abs=1e-4)
    with pytest.raises(ValueError, match="0 < p < 1"):
        t_quantile(1.0, 4)


def test_mean_interval_covers_the_mean_95_percent_of_the_time_at_five_values():
    """Monte Carlo: 20,000 draws of five normal values; the t interval covers the true mean in
    95% of them (± 0.5%, four binomial standard errors at 20,000 draws: 0.15% each), where the
    percentile bootstrap's z-width (1.96·s/√5) covers only about 88%."""
    from icl.stats import mean_interval
    rng = np.random.default_rng(7)
    x = rng.normal(3.0, 2.0, size=(20000, 5))
    hit = np.array([lo <= 3.0 <= hi for _, lo, hi in (mean_interval(r) for r in x)])
    assert hit.mean() == pytest.approx(0.95, abs=0.005)
    z = np.abs(x.mean(1) - 3.0) <= 1.959964 * x.std(1, ddof=1) / math.sqrt(5)
    assert z.mean() < 0.90
    m, lo, hi = mean_interval([1.0])
    assert m == 1.0 and math.isnan(lo) and math.isnan(hi)


def test_welch_interval_keeps_its_coverage_where_the_spreads_and_sizes_differ():
    """Monte Carlo: 6 values of sd 0.4 against 5 of sd 0.15 (the two GPT arms' seeds' log spikes),
    4,000 draws: Welch's interval covers the true difference in 95% of them (± 1.4%, four binomial
    standard errors). Equal values: a zero-width interval; one value in a group: no interval."""
    from icl.stats import welch_interval
    rng = np.random.default_rng(11)
    x, y = rng.normal(0.3, 0.4, size=(4000, 6)), rng.normal(0.1, 0.15, size=(4000, 5))
    out = np.array([welch_interval(a, b) for a, b in zip(x, y)])
    assert np.allclose(out[:, 0], x.mean(1) - y.mean(1))
    assert ((out[:, 1] <= 0.2) & (0.2 <= out[:, 2])).mean() == pytest.approx(0.95, abs=0.014)
    assert welch_interval([1.0, 1.0], [0.5, 0.5]) == (0.5, 0.5, 0.5)
    d, lo, hi = welch_interval([1.0], [0.5, 0.7])
    assert d == pytest.approx(0.4) and math.isnan(lo) and math.isnan(hi)


def test_normal_quantile_against_its_closed_forms():
    """Φ⁻¹ at ½ is 0, at Φ(1) = ½·erfc(−1/√2) is 1; 1.959964 at 0.975; odd about ½."""
    from icl.stats import normal_quantile
    assert normal_quantile(0.5) == pytest.approx(0.0, abs=1e-12)
    assert normal_quantile(0.5 * math.erfc(-1 / math.sqrt(2))) == pytest.approx(1.0, rel=1e-12)
    assert normal_quantile(0.975) == pytest.approx(1.959963985, rel=1e-9)
    assert normal_quantile(0.01) == pytest.approx(-normal_quantile(0.99), rel=1e-12)


def test_the_bootstrap_interval_is_the_percentiles_widened_by_t_over_z():
    """On draws symmetric about 10 whose 2.5 and 97.5 percentiles are 10 ∓ 1: over n units, the
    interval is 10 ∓ √(n/(n−1))·t(0.975; n−1)/1.959964 (1.5837 at n = 5: t = 2.776445)."""
    from icl.stats import percentile_interval
    draws = 10 + np.linspace(-1, 1, 4001) / 0.95       # the middle 95 % of them within 10 ∓ 1
    for n, t in ((5, 2.776445), (30, 2.045230)):
        w = math.sqrt(n / (n - 1)) * t / 1.959964
        lo, hi = percentile_interval(draws, n)
        assert (lo, hi) == (pytest.approx(10 - w, rel=1e-5), pytest.approx(10 + w, rel=1e-5))
    assert percentile_interval(draws, 5)[1] - 10 == pytest.approx(1.5837, abs=1e-4)
    assert all(math.isnan(v) for v in percentile_interval([np.nan, np.inf], 5) + percentile_interval(draws, 1))


def test_a_bootstrap_over_five_units_covers_95_percent_of_the_time():
    """Monte Carlo, 4,000 draws of five normal values: judge.boot's interval of the mean covers the
    true mean in 94 % of them (95 % ± 1.5 %, about four binomial standard errors at 4,000 draws:
    0.34 % each; the bootstrap of five values falls about a point short of the t interval), where
    the plain percentiles of the same resamples cover about 85 %."""
    from icl import stats
    rng = np.random.default_rng(11)
    x = rng.normal(3.0, 2.0, size=(4000, 5))
    hit = [lo <= 3.0 <= hi for lo, hi in (boot(r, np.mean, seed=i) for i, r in enumerate(x))]
    plain = [np.percentile(r[stats.resamples(5, i)].mean(1), [2.5, 97.5]) for i, r in enumerate(x)]
    assert np.mean(hit) == pytest.approx(0.95, abs=0.015)
    assert np.mean([lo <= 3.0 <= hi for lo, hi in plain]) < 0.88


def test_a_slope_over_five_seeds_covers_its_true_value_95_percent_of_the_time():
    """Monte Carlo, 1,500 sweeps of 5 seeds × 4 values of L: log t = 1.5·log L + a seed's own
    offset and slope (sd 0.3 and 0.2, as seeds differ) + noise (sd 0.1). fits.slope_with_bootstrap's
    interval over seeds covers 1.5 in 95 % ± 2.5 % (four standard errors: 0.56 % each)."""
    from icl.analyse.fits import slope_with_bootstrap
    rng = np.random.default_rng(5)
    Ls = np.array([0.5, 1.0, 2.0, 4.0])
    hits = []
    for i in range(1500):
        off, dsl = rng.normal(0, 0.3, 5), rng.normal(0, 0.2, 5)
        logt = (1.5 + dsl[:, None]) * np.log(Ls)[None] + off[:, None] + rng.normal(0, 0.1, (5, 4))
        df = pd.DataFrame({"L": np.tile(Ls, 5), "seed": np.repeat(np.arange(5), 4), "t": np.exp(logt).ravel()})
        _, lo, hi, _, _ = slope_with_bootstrap(df, "t", seed=i)
        hits.append(lo <= 1.5 <= hi)
    assert np.mean(hits) == pytest.approx(0.95, abs=0.025)
