"""The off-diagonal logits' rate per phase (icl.tables.measures.phase_rates), against a plain loop over
a synthetic logit path whose phases move at known rates, one off-diagonal logit oscillating."""
import numpy as np

from icl.tables.measures import phase_rates


def synthetic(K=3, E=41):
    """q[e, i, j]: own logits rise by 1 an epoch up to epoch 10, then by 0.1; the off-diagonal ones
    fall by 1/(K − 1) of it, and q_(0,1) adds a 0.2 zigzag in the second phase."""
    t = np.arange(E, dtype=float)
    own = np.where(t <= 10, t, 10 + 0.1 * (t - 10))
    q = np.zeros((E, K, K))
    for i in range(K):
        for j in range(K):
            q[:, i, j] = own if i == j else -own / (K - 1)
    q[11:, 0, 1] += 0.2 * (np.arange(11, E) % 2)
    return t, q


def loop_rates(q, t, bounds):
    """The same statistic, written out: Σ over epochs of |Δq| per off-diagonal logit, their mean,
    over the mean rise of the own logits, in each stretch of `bounds`."""
    K = q.shape[1]
    out = []
    for a, b in zip(bounds[:-1], bounds[1:]):
        i, j = int(np.searchsorted(t, a)), int(np.searchsorted(t, b))
        paths = [sum(abs(q[e + 1, r, c] - q[e, r, c]) for e in range(i, j)) for r in range(K) for c in range(K) if r != c]
        rises = [q[j, r, r] - q[i, r, r] for r in range(K)]
        out.append(np.mean(paths) / np.mean(rises))
    return out


def test_phase_rates_match_a_loop_and_the_known_rates():
    t, q = synthetic()
    bounds = [0.0, 10.0, 40.0]
    got = phase_rates(q[None], t, [bounds])[0]
    np.testing.assert_allclose(got, loop_rates(q, t, bounds), rtol=1e-12)
    # phase 1: every off-diagonal logit falls by half the own rise, (K − 1)·rate = 1 exactly
    assert abs(2 * got[0] - 1) < 1e-12
    # phase 2 (K = 3, own rise 3): q_(0,1) steps +0.15, −0.25, ... (path 15 × 0.4 = 6), the other five
    # fall by 0.05 an epoch (path 1.5): mean path (6 + 5 × 1.5)/6 = 2.25, rate 2.25/3 = 0.75
    assert abs(got[1] - 0.75) < 1e-9


def test_a_phase_whose_own_logits_do_not_rise_has_no_rate_and_runs_keep_their_own_phases():
    t, q = synthetic()
    flat = q.copy()
    flat[20:] = flat[20]                      # nothing moves after epoch 20
    got = phase_rates(np.stack([q, flat]), t, [[0.0, 10.0, 40.0], [0.0, 10.0, 20.0, 40.0]])
    assert len(got[0]) == 2 and len(got[1]) == 3
    assert np.isnan(got[1][2]) and np.isfinite(got[1][1])
