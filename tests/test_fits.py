"""Convergence-time slopes against an independent least-squares fit; stability classes."""
import numpy as np
import pandas as pd
import pytest

from icl.fits import slope_with_bootstrap, stability_class, theory_slope


def _frame(slope, noise, seeds=5, seed=0):
    g = np.random.default_rng(seed)
    Ls = [0.1, 0.2, 0.4, 1.0, 2.0]
    rows = [{"L": L, "seed": s, "t": 50 * L**slope * np.exp(noise * g.standard_normal())} for L in Ls for s in range(seeds)]
    return pd.DataFrame(rows)


def test_slope_equals_numpy_polyfit():
    df = _frame(-2.0, 0.1)
    s, lo, hi, n, miss = slope_with_bootstrap(df, "t")
    ref = np.polyfit(np.log(df["L"]), np.log(df["t"]), 1)[0]
    assert s == pytest.approx(ref, rel=1e-12)
    assert lo < s < hi and n == 25 and miss == 0


def test_bootstrap_interval_covers_truth_and_shrinks():
    cover = 0
    for k in range(40):
        _, lo, hi, _, _ = slope_with_bootstrap(_frame(-2.0, 0.3, seed=k), "t", seed=k)
        cover += lo <= -2.0 <= hi
    # nominal 95%; with only 5 seeds (clusters) the percentile bootstrap is liberal: 30/40 measured
    assert cover >= 26
    w_noisy = np.diff(slope_with_bootstrap(_frame(-2.0, 0.3), "t")[1:3])[0]
    w_clean = np.diff(slope_with_bootstrap(_frame(-2.0, 0.03), "t")[1:3])[0]
    assert w_clean < w_noisy / 5


def test_runs_that_never_converged_are_counted_not_used():
    df = _frame(-1.0, 0.0)
    df.loc[df["L"] == 0.1, "t"] = np.nan
    s, _, _, n, miss = slope_with_bootstrap(df, "t")
    assert s == pytest.approx(-1.0, abs=1e-9) and n == 20 and miss == 5


def test_theory_slope_flat_is_minus_two():
    assert theory_slope([0.1, 0.2, 0.3], 4, 100, 3.0, 1.0, "flat", 1e-2) == pytest.approx(-2.0, abs=1e-12)
    sharp = theory_slope([0.5, 1.0, 2.0], 4, 100, 3.0, 1.0, "sharp", 1e-2)
    assert -2.0 < sharp < -1.8                 # the log(KLΔ/ε) factor flattens it a little


def test_stability_classes():
    s = pd.DataFrame({"final_train_loss": [1e-4, 0.5, 2.0, np.nan], "loss0": [1.0, 1.0, 1.0, 1.0],
                      "diverged": [False, False, False, True]})
    assert stability_class(s).tolist() == ["converged", "stalled", "diverged", "diverged"]
