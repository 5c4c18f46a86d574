"""What every model kind shares: the Model interface, prompts as a model reads them (Batch and the
token and count layouts) and the initialisation streams. The attention summaries are in
icl.models.attention, the memory model (Memory, which Model inherits) in icl.models.memory.

Ensemble models: every parameter has a leading run dimension R, so one call trains a shard.
Inputs: x (R, B, T, d) with the query last (T = N + 1), y (R, B, T) whose query entry is the
target and is never shown to the model. Every model computes only what the loss reads.

The training loop talks to a model through four calls: `prepare` (prompts into the form the
model reads, a Batch), `step` (loss, gradients and what the forward saw), `loss` (the same
without gradients) and `diagnostics` (what the model logs about itself: attention, its
matrices). The plan, the tables and the report ask the kind (the class, no instance) for what
depends on it: the runs.parquet columns of its settings (`columns`), its memory (`train_bytes`,
`eval_bytes`), the checks of its settings (`check`) and what it is, its traits (`linear_attention`,
`linear_in_labels`, `label_average`, `mean_field`, `has_positions`, `nonlinear`; the kinds that
have one: `icl.models.kinds(trait)`). So nothing outside a kind's module branches on its name (a
claim, a theory table or a figure asks for a trait: tests/test_layers.py checks), and a new kind
touches its module, `icl/models/__init__.py` (one line) and the schema. A kind's own settings
(beside name, kind, optimizer, lr) are a frozen dataclass in its module, typed and defaulted there
once (`Settings`, read with `settings(model)`); tests/test_model_settings.py holds the schema's
per-kind properties and defaults against it.

torch is imported on first use (icl.models.lazy).
"""
from __future__ import annotations

import dataclasses
import zlib
from typing import NamedTuple

import numpy as np

from icl.data import tokens_are_features
from icl.models.attention import (attention_logs, count_attention_logs, knn_count, nearest,  # noqa: F401
                                   nearest_tokens, own_attention, token_attention_logs, token_own)
from icl.models.compiled import guarded
from icl.models.lazy import lazy_torch
from icl.models.memory import Memory
from icl.settings import Tokens


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


def count_batch(arrays, diagnose: bool, K: int) -> Batch:
    """The count form of noiseless discrete prompts: per prompt the number n_k and label sum S_k
    of its context tokens of each feature, and the query's feature; the tokens themselves are
    never read. Every token of feature k in a prompt is the same (v_k, f(v_k)), so a model whose
    context enters through a softmax over tokens sees a prompt exactly through (n, S)."""
    drawn = drawn_counts(arrays)
    if drawn is not None:
        return _drawn_count_batch(*drawn, arrays("features"), diagnose)
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


def drawn_counts(arrays):
    """(counts, labels at the features, query feature) of prompts drawn in the count form
    (prompts.form: counts), None for prompts drawn token by token."""
    try:
        return arrays("counts"), arrays("labels"), arrays("query").long()
    except KeyError:
        return None


def _drawn_count_batch(counts, labels, q, V, diagnose: bool) -> Batch:
    """count_batch's arrays from prompts drawn as counts: S_k = n_k·f(v_k), the target f(v_query).
    Their tokens have no positions, so `near` (the query's N/10 nearest tokens, ties broken by
    position in the token form) is its expectation over the tokens' order: the features nearer the
    query taken whole, the tied ones in proportion to their counts (the hypergeometric mean)."""
    n = counts.to(labels.dtype)
    query = torch.nn.functional.one_hot(q, n.shape[-1]).to(n.dtype)
    prompts = {"n": n, "S": n * labels, "absent": n == 0, "query": query,
               "target": torch.gather(labels, 2, q.unsqueeze(-1))[..., 0]}
    if diagnose:
        D = ((V.unsqueeze(1) - V.unsqueeze(2)) ** 2).sum(-1)                 # [r, j, k] = |v_k - v_j|^2
        dist = torch.bmm(query, D)                                           # [r, b, k]: feature k's distance
        closer = (dist.unsqueeze(-1) < dist.unsqueeze(-2)).to(n.dtype)      # [r, b, k', k]: k' nearer than k
        tied = (dist.unsqueeze(-1) == dist.unsqueeze(-2)).to(n.dtype)
        before = torch.einsum("rbjk,rbj->rbk", closer, n)
        level = torch.einsum("rbjk,rbj->rbk", tied, n)
        take = (knn_count(int(n[0, 0].sum())) - before).clamp(min=0)
        prompts["near"] = n * torch.minimum(take, level) / level.clamp_min(1)
    return Batch(prompts, {"features": V})


@dataclasses.dataclass(frozen=True)
class NoSettings:
    """A kind with no settings of its own."""
    unfilled = ()      # settings whose default the schema leaves out (see GPTSettings)


class Step(NamedTuple):
    """What a training step returns: the objective (R,), the gradients (name -> (R, ...)), what the
    forward saw (its attention, or None) and the query's ½MSE (R,), which the trace keeps."""
    loss: object
    grads: dict
    seen: object
    query_loss: object


class Model(Memory):
    """A model kind: what the training loop calls (an instance, for one shard's model section
    and tokens), and what the plan, the tables and the report ask of the kind (classmethods on
    a run's spec; no torch). The defaults read the token form."""

    kind = ""
    Settings = NoSettings      # the kind's own settings, a frozen dataclass with their defaults
    has_attention = True
    # Traits: what a claim, a theory table or a figure needs of a kind (icl.models.kinds(trait) lists
    # the kinds that have one); set in each kind's module, never read off its name.
    linear_attention = False   # ZFB's linear self-attention: ŷ = x_qᵀ B m̂ at zero side blocks; logs `effective`;
                               # ZFB's closed forms (the optimum Γ⁻¹, its limits, the LSA claims) describe it
    linear_in_labels = False   # ŷ linear in the context labels, so the LSA's limit binds it (zfb.beyond_lsa
                               # compares the others with the LSA)
    label_average = False      # ŷ = Σ aᵢyᵢ, a convex combination of the context labels: the loss is bounded (GD
                               # cannot diverge), and a task that scales the labels by L scales it by L² (LDL's
                               # scale identity)
    mean_field = False         # LDL's model: a softmax over key features with one Q (logits v_kᵀ Q v_j), so its
                               # mean-field flow, collapse clock and the shift invariance of GD on its logits apply
    has_positions = False      # a positional embedding setting (`positional`): ZFB §5's GPT claims (the length spike)
    nonlinear = False          # a deep nonlinear network with no closed-form theory (the block, the GPT)
    reads_counts = False       # reads a noiseless discrete prompt only through its per-feature counts and labels
                               # (the count form), so its prompts may be drawn as counts (prompts.form: counts)
    column_types: dict = {}    # runs.parquet columns of the kind's settings: name -> pandas dtype

    # ---- the kind, asked by the plan, the tables and the report (run specs, no instance)

    @classmethod
    def settings(cls, model: dict):
        """The kind's own settings of a model section, a missing or null one at its default."""
        names = {f.name for f in dataclasses.fields(cls.Settings)}
        return cls.Settings(**{k: v for k, v in model.items() if k in names and v is not None})

    @classmethod
    def columns(cls, spec: dict) -> dict:
        """The runs.parquet columns of a run's model settings (those in `column_types`)."""
        return {c: spec["model"].get(c) for c in cls.column_types}

    @classmethod
    def check(cls, model: dict, exp: dict) -> list[tuple[str, str]]:
        """Settings that are wrong together (the schema checks each alone): (key under the model
        section, what is wrong and what is allowed) for each problem."""
        return []

    # ---- one shard's model

    def __init__(self, spec: dict, tokens: dict | int):
        if isinstance(tokens, int):          # Model(spec, d): token form, no features
            tokens = {"kind": "gaussian", "d": tokens}
        self.tokens, self.d = tokens, tokens["d"]
        self.K = Tokens.of(tokens).K
        self.precision, self.device_type = "float32", "cpu"

    def place(self, device_type: str, precision: str) -> None:
        """Where the model computes and in what precision (icl.jobs.runtime.pick_precision's answer):
        what `autocast` reads. models.build sets it; a model built without them computes float32."""
        self.precision, self.device_type = precision, device_type

    def log_shapes(self) -> dict:
        """Per-run shape of every array `diagnostics` and `test_losses` return beyond the standard
        losses (the loop allocates the logs)."""
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

    def step(self, params, batch: Batch) -> "Step":
        """loss (R,), gradients, what the forward saw (its attention) and the query's ½MSE, from one
        forward: autograd through `predict` (the block, the LSA, the GPT); the forward and the loss
        compiled where `compile` was called (autograd then runs the compiled backward), and the step
        made again eagerly where that raises (icl.models.compiled)."""
        return guarded(lambda: self._step(params, batch), self.__dict__.get("_failed"))

    def _step(self, params, batch: Batch) -> "Step":
        graphs = self.__dict__.get("_graphs", False)
        if graphs:                  # a new iteration: the graphs' outputs of the last one may be overwritten
            torch.compiler.cudagraph_mark_step_begin()
        with torch.enable_grad():
            leaves = {k: v.detach().requires_grad_(True) for k, v in params.items()}
            loss, pred, a = self._forward_loss(leaves, batch)
            grads = torch.autograd.grad(loss.sum(), list(leaves.values()))
        if graphs:                  # ours to keep past the next replay (the gradients are flattened, a copy, at once)
            loss, pred, a = loss.clone(), pred.clone(), None if a is None else a.clone()
        return Step(loss.detach(), dict(zip(leaves, grads)), None if a is None else a.detach(),
                    self.query_loss(pred.detach(), batch))

    def forward_loss(self, params, batch: Batch):
        """The objective (R,), the prediction and what the forward saw: what `step` differentiates."""
        pred, a = self.predict(params, batch)
        return self.objective(pred, batch), pred, a

    @property
    def _forward_loss(self):
        return self.__dict__.get("_compiled") or self.forward_loss

    def compile(self, graphs: bool = False, failed=None) -> None:
        """Train through torch.compile of `forward_loss` (one graph per prompt shape: a curriculum
        stage compiles once); `graphs`: its forward and backward replayed as CUDA graphs (mode
        reduce-overhead; torch leaves a CPU's step as plain compiled code). A step that raises calls
        `failed(error)` and is made again eagerly (icl.models.compiled)."""
        self._compiled = torch.compile(self.forward_loss, dynamic=False, **({"mode": "reduce-overhead"} if graphs else {}))
        self._graphs, self._failed = graphs, failed

    def uncompile(self) -> None:
        for key in ("_compiled", "_graphs", "_failed"):
            self.__dict__.pop(key, None)

    bf16_blocks = False         # `train.precision: bf16` autocasts the kind's inner blocks (kinds that say so)

    def autocast(self):
        """The blocks' precision (`place`): bfloat16 autocast of their matmuls under `bf16`,
        nothing otherwise (float32, or TF32 matmuls set globally)."""
        import contextlib
        if self.precision != "bf16":
            return contextlib.nullcontext()
        return torch.autocast(self.device_type, dtype=torch.bfloat16)

    def loss(self, params, batch: Batch):
        """loss (R,) and what the forward saw, without gradients."""
        pred, seen = self.predict(params, batch)
        return self.objective(pred, batch), seen

    def objective(self, pred, batch: Batch):
        """The training loss per run (R,): ½ mean squared error of the query's prediction."""
        return 0.5 * ((pred - batch["target"]) ** 2).mean(1)

    def query_loss(self, pred, batch: Batch):
        """½ mean squared error at the query alone (R,): what t_escape reads. `step` returns the
        step's own (Step.query_loss), so the trace needs no second forward; equal to the objective
        for every kind whose loss reads the query only."""
        return Model.objective(self, pred, batch)

    def test_losses(self, params, batch: Batch) -> dict:
        """What the logs keep of the test prompts: the objective (`test_loss`). A kind whose objective
        reads more than the query adds the query's own (`test_query_loss`, in its log_shapes): the
        references a run is judged against (uniform attention, the feature oracle) are at the query."""
        return {"test_loss": self.loss(params, batch)[0]}

    def diagnostics(self, params, batch: Batch, seen) -> dict:
        return token_attention_logs(seen, batch, self.K) if self.has_attention else {}

    def trace(self, params, batch: Batch, seen) -> dict:
        """What icl.train.logs.Trace keeps of a step every epoch, beside the loss: the own attention
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
        out = self.step(params, Batch({"x": x, "y": y, "target": y[:, :, -1]}))
        return out.loss, out.grads

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
