"""Ensemble models: every parameter has a leading run dimension R, so one call trains a shard.

Inputs: x (R, B, T, d) with the query last (T = N + 1), y (R, B, T) whose query entry is the
target and is never shown to the model. Every model computes only what the loss reads: the
prediction at the query position and the query's attention over the N context tokens.

The training loop talks to a model through four calls: `prepare` (prompts into the form the
model reads, a Batch), `step` (loss, gradients and what the forward saw), `loss` (the same
without gradients) and `diagnostics` (what the model logs about itself: attention, its
matrices). So the loop has no branch on the model's kind, and a new model touches this file
and the schema.
"""
from __future__ import annotations

import math
import zlib

import numpy as np
import torch


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
            runs["features"] = arrays("features")
    return Batch(prompts, runs)


def attention_logs(mass, query, entropy, knn_mass, K) -> dict:
    """Per-run summaries of attention from per-prompt quantities: `mass` (R, B, K) on each key
    feature, the query's feature as a one-hot (R, B, K), the entropy over tokens and the mass on
    the nearest tokens (R, B). attn[r, k, j] is the mean mass a query with feature j puts on
    feature k (NaN where no query has feature j); attn_own its diagonal mean."""
    out = {"attn_entropy": entropy.mean(1), "attn_knn": knn_mass.mean(1)}
    if K:
        sums = torch.bmm(query.transpose(1, 2), mass)                                  # [r, j, k]
        amap = (sums / query.sum(1).unsqueeze(-1)).transpose(1, 2)
        out["attn"] = amap
        out["attn_own"] = torch.diagonal(amap, dim1=1, dim2=2).nanmean(-1)
    return out


def token_attention_logs(a, batch: Batch, K) -> dict:
    """attention_logs of token-level attention a (R, B, N)."""
    ent = -(a * torch.log(a.clamp_min(1e-30))).sum(-1)
    knn = torch.gather(a, 2, batch["knn"]).sum(-1)
    if not K:
        return attention_logs(None, None, ent, knn, None)
    mass = torch.zeros(*a.shape[:2], K, dtype=a.dtype, device=a.device).scatter_add_(2, batch["feat"][:, :, :-1], a)
    return attention_logs(mass, batch["query"], ent, knn, K)


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


def count_attention_logs(w, batch: Batch, K: int) -> dict:
    """attention_logs of the count form: w (R, B, K) the attention on one token of each feature."""
    n = batch["n"]
    ent = -(n * w * torch.log(w.clamp_min(1e-30))).sum(-1)
    return attention_logs(n * w, batch["query"], ent, (batch["near"] * w).sum(-1), K)


class Model:
    """What the training loop calls; the defaults read the token form."""

    kind = ""
    has_attention = True

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
            loss = 0.5 * ((pred - batch["target"]) ** 2).mean(1)
            grads = torch.autograd.grad(loss.sum(), list(leaves.values()))
        return loss.detach(), dict(zip(leaves, grads)), None if a is None else a.detach()

    def loss(self, params, batch: Batch):
        """loss (R,) and what the forward saw, without gradients."""
        pred, seen = self.predict(params, batch)
        return 0.5 * ((pred - batch["target"]) ** 2).mean(1), seen

    def diagnostics(self, params, batch: Batch, seen) -> dict:
        return token_attention_logs(seen, batch, self.K) if self.has_attention else {}

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


class SoftmaxQ(Model):
    """LDL eq. (6): y_hat = sum_i y_i softmax_i(x_i^T Q x_q); only Q is trained, from zero.

    The gradient is analytic (no autograd): with a_n the attention, p the prediction and t the
    target, dL/dQ = (1/B) sum_b (p_b - t_b) sum_n a_n (y_n - p_b) x_n x_q^T.

    On discrete tokens without noise a score depends only on the (key, query) features,
    s_kj = v_k^T Q v_j, so a prompt reduces to its per-feature counts n_k and label sums S_k:
    p = sum_k e^{s_kj} S_k / sum_k n_k e^{s_kj}, and the gradient is V^T C V with
    C[j, k] = (1/B) sum_{b: query j} (p_b - t_b) a_k (S_k - n_k p_b). That costs O(K) per prompt
    instead of O(N d), and is exact (tests/test_softmax_q.py checks it against the token form).
    """

    kind = "softmax_q"

    def __init__(self, spec: dict, tokens):
        super().__init__(spec, tokens)
        self.by_feature = bool(self.K) and not self.tokens.get("noise")

    def init(self, seeds, names, device, dtype=torch.float32) -> dict:
        return {"Q": torch.zeros(len(seeds), self.d, self.d, device=device, dtype=dtype)}

    def forward(self, params, x, y):
        ctx, xq = x[:, :, :-1], x[:, :, -1]
        u = torch.einsum("rij,rbj->rbi", params["Q"], xq)          # Q x_q
        a = torch.softmax(torch.einsum("rbnd,rbd->rbn", ctx, u), dim=-1)
        pred = (a * y[:, :, :-1]).sum(-1)
        return pred, a

    def _token_step(self, params, x, y):
        """The analytic gradient on the token form."""
        pred, a = self.forward(params, x, y)
        err = pred - y[:, :, -1]                                     # (R, B)
        loss = 0.5 * (err ** 2).mean(1)
        coef = (err / x.shape[1]).unsqueeze(-1) * a * (y[:, :, :-1] - pred.unsqueeze(-1))
        z = torch.einsum("rbn,rbnd->rbd", coef, x[:, :, :-1])
        grad = torch.einsum("rbd,rbe->rde", z, x[:, :, -1])
        return loss, {"Q": grad}, a

    # ---- the feature-count form (discrete tokens without noise)

    def log_shapes(self) -> dict:
        return {**super().log_shapes(), **({"q_features": (self.K, self.K)} if self.K else {})}

    def prepare(self, arrays, diagnose: bool = True) -> Batch:
        return count_batch(arrays, diagnose, self.K) if self.by_feature else super().prepare(arrays, diagnose)

    def _feature_weights(self, params, b: Batch):
        """Attention on one token of each feature (R, B, K), 0 for features absent from a prompt."""
        V = b["features"]
        s = torch.einsum("rkd,rde,rje->rjk", V, params["Q"], V)      # [r, query j, key k] = v_k^T Q v_j
        logit = torch.bmm(b["query"], s).masked_fill(b["absent"], float("-inf"))
        w = torch.exp(logit - logit.amax(-1, keepdim=True))
        return w / (b["n"] * w).sum(-1, keepdim=True)

    def predict(self, params, batch: Batch):
        if "x" in batch:
            return super().predict(params, batch)
        w = self._feature_weights(params, batch)
        return (w * batch["S"]).sum(-1), w

    def step(self, params, batch: Batch):
        if "x" in batch:
            return self._token_step(params, batch["x"], batch["y"])
        pred, w = self.predict(params, batch)
        err = pred - batch["target"]
        n, S, V = batch["n"], batch["S"], batch["features"]
        coef = (err / n.shape[1]).unsqueeze(-1) * w * (S - n * pred.unsqueeze(-1))
        C = torch.bmm(batch["query"].transpose(1, 2), coef)              # [r, query j, key k]
        grad = torch.einsum("rjk,rkd,rje->rde", C, V, V)
        return 0.5 * (err ** 2).mean(1), {"Q": grad}, w

    def diagnostics(self, params, batch: Batch, seen) -> dict:
        out = token_attention_logs(seen, batch, self.K) if "x" in batch else count_attention_logs(seen, batch, self.K)
        if self.K:
            # q_features[i, j] = v_j^T Q v_i (LDL §5.1: q_{k,k'} = v_k'^T Q v_k)
            V = batch["features"]
            out["q_features"] = torch.einsum("rjd,rde,rie->rij", V, params["Q"], V)
        return out


def _layer_norm(h, g, b, eps=1e-5):
    mu = h.mean(-1, keepdim=True)
    var = h.var(-1, keepdim=True, unbiased=False)
    return (h - mu) * torch.rsqrt(var + eps) * g + b


class TransformerBlock(Model):
    """One pre-LN block: embedding of [x; y], single-head attention, ReLU feed-forward, LayerNorm,
    linear head read at the query. The query attends to the N context tokens (as in LDL eq. 6).

    Only the query's output is computed, and never a (tokens x width) tensor. The embedding is
    h_n = e_n A with e_n = [x_n, y_n, 1] and A = [W_x; w_y; b] of shape (d+2, W), so with
    A~ = A centred over its columns and G = A~ A~^T / W:
      LayerNorm(h_n) = (e_n A~) / s_n * g + beta,   s_n^2 = e_n G e_n^T + eps,
      score_n = LN(h_n) . u = (e_n . (A~ (g * u))) / s_n + const   (the const cancels in softmax),
      sum_n a_n LN(h_n) = ((sum_n a_n e_n / s_n) A~) * g + beta.
    Per token this costs O(d^2) instead of O(d W). `reference_forward` in the tests computes the
    block the plain way, token by token, and must agree.
    """

    kind = "transformer_block"
    eps = 1e-5

    def __init__(self, spec: dict, tokens):
        super().__init__(spec, tokens)
        self.w = spec["width"]
        self.f = spec["width"] * spec.get("ffn_mult", 4)
        self.by_feature = bool(self.K) and not self.tokens.get("noise")

    def prepare(self, arrays, diagnose: bool = True) -> Batch:
        """Noiseless discrete prompts as K distinct context tokens (v_k and its label S_k/n_k)
        plus the query, with log n_k added to the attention logits: the softmax over N tokens
        then sums each feature's n_k equal terms, so the block is exact on K + 1 tokens a prompt
        instead of N + 1 (tests/test_transformer_block.py checks it against the token form)."""
        if not self.by_feature:
            return super().prepare(arrays, diagnose)
        b = count_batch(arrays, diagnose, self.K)
        V, n = b["features"], b["n"]
        R, B, K = n.shape
        ctx = V.unsqueeze(1).expand(R, B, K, self.d)
        labels = torch.where(n > 0, b["S"] / n.clamp_min(1), torch.zeros_like(n))
        b.prompts.update(x=torch.cat([ctx, torch.bmm(b["query"], V).unsqueeze(2)], 2),
                         y=torch.cat([labels, b["target"].unsqueeze(-1)], 2), log_n=torch.log(n))
        return b

    def predict(self, params, batch: Batch):
        return self.forward(params, batch["x"], batch["y"], batch.prompts.get("log_n"))

    def diagnostics(self, params, batch: Batch, seen) -> dict:
        if "log_n" not in batch:
            return super().diagnostics(params, batch, seen)
        n = batch["n"]                       # seen: each feature's attention mass; per token: mass / n
        return count_attention_logs(torch.where(n > 0, seen / n.clamp_min(1), torch.zeros_like(n)), batch, self.K)

    def shapes(self) -> dict:
        d, w, f = self.d, self.w, self.f
        return {  # name: (shape, fan_in for uniform init, or "one"/"zero")
            "emb_x": ((d, w), d + 1), "emb_y": ((w,), d + 1), "emb_b": ((w,), d + 1),
            "ln1_g": ((w,), "one"), "ln1_b": ((w,), "zero"),
            "wq": ((w, w), w), "wk": ((w, w), w), "wv": ((w, w), w), "wo": ((w, w), w),
            "ln2_g": ((w,), "one"), "ln2_b": ((w,), "zero"),
            "w1": ((w, f), w), "b1": ((f,), w), "w2": ((f, w), f), "b2": ((w,), f),
            "lnf_g": ((w,), "one"), "lnf_b": ((w,), "zero"),
            "head_w": ((w,), w), "head_b": ((1,), w),
        }

    def init(self, seeds, names, device, dtype=torch.float32) -> dict:
        """PyTorch's default Linear init (U(+-1/sqrt(fan_in))), drawn per run from its own stream."""
        per_run = []
        for seed, name in zip(seeds, names):
            g = init_rng(seed, name)
            p = {}
            for key, (shape, fan) in self.shapes().items():
                if fan == "one":
                    p[key] = np.ones(shape)
                elif fan == "zero":
                    p[key] = np.zeros(shape)
                else:
                    p[key] = g.uniform(-1, 1, size=shape) / math.sqrt(fan)
            per_run.append(p)
        return {k: torch.tensor(np.stack([p[k] for p in per_run]), dtype=dtype, device=device)
                for k in self.shapes()}

    @staticmethod
    def token_features(x, y):
        """e_n = [x_n, y_n, 1] with the query's label hidden: (R, B, T, d + 2)."""
        yin = y.clone()
        yin[:, :, -1] = 0.0
        return torch.cat([x, yin.unsqueeze(-1), torch.ones_like(yin).unsqueeze(-1)], dim=-1)

    def forward(self, params, x, y, log_n=None):
        """Prediction at the query and its attention over the context; `log_n` (R, B, N), where
        given, is added to the logits (the count form: token n stands for n_k equal tokens)."""
        p = params
        e = self._features(x, y)
        A = torch.cat([p["emb_x"], p["emb_y"].unsqueeze(1), p["emb_b"].unsqueeze(1)], dim=1)   # (R, d+2, W)
        At = A - A.mean(-1, keepdim=True)
        G = torch.bmm(At, At.transpose(1, 2)) / self.w
        R, B, T, D = e.shape
        ef = e.reshape(R, B * T, D)
        inv = torch.rsqrt((torch.bmm(ef, G) * ef).sum(-1) + self.eps).view(R, B, T)
        eq, ectx, inv_ctx = e[:, :, -1], e[:, :, :-1], inv[:, :, :-1]
        g1, b1 = p["ln1_g"].unsqueeze(1), p["ln1_b"].unsqueeze(1)
        zq = torch.bmm(eq, At) * inv[:, :, -1:] * g1 + b1                       # LN(h_q): (R, B, W)
        u = torch.bmm(torch.bmm(zq, p["wq"]), p["wk"].transpose(1, 2)) / math.sqrt(self.w)
        r = torch.bmm(u * g1, At.transpose(1, 2))                               # A~ (g * u): (R, B, d+2)
        logits = torch.einsum("rbne,rbe->rbn", ectx, r) * inv_ctx
        a = torch.softmax(logits if log_n is None else logits + log_n, dim=-1)
        m = torch.einsum("rbn,rbne->rbe", a * inv_ctx, ectx)
        c = torch.bmm(m, At) * g1 + b1                                          # sum_n a_n LN(h_n)
        hq = torch.bmm(eq, A) + torch.bmm(torch.bmm(c, p["wv"]), p["wo"])
        z2 = _layer_norm(hq, p["ln2_g"].unsqueeze(1), p["ln2_b"].unsqueeze(1), self.eps)
        ff = torch.relu(torch.bmm(z2, p["w1"]) + p["b1"].unsqueeze(1))
        hq = hq + torch.bmm(ff, p["w2"]) + p["b2"].unsqueeze(1)
        zf = _layer_norm(hq, p["lnf_g"].unsqueeze(1), p["lnf_b"].unsqueeze(1), self.eps)
        pred = torch.einsum("rbw,rw->rb", zf, p["head_w"]) + p["head_b"]
        return pred, a


class LSA(Model):
    """ZFB eq. (3.3): f(E) = E + W^PV E (E^T W^KQ E)/ρ, ŷ = f(E)[d+1, N+1], full (d+1)x(d+1)
    matrices, all entries trained; ρ = the prompt's own number of context tokens (ZFB).

    Only the query column is computed: with e_q = [x_q; 0] and E including the query column,
    f(E) e_q-column = e_q + W^PV (sum_t e_t (e_t . W^KQ e_q)) / ρ.
    Init (ZFB Assumption): W^PV(0) = σ e_{d+1} e_{d+1}^T, W^KQ(0) = σ [[ΘΘ^T, 0], [0, 0]] with
    ΘΘ^T = I/√d (so ‖ΘΘ^T‖_F = 1), plus optional i.i.d. N(0, init_noise²) on every entry.
    """

    kind = "lsa"
    has_attention = False

    def __init__(self, spec: dict, tokens):
        super().__init__(spec, tokens)
        self.sigma = spec.get("init_scale", 0.3)
        self.noise = spec.get("init_noise", 0.0)

    def init(self, seeds, names, device, dtype=torch.float32) -> dict:
        D = self.d + 1
        pv, kq = [], []
        for seed, name in zip(seeds, names):
            g = init_rng(seed, name)
            a = np.zeros((D, D))
            a[-1, -1] = self.sigma
            b = np.zeros((D, D))
            b[:-1, :-1] = self.sigma * np.eye(self.d) / math.sqrt(self.d)
            if self.noise:
                a += self.noise * g.standard_normal((D, D))
                b += self.noise * g.standard_normal((D, D))
            pv.append(a)
            kq.append(b)
        return {"W_pv": torch.tensor(np.stack(pv), dtype=dtype, device=device),
                "W_kq": torch.tensor(np.stack(kq), dtype=dtype, device=device)}

    @staticmethod
    def token_features(x, y):
        """The prompt matrix's columns e_t = [x_t; y_t], the query's label hidden: (R, B, T, d + 1)."""
        e = torch.cat([x, y.unsqueeze(-1)], dim=-1)
        e[:, :, -1, -1] = 0.0
        return e

    def forward(self, params, x, y):
        e = self._features(x, y)
        eq = e[:, :, -1]                                                # (R, B, D)
        v = torch.einsum("rij,rbj->rbi", params["W_kq"], eq)
        a = torch.einsum("rbtd,rbd->rbt", e, v)                         # e_t . W^KQ e_q over all columns
        b = torch.einsum("rbt,rbtd->rbd", a, e) / (x.shape[2] - 1)
        pred = torch.einsum("rj,rbj->rb", params["W_pv"][:, -1, :], b)  # last row of W^PV b (+ e_q's 0)
        return pred, None

    @staticmethod
    def effective(params) -> torch.Tensor:
        """B = w22^PV · (W11^KQ)^T: the matrix with ŷ = x_q^T B m̂ when w21 blocks are zero."""
        return params["W_pv"][:, -1, -1, None, None] * params["W_kq"][:, :-1, :-1].transpose(1, 2)

    def log_shapes(self) -> dict:
        return {"effective": (self.d, self.d), "dist_target": ()}

    def extras(self, specs: list[dict], device) -> dict:
        from icl.theory.table import lsa_target
        targets = [lsa_target(s) for s in specs]
        if any(t is None for t in targets):       # no closed form for this task: no distance logged
            return {}
        return {"lsa_target": torch.as_tensor(np.stack(targets), dtype=torch.float32, device=device)}

    def diagnostics(self, params, batch: Batch, seen) -> dict:
        """The effective matrix and its relative distance to the optimum Γ⁻¹ (ZFB)."""
        B = self.effective(params)
        out = {"effective": B}
        if "lsa_target" in batch:
            T = batch["lsa_target"]
            out["dist_target"] = torch.linalg.norm(B - T, dim=(1, 2)) / torch.linalg.norm(T, dim=(1, 2))
        return out


MODELS = {m.kind: m for m in (SoftmaxQ, TransformerBlock, LSA)}


def build(spec: dict, tokens):
    """The model of a run spec's `model` section, for its `tokens` section (or just d)."""
    return MODELS[spec["kind"]](spec, tokens)
