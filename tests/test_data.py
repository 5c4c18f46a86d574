"""Prompt data: geometry of the features, Lipschitz constant of the tasks, determinism."""
import numpy as np
import pytest

from icl.data import features, make_dataset, rng, sample_labels


def _spec(**tok):
    t = {"kind": "discrete", "d": 8, "K": 4, "delta": 3.0, "noise": 0.0, "features": "orthogonal"}
    t.update(tok)
    return {"tokens": t, "task": {"kind": "cosine", "L": 1.5, "c": 0.5},
            "prompts": {"N": 20, "train": 30, "test": 40}, "seed": 7}


@pytest.mark.parametrize("kind", ["orthogonal", "random"])
def test_features_are_delta_apart(kind):
    v = features(_spec(features=kind)["tokens"], seed=3)
    dist = np.linalg.norm(v[:, None] - v[None], axis=-1)[~np.eye(4, dtype=bool)]
    if kind == "orthogonal":
        np.testing.assert_allclose(dist, 3.0, rtol=1e-12)
    else:
        assert dist.min() == pytest.approx(3.0, rel=1e-12) and dist.max() > 3.0


@pytest.mark.parametrize("L,c", [(0.1, 0.5), (2.0, 0.5), (1.0, 3.0)])
def test_cosine_lipschitz_constant(L, c):
    """Measured |f(x)-f(x')|/|x-x'| over close and far pairs never exceeds L; in d=1 (where the
    direction of w is the only direction) close pairs come within 2% of it."""
    for d, scale in ((5, 1e-4), (5, 1.0), (1, 1e-4)):
        g = rng(0, 9 + d)
        x = 3 * g.standard_normal((4000, 1, d))
        step = scale * g.standard_normal((4000, 1, d))
        y = sample_labels({"kind": "cosine", "L": L, "c": c}, np.concatenate([x, x + step], axis=1), g)
        ratio = np.abs(y[:, 0] - y[:, 1]) / np.linalg.norm(step[:, 0], axis=-1)
        assert ratio.max() <= L * (1 + 1e-6)
        if d == 1:
            assert ratio.max() >= 0.98 * L


def test_cosine_amplitude_and_sphere():
    """f = (L/c) cos(c<w,x> + phi): at x = 0 the values are (L/c) cos(phi), phi uniform."""
    g = rng(1, 1)
    y = sample_labels({"kind": "cosine", "L": 2.0, "c": 0.5}, np.zeros((20000, 1, 3)), g)[:, 0]
    assert np.abs(y).max() <= 4.0 + 1e-12
    # E[cos^2(phi)] = 1/2 for phi ~ U[0, 2pi): Monte Carlo, 5 standard errors
    assert np.mean((y / 4.0) ** 2) == pytest.approx(0.5, abs=5 * np.sqrt(0.125 / 20000))


def test_dataset_deterministic_and_splits_differ():
    a, b = make_dataset(_spec()), make_dataset(_spec())
    for k in a:
        np.testing.assert_array_equal(a[k], b[k])
    assert a["train_x"].shape == (30, 21, 8) and a["test_y"].shape == (40, 21)
    # tokens are exactly features; labels of train and test come from different functions
    v = a["features"]
    np.testing.assert_array_equal(a["train_x"], v[a["train_feat"]])
    assert not np.allclose(a["train_y"][:30], a["test_y"][:30])
    spec2 = _spec()
    spec2["seed"] = 8
    assert not np.array_equal(make_dataset(spec2)["train_y"], a["train_y"])


def test_feature_probabilities():
    spec = _spec(probs=[0.1, 0.2, 0.3, 0.4])
    spec["prompts"] = {"N": 200, "train": 200, "test": 1}
    f = make_dataset(spec)["train_feat"].ravel()
    freq = np.bincount(f, minlength=4) / f.size
    se = np.sqrt(0.25 / f.size)
    np.testing.assert_allclose(freq, [0.1, 0.2, 0.3, 0.4], atol=5 * se)


def test_noise_scale():
    spec = _spec(noise=0.1)
    ds = make_dataset(spec)
    resid = ds["train_x"] - ds["features"][ds["train_feat"]]
    assert resid.std() == pytest.approx(0.1, rel=0.05)


def test_training_jobs_write_missing_prompt_files_once(tiny_raw, tmp_path):
    """ensure_datasets writes a file per dataset where missing, leaves present ones alone, and
    writes anew those older than the code stamp (rerun_on_code_change), with the same content."""
    import os
    import time

    from icl.config import validate
    from icl.data import ensure_datasets, make_dataset, read_dataset
    from icl.plan.shards import plan
    runs = [{"run_id": r.run_id, "data_id": r.data_id, "spec": r.spec} for r in plan(validate(tiny_raw), "tiny")]
    paths = ensure_datasets(runs, str(tmp_path / "p"))
    assert set(paths) == {r["data_id"] for r in runs} and len(paths) == 4      # 8 runs, 2 models share data
    r0 = runs[0]
    ds = read_dataset(paths[r0["data_id"]])
    for k, v in make_dataset({k: r0["spec"][k] for k in ("tokens", "task", "prompts", "seed")}).items():
        np.testing.assert_array_equal(ds[k], v)
    first = {d: os.path.getmtime(p) for d, p in paths.items()}
    time.sleep(0.02)
    ensure_datasets(runs, str(tmp_path / "p"))
    assert {d: os.path.getmtime(p) for d, p in paths.items()} == first
    ensure_datasets(runs, str(tmp_path / "p"), stale_before=time.time())
    assert all(os.path.getmtime(p) > first[d] for d, p in paths.items())
    np.testing.assert_array_equal(read_dataset(paths[r0["data_id"]])["train_x"], ds["train_x"])
    assert not [p for p in os.listdir(tmp_path / "p") if ".tmp" in p]


def test_noiseless_discrete_files_rebuild_their_tokens_exactly(tmp_path):
    """Files of noiseless discrete tokens hold the feature indices, not the tokens; reading them
    gives back the tokens make_dataset made, bit for bit. Noisy tokens are stored as they are."""
    import zipfile

    from icl.data import Dataset, read_dataset, write_dataset
    spec = {"tokens": {"kind": "discrete", "d": 6, "K": 3, "delta": 2.0, "noise": 0.0, "features": "random"},
            "task": {"kind": "cosine", "L": 1.0, "c": 0.5}, "prompts": {"N": 9, "train": 5, "test": 7}, "seed": 3}
    for noise, stored in ((0.0, False), (0.2, True)):
        spec["tokens"]["noise"] = noise
        path = str(tmp_path / f"{noise}.npz")
        write_dataset(spec, path)
        assert ("train_x.npy" in zipfile.ZipFile(path).namelist()) == stored
        made, read = make_dataset(spec), read_dataset(path)
        assert set(read) == set(made)
        for k in made:
            np.testing.assert_array_equal(read[k], made[k], err_msg=k)
            np.testing.assert_array_equal(Dataset(path)[k], made[k], err_msg=k)


def test_discrete_labels_drawn_at_the_features_equal_labelling_every_token():
    """make_split labels noiseless discrete prompts at their K features and picks per token: the
    same draws and, bit for bit, the same labels as labelling every token x = features[feat]."""
    from icl.data import make_split, rng, sample_tokens
    for kind, task in (("cosine", {"kind": "cosine", "L": 1.5, "c": 0.5}), ("polynomial", {"kind": "polynomial", "L": 1.0}),
                       ("linear", {"kind": "linear"})):
        for feats_kind in ("orthogonal", "random"):
            tok = {"kind": "discrete", "d": 15, "K": 4, "delta": 3.0, "features": feats_kind}
            spec = {"tokens": tok, "task": task, "prompts": {"N": 100}, "seed": 3}
            feats = features(tok, 3)
            g = rng(3, 1)
            x, idx = sample_tokens(tok, feats, 200, 101, g)
            y = sample_labels(task, x, g).astype(np.float32)
            got = make_split(spec, feats, 200, 1)
            assert np.array_equal(got["feat"], idx) and np.array_equal(got["x"], x.astype(np.float32))
            np.testing.assert_array_equal(got["y"], y, err_msg=f"{kind}, {feats_kind}")
            assert "x" not in make_split(spec, feats, 200, 1, tokens=False)


@pytest.mark.parametrize("probs", [None, [0.55, 0.3, 0.1, 0.05], [0.2, 0.2, 0.2, 0.2, 0.2], [1e-9, 0.5, 0.5 - 1e-9]])
def test_feature_indices_are_numpys_choice(probs):
    """feature_indices draws what Generator.choice(K, size, p) draws, and leaves the stream where
    choice leaves it (the labels drawn next are the same too)."""
    from icl.data import feature_indices
    K = len(probs) if probs else 4
    tok = {"kind": "discrete", "d": K, "K": K, "delta": 1.0, "probs": probs}
    for seed in range(5):
        a, b = rng(seed, 1), rng(seed, 1)
        p = np.asarray(probs or [1 / K] * K, float)
        np.testing.assert_array_equal(feature_indices(tok, 300, 101, a), b.choice(K, size=(300, 101), p=p / p.sum()))
        assert a.random() == b.random()
