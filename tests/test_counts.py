"""Prompts drawn as feature counts (prompts.form: counts): the token form's law, the token form's
loss and gradient on the same prompts, memory independent of N, and the settings it refuses."""
import copy

import numpy as np
import pytest
import torch

from icl.config import ConfigError, validate
from icl.data import draw_counts, feature_indices, features, make_split, prompt_file_bytes, rng, write_dataset
from icl.models.base import _drawn_count_batch, count_batch, token_batch
from icl.models.softmax_q import SoftmaxQ


def _spec(N=40, K=4, probs=None, feats="orthogonal", train=16, test=8, d=6):
    tok = {"kind": "discrete", "d": d, "K": K, "delta": 2.0, "noise": 0.0, "features": feats}
    if probs is not None:
        tok["probs"] = probs
    return {"tokens": tok, "task": {"kind": "cosine", "L": 1.5, "c": 0.5}, "seed": 3,
            "prompts": {"N": N, "train": train, "test": test, "form": "counts"}}


def _expand(drawn: dict, feats: np.ndarray, g: np.random.Generator) -> dict:
    """The count-drawn prompts as tokens, each context in a random order, the query last: what the
    token form would hold for the same prompts."""
    feat = []
    for n, q in zip(drawn["counts"], drawn["query"]):
        ctx = g.permutation(np.repeat(np.arange(len(n)), n))
        feat.append(np.concatenate([ctx, [q]]))
    feat = np.stack(feat)
    y = np.take_along_axis(drawn["labels"], feat, 1)
    return {"x": feats[feat].astype(np.float32), "y": y.astype(np.float32), "feat": feat}


def _arrays(split: dict, feats):
    """A one-run `arrays` callable as icl.train.loop.load_prompts makes it (KeyError where absent)."""
    stored = {**split, "features": feats.astype(np.float32)}
    return lambda key: torch.from_numpy(np.asarray(stored[key])[None])


def test_counts_follow_the_multinomial_law_the_token_form_draws():
    """Counts: mean N·p_k and covariance N(diag p − ppᵀ) (the token form's law: N tokens drawn one by
    one with p), within 4 standard errors on 20000 prompts; the query's feature drawn with p; and the
    token form's own counts agree with the same moments (one law, two draws)."""
    p = np.array([0.4, 0.3, 0.2, 0.1])
    s = _spec(N=50, probs=list(p))
    feats = features(s["tokens"], 3)
    P = 20000
    drawn = draw_counts(s, feats, P, rng(0, 1))
    assert drawn["counts"].shape == (P, 4) and (drawn["counts"].sum(1) == 50).all()
    tok_idx = feature_indices(s["tokens"], P, 51, rng(0, 2))
    tok_counts = (tok_idx[:, :-1, None] == np.arange(4)).sum(1)
    for counts in (drawn["counts"].astype(float), tok_counts.astype(float)):
        mean, cov = counts.mean(0), np.cov(counts.T)
        want = 50 * (np.diag(p) - np.outer(p, p))
        assert np.all(np.abs(mean - 50 * p) < 4 * np.sqrt(np.diag(want) / P)), mean
        # a sample covariance's entry has variance about (σ_ii σ_jj + σ_ij²)/P
        se = np.sqrt((np.outer(np.diag(want), np.diag(want)) + want ** 2) / P)
        assert np.all(np.abs(cov - want) < 4 * se), cov - want
    share = np.bincount(drawn["query"], minlength=4) / P
    assert np.all(np.abs(share - p) < 4 * np.sqrt(p * (1 - p) / P)), share


def test_labels_are_the_task_at_the_features_as_the_token_form_draws_them():
    """The labels at the features follow the token form's law: for a cosine task each prompt's
    labels f(v_k) have the token form's mean and spread at every feature (4 SE, 4000 prompts)."""
    s = _spec(N=30)
    feats = features(s["tokens"], 3)
    counts = draw_counts(s, feats, 4000, rng(1, 1))["labels"]
    tok = {**s, "prompts": {"N": 30, "train": 4000, "test": 1}}
    t = make_split(tok, feats, 4000, 7, tokens=False)
    at_feat = np.full((4000, 4), np.nan)
    for k in range(4):
        hit = t["feat"] == k
        rows = hit.any(1)
        at_feat[rows, k] = t["y"][rows][hit[rows]].reshape(-1)[np.cumsum(hit[rows].sum(1)) - 1]
    for k in range(4):
        a, b = counts[:, k], at_feat[:, k][np.isfinite(at_feat[:, k])]
        se = np.sqrt(a.var() / len(a) + b.var() / len(b))
        assert abs(a.mean() - b.mean()) < 4 * se and 0.8 < a.std() / b.std() < 1.25


@pytest.mark.parametrize("feats", ["orthogonal", "random"])
def test_the_count_form_reads_the_same_loss_and_gradient_as_the_tokens(feats):
    """On the same prompts, written out as tokens in a random order, softmax_q's loss, prediction and
    gradient at a random Q are the token form's (float32 tolerance), the count form's arrays are
    count_batch's of those tokens, and the reference losses agree."""
    from icl.train.loop import _count_references, reference_losses
    s = _spec(N=30, feats=feats)
    feats_ = features(s["tokens"], 3)
    drawn = draw_counts(s, feats_, 64, rng(2, 1))
    tokens = _expand(drawn, feats_, np.random.default_rng(0))
    counted = count_batch(_arrays(drawn, feats_), diagnose=False, K=4)
    from_tokens = count_batch(_arrays(tokens, feats_), diagnose=False, K=4)
    for key in ("n", "S", "query", "target"):
        np.testing.assert_allclose(counted[key].numpy(), from_tokens[key].numpy(), rtol=1e-6, err_msg=key)
    model = SoftmaxQ({"kind": "softmax_q"}, s["tokens"])
    Q = {"Q": 0.3 * torch.from_numpy(np.random.default_rng(1).standard_normal((1, 6, 6))).float()}
    a = model.step(Q, counted)
    b = model.step(Q, token_batch(_arrays(tokens, feats_), diagnose=False, K=4))
    np.testing.assert_allclose(a.loss.numpy(), b.loss.numpy(), rtol=1e-5)
    np.testing.assert_allclose(a.grads["Q"].numpy(), b.grads["Q"].numpy(), rtol=1e-4, atol=1e-7)
    for split in ("train", "test"):
        mine = _count_references(split, {f"{split}_{k}": v for k, v in drawn.items()})
        theirs = reference_losses(split, {f"{split}_{k}": v for k, v in tokens.items()})
        assert mine.keys() == theirs.keys()
        for k in mine:
            assert mine[k] == pytest.approx(theirs[k], rel=1e-9, abs=1e-12), k


def test_the_loss_on_count_prompts_has_the_token_forms_expectation():
    """Independent draws of the two forms at the same settings: softmax_q's mean loss at a fixed Q over
    6000 prompts each agrees within 4 standard errors (the same law seen through the model)."""
    s = _spec(N=20, probs=[0.4, 0.3, 0.2, 0.1])
    feats_ = features(s["tokens"], 3)
    model = SoftmaxQ({"kind": "softmax_q"}, s["tokens"])
    Q = {"Q": torch.from_numpy(np.eye(6)[None] * 0.8).float()}
    drawn = make_split(s, feats_, 6000, 11, tokens=False)
    tok = make_split({**s, "prompts": {"N": 20, "train": 1, "test": 1}}, feats_, 6000, 12, tokens=False)
    losses = []
    for split in (drawn, tok):
        pred, _ = model.predict(Q, count_batch(_arrays(split, feats_), diagnose=False, K=4))
        target = count_batch(_arrays(split, feats_), diagnose=False, K=4)["target"]
        losses.append(0.5 * ((pred - target) ** 2).numpy().ravel())
    se = np.sqrt(sum(x.var() / len(x) for x in losses))
    assert abs(losses[0].mean() - losses[1].mean()) < 4 * se, (losses[0].mean(), losses[1].mean(), se)


def test_the_nearest_tokens_mass_is_its_expectation_over_the_tokens_order():
    """Count-drawn prompts have no token order, so `near` is the token form's expectation over it:
    averaged over 400 random orders of the same prompts, the token form's nearest-token counts equal
    it within 4 SE (orthogonal features tie, so the order decides); random features, which do not
    tie, give exactly the token form's."""
    for feats in ("orthogonal", "random"):
        s = _spec(N=40, K=16, d=16, feats=feats)      # N/10 = 4 nearest, about 2.5 of the query's feature
        feats_ = features(s["tokens"], 3)
        drawn = draw_counts(s, feats_, 8, rng(4, 1))
        want = _drawn_count_batch(*(torch.from_numpy(np.asarray(drawn[k])[None]) for k in ("counts", "labels")),
                                  torch.from_numpy(drawn["query"][None].astype(np.int64)),
                                  torch.from_numpy(feats_[None].astype(np.float32)), diagnose=True)["near"][0].numpy()
        g = np.random.default_rng(5)
        seen = np.stack([count_batch(_arrays(_expand(drawn, feats_, g), feats_), diagnose=True, K=16)["near"][0].numpy()
                         for _ in range(400)])
        assert np.allclose(seen.sum(-1), 4) and np.allclose(want.sum(-1), 4)     # N/10 tokens
        if feats == "random":
            np.testing.assert_allclose(seen, np.broadcast_to(want, seen.shape), atol=1e-6)
        else:
            se = seen.std(0) / np.sqrt(len(seen))
            assert np.all(np.abs(seen.mean(0) - want) <= 4 * se + 1e-6), (seen.mean(0), want)
            assert seen.std(0).max() > 0          # the order did decide, so the test is not vacuous


def test_memory_and_files_do_not_grow_with_N(tmp_path):
    """The count form's file, the plan's estimate of it and the model's per-prompt floats are the same
    at N = 100 and N = 10⁸; the token form's grow with N."""
    small, big = _spec(N=100), _spec(N=100_000_000)
    assert prompt_file_bytes(small) == prompt_file_bytes(big) == 24 * (8 * 4 + 2)
    tokens = {**small, "prompts": {"N": 100, "train": 16, "test": 8}}
    assert prompt_file_bytes(tokens) > prompt_file_bytes(small)
    sizes = []
    for i, s in enumerate((small, big)):
        write_dataset(s, str(tmp_path / f"{i}.npz"))
        sizes.append((tmp_path / f"{i}.npz").stat().st_size)
    assert sizes[0] == sizes[1]
    spec = lambda s: {**s, "model": {"kind": "softmax_q"}, "train": {"epochs": 1, "log_every": 1,
                                                                      "checkpoint_every": 1, "fresh": False}}
    for what in ("step_floats", "forward_floats"):
        assert getattr(SoftmaxQ, what)(spec(small)) == getattr(SoftmaxQ, what)(spec(big))
    assert SoftmaxQ.prompt_floats(spec(small), True) == SoftmaxQ.prompt_floats(spec(big), True)


def test_the_sampled_count_flow_reads_the_drawn_counts():
    from icl.theory.table import train_counts
    s = _spec(N=5000)
    counts, query = train_counts({**s, "prompts": {**s["prompts"]}})
    drawn = make_split(s, features(s["tokens"], 3), 16, 1, tokens=False)
    np.testing.assert_array_equal(counts, drawn["counts"])
    np.testing.assert_array_equal(query, drawn["query"])


@pytest.mark.parametrize("change, message", [
    (lambda e: e["prompts"].pop("form"), r"prompts.N: 200000 tokens a prompt is beyond the token form's 100000"),
    (lambda e: e["tokens"].update(noise=0.1), r"prompts.form: counts .* noiseless discrete tokens .* with noise 0.1"),
    (lambda e: e["models"].append({"name": "blk", "kind": "transformer_block", "optimizer": "adam", "lr": 1e-3,
                                   "width": 8}), r"model kind\(s\) transformer_block read every token"),
    (lambda e: e["train"].update(fresh=True), r"train.fresh and train.curriculum draw tokens as training goes"),
])
def test_settings_the_count_form_cannot_serve_are_named(tiny_raw, change, message):
    raw = copy.deepcopy(tiny_raw)
    e = raw["experiments"]["tiny"]
    e["models"] = e["models"][:1]
    e.pop("sweep")
    e["prompts"] = {"N": 200_000, "train": 16, "test": 8, "form": "counts"}
    validate(copy.deepcopy(raw))                       # the count form itself is valid at this N
    change(e)
    with pytest.raises(ConfigError, match=message):
        validate(raw)


def test_a_count_form_shard_trains_at_a_context_no_token_form_holds(tiny_raw, tmp_path):
    """softmax_q trains on count-drawn prompts at N = 10⁷ through the training loop: its first loss is
    uniform attention's (Q starts at zero), its loss falls, and its attention on the query's feature
    rises from p_k."""
    from icl.plan.shards import plan
    from icl.train.loop import train_shard
    raw = copy.deepcopy(tiny_raw)
    e = raw["experiments"]["tiny"]
    e["models"] = e["models"][:1]
    e["prompts"] = {"N": 10_000_000, "train": 16, "test": 8, "form": "counts"}
    e["sweep"] = {"task.L": [1.5], "seed": [0, 1]}
    runs = plan(validate(raw), "tiny")
    paths = {}
    for r in runs:
        paths[r.data_id] = str(tmp_path / f"{r.data_id}.npz")
        write_dataset(r.data_spec, paths[r.data_id])
    recs = [{"run_id": r.run_id, "data_id": r.data_id, "shard": r.shard, "spec": r.spec} for r in runs]
    out = train_shard(recs, paths, str(tmp_path / "shard.npz"))
    np.testing.assert_allclose(out["train_loss"][:, 0], out["uniform_train_loss"], rtol=1e-5)
    assert np.all(out["train_loss"][:, -1] < 0.5 * out["train_loss"][:, 0])
    np.testing.assert_allclose(out["attn_own"][:, 0], 1 / 3, rtol=1e-3)
    assert np.all(out["attn_own"][:, -1] > 0.4)
