"""What every model kind shares: the Model interface, prompts as a model reads them (Batch),
attention summaries, and the initialisation streams.

Ensemble models: every parameter has a leading run dimension R, so one call trains a shard.
Inputs: x (R, B, T, d) with the query last (T = N + 1), y (R, B, T) whose query entry is the
target and is never shown to the model. Every model computes only what the loss reads.

The training loop talks to a model through four calls: `prepare` (prompts into the form the
model reads, a Batch), `step` (loss, gradients and what the forward saw), `loss` (the same
without gradients) and `diagnostics` (what the model logs about itself: attention, its
matrices). The plan, the tables and the report ask the kind (the class, no instance) for what
depends on it: the runs.parquet columns of its settings (`columns`), its memory (`train_bytes`,
`eval_bytes`), the checks of its settings (`check`) and what it is (`linear_attention`,
`nonlinear`). So nothing outside a kind's module branches on its name, and a new kind touches
its module, `icl/models/__init__.py` (one line) and the schema.

torch is imported on first use (`lazy_torch`): the plan runs at Snakemake's parse time and the
tables and report jobs never train, and importing torch costs 1-3 s a process.
"""
from __future__ import annotations

import zlib

import numpy as np


class _LazyTorch:
    """Stands for `torch` in a module's globals until the module first uses it, then puts the real
    module in its place (so later uses cost nothing)."""

    def __init__(self, namespace: dict):
        self._namespace = namespace

    def __getattr__(self, name):
        import torch as real
        self._namespace["torch"] = real
        return getattr(real, name)


def lazy_torch(namespace: dict):
    """`torch = lazy_torch(globals())`: torch, imported when the module first touches it."""
    return _LazyTorch(namespace)


torch = lazy_torch(globals())


def init_rng(seed: int, name: str) -> np.random.Generator:
    """Initialization stream of one run: independent of the data streams (stream >= 1000)."""
    return np.random.Generator(np.random.PCG64(np.random.SeedSequence([seed, 1000, zlib.crc32(name.encode())])))


class Batch:
    """Prompts as a model reads them: tensors with leading (run, prompt) dimensions in `prompts`
    (always `target`, the query's label), and per-run tensors in `runs` (feature vectors)."""

    def __init__(self, prompts: dict, runs: dict | None = None):
        self.prompts, self.runs = prompts, runs or {}

    def __getitem__(self, key):
        return self.prompts[key] if key in self.prompts else self.runs[key]

    def __contains__(self, key):
        return key in self.prompts or key in self.runs

    def take(self, it: torch.Tensor) -> "Batch":
        """The prompts it[r] of every run r (a minibatch)."""
        ar = torch.arange(it.shape[0], device=it.device).unsqueeze(1)
        return Batch({k: v[ar, it] for k, v in self.prompts.items()}, self.runs)

    @staticmethod
    def cat(parts: list["Batch"]) -> "Batch":
        """Batches of consecutive groups of runs, joined along the run axis."""
        if len(parts) == 1:
            return parts[0]
        join = lambda key, where: torch.cat([getattr(p, where)[key] for p in parts])
        return Batch({k: join(k, "prompts") for k in parts[0].prompts}, {k: join(k, "runs") for k in parts[0].runs})


def knn_count(N: int) -> int:
    """How many nearest context tokens `attn_knn` sums over: a tenth of the context, at least 1."""
    return max(1, N // 10)


def nearest(dist: torch.Tensor, k: int) -> torch.Tensor:
    """Indices (R, B, k) of the k context tokens with the smallest distance to the query, ties
    broken by position (a stable sort), so that every form of a prompt picks the same tokens."""
    return torch.sort(dist, dim=-1, stable=True).indices[..., :k]


def nearest_tokens(x: torch.Tensor, k: int) -> torch.Tensor:
    """The k context tokens closest to the query (Euclidean).

    attn_knn (the attention mass on them) is the attention summary for continuous tokens, where
    there are no features. For discrete tokens it saturates below 1 (k = N/10 tokens of the
    ~N/K that share the query's feature): read attn_own there."""
    return nearest(((x[:, :, :-1] - x[:, :, -1:]) ** 2).sum(-1), k)


def token_batch(arrays, diagnose: bool, K) -> Batch:
    """The token form every model can read: x, y; with `diagnose`, what the attention summaries
    need: the query's nearest context tokens and, for discrete tokens, the tokens' features and
    the query's feature one-hot. `arrays(name)` gives one stacked array (x, y, feat, features)."""
    x, y = arrays("x"), arrays("y")
    prompts, runs = {"x": x, "y": y, "target": y[:, :, -1]}, {}
    if diagnose:
        prompts["knn"] = nearest_tokens(x, knn_count(x.shape[2] - 1))
        if K:
            feat = arrays("feat").long()
            prompts["feat"] = feat
            prompts["query"] = torch.nn.functional.one_hot(feat[:, :, -1], K).to(x.dtype)
            prompts["same"] = (feat[:, :, :-1] == feat[:, :, -1:]).to(x.dtype)   # tokens of the query's feature
            runs["features"] = arrays("features")
    return Batch(prompts, runs)


def own_attention(own, query) -> torch.Tensor:
    """attn_own per run (R,) from each prompt's mass on the tokens of its query's feature, own
    (R, B), and the query's feature as a one-hot (R, B, K): the diagonal mean of the attention
    map (the mean over query features j of the mean own mass of the queries with feature j;
    features no query has are left out). The trace computes it every epoch from these two
    (R, B) quantities alone, and the logs from the same function, so they agree exactly."""
    sums = torch.bmm(query.transpose(1, 2), own.unsqueeze(-1))[..., 0]                # (R, K)
    return (sums / query.sum(1)).nanmean(-1)


def attention_logs(mass, query, entropy, knn_mass, K, own=None) -> dict:
    """Per-run summaries of attention from per-prompt quantities: `mass` (R, B, K) on each key
    feature, the query's feature as a one-hot (R, B, K), the entropy over tokens and the mass on
    the nearest tokens (R, B), and (optional) each prompt's own mass (R, B). attn[r, k, j] is the
    mean mass a query with feature j puts on feature k (NaN where no query has feature j);
    attn_own its diagonal mean (own_attention)."""
    out = {"attn_entropy": entropy.mean(1), "attn_knn": knn_mass.mean(1)}
    if K:
        sums = torch.bmm(query.transpose(1, 2), mass)                                  # [r, j, k]
        amap = (sums / query.sum(1).unsqueeze(-1)).transpose(1, 2)
        out["attn"] = amap
        out["attn_own"] = own_attention((mass * query).sum(-1) if own is None else own, query)
    return out


def token_attention_logs(a, batch: Batch, K) -> dict:
    """attention_logs of token-level attention a (R, B, N)."""
    ent = -(a * torch.log(a.clamp_min(1e-30))).sum(-1)
    knn = torch.gather(a, 2, batch["knn"]).sum(-1)
    if not K:
        return attention_logs(None, None, ent, knn, None)
    mass = torch.zeros(*a.shape[:2], K, dtype=a.dtype, device=a.device).scatter_add_(2, batch["feat"][:, :, :-1], a)
    return attention_logs(mass, batch["query"], ent, knn, K, own=token_own(a, batch))


def token_own(a, batch: Batch) -> torch.Tensor:
    """Each prompt's attention mass on the context tokens of its query's feature, (R, B), from
    token-level attention a (R, B, N)."""
    return (a * batch["same"]).sum(-1)


def count_batch(arrays, diagnose: bool, K: int) -> Batch:
    """The count form of noiseless discrete prompts: per prompt the number n_k and label sum S_k
    of its context tokens of each feature, and the query's feature; the tokens themselves are
    never read. Every token of feature k in a prompt is the same (v_k, f(v_k)), so a model whose
    context enters through a softmax over tokens sees a prompt exactly through (n, S)."""
    feat, y, V = arrays("feat").long(), arrays("y"), arrays("features")
    ctx = feat[:, :, :-1]
    zeros = torch.zeros(*ctx.shape[:2], K, dtype=y.dtype, device=y.device)
    n = zeros.scatter_add(2, ctx, torch.ones_like(y[:, :, :-1]))
    query = torch.nn.functional.one_hot(feat[:, :, -1], K).to(y.dtype)
    prompts = {"n": n, "S": zeros.scatter_add(2, ctx, y[:, :, :-1]), "absent": n == 0, "query": query,
               "target": y[:, :, -1]}
    if diagnose:   # how many of the query's nearest tokens carry each feature (attn_knn)
        D = ((V.unsqueeze(1) - V.unsqueeze(2)) ** 2).sum(-1)                 # [r, j, k] = |v_k - v_j|^2
        dist = torch.gather(torch.bmm(query, D), 2, ctx)                     # per token, as nearest_tokens
        near = torch.gather(ctx, 2, nearest(dist, knn_count(ctx.shape[2])))
        prompts["near"] = zeros.scatter_add(2, near, torch.ones_like(near, dtype=y.dtype))
    return Batch(prompts, {"features": V})


def count_attention_logs(mass, batch: Batch, K: int) -> dict:
    """attention_logs of the count form: mass (R, B, K) the attention on each feature's tokens
    together (mass / n_k on each of them)."""
    n = batch["n"]
    w = torch.where(n > 0, mass / n.clamp_min(1), torch.zeros_like(n))
    ent = -(n * w * torch.log(w.clamp_min(1e-30))).sum(-1)
    return attention_logs(mass, batch["query"], ent, (batch["near"] * w).sum(-1), K)


class Model:
    """A model kind: what the training loop calls (an instance, for one shard's model section
    and tokens), and what the plan, the tables and the report ask of the kind (classmethods on
    a run's spec; no torch). The defaults read the token form."""

    kind = ""
    has_attention = True
    linear_attention = False   # ZFB's linear self-attention: ŷ = x_qᵀ B m̂ at zero side blocks; logs `effective`
    nonlinear = False          # a deep nonlinear network with no closed-form theory (the block, the GPT)
    column_types: dict = {}    # runs.parquet columns of the kind's settings: name -> pandas dtype

    # ---- the kind, asked by the plan, the tables and the report (run specs, no instance)

    @classmethod
    def columns(cls, spec: dict) -> dict:
        """The runs.parquet columns of a run's model settings (those in `column_types`)."""
        return {c: spec["model"].get(c) for c in cls.column_types}

    @classmethod
    def check(cls, model: dict, exp: dict) -> list[tuple[str, str]]:
        """Settings that are wrong together (the schema checks each alone): (key under the model
        section, what is wrong and what is allowed) for each problem."""
        return []

    @staticmethod
    def _data_bytes(spec: dict) -> tuple[int, int, int, int]:
        """The prompts of a run as the ensemble holds them: (bytes, rows, bytes of one prompt,
        rows of the largest forward)."""
        p, tok = spec["prompts"], spec["tokens"]
        n_tok, rows = p["N"] + 1, p["train"] + p["test"]
        tok_bytes = 4 * n_tok * (tok["d"] + 2)                      # one prompt, float32
        data = 2 * rows * tok_bytes                                  # as read, and stacked for the ensemble
        batch = spec["train"].get("batch_size") or p["train"]
        return data, rows, tok_bytes, max(batch, min(p["test"], 4096))

    @classmethod
    def train_bytes(cls, spec: dict) -> int:
        """Peak memory of one run inside a training ensemble, an upper bound with some slack
        (benchmarks/memory.py measures it): the prompts, and the scores and broadcasts of a pass."""
        data, _, tok_bytes, eval_rows = cls._data_bytes(spec)
        return data + eval_rows * tok_bytes

    @classmethod
    def eval_bytes(cls, spec: dict, width: int = 1) -> int:
        """Rough peak memory of evaluating one run on its largest cell: the prompts in float64
        (numpy) and float32 (torch), the baselines' per-prompt d×d systems and the forward pass."""
        ev, d = spec["evaluate"], spec["tokens"]["d"]
        P, n_tok = ev["prompts"], max(ev["lengths"]) + 1
        data = P * n_tok * (d + 1) * (8 + 4) + P * d * d * 8 * 4
        return data + 4 * P * n_tok * (d + 2 + 2 * width)

    # ---- one shard's model

    def __init__(self, spec: dict, tokens: dict | int):
        if isinstance(tokens, int):          # Model(spec, d): token form, no features
            tokens = {"kind": "gaussian", "d": tokens}
        self.tokens, self.d = tokens, tokens["d"]
        self.K = tokens.get("K") if tokens.get("kind") == "discrete" else None

    def log_shapes(self) -> dict:
        """Per-run shape of every array `diagnostics` returns (the loop allocates the logs)."""
        if not self.has_attention:
            return {}
        out = {"attn_entropy": (), "attn_knn": ()}
        if self.K:
            out.update({"attn_own": (), "attn": (self.K, self.K)})
        return out

    def prepare(self, arrays, diagnose: bool = True) -> Batch:
        """The prompts in the form this model reads (`arrays(name)`: x, y, feat, features)."""
        return token_batch(arrays, diagnose, self.K)

    def predict(self, params, batch: Batch):
        return self.forward(params, batch["x"], batch["y"])

    def step(self, params, batch: Batch):
        """loss (R,), gradients, and what the forward saw (its attention), from one forward:
        autograd through `predict` (the block, the LSA)."""
        with torch.enable_grad():
            leaves = {k: v.detach().requires_grad_(True) for k, v in params.items()}
            pred, a = self.predict(leaves, batch)
            loss = self.objective(pred, batch)
            grads = torch.autograd.grad(loss.sum(), list(leaves.values()))
        return loss.detach(), dict(zip(leaves, grads)), None if a is None else a.detach()

    def loss(self, params, batch: Batch):
        """loss (R,) and what the forward saw, without gradients."""
        pred, seen = self.predict(params, batch)
        return self.objective(pred, batch), seen

    def objective(self, pred, batch: Batch):
        """The training loss per run (R,): ½ mean squared error of the query's prediction."""
        return 0.5 * ((pred - batch["target"]) ** 2).mean(1)

    def diagnostics(self, params, batch: Batch, seen) -> dict:
        return token_attention_logs(seen, batch, self.K) if self.has_attention else {}

    def trace(self, params, batch: Batch, seen) -> dict:
        """What icl.train.Trace keeps of a step every epoch, beside the loss: the own attention
        (discrete tokens), from what the step's forward saw, and nothing of the rest of the
        diagnostics (entropy, nearest-token mass, K x K maps: those are logged every log_every
        epochs). Equal to the logged attn_own (the same function of the same numbers)."""
        if not (self.K and self.has_attention) or seen is None:
            return {}
        return {"attn_own": own_attention(self.own_mass(batch, seen), batch["query"])}

    def own_mass(self, batch: Batch, seen) -> torch.Tensor:
        """Each prompt's attention on the tokens of its query's feature (R, B), from `seen`."""
        return token_own(seen, batch)

    def loss_and_grads(self, params, x, y):
        """Loss and gradients on token-form prompts x, y (tests, benchmarks)."""
        loss, grads, _ = self.step(params, Batch({"x": x, "y": y, "target": y[:, :, -1]}))
        return loss, grads

    def extras(self, specs: list[dict], device) -> dict:
        """Per-run tensors a model's diagnostics need from the run specs (the LSA's target)."""
        return {}

    def _features(self, x, y):
        """self.token_features(x, y), remembered for the last two inputs: full-batch training and
        the evaluations pass the same tensors every epoch, so the copy is made once, not per step.
        The cache holds the input tensors themselves and matches by identity and version, so a
        new tensor that happens to reuse freed memory is never mistaken for an old one."""
        cache = self.__dict__.setdefault("_feature_cache", [])
        for cx, cy, vx, vy, e in cache:
            if cx is x and cy is y and vx == x._version and vy == y._version:
                return e
        e = self.token_features(x, y)
        cache.append((x, y, x._version, y._version, e))
        if len(cache) > 2:
            cache.pop(0)
        return e
