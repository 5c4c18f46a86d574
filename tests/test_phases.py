"""Phase analysis on synthetic curves whose breakpoints are known."""
import numpy as np
import pytest

from icl.phases import phases, segment


def _curve(breaks_epoch, slopes, epochs, noise=0.0, seed=0):
    """log-loss piecewise linear in log(1+epoch), continuous, with the given slopes."""
    x = np.log1p(epochs)
    xb = np.log1p(np.asarray(breaks_epoch, float))
    y = np.zeros_like(x)
    for i, xi in enumerate(x):
        y_acc, x_prev = 0.0, 0.0
        for b, s in zip(list(xb) + [np.inf], slopes):
            seg_end = min(xi, b)
            if seg_end > x_prev:
                y_acc += s * (seg_end - x_prev)
            x_prev = b
            if xi <= b:
                break
        y[i] = y_acc
    y += noise * np.random.default_rng(seed).standard_normal(len(x))
    return np.exp(y)


@pytest.mark.parametrize("breaks,slopes", [
    ([], [-1.0]),
    ([40], [-0.2, -3.0]),
    ([30, 150], [-0.1, -4.0, -0.5]),
])
def test_recovers_known_breakpoints(breaks, slopes):
    epochs = np.arange(0, 401, 2)
    n, ends = phases(epochs, _curve(breaks, slopes, epochs, noise=0.01))
    assert n == len(breaks) + 1
    for got, want in zip(ends, breaks):
        # a breakpoint is located to within 15% in epoch (about 0.15 in log-epoch)
        assert abs(np.log1p(got) - np.log1p(want)) < 0.15, (ends, breaks)


def test_smooth_curve_is_one_phase():
    epochs = np.arange(0, 401, 4)
    loss = 1.0 / (1.0 + epochs) ** 1.5 * (1 + 0.002 * np.sin(epochs))
    assert phases(epochs, loss)[0] == 1


def test_diverged_curve_is_cut_at_nan():
    epochs = np.arange(0, 200, 2)
    loss = _curve([50], [-0.1, -3.0], epochs)
    loss[60:] = np.nan
    n, ends = phases(epochs, loss)
    assert n == 2 and abs(ends[0] - 50) < 10


def test_segment_rss_zero_for_exact_lines():
    x = np.arange(12.0)
    y = np.where(x < 6, 2 * x, 30 - x)
    rss, cuts = segment(x, y, 2, min_len=3)
    assert rss == pytest.approx(0.0, abs=1e-9) and cuts == [6]
