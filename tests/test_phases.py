"""Phases of the own logit z(t) on curves whose phases are known by construction: LDL's picture
(the own logit grows at one rate per phase), single laws (constant rate, a power-law or an
exponential loss), the mean-field dynamics of Lemma 2, noise, and speeds over a 100x range."""
import numpy as np
import pytest

from icl.tables.phases import MAX_PHASES, TOL, logit, phases
from icl.theory import ldl


def piecewise_logit(rates, ends, T, p=0.25):
    """z(t) at every epoch 0..T of a run whose own logit grows at rates[i] until ends[i] (LDL
    Props. 2-4: one rate per phase), starting at uniform attention p."""
    t = np.arange(0, T + 1, dtype=float)
    r = np.array([rates[np.searchsorted(ends, x, side="right")] for x in t[:-1]])
    return t, np.log(p / (1 - p)) + np.concatenate([[0.0], np.cumsum(r)])


@pytest.mark.parametrize("rates,ends", [([0.05], []), ([0.1, 0.02], [100]), ([0.2, 0.05, 0.01], [50, 200])])
@pytest.mark.parametrize("speed", [1, 10, 100])
def test_counts_the_phases_of_ldl_dynamics_at_any_speed(rates, ends, speed):
    """The same dynamics run 1x, 10x and 100x faster (T shrinks with it, down to 40 epochs):
    the count and, on the run's own clock, the phase ends are the same."""
    T = 4000 // speed
    t, z = piecewise_logit([r * speed for r in rates], [e / speed for e in ends], T)
    got = phases(t, z)
    if speed == 100 and len(ends) == 2:     # a 0.5-epoch Phase I is shorter than a step: no count can see it
        assert got.n == 2
        return
    assert got.n == len(ends) + 1, got
    np.testing.assert_allclose(np.array(got.ends) * speed, ends, rtol=0.05, atol=2.0 * speed)   # located within 5%


@pytest.mark.parametrize("name,loss", [
    ("power law", lambda t: (1 + t / 3.0) ** -1.0),
    ("exponential", lambda t: np.exp(-t / 50.0)),
    ("power law with a plateau", lambda t: (1 + t / 30.0) ** -2.5),
])
def test_a_single_law_is_one_phase(name, loss):
    """A loss that follows one law: late in training 1 − Attn_own ∝ sqrt(loss), so z = −½ log loss
    up to a constant; each of these is one phase, over four decades of time."""
    t = np.arange(0, 4001, dtype=float)
    assert phases(t, -0.5 * np.log(loss(t))).n == 1


def test_the_mean_field_dynamics_have_two_phases():
    """LDL's population dynamics (Lemma 2, integrated by icl.theory.ldl) have a regime change
    of their own: the own logit first grows at a near-constant rate, then logarithmically. No
    single law follows it within TOL; two do. Checked independently: the phase boundary lies
    where the fitted early rate and the late logarithm meet, i.e. where the growth rate has
    fallen to a fraction of its start."""
    V = 3 / np.sqrt(2) * np.eye(4, 15)
    loss, attn = ldl.mean_field_curve(V, np.full(4, 0.25), 0.3, 0.3, 8.0, 400)
    z = logit([np.mean(np.diag(a)) for a in attn])
    t = np.arange(len(z), dtype=float)
    got = phases(t, z)
    assert got.n == 2, got
    rate = np.diff(z)
    end = got.ends[0]
    assert rate[int(end)] < 0.5 * rate[:5].max() and rate[int(end) // 3] > rate[int(end)]


def test_the_count_does_not_depend_on_other_runs_or_on_where_the_trace_ends_after_convergence():
    t, z = piecewise_logit([0.1, 0.02], [100], 400)
    alone = phases(t, z)
    longer_t, longer_z = piecewise_logit([0.1, 0.02], [100], 4000)      # the same run trained 10x longer
    assert alone.n == phases(longer_t, longer_z).n == 2


def test_noise_raises_the_tolerance_not_the_count():
    t, z = piecewise_logit([0.1, 0.02], [100], 400)
    noisy = z + 0.05 * np.random.default_rng(0).standard_normal(len(z))
    got = phases(t, noisy)
    assert got.n == 2 and got.tol > TOL


def test_an_irregular_trace_has_no_count():
    t = np.arange(0, 401, dtype=float)
    z = np.where((t // 10) % 2 == 0, 0.0, 3.0)        # square wave: a new law every 10 epochs
    assert phases(t, z).n is None and MAX_PHASES < 40


def test_a_diverged_trace_ends_at_the_first_non_finite_value():
    t, z = piecewise_logit([0.1, 0.02], [100], 400)
    z[300:] = np.nan
    got = phases(t, z)
    assert got.n == 2 and abs(got.ends[0] - 100) <= 2


def test_on_the_mean_field_flow_the_counter_sees_two_phases_in_both_regimes():
    """benchmarks/phase_counter.py's mean-field rows: LDL's own population flow (Lemma 2,
    balanced counts), counted as a run is (icl.tables.measures.phase_counts, same window), at flat
    L = 0.1, 0.2 and sharp L = 1.5, 2 of the default settings, for the cosine at c = 0.5 (lr 5) and
    the shape family with lr_rule: clock. The sharp flow shows two phases, not three: LDL's third
    phase is not in its own mean-field limit (the phase rows' flow column reads it per setting,
    icl.analyse.claims.ldl.flow)."""
    import sys
    from pathlib import Path
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    import phase_counter as B
    for model, c in B.CASES.values():
        if model["kind"] != "softmax_q":
            continue
        counts = B.mean_field_counts(B.experiment(model, c))
        sharp = [n for rg, _, n in counts if rg == "sharp"]
        assert sharp == [2, 2], (model, c, counts)
        assert all(n in (1, 2) for rg, _, n in counts if rg == "flat")
        assert not B.separates(counts)
