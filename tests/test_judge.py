"""The rules every verdict obeys (icl.claims.judge), each shown to hold, fail and be inconclusive."""
import math

import numpy as np
import pandas as pd
import pytest

from icl import claims
from icl.claims import FAILS, HOLDS, UNSURE
from icl.claims.judge import Band, Choices, boot, by_setting, exclude, judge, robust, settings


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
    assert 1.0 <= lo < 5.1 < hi <= 9.1


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
