"""lsa with several heads, merged or with separate key and query matrices: the ensemble against a
plain per-run module on the whole prompt matrix (benchmarks/reference_models.py) in float64; the
single merged head unchanged; the effective matrix; the settings' checks."""
import re
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
from reference_models import LSAHeadsReference  # noqa: E402

from icl.models import LSA  # noqa: E402
from icl.theory import lsa  # noqa: E402

FORMS = [{"heads": 3}, {"heads": 1, "separate_kq": True, "rank": 1}, {"heads": 2, "separate_kq": True, "rank": 3},
         {"heads": 4, "separate_kq": True}]


def _setup(form, seed=0, d=4, R=2, B=6, N=9):
    m = LSA({"init_scale": 0.3, "init_noise": 0.0, **form}, d)
    p = m.init(list(range(R)), ["a"] * R, "cpu", torch.float64)
    g = torch.Generator().manual_seed(seed)
    p = {k: v + 0.2 * torch.randn(v.shape, generator=g, dtype=torch.float64) for k, v in p.items()}
    x = torch.randn(R, B, N + 1, d, generator=g, dtype=torch.float64)
    y = torch.randn(R, B, N + 1, generator=g, dtype=torch.float64)
    return m, p, x, y


@pytest.mark.parametrize("form", FORMS, ids=str)
def test_forward_and_gradients_equal_the_plain_module(form):
    m, p, x, y = _setup(form)
    pred, _ = m.forward(p, x, y)
    loss, grads = m.loss_and_grads(p, x, y)
    for r in range(2):
        ref = LSAHeadsReference(p, r).double()
        pr = ref(x[r], y[r])
        torch.testing.assert_close(pred[r], pr, rtol=0, atol=1e-10)
        (0.5 * ((pr - y[r, :, -1]) ** 2).mean()).backward()
        for k, gr in ref.grads_as().items():
            torch.testing.assert_close(grads[k][r], gr, rtol=0, atol=1e-10, msg=k)


def test_one_merged_head_is_zfb_lsa_unchanged():
    """heads: 1 (written or not) is the single-head model of before: its parameters' shapes, its
    initialisation and its numbers, bit for bit."""
    base = LSA({"init_scale": 0.3, "init_noise": 0.05}, 3)
    one = LSA({"init_scale": 0.3, "init_noise": 0.05, "heads": 1, "separate_kq": False}, 3)
    p, q = base.init([0, 1], ["a", "b"], "cpu"), one.init([0, 1], ["a", "b"], "cpu")
    assert p["W_pv"].shape == (2, 4, 4) and set(p) == {"W_pv", "W_kq"}
    g = torch.Generator().manual_seed(2)
    x, y = torch.randn(2, 5, 8, 3, generator=g), torch.randn(2, 5, 8, generator=g)
    for k in p:
        assert torch.equal(p[k], q[k])
    assert torch.equal(base.forward(p, x, y)[0], one.forward(q, x, y)[0])


@pytest.mark.parametrize("form", FORMS, ids=str)
def test_effective_matrix_is_what_the_prediction_reads(form):
    """With the side blocks zero (keys, queries and values acting on x only, the value row on
    the label slot only) every form predicts ŷ = x_qᵀ B m̂ with B = `effective`."""
    m, p, x, y = _setup(form, seed=3)
    if "W_k" in p:
        p["W_k"][..., -1] = 0
        p["W_q"][..., -1] = 0
        p["w_v"][..., :-1] = 0
    else:
        p["W_kq"][..., -1, :] = 0
        p["W_kq"][..., :, -1] = 0
        p["W_pv"][..., -1, :-1] = 0
    B = LSA.effective(p).numpy()
    pred, _ = m.forward(p, x, y)
    for r in range(2):
        want = lsa.lsa_predict(B[r], x[r, :, :-1].numpy(), y[r, :, :-1].numpy(), x[r, :, -1].numpy())
        np.testing.assert_allclose(pred[r].numpy(), want, rtol=1e-10, atol=1e-12)


def test_initialisations():
    one = LSA({"init_scale": 0.3}, 3).init([0], ["a"], "cpu", torch.float64)
    merged = LSA({"init_scale": 0.3, "heads": 4}, 3).init([0], ["a"], "cpu", torch.float64)
    assert merged["W_kq"].shape == (1, 4, 4, 4)
    torch.testing.assert_close(LSA.effective(merged), LSA.effective(one))   # the heads share ZFB's start
    sep = LSA({"init_scale": 0.5, "heads": 64, "separate_kq": True, "rank": 2}, 3).init([0, 1], ["a", "a"], "cpu",
                                                                                      torch.float64)
    assert sep["W_k"].shape == (2, 64, 2, 4) and sep["w_v"].shape == (2, 64, 4)
    assert abs(float(sep["W_k"].std()) - 0.5 / 2) < 0.03                  # std init_scale/√(d+1)
    assert not torch.equal(sep["W_k"][0], sep["W_q"][0])


def test_columns_of_runs_parquet():
    spec = {"tokens": {"d": 5}, "model": {"kind": "lsa", "init_scale": 0.3, "init_noise": 0.0}}
    assert LSA.columns(spec) == {"init_scale": 0.3, "init_noise": 0.0, "heads": 1, "separate_kq": False, "rank": None}
    spec["model"].update(heads=2, separate_kq=True)
    assert LSA.columns(spec)["rank"] == 6


@pytest.mark.parametrize("model,key,match", [
    ({"rank": 2}, "rank", "rank applies to separate key and query matrices only"),
    ({"separate_kq": True, "rank": 5}, "rank", "5 is larger than d+1 = 4"),
    ({"separate_kq": True, "rank": 0}, "rank", "out of range"),
    ({"separate_kq": True, "init_noise": 0.1}, "init_noise", "merged form only"),
    ({"heads": 0}, "heads", "out of range"),
])
def test_bad_settings_are_refused_naming_the_key(model, key, match):
    from icl.config import ConfigError, validate
    exp = {"tokens": {"kind": "gaussian", "d": 3}, "task": {"kind": "linear"}, "prompts": {"N": 6, "train": 12, "test": 10},
           "models": [{"name": "l", "kind": "lsa", "optimizer": "adam", "lr": 1e-2, **model}], "train": {"epochs": 4}}
    with pytest.raises(ConfigError, match=rf"^experiments\.l\.models\.0\.{key}: .*{re.escape(match)}"):
        validate({"experiments": {"l": exp}})


def test_defaults_leave_existing_run_ids_alone():
    """The new settings have no schema default: an LSA run's spec, and so its id, is what it was."""
    from icl.config import validate
    cfg = validate({"experiments": {"l": {"tokens": {"kind": "gaussian", "d": 3}, "task": {"kind": "linear"},
                                          "prompts": {"N": 6, "train": 12, "test": 10}, "train": {"epochs": 4},
                                          "models": [{"name": "l", "kind": "lsa", "optimizer": "adam", "lr": 1e-2}]}}})
    assert set(cfg["experiments"]["l"]["models"][0]) == {"name", "kind", "optimizer", "lr", "init_scale", "init_noise"}


def test_separate_heads_train_toward_the_optimum(tmp_path):
    """Adam on fresh prompts: two rank-2 heads on d = 2 reach the neighbourhood of Γ⁻¹, and the
    logged distance falls."""
    from icl.config import validate
    from icl.data import ensure_datasets
    from icl.plan.shards import plan
    from icl.train.loop import train_shard
    cfg = validate({"experiments": {"z": {
        "tokens": {"kind": "gaussian", "d": 2, "covariance": [2.0, 0.5]}, "task": {"kind": "linear"},
        "prompts": {"N": 10, "train": 400, "test": 200},
        "models": [{"name": "mh", "kind": "lsa", "optimizer": "adam", "lr": 0.02, "init_scale": 0.3, "heads": 2,
                    "separate_kq": True, "rank": 2}],
        "train": {"epochs": 300, "log_every": 50, "fresh": True}}}})
    runs = [{"run_id": r.run_id, "data_id": r.data_id, "spec": r.spec} for r in plan(cfg, "z")]
    out = train_shard(runs, ensure_datasets(runs, str(tmp_path)), str(tmp_path / "s.npz"))
    target = lsa.optimal_B([2.0, 0.5], 10)
    assert np.linalg.norm(out["effective"][0, -1] - target) / np.linalg.norm(target) < 0.2
    assert out["dist_target"][0, -1] < 0.5 * out["dist_target"][0, 0]
