"""Phases of the own logit z(t), chosen by the data: fits by k laws checked against independent
least squares, and counts chosen against replicates on curves whose phases are known by
construction (LDL's picture: the own logit grows at one rate per phase; single laws), with seeds
that differ in speed as real seeds do (their prompts' counts set their clock: a few per cent)."""
import numpy as np
import pandas as pd
import pytest

from icl.tables import measures
from icl.tables.phases import _THETA, MAX_PHASES, choose, fit, logit, spread, thin
from icl.theory import ldl


def piecewise_logit(rates, ends, T, p=0.25):
    """z(t) at every epoch 0..T of a run whose own logit grows at rates[i] until ends[i] (LDL
    Props. 2-4: one rate per phase), starting at uniform attention p."""
    t = np.arange(0, T + 1, dtype=float)
    r = np.array([rates[np.searchsorted(ends, x, side="right")] for x in t[:-1]])
    return t, np.log(p / (1 - p)) + np.concatenate([[0.0], np.cumsum(r)])


def seeds(rates, ends, T, jitter, n=6, rng=1):
    """n replicates of one setting: each seed's clock runs exp(jitter·N(0, 1)) times faster."""
    g = np.random.default_rng(rng)
    out = []
    for _ in range(n):
        k = float(np.exp(jitter * g.standard_normal()))
        out.append(piecewise_logit([r * k for r in rates], [e / k for e in ends], T)[1])
    return np.arange(T + 1, dtype=float), out


@pytest.mark.parametrize("rates,ends", [([0.05], []), ([0.1, 0.02], [100]), ([0.2, 0.05, 0.01], [50, 200])])
def test_a_trace_made_of_k_laws_is_fitted_exactly_by_k_and_its_ends_found(rates, ends):
    t, z = piecewise_logit(rates, ends, 400)
    f = fit(t, z)
    k = len(rates)
    assert len(f.rms) == len(f.ends) == MAX_PHASES
    assert f.rms[k - 1] < 1e-3 * np.ptp(z)                       # k constant rates fit k constant-rate stretches
    if k > 1:
        assert f.rms[k - 2] > 10 * f.rms[k - 1]                  # one fewer does not
        np.testing.assert_allclose(f.ends[k - 1], ends, rtol=0.05, atol=3.0)
    assert all(np.diff(f.rms[:k]) <= 1e-12)                       # more pieces never fit worse


def test_one_law_is_the_least_squares_fit_over_the_laws():
    """k = 1 against np.linalg.lstsq, law by law, on the thinned epochs the fit sees."""
    t = np.arange(0, 1001, dtype=float)
    z = -0.5 * np.log((1 + t / 7.0) ** -1.3) + 0.05 * np.sin(t / 40.0)
    keep = thin(t)
    tk, zk = t[keep], z[keep]
    u = tk - tk[0]
    best = np.inf
    for g in [np.log1p(u / (th * (tk[-1] - tk[0]))) for th in _THETA] + [u]:
        A = np.vstack([np.ones_like(g), g]).T
        res = zk - A @ np.linalg.lstsq(A, zk, rcond=None)[0]
        best = min(best, float(np.sqrt(np.mean(res ** 2))))
    assert fit(t, z).rms[0] == pytest.approx(best, rel=1e-6, abs=1e-9)


def test_the_spread_is_the_replicates_rms_distance_from_their_mean():
    g = np.random.default_rng(0)
    traces = [np.cumsum(g.standard_normal(300)) for _ in range(4)] + [np.cumsum(g.standard_normal(250))]
    Z = np.stack([z[:250] for z in traces])[:, thin(np.arange(250.0))]
    want = np.sqrt(np.mean(np.var(Z, axis=0, ddof=1)))
    assert spread(traces) == pytest.approx(want, rel=1e-12)
    assert np.isnan(spread(traces[:1]))                            # one seed: no replicate


@pytest.mark.parametrize("rates,ends,want", [([0.05], [], 1), ([0.1, 0.02], [100], 2),
                                             ([0.2, 0.05, 0.01], [50, 200], 3)])
@pytest.mark.parametrize("jitter", [0.02, 0.05])
def test_the_count_is_the_fewest_laws_within_the_seeds_spread(rates, ends, want, jitter):
    """Six seeds a few per cent apart in speed (the default run's seeds sit 0.03-0.10 apart in the
    logit): each counts the phases it was built with."""
    t, zs = seeds(rates, ends, 400, jitter)
    w = spread(zs)
    assert [choose(fit(t, z).rms, w) for z in zs] == [want] * len(zs)


def test_seeds_that_disagree_more_than_a_bend_do_not_resolve_it():
    """Seeds 15 % apart in speed (this draw: a spread of about 1.1 in the logit) sit further apart
    than Phase II's bend is from one law (about 0.56): the data cannot say there are two phases, and
    the count says one, where the same seeds 2 % apart count two."""
    t, zs = seeds([0.1, 0.02], [100], 400, 0.15, rng=2)
    w = spread(zs)
    assert w > max(fit(t, z).rms[0] for z in zs)
    assert {choose(fit(t, z).rms, w) for z in zs} == {1}
    t, close = seeds([0.1, 0.02], [100], 400, 0.02, rng=2)
    assert {choose(fit(t, z).rms, spread(close)) for z in close} == {2}


def test_no_count_without_a_spread_or_for_an_irregular_curve():
    t, z = piecewise_logit([0.1, 0.02], [100], 400)
    rms = fit(t, z).rms
    assert choose(rms, float("nan")) is None and choose(rms, 0.0) is None
    square = np.where((t // 10) % 2 == 0, 0.0, 3.0)      # a new law every 10 epochs
    assert choose(fit(t, square).rms, 0.01) is None


def test_a_diverged_trace_is_fitted_up_to_its_first_non_finite_value():
    t, z = piecewise_logit([0.1, 0.02], [100], 400)
    cut = z.copy()
    cut[300:] = np.nan
    assert fit(t, cut) == fit(t[:300], z[:300])


def _summary(zs, setting):
    """summary_table's phase columns for replicate traces (its shape before phases_over_seeds)."""
    t = np.arange(len(zs[0]), dtype=float)
    fits = [fit(t, z) for z in zs]
    return pd.DataFrame({"run_id": [f"r{i}" for i in range(len(zs))], "phase_rms": [f.rms for f in fits],
                         "phase_fit_ends": [f.ends for f in fits], "phase_logit": list(zs),
                         "qoff_rates_by_count": [[[k] * k for k in range(1, MAX_PHASES + 1)] for _ in zs]}), \
        pd.DataFrame({"run_id": [f"r{i}" for i in range(len(zs))], "seed": range(len(zs)), "L": setting,
                      "shard": "s0", "data_id": [f"d{i}" for i in range(len(zs))]})


def test_phases_over_seeds_counts_each_setting_against_its_own_seeds():
    _, two = seeds([0.1, 0.02], [100], 400, 0.03)
    _, three = seeds([0.2, 0.05, 0.01], [50, 200], 400, 0.03, n=4)
    summ, runs = _summary(two + three, [1.0] * 6 + [2.0] * 4)
    got = measures.phases_over_seeds(summ, runs)
    assert got["n_phases"].tolist() == [2] * 6 + [3] * 4
    assert got["phase_spread"].iloc[0] == pytest.approx(spread(two)) and \
        got["phase_spread"].iloc[-1] == pytest.approx(spread(three))
    assert got["qoff_phase_rates"].iloc[0] == [2, 2] and len(got["phase_ends"].iloc[-1]) == 2
    assert "phase_logit" not in got and "qoff_rates_by_count" not in got
    alone, runs1 = _summary(two[:1], [1.0])                    # one seed: nothing to choose against
    assert measures.phases_over_seeds(alone, runs1)["n_phases"].isna().all()


def test_on_the_mean_field_flow_the_counter_sees_two_phases_in_both_regimes():
    """benchmarks/phase_counter.py's mean-field rows: LDL's own population flow (Lemma 2, balanced
    counts) of the shape family with lr_rule: clock at flat L = 0.1, 0.2 and sharp L = 1.5, 2, fitted
    as a run is and counted within 0.03-0.1 (the range of the default run's seeds' spread): every
    L shows two phases, so the sharp flow does not show three. LDL's third phase is not in its own
    mean-field limit (the phase rows' power, icl.analyse.claims.ldl.phase_power, reads it per setting)."""
    import sys
    from pathlib import Path
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    import phase_counter as B
    model, c = B.CASES["softmax_q, GD clock, c = L (ldl_phase_diagram)"]
    for w in (0.03, 0.1):
        counts = B.mean_field_counts(B.experiment(model, c), {L: w for L in (*B.FLAT, *B.SHARP)})
        assert [n for _, _, n in counts] == [2, 2, 2, 2], (w, counts)
        assert not B.separates(counts)


def test_the_mean_field_dynamics_bend_where_the_fit_puts_the_end_of_phase_one():
    """LDL's population dynamics (Lemma 2, integrated by icl.theory.ldl): where the best two-law fit
    ends its first piece, the growth rate has fallen to a fraction of its start (checked on the
    trace's own differences)."""
    V = 3 / np.sqrt(2) * np.eye(4, 15)
    loss, attn = ldl.mean_field_curve(V, np.full(4, 0.25), 0.3, 0.3, 8.0, 400)
    z = logit([np.mean(np.diag(a)) for a in attn])
    f = fit(np.arange(len(z), dtype=float), z)
    end = f.ends[1][0]
    rate = np.diff(z)
    assert rate[int(end)] < 0.5 * rate[:5].max() and rate[int(end) // 3] > rate[int(end)]
    assert f.rms[1] < 0.2 * f.rms[0]
