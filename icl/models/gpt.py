"""gpt: a decoder-only GPT-2 / nanoGPT transformer reading prompts as Garg et al. do (ZFB §5)."""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from icl.models.base import Batch, Model, init_rng, lazy_torch, own_attention, token_attention_logs, token_own
from icl.settings import Tokens

torch = lazy_torch(globals())

INIT_STD = 0.02               # GPT-2's initializer_range (nanoGPT: the same)
STEP_CAP_BYTES = 2**29       # a CPU ensemble step's activations at most (ensemble_cap): 16 runs of the benchmark's GPT
CHUNK_FLOATS = 2**24          # a forward without gradients goes through the prompts in chunks of about this many floats


def _normalise(h, eps=1e-5):
    """LayerNorm without its gain and bias (those are folded into the linear layer that follows)."""
    return torch.nn.functional.layer_norm(h, h.shape[-1:], eps=eps)


def _folded(g, b, w, bias):
    """The linear layer after a LayerNorm with gain g and bias b (R, I): (n·g + b) @ w + bias
    = n @ (g[:, None]·w) + (b @ w + bias), so the gain and bias act on the (R, I, O) weights,
    not on every token's (R, B, S, I) activations."""
    return g.unsqueeze(-1) * w, torch.baddbmm(bias.unsqueeze(1), b.unsqueeze(1), w).squeeze(1)


def _linear(h, w, b):
    """h (R, ..., I) @ w (R, I, O) + b (R, O): one batched matmul over runs."""
    R, I = h.shape[0], h.shape[-1]
    out = torch.baddbmm(b.unsqueeze(1), h.reshape(R, -1, I), w)
    return out.view(*h.shape[:-1], w.shape[-1])


def _query_attention(q, k):
    """The last query row's attention (R·B, H, N) over the N context examples, x_i and ỹ_i
    summed for example i, its attention to itself left out and the rest renormalised."""
    with torch.no_grad():
        S = k.shape[2]
        wq = torch.softmax(q[:, :, -1:] @ k.transpose(-1, -2) / math.sqrt(k.shape[-1]), -1)[:, :, 0, :S - 1]
        wq = wq.unflatten(-1, (-1, 2)).sum(-1)
        return wq / wq.sum(-1, keepdim=True)


@dataclass(frozen=True)
class GPTSettings:
    """A GPT's settings (as nanoGPT's GPTConfig), each defaulted here and nowhere else."""
    layers: int = 3              # transformer blocks
    heads: int = 2               # attention heads per block (a divisor of width)
    width: int = 64              # model width (embedding dimension)
    ffn_mult: int = 4            # MLP width / model width
    positional: str = "learned"  # learned absolute positional embeddings, or none (the causal mask alone)
    positions: int = 1024        # rows of the learned positional table
    loss: str = "all"            # train on the prediction at every x position (Garg), or at the query alone
    unfilled = ()                # settings whose default the schema leaves out (it fills in every other)


class GPT(Model):
    """Garg et al.'s in-context learner: a read-in linear layer from d to the width, GPT-2 blocks,
    a final LayerNorm and a read-out linear layer to 1, every parameter with a leading run axis.

    Prompt (Garg's `_combine`): x_1, ỹ_1, x_2, ỹ_2, ..., x_N, ỹ_N, x_q with ỹ_i = (y_i, 0, ..., 0)
    in R^d: S = 2N + 1 tokens (the query's label is never a token). The prediction is read at
    every x position: at x_i it sees the examples before i only (causal attention), so one forward
    gives the error at every context length; the query's is the last. `loss: all` trains on the
    mean over all N + 1 x positions (Garg), `loss: query` on the query's alone; train_loss and
    test_loss are that objective.

    Blocks as nanoGPT's (pre-LN): h += proj(causal_attention(LN1(h))); h += fc_proj(GELU(fc(LN2(h)))),
    with `heads` heads of width/heads each, softmax(q·k/√(width/heads)), exact (erf) GELU, an MLP of
    ffn_mult · width, LayerNorm eps 1e-5. `positional: learned` adds a learned absolute embedding
    of the token's position (a table of `positions` rows; `none`: no positional information but
    the causal mask). Init: GPT-2's (N(0, 0.02) for the blocks' weights and the positions, the
    residual projections N(0, 0.02/√(2·layers)), biases 0, LayerNorms 1 and 0) for the backbone,
    PyTorch's nn.Linear default (U(±1/√fan_in)) for read-in and read-out, as in Garg's model. The
    positional table is drawn from a stream of its own, row by row, so row p's initial value does
    not depend on the table's size; rows past the longest training prompt get no gradient and keep
    it (Adam moves a parameter with zero gradients by exactly 0): the table size changes no number.

    Only what the loss reads: the last layer computes its queries, residual and MLP at the x
    positions the objective reads (all N + 1, or the query alone), its keys and values at every
    token. Parameters, stacked over layers: read_in_w (d, W), read_in_b (W), wpe (P, W),
    ln1_g/ln1_b (L, W), attn_w (L, W, 3W) (query, key, value), attn_b (L, 3W), proj_w (L, W, W),
    proj_b (L, W), ln2_g/ln2_b (L, W), fc_w (L, W, F), fc_b (L, F), fc_proj_w (L, F, W),
    fc_proj_b (L, W), lnf_g/lnf_b (W), read_out_w (W), read_out_b (1); x @ w, so a weight is
    nn.Linear's transposed.

    Diagnostics: the attention of the final x position (the query) in every layer and head, over
    the N context examples (x_i and ỹ_i both count for example i; its attention to itself left out
    and the rest renormalised): for discrete tokens the K×K map of every (layer, head) in `attn`
    (L, H, K, K), and attn_own / attn_entropy / attn_knn of the last layer, averaged over its heads.
    """

    kind = "gpt"
    Settings = GPTSettings
    nonlinear = True
    has_positions = True
    bf16_blocks = True
    column_types = {"width": "Int64", "ffn_mult": "Int64", "layers": "Int64", "heads": "Int64",
                    "positional": "string", "positions": "Int64", "loss": "string"}

    def __init__(self, spec: dict, tokens):
        super().__init__(spec, tokens)
        s = self.settings(spec)
        self.w, self.layers, self.heads = s.width, s.layers, s.heads
        self.f = s.width * s.ffn_mult
        self.learned = s.positional == "learned"
        self.positions = s.positions
        self.loss_all = s.loss == "all"

    # ---- the kind

    @classmethod
    def columns(cls, spec: dict) -> dict:
        out = super().columns(spec)
        if out["positional"] != "learned":
            out["positions"] = None            # no table
        return out

    @staticmethod
    def tokens_needed(N: int) -> int:
        """Tokens of a prompt with N context examples: x and ỹ for each, and the query's x."""
        return 2 * N + 1

    @classmethod
    def check(cls, model: dict, exp: dict) -> list[tuple[str, str]]:
        out = []
        s = cls.settings(model)
        W, H = s.width, s.heads
        if W % H:
            divisors = ", ".join(str(k) for k in range(1, W + 1) if W % k == 0)
            out.append(("heads", f"{H} heads do not divide width={W}; allowed: a divisor of the width ({divisors})"))
        if s.positional == "learned":
            N = exp["prompts"]["N"]
            lengths = (exp.get("evaluate") or {}).get("lengths") or []
            longest = max([N, *lengths])
            need, P = cls.tokens_needed(longest), s.positions
            if P < need:
                what = (f"evaluate.lengths reaches M={longest}" if longest > N else f"prompts.N is {N}")
                out.append(("positions", f"a table of {P} positions is too short: {what}, a prompt of "
                                         f"2·{longest}+1 = {need} tokens; allowed: positions >= {need}"))
        return out

    @classmethod
    def n_params(cls, spec: dict) -> int:
        s, d = cls.settings(spec["model"]), spec["tokens"]["d"]
        W, L, F = s.width, s.layers, s.width * s.ffn_mult
        per_layer = 4 * W + 3 * W * W + 3 * W + W * W + W + 2 * W * F + F + W
        return d * W + W + L * per_layer + 2 * W + W + 1 + (s.positions * W if s.positional == "learned" else 0)

    @classmethod
    def cache_floats(cls, spec: dict) -> float:
        return cls.tokens_needed(spec["prompts"]["N"]) * spec["tokens"]["d"]     # the interleaved sequence

    @classmethod
    def step_floats(cls, spec: dict) -> float:
        """What a training step keeps for the backward pass, per token and layer about 8W + 2F
        floats (the fused attention keeps no tokens × tokens matrix; the gradients flowing back
        reuse what the layers above freed). The forward without gradients is chunked."""
        s = cls.settings(spec["model"])
        W, L, H, F = s.width, s.layers, s.heads, s.width * s.ffn_mult
        return cls.tokens_needed(spec["prompts"]["N"]) * L * (8 * W + 2 * F + H)

    @classmethod
    def ensemble_cap(cls, spec: dict) -> int:
        """Most runs one CPU step should hold: as many as keep the step's activations within
        STEP_CAP_BYTES. A GPT step is compute-bound and its per-run loop already efficient; past
        the cache the ensemble's elementwise work is bound by memory bandwidth (benchmarks/
        README.md, 2026-11-25: one thread steps 1-16 runs of the 3-layer, width-64 model at
        1.1-1.25x the loop per core; 32 runs in one shard with two threads reach 0.8x the
        two-process loop, cut into shards of this size side by side 1.0x), so a GPT sweep is cut
        into shards of this size that train side by side, one thread each."""
        per_run = 4 * cls._prompts(spec)["batch"] * cls.step_floats(spec)
        return max(1, int(STEP_CAP_BYTES // per_run))

    @classmethod
    def log_matrix_floats(cls, spec: dict) -> int:
        K = Tokens.of(spec["tokens"]).K
        s = cls.settings(spec["model"])
        return s.layers * s.heads * (K or 0) ** 2

    @classmethod
    def eval_bytes(cls, spec: dict, width: int = 1) -> int:
        """The prompts and the baselines (Model.eval_bytes), the forward's chunks and the parameters."""
        return super().eval_bytes(spec) + 4 * 8 * CHUNK_FLOATS + 4 * cls.n_params(spec)

    # ---- one shard's model

    def shapes(self) -> dict:
        d, W, L, F, P = self.d, self.w, self.layers, self.f, self.positions
        proj = INIT_STD / math.sqrt(2 * L)
        return {  # name: (shape, init): ("uniform", fan_in) | ("normal", std) | "one" | "zero"
            "read_in_w": ((d, W), ("uniform", d)), "read_in_b": ((W,), ("uniform", d)),
            "ln1_g": ((L, W), "one"), "ln1_b": ((L, W), "zero"),
            "attn_w": ((L, W, 3 * W), ("normal", INIT_STD)), "attn_b": ((L, 3 * W), "zero"),
            "proj_w": ((L, W, W), ("normal", proj)), "proj_b": ((L, W), "zero"),
            "ln2_g": ((L, W), "one"), "ln2_b": ((L, W), "zero"),
            "fc_w": ((L, W, F), ("normal", INIT_STD)), "fc_b": ((L, F), "zero"),
            "fc_proj_w": ((L, F, W), ("normal", proj)), "fc_proj_b": ((L, W), "zero"),
            "lnf_g": ((W,), "one"), "lnf_b": ((W,), "zero"),
            "read_out_w": ((W,), ("uniform", W)), "read_out_b": ((1,), ("uniform", W)),
            **({"wpe": ((P, W), ("normal", INIT_STD))} if self.learned else {}),
        }

    def init(self, seeds, names, device, dtype=None) -> dict:
        """Drawn per run from its own stream (the positional table from a second one)."""
        dtype = dtype or torch.float32
        per_run = []
        for seed, name in zip(seeds, names):
            g, gpos = init_rng(seed, name), init_rng(seed, name + "/positions")
            p = {}
            for key, (shape, how) in self.shapes().items():
                if how == "one":
                    p[key] = np.ones(shape)
                elif how == "zero":
                    p[key] = np.zeros(shape)
                elif how[0] == "uniform":
                    p[key] = g.uniform(-1, 1, size=shape) / math.sqrt(how[1])
                else:
                    p[key] = how[1] * (gpos if key == "wpe" else g).standard_normal(shape)
            per_run.append(p)
        return {k: torch.tensor(np.stack([p[k] for p in per_run]), dtype=dtype, device=device) for k in self.shapes()}

    @staticmethod
    def token_features(x, y):
        """Garg's interleaving: x_1, ỹ_1, ..., x_N, ỹ_N, x_q with ỹ = (y, 0, ..., 0): (R, B, 2N+1, d)."""
        R, B, T, d = x.shape
        z = x.new_zeros(R, B, T, 2, d)
        z[:, :, :, 0] = x
        z[:, :, :, 1, 0] = y
        return z.reshape(R, B, 2 * T, d)[:, :, :-1]

    def predict(self, params, batch: Batch):
        # the query's attention only for prompts prepared for diagnostics (fresh ones are not: no one reads it)
        return self.forward(params, batch["x"], batch["y"], every=self.loss_all, attend="knn" in batch)

    def objective(self, pred, batch: Batch):
        """½ mean squared error over the prompts and the x positions the loss reads."""
        target = batch["y"] if self.loss_all else batch["target"]
        return 0.5 * ((pred - target) ** 2).flatten(1).mean(1)

    def query_loss(self, pred, batch: Batch):
        return super().query_loss(pred[..., -1] if self.loss_all else pred, batch)

    def forward(self, params, x, y, every: bool = False, attend: bool = True):
        """Predictions at the query (R, B), or with `every` at all N + 1 x positions (R, B, N+1),
        and the query's attention over the context examples in every layer and head
        (R, B, layers, heads, N); None without `attend`. Without gradients the prompts go through
        in chunks."""
        R, B, T = y.shape
        per_prompt = R * (2 * T) * max(self.f, self.heads * 2 * T)
        if not torch.is_grad_enabled() and B * per_prompt > CHUNK_FLOATS and B > 1:
            step = max(1, CHUNK_FLOATS // per_prompt)
            parts = [self._forward(params, x[:, i:i + step], y[:, i:i + step], every, attend)
                     for i in range(0, B, step)]
            return torch.cat([p[0] for p in parts], 1), torch.cat([p[1] for p in parts], 1) if attend else None
        return self._forward(params, x, y, every, attend)

    def _forward(self, params, x, y, every: bool, attend: bool):
        p = params
        z = self._features(x, y)                                           # (R, B, S, d)
        R, B, S, _ = z.shape
        h = _linear(z, p["read_in_w"], p["read_in_b"])
        if self.learned:
            if S > p["wpe"].shape[1]:
                raise ValueError(f"a prompt of {S} tokens is longer than the positional table "
                                 f"({p['wpe'].shape[1]} positions: the model's `positions` setting)")
            h = h + p["wpe"][:, None, :S]
        rows = slice(0, S, 2) if every else slice(S - 1, S)               # the x positions the loss reads
        layers = zip(*(p[k].unbind(1) for k in ("ln1_g", "ln1_b", "attn_w", "attn_b", "proj_w", "proj_b",
                                                  "ln2_g", "ln2_b", "fc_w", "fc_b", "fc_proj_w", "fc_proj_b")))
        seen = []
        dtype = h.dtype
        with self.autocast():                     # bf16: the blocks' matmuls; read-in, read-out and loss in float32
            for i, lp in enumerate(layers):
                h, a = self._block(h, lp, rows if i == self.layers - 1 else None, attend)
                if attend:
                    seen.append(a.to(dtype))
        h = h.to(dtype)
        w_out, b_out = _folded(p["lnf_g"], p["lnf_b"], p["read_out_w"].unsqueeze(-1), p["read_out_b"])
        pred = _linear(_normalise(h), w_out, b_out)[..., 0]
        return (pred if every else pred[:, :, 0]), torch.stack(seen, 2) if attend else None

    def _block(self, h, lp, rows, attend: bool = True):
        """One pre-LN block on h (R, B, S, W); with `rows` (a slice), the output at those positions
        only. Returns it and, with `attend`, the query's attention over the context examples per
        head (R, B, H, N)."""
        ln1_g, ln1_b, attn_w, attn_b, proj_w, proj_b, ln2_g, ln2_b, fc_w, fc_b, fc_proj_w, fc_proj_b = lp
        R, B, S, W = h.shape
        H, hs = self.heads, W // self.heads
        n = _normalise(h)
        w_qkv, b_qkv = _folded(ln1_g, ln1_b, attn_w, attn_b)
        heads = lambda t: t.reshape(R * B, t.shape[2], H, hs).transpose(1, 2)   # (R·B, H, rows, hs)
        if rows is None:
            q, k, v = (heads(t) for t in _linear(n, w_qkv, b_qkv).split(W, -1))
            o = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            q = heads(_linear(n[:, :, rows], w_qkv[:, :, :W], b_qkv[:, :W]))
            k, v = (heads(t) for t in _linear(n, w_qkv[:, :, W:], b_qkv[:, W:]).split(W, -1))
            pos = torch.arange(S, device=h.device)
            allowed = pos <= pos[rows].unsqueeze(1)                              # causal: keys up to the row
            o = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=allowed)
            h = h[:, :, rows]
        seen = _query_attention(q, k).view(R, B, H, -1) if attend else None
        h = h + _linear(o.transpose(1, 2).reshape(R, B, -1, W), proj_w, proj_b)
        w_fc, b_fc = _folded(ln2_g, ln2_b, fc_w, fc_b)
        m = torch.nn.functional.gelu(_linear(_normalise(h), w_fc, b_fc))
        h = h + _linear(m, fc_proj_w, fc_proj_b)
        return h, seen

    # ---- what it logs

    def test_losses(self, params, batch: Batch) -> dict:
        if not self.loss_all:
            return super().test_losses(params, batch)
        pred, _ = self.predict(params, batch)
        return {"test_loss": self.objective(pred, batch), "test_query_loss": self.query_loss(pred, batch)}

    def log_shapes(self) -> dict:
        out = {"attn_entropy": (), "attn_knn": (), **({"test_query_loss": ()} if self.loss_all else {})}
        if self.K:
            out.update({"attn_own": (), "attn": (self.layers, self.heads, self.K, self.K)})
        return out

    def diagnostics(self, params, batch: Batch, seen) -> dict:
        """Per (layer, head) the attention summaries of the query's attention `seen`
        (R, B, layers, heads, N); the curves are the last layer's, averaged over its heads."""
        L, H = self.layers, self.heads
        per = [[token_attention_logs(seen[:, :, l, h], batch, self.K) for h in range(H)] for l in range(L)]
        last = per[-1]
        out = {k: torch.stack([d[k] for d in last], 1).mean(1) for k in ("attn_entropy", "attn_knn")}
        if self.K:
            maps = torch.stack([torch.stack([d["attn"] for d in row], 1) for row in per], 1)   # (R, L, H, K, K)
            out["attn"] = maps
            out["attn_own"] = own_attention(self.own_mass(batch, seen), batch["query"])   # the diagonal's mean
        return out

    def own_mass(self, batch: Batch, seen):
        """The last layer's attention on the query's feature, averaged over its heads."""
        return token_own(seen[:, :, -1].mean(2), batch)
