"""The LSA model and the evaluation under shift, against icl.theory.lsa and plain numpy."""
import numpy as np
import pytest
import torch

from icl.data import make_dataset
from icl.evaluate.baselines import predict_all
from icl.evaluate.cells import _stats, cells, eval_prompts
from icl.evaluate.shifts import theory_cell
from icl.models import LSA
from icl.theory import lsa


def _weights(d, seed):
    g = np.random.default_rng(seed)
    return g.standard_normal((2, d + 1, d + 1)) * 0.3


def test_forward_equals_numpy_lsa():
    d, P, M = 3, 7, 9
    g = np.random.default_rng(0)
    x, y = g.standard_normal((P, M + 1, d)), g.standard_normal((P, M + 1))
    W = _weights(d, 1)
    m = LSA({"init_scale": 0.3}, d)
    p = {"W_pv": torch.tensor(W[0][None]), "W_kq": torch.tensor(W[1][None])}
    pred, a = m.forward(p, torch.tensor(x[None]), torch.tensor(y[None]))
    ref = lsa.lsa_forward(W[0], W[1], x[:, :-1], y[:, :-1], x[:, -1])
    np.testing.assert_allclose(pred[0].numpy(), ref, rtol=1e-12)
    assert a is None


def test_optimum_weights_predict_like_gamma_inverse():
    d, N = 4, 12
    lam = np.array([2.0, 1.0, 0.5, 0.25])
    Wpv, Wkq = lsa.zfb_optimum_weights(lam, N)
    g = np.random.default_rng(2)
    x = g.standard_normal((50, N + 1, d)) * np.sqrt(lam)
    y = np.einsum("ptd,pd->pt", x, g.standard_normal((50, d)))
    m = LSA({}, d)
    pred, _ = m.forward({"W_pv": torch.tensor(Wpv[None]), "W_kq": torch.tensor(Wkq[None])},
                        torch.tensor(x[None]), torch.tensor(y[None]))
    np.testing.assert_allclose(pred[0].numpy(), lsa.lsa_predict(lsa.optimal_B(lam, N), x[:, :-1], y[:, :-1], x[:, -1]),
                               rtol=1e-10)
    B = LSA.effective({"W_pv": torch.tensor(Wpv[None]), "W_kq": torch.tensor(Wkq[None])})[0].numpy()
    np.testing.assert_allclose(B, lsa.optimal_B(lam, N), rtol=1e-12)


def test_zfb_initialisation():
    m = LSA({"init_scale": 0.2, "init_noise": 0.0}, 3)
    p = m.init([0, 1], ["a", "a"], "cpu", torch.float64)
    assert torch.all(p["W_pv"][:, -1, -1] == 0.2) and p["W_pv"].abs().sum() == pytest.approx(0.4)
    kq = p["W_kq"][0, :3, :3].numpy()
    np.testing.assert_allclose(np.linalg.norm(kq / 0.2), 1.0)    # ‖ΘΘᵀ‖_F = 1
    noisy = LSA({"init_scale": 0.2, "init_noise": 0.01}, 3).init([0, 1], ["a", "a"], "cpu", torch.float64)
    assert not torch.equal(noisy["W_kq"][0], noisy["W_kq"][1])   # each run its own noise


def test_trained_lsa_approaches_gamma_inverse(tmp_path):
    """Adam on fresh prompts: the effective matrix ends within 15% of Γ⁻¹ (d=2, N=10)."""
    from icl.config import validate
    from icl.plan.shards import plan
    from icl.data import write_dataset
    from icl.train.loop import train_shard
    cfg = validate({"experiments": {"z": {
        "tokens": {"kind": "gaussian", "d": 2, "covariance": [2.0, 0.5]}, "task": {"kind": "linear"},
        "prompts": {"N": 10, "train": 400, "test": 200},
        "models": [{"name": "lsa", "kind": "lsa", "optimizer": "adam", "lr": 0.02}],
        "train": {"epochs": 300, "log_every": 50, "fresh": True}, "sweep": {"seed": [0, 1]}}}})
    runs = plan(cfg, "z")
    paths = {}
    for r in runs:
        paths[r.data_id] = str(tmp_path / f"{r.data_id}.npz")
        write_dataset(r.data_spec, paths[r.data_id])
    out = train_shard([{"run_id": r.run_id, "data_id": r.data_id, "spec": r.spec} for r in runs], paths,
                      str(tmp_path / "s.npz"))
    target = lsa.optimal_B([2.0, 0.5], 10)
    for i in range(2):
        B = out["effective"][i, -1]
        assert np.linalg.norm(B - target) / np.linalg.norm(target) < 0.15
        assert out["dist_target"][i, -1] < out["dist_target"][i, 0]


def test_baselines():
    g = np.random.default_rng(3)
    d, M = 3, 8
    x = g.standard_normal((40, M + 1, d))
    w = g.standard_normal((40, d))
    y = np.einsum("ptd,pd->pt", x, w)
    b = predict_all(x, y, ridge=0.1)
    np.testing.assert_allclose(b["ols"], y[:, -1], atol=1e-9)            # noise-free, M >= d: exact
    ref = [x[p, -1] @ np.linalg.solve(x[p, :-1].T @ x[p, :-1] + 0.1 * np.eye(d), x[p, :-1].T @ y[p, :-1])
           for p in range(40)]
    np.testing.assert_allclose(b["ridge"], ref, rtol=1e-10)
    # minimum-norm OLS when M < d equals numpy's lstsq (which returns the minimum-norm solution)
    xs, ys = x[:, :3], y[:, :3]
    xs = np.concatenate([xs[:, :2], xs[:, -1:]], axis=1)
    b2 = predict_all(xs, ys[:, [0, 1, 2]], ridge=0.1)["ols"]
    ref2 = [xs[p, -1] @ np.linalg.lstsq(xs[p, :-1], ys[p, :2], rcond=None)[0] for p in range(40)]
    np.testing.assert_allclose(b2, ref2, rtol=1e-8, atol=1e-10)
    # Nadaraya-Watson is a convex combination of the context labels
    assert np.all(b["nadaraya_watson"] <= y[:, :-1].max(1) + 1e-12)


def _spec(kind="gaussian"):
    tok = {"kind": "gaussian", "d": 3, "covariance": [1.0, 2.0, 0.5]} if kind == "gaussian" else \
        {"kind": "random_covariance", "d": 3, "scale": 1.0}
    return {"tokens": tok, "task": {"kind": "linear"}, "prompts": {"N": 10, "train": 5, "test": 5}, "seed": 4,
            "model": {"name": "lsa", "kind": "lsa"},
            "evaluate": {"lengths": [5], "prompts": 20000, "ridge": 0.1,
                         "shifts": [{"kind": "none"}, {"kind": "scale", "c": [3.0]}, {"kind": "query_only", "c": [2.0]}]}}


def test_shifts_do_what_they_say():
    spec = _spec()
    feats = np.zeros((0, 3))
    base, _, _ = eval_prompts(spec, feats, "none", None, 5, 0)
    scaled, _, _ = eval_prompts(spec, feats, "scale", 3.0, 5, 1)
    q, _, _ = eval_prompts(spec, feats, "query_only", 2.0, 5, 2)
    v = lambda a: a.reshape(-1, 3).var(0)
    np.testing.assert_allclose(v(base), [1.0, 2.0, 0.5], rtol=0.03)
    np.testing.assert_allclose(v(scaled), 9 * np.array([1.0, 2.0, 0.5]), rtol=0.03)
    np.testing.assert_allclose(q[:, -1].var(0), 4 * np.array([1.0, 2.0, 0.5]), rtol=0.05)
    np.testing.assert_allclose(v(q[:, :-1]), [1.0, 2.0, 0.5], rtol=0.03)
    again, _, _ = eval_prompts(spec, feats, "scale", 3.0, 5, 1)
    np.testing.assert_array_equal(again, scaled)
    assert cells(spec["evaluate"]) == [("none", None), ("scale", 3.0), ("query_only", 2.0)]


@pytest.mark.parametrize("kind,c", [("none", 1.0), ("scale", 3.0), ("query_only", 2.0)])
def test_lsa_limit_matches_theory_monte_carlo(kind, c):
    """The closed-form LSA optimum on the evaluation prompts: MSE and slope within 5 s.e. of theory."""
    spec = _spec()
    x, y, _ = eval_prompts(spec, np.zeros((0, 3)), kind, c, 5, 7)
    B = lsa.optimal_B([1.0, 2.0, 0.5], 10)
    pred = lsa.lsa_predict(B, x[:, :-1], y[:, :-1], x[:, -1])
    mse, se, slope, slope_se = _stats(pred[None], y[None, :, -1])
    th_mse, th_slope = theory_cell(spec, kind, c, 5)
    assert abs(mse[0] - th_mse) < 5 * se[0]
    assert abs(slope[0] - th_slope) < 5 * slope_se[0]
