"""Prompt datasets: tokens x_i, labels y_i = f(x_i), a query, for the train and test splits.

Deterministic from (data spec, seed): numpy's PCG64 seeded by a SeedSequence of the seed and a
stream number, so the train split, the test split and the feature set draw from separate streams
and the test prompts carry task functions never seen in training.
"""
from __future__ import annotations

import os

import numpy as np

from icl.store.files import atomic_path, move_aside
from icl.settings import Prompts, Tokens, Train
from icl.tasks import sample_labels   # each task family draws its own labels (icl/tasks.py)

STREAM_FEATURES, STREAM_TRAIN, STREAM_TEST = 0, 1, 2
STREAM_EVAL = 100_000        # + cell index: evaluation prompts under shift (icl.evaluate.cells)
STREAM_FRESH = 1_000_000     # + epoch: fresh training prompts (drawn on the training device: icl.train.fresh)
STREAM_ROTATION = 3          # the eigenvectors of a rotated gaussian covariance (seed: rotation_seed)


def data_spec(spec: dict) -> dict:
    """What a prompt file depends on: models trained on the same data share it."""
    return {k: spec[k] for k in ("tokens", "task", "prompts", "seed")}


def rng(seed: int, stream: int) -> np.random.Generator:
    return np.random.Generator(np.random.PCG64(np.random.SeedSequence([seed, stream])))


def features(tokens: dict, seed: int) -> np.ndarray:
    """K feature vectors in R^d with pairwise distance delta (orthogonal) or min distance delta (random)."""
    K, d, delta = tokens["K"], tokens["d"], tokens["delta"]
    if Tokens.of({"kind": "discrete", **tokens}).features == "orthogonal":
        if K > d:
            raise ValueError(f"tokens: K={K} orthogonal features need d >= K, got d={d}")
        return delta / np.sqrt(2.0) * np.eye(K, d)
    v = rng(seed, STREAM_FEATURES).standard_normal((K, d))
    dist = np.linalg.norm(v[:, None] - v[None], axis=-1)
    return v * (delta / dist[~np.eye(K, dtype=bool)].min())


def feature_probs(tokens: dict) -> np.ndarray:
    """p_k of discrete tokens: the config's `probs`, else uniform 1/K."""
    return np.asarray(Tokens.of({"kind": "discrete", **tokens}).probs or np.full(tokens["K"], 1.0 / tokens["K"]), float)


def tokens_are_features(tokens: dict) -> bool:
    """Noiseless discrete tokens: every token is its feature's row, x = features[feat], so a prompt
    is known by its feature indices (the prompt files keep those, not x) and a model whose context
    enters through a softmax over tokens can read it as per-feature counts (the count form)."""
    return tokens["kind"] == "discrete" and not Tokens.of(tokens).noise


def feature_indices(tokens: dict, n_prompts: int, n_tok: int, g: np.random.Generator) -> np.ndarray:
    """The feature of every token of discrete prompts (P, T), drawn with the features' probabilities:
    g.choice(K, size, p=probs) as numpy computes it (one uniform per token, its place in the
    cumulative probabilities), the same draws and numbers (tests/test_data.py holds the two
    equal), with K comparisons instead of a binary search per token (2x faster at LDL's sizes)."""
    probs = feature_probs(tokens)
    cdf = np.cumsum(probs / probs.sum())
    cdf /= cdf[-1]
    u = g.random((n_prompts, n_tok))
    idx = np.zeros((n_prompts, n_tok), dtype=np.int64)
    for edge in cdf[:-1]:
        idx += u >= edge
    return idx


def sample_tokens(tokens: dict, feats, n_prompts: int, n_tok: int, g: np.random.Generator):
    """Returns x (P, T, d) and the feature index of each token (P, T), -1 for continuous tokens."""
    d = tokens["d"]
    if tokens["kind"] == "discrete":
        idx = feature_indices(tokens, n_prompts, n_tok, g)
        x = feats[idx]
        if Tokens.of(tokens).noise > 0:
            x = x + tokens["noise"] * g.standard_normal(x.shape)
        return x, idx
    if tokens["kind"] == "random_covariance":
        lam = Tokens.of(tokens).scale * g.standard_exponential((n_prompts, 1, d))   # Λ_τ = diag(λ) per prompt
        x = g.standard_normal((n_prompts, n_tok, d)) * np.sqrt(lam)
        return x, np.full((n_prompts, n_tok), -1)
    x = g.standard_normal((n_prompts, n_tok, d)) * np.sqrt(eigenvalues(tokens))
    R = rotation(tokens)
    if R is not None:                       # x = R·diag(√λ)·z: covariance R diag(λ) Rᵀ
        x = x @ R.T
    return x, np.full((n_prompts, n_tok), -1)


def eigenvalues(tokens: dict) -> np.ndarray:
    """Eigenvalues of a gaussian token covariance: identity, a list, 'skewed' (λ_i ∝ 1/i, trace d),
    or {eigenvalues: [...], rotation_seed: n} (a rotated, non-diagonal covariance)."""
    d, cov = tokens["d"], Tokens.of({"kind": "gaussian", **tokens}).covariance
    if isinstance(cov, dict):
        return np.asarray(cov["eigenvalues"], dtype=float)
    if cov == "identity":
        return np.ones(d)
    if cov == "skewed":
        lam = 1.0 / np.arange(1, d + 1)
        return d * lam / lam.sum()
    return np.asarray(cov, dtype=float)


def rotation(tokens: dict) -> np.ndarray | None:
    """The eigenvectors R of a rotated gaussian covariance (Haar-random from `rotation_seed`, the
    same for every run seed: Λ is part of the data distribution), or None where Λ is diagonal."""
    cov = Tokens.of({"kind": "gaussian", **tokens}).covariance
    if not isinstance(cov, dict) or cov.get("rotation_seed") is None:
        return None
    Q, r = np.linalg.qr(rng(int(cov["rotation_seed"]), STREAM_ROTATION).standard_normal((tokens["d"],) * 2))
    return Q * np.sign(np.diag(r))          # sign fix: Haar-distributed


def covariance(tokens: dict) -> np.ndarray:
    """The gaussian tokens' covariance Λ = R diag(λ) Rᵀ as a d×d matrix (what the LSA theory takes)."""
    lam, R = eigenvalues(tokens), rotation(tokens)
    return np.diag(lam) if R is None else (R * lam) @ R.T


def make_split(spec: dict, feats, n_prompts: int, stream: int, tokens: bool = True) -> dict:
    """n_prompts prompts of the spec's N context tokens and a query (last).

    Noiseless discrete tokens are their features, so the labels are drawn at the K features of
    each prompt and picked per token: the same draws and the same numbers as labelling every
    token (a prompt's function is drawn once, whatever it is evaluated at), without the (P, T, d)
    tokens; with `tokens=False` those are not made at all (write_dataset keeps the indices)."""
    g = rng(spec["seed"], stream)
    n_tok = spec["prompts"]["N"] + 1
    tok = spec["tokens"]
    if Prompts.of(spec["prompts"]).counts:
        return draw_counts(spec, feats, n_prompts, g)
    if tokens_are_features(tok):
        idx = feature_indices(tok, n_prompts, n_tok, g)
        at_features = sample_labels(spec["task"], np.broadcast_to(feats, (n_prompts, *feats.shape)), g)
        out = {"y": np.take_along_axis(at_features, idx, 1).astype(np.float32), "feat": idx.astype(np.int16)}
        return {"x": feats[idx].astype(np.float32), **out} if tokens else out
    x, idx = sample_tokens(tok, feats, n_prompts, n_tok, g)
    y = sample_labels(spec["task"], x, g)
    return {"x": x.astype(np.float32), "y": y.astype(np.float32), "feat": idx.astype(np.int16)}


def draw_counts(spec: dict, feats, n_prompts: int, g: np.random.Generator) -> dict:
    """The count form (prompts.form: counts): each prompt's context as its feature counts, drawn as
    one multinomial of N over p (what counting N tokens drawn one by one with p gives), the query's
    feature as one token is drawn (feature_indices), and the labels at the K features (the task's
    function evaluated once, as the token form does before picking per token). The same law as the
    token form's (tests/test_counts.py), other draws, O(K) per prompt whatever N."""
    tok = spec["tokens"]
    p = feature_probs(tok)
    counts = g.multinomial(spec["prompts"]["N"], p / p.sum(), size=n_prompts)
    query = feature_indices(tok, n_prompts, 1, g)[:, 0]
    labels = sample_labels(spec["task"], np.broadcast_to(feats, (n_prompts, *feats.shape)), g)
    return {"counts": counts.astype(np.int32), "labels": labels.astype(np.float32), "query": query.astype(np.int16)}


def curriculum_stage(spec: dict, step: int) -> dict | None:
    """Garg et al.'s curriculum at optimisation step `step` (0-based): for `dims` (the
    coordinates of x drawn, the rest 0) and `points` (x positions of a prompt, the query's
    included: N + 1 at the end), min(end, start + inc·⌊step / interval⌋); a schedule left out
    stays at its full value (d, N + 1). None where the run has no curriculum."""
    cur = Train.of(spec["train"]).curriculum
    if not cur:
        return None
    full = {"dims": spec["tokens"]["d"], "points": spec["prompts"]["N"] + 1}
    return {k: (min(c["end"], c["start"] + c["inc"] * (step // c["interval"])) if (c := cur.get(k)) else full[k])
            for k in full}


def make_dataset(spec: dict, tokens: bool = True) -> dict:
    """All arrays of one dataset: features, train and test splits (the splits' tokens x too where
    `tokens` or where they are not their features' rows)."""
    tok = spec["tokens"]
    feats = features(tok, spec["seed"]) if tok["kind"] == "discrete" else np.zeros((0, tok["d"]))
    tr = make_split(spec, feats, spec["prompts"]["train"], STREAM_TRAIN, tokens=tokens)
    te = make_split(spec, feats, spec["prompts"]["test"], STREAM_TEST, tokens=tokens)
    out = {"features": feats.astype(np.float32)}
    out.update({f"train_{k}": v for k, v in tr.items()})
    out.update({f"test_{k}": v for k, v in te.items()})
    return out


def prompt_file_bytes(spec: dict) -> int:
    """One run's prompts as they are drawn, written and read back: labels (float32) and feature
    indices (int16) of every token, and the tokens (float32) where they are not their features'
    rows; in the count form K counts and labels a prompt, whatever N. Training holds a group of
    these while it prepares the model's form (icl.train.loop)."""
    p, tok = spec["prompts"], spec["tokens"]
    if Prompts.of(p).counts:      # counts (int32) and labels (float32) per feature, the query's feature (int16)
        return (p["train"] + p["test"]) * (8 * tok["K"] + 2)
    return (p["train"] + p["test"]) * (p["N"] + 1) * (4 + 2 + (0 if tokens_are_features(tok) else 4 * tok["d"]))


def write_dataset(spec: dict, path: str) -> None:
    """Write atomically: a half-written file never carries the final name. Discrete tokens
    without noise are their features, x = features[feat] exactly, so the file keeps the indices
    and not the tokens (15x smaller at LDL's sizes); readers rebuild x (with_tokens)."""
    arrays = make_dataset(spec, tokens=False)
    with atomic_path(path) as tmp:
        np.savez(tmp, **arrays)


def with_tokens(z, key: str) -> np.ndarray:
    """z[key] from an open prompt file (or the arrays read from one), rebuilding the tokens of a
    split from its feature indices where the file does not hold them."""
    if key.endswith("_x") and key not in z:
        return z["features"][z[key[:-2] + "_feat"]]
    return z[key]


def ensure_datasets(runs: list[dict], prompts_dir: str, stale_before: float | None = None, workers: int = 1) -> dict:
    """The prompt file of every run, written where it is missing (or older than `stale_before`,
    a time stamp: the workflow's code stamp when reruns on code change are on). Returns
    {data_id: path}. The training job makes its own prompts, in one process (or `workers`
    forked ones: a job given several threads writes with all of them) instead of one job per
    dataset; jobs that share a dataset may both write it: the content is a function of the data
    spec, and each writes its own temporary file before the rename."""
    from icl.jobs.parallel import Forked
    os.makedirs(prompts_dir, exist_ok=True)
    paths, todo = {}, []
    for r in runs:
        if r["data_id"] in paths:
            continue
        path = paths[r["data_id"]] = os.path.join(prompts_dir, f"{r['data_id']}.npz")
        if not os.path.exists(path) or (stale_before is not None and os.path.getmtime(path) < stale_before):
            todo.append((data_spec(r["spec"]), path))
    if workers > 1 and len(todo) > 1:      # a forked worker per share of the files
        shares = [todo[i::workers] for i in range(workers)]
        with Forked(_write_all, shares, workers) as work:
            work.results()
    else:
        _write_all(todo)
    return paths


def _write_all(todo: list) -> None:
    for spec, path in todo:
        write_dataset(spec, path)


class Dataset:
    """A prompt file whose arrays are read when asked for, one at a time: a model that reads
    only labels and feature indices (softmax_q's count form) never loads the tokens, the largest
    array. The file is checked when opened, so a damaged one is named before training starts."""

    def __init__(self, path: str):
        self.path = path
        self.files = set(self._read(lambda z: z.files))
        self.keys = self.files | {k[:-5] + "_x" for k in self.files if k.endswith("_feat") and "features" in self.files}

    def _read(self, what):
        try:
            with np.load(self.path) as z:
                return what(z)
        except Exception as e:   # zipfile/ValueError/EOFError/KeyError: all mean the same to the user
            raise RuntimeError(f"prompt file {self.path} is unreadable ({type(e).__name__}: {e}); moved aside to "
                               f"{move_aside(self.path)} (kept for inspection): rerun snakemake (the same command) to "
                               "regenerate it") from None

    def __getitem__(self, key: str) -> np.ndarray:
        return self._read(lambda z: with_tokens(z, key))

    def read(self, keys) -> dict:
        """Several arrays at once, the file opened once (each opening parses the archive)."""
        return self._read(lambda z: {k: with_tokens(z, k) for k in keys})

    def split(self, split: str) -> dict:
        """Every stored array of one split (train or test) and the features, in one opening; the
        tokens only where the file stores them (a reader rebuilds the others when asked)."""
        return self.read([k for k in self.files if k.startswith(f"{split}_") or k == "features"])


def read_dataset(path: str) -> dict:
    """Every array of a prompt file, tokens included."""
    ds = Dataset(path)
    return {k: ds[k] for k in sorted(ds.keys)}


def read_datasets(runs: list[dict], paths: dict) -> dict:
    """The prompt files of a shard's runs, one Dataset per file (runs on the same data share it)."""
    return {d: Dataset(paths[d]) for d in dict.fromkeys(r["data_id"] for r in runs)}
