"""Crossing times on a noisy trace (icl.tables.measures.denoise_windows, denoised): read on the loss
averaged until its noise is NOISE_TARGET, not on the raw trace, whose first epoch below a level is
the deepest dip of its noise. The noise here is what fresh prompts give: ldl_polynomial's traces
(200 prompts a step) move by a robust 0.21 in log-loss from epoch to epoch (2026-11-28)."""
import numpy as np
import pytest

from icl.tables.measures import MAX_WINDOW, NOISE_TARGET, crossing_time, denoise_windows, denoised
from icl.tables.phases import noise_level

SIGMA = 0.21          # ldl_polynomial's measured epoch-to-epoch noise in log-loss
E = 301               # its 300 epochs and the start


def _curve(floor: float, tau: float = 80.0) -> np.ndarray:
    """The loss over uniform attention's: from 1 down to `floor`, exponentially with time constant tau."""
    t = np.arange(E, dtype=float)
    return floor + (1.0 - floor) * np.exp(-t / tau)


def _noisy(curve: np.ndarray, runs: int, seed: int = 0) -> np.ndarray:
    return curve[None, :] * np.exp(np.random.default_rng(seed).normal(0.0, SIGMA, (runs, len(curve))))


def test_a_trace_without_noise_is_read_as_it_is():
    """Full-batch GD on fixed prompts: no window, the same numbers, the same crossing."""
    t = np.arange(E, dtype=float)
    traces = np.stack([_curve(0.3), _curve(0.05, 20.0), 1.0 / (1.0 + np.exp((t - 150) / 10)) + 1e-3])
    w = denoise_windows(traces)
    assert w.tolist() == [1, 1, 1]
    np.testing.assert_array_equal(denoised(traces, w), traces)


def test_the_window_brings_the_measured_noise_to_the_target():
    """σ = 0.21 asks for (0.21/0.05)² ≈ 18 epochs, odd: 19; the averaged trace's noise is then near
    the target (Monte Carlo over 50 runs, within 30 %); a noisier trace is capped at a tenth of the epochs."""
    x = _noisy(_curve(0.3), 50)
    w = denoise_windows(x)
    want = np.array([int(np.ceil((noise_level(np.log(r)) / NOISE_TARGET) ** 2)) // 2 * 2 + 1 for r in x])
    assert np.array_equal(w, want) and np.all(w % 2 == 1) and 15 <= np.median(w) <= 23
    # the residual noise of the averaged log-trace, from its departures from the true curve
    resid = np.log(denoised(x, w)) - np.log(_curve(0.3))[None, :]
    assert np.std(resid[:, 20:-20]) == pytest.approx(SIGMA / np.sqrt(np.median(w)), rel=0.3)
    loud = _curve(0.3)[None, :] * np.exp(np.random.default_rng(1).normal(0.0, 1.0, (3, E)))
    assert denoise_windows(loud).tolist() == [int(MAX_WINDOW * E) // 2 * 2 + 1] * 3


def test_a_noisy_run_crosses_when_its_loss_does_not_at_its_deepest_dip():
    """The true curve falls to half at t* = 80·ln(0.7/0.2) = 100.2. On 200 noisy copies the raw first
    crossing comes at a median below 70 (the noise's dips); averaged, the median is within 5 % of t*
    and 95 % of runs within 20 epochs of it."""
    t_star = 80.0 * np.log(0.7 / 0.2)
    x = _noisy(_curve(0.3), 200, seed=2)
    ep = np.arange(E, dtype=float)
    raw = crossing_time(x, ep, 0.5).to_numpy(float)
    fixed = crossing_time(denoised(x, denoise_windows(x)), ep, 0.5).to_numpy(float)
    assert np.median(raw) < 70
    assert np.median(fixed) == pytest.approx(t_star, rel=0.05)
    assert np.quantile(np.abs(fixed - t_star), 0.95) < 20


def test_a_run_that_levels_off_above_the_level_never_reaches_it():
    """A run that settles at 0.65 of uniform attention's loss (ldl_polynomial's softmax_q ends at
    0.60-0.74x) has raw dips below 0.5 in most of 200 noisy copies; averaged, in almost none."""
    x = _noisy(_curve(0.65), 200, seed=3)
    ep = np.arange(E, dtype=float)
    raw = crossing_time(x, ep, 0.5).to_numpy(float)
    fixed = crossing_time(denoised(x, denoise_windows(x)), ep, 0.5).to_numpy(float)
    assert np.isfinite(raw).mean() > 0.9
    assert np.isfinite(fixed).mean() < 0.05


def test_the_ends_average_the_epochs_there_are_and_a_diverged_run_keeps_its_gaps():
    """At the ends the window shrinks (epoch 0 is the mean of epochs 0..h, not a repeated raw value);
    an epoch that is not finite stays so and is left out of its neighbours' means, so a run that
    diverged at epoch 200 keeps its averaged trace before it."""
    x = _noisy(_curve(0.3), 1, seed=4)
    w = denoise_windows(x)
    h = int(w[0]) // 2
    d = denoised(x, w)
    assert d[0, 0] == pytest.approx(np.exp(np.log(x[0, :h + 1]).mean()))
    assert d[0, 100] == pytest.approx(np.exp(np.log(x[0, 100 - h:101 + h]).mean()))
    broken = x.copy()
    broken[0, 200:] = np.nan
    broken[0, 250] = np.inf
    b = denoised(broken, w)
    np.testing.assert_allclose(b[0, :200 - h], d[0, :200 - h])
    assert np.isfinite(b[0, 200 - h:200]).all() and np.isnan(b[0, 200:250]).all() and b[0, 250] == np.inf


def test_an_abrupt_drop_is_read_at_most_half_a_window_early():
    """A noisy run whose loss drops at once from 1 to 0.01 at epoch 150 (a plateau left abruptly):
    the averaged trace crosses half at most half a window before 150, and never after it."""
    t = np.arange(E, dtype=float)
    x = _noisy(np.where(t < 150, 1.0, 0.01), 100, seed=5)
    w = denoise_windows(x)
    cross = crossing_time(denoised(x, w), t, 0.5).to_numpy(float)
    assert np.all(cross <= 150) and np.all(cross >= 150 - w // 2 - 1)
