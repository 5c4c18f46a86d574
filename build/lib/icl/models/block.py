"""transformer_block (LDL §6): one pre-LN block read at the query, computed without a (tokens x width) tensor."""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from icl.models.base import Batch, Model, count_attention_logs, count_batch, init_rng, lazy_torch, tokens_are_features

torch = lazy_torch(globals())

CHUNK_FLOATS = 2**24      # a forward without gradients goes through the prompts in chunks of about this many floats


def _layer_norm(h, g, b, eps=1e-5):
    mu = h.mean(-1, keepdim=True)
    var = h.var(-1, keepdim=True, unbiased=False)
    return (h - mu) * torch.rsqrt(var + eps) * g + b


@dataclass(frozen=True)
class BlockSettings:
    """A transformer block's settings, each defaulted here and nowhere else."""
    width: int = 64              # model width
    ffn_mult: int = 4            # feed-forward width / model width
    unfilled = ()                # settings whose default the schema leaves out (it fills in every other)


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
    Settings = BlockSettings
    nonlinear = True
    eps = 1e-5
    column_types = {"width": "Int64", "ffn_mult": "Int64"}

    @classmethod
    def _tokens(cls, spec: dict) -> int:
        """Tokens the block reads a prompt as: K + 1 in the count form, N + 1 otherwise."""
        tok = spec["tokens"]
        return tok["K"] + 1 if tokens_are_features(tok) else spec["prompts"]["N"] + 1

    @classmethod
    def prompt_floats(cls, spec: dict, diagnose: bool) -> float:
        """The count form: its K + 1 tokens (x, y), log n, and the counts it was made from."""
        tok = spec["tokens"]
        if cls._tokens(spec) == spec["prompts"]["N"] + 1:
            return super().prompt_floats(spec, diagnose)
        K, d = tok["K"], tok["d"]
        return (K + 1) * (d + 1) + K + (4 if diagnose else 3) * K + K / 4 + 1

    @classmethod
    def cache_floats(cls, spec: dict) -> float:
        return cls._tokens(spec) * (spec["tokens"]["d"] + 2)          # e_n = [x_n, y_n, 1]

    @classmethod
    def step_floats(cls, spec: dict) -> float:
        """A forward's activations (floats_per_prompt), kept for the backward pass, and ~15% more
        for the gradients flowing back (measured: benchmarks/memory.py)."""
        s = cls.settings(spec["model"])
        W, F, T, d = s.width, s.width * s.ffn_mult, cls._tokens(spec), spec["tokens"]["d"]
        return 1.15 * (2 * T * (d + 2) + 20 * W + 3 * F)

    @classmethod
    def n_params(cls, spec: dict) -> int:
        s, d = cls.settings(spec["model"]), spec["tokens"]["d"]
        W, F = s.width, s.width * s.ffn_mult
        return (d + 2) * W + 4 * W * W + 2 * W * F + F + 9 * W + 1

    @classmethod
    def eval_bytes(cls, spec: dict, width: int = 1) -> int:
        return super().eval_bytes(spec, cls.settings(spec["model"]).width)

    def __init__(self, spec: dict, tokens):
        super().__init__(spec, tokens)
        s = self.settings(spec)
        self.w, self.f = s.width, s.width * s.ffn_mult
        self.by_feature = tokens_are_features(self.tokens)

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
        return count_attention_logs(seen, batch, self.K)      # seen: each feature's attention mass

    def own_mass(self, batch: Batch, seen):
        return super().own_mass(batch, seen) if "log_n" not in batch else (seen * batch["query"]).sum(-1)

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

    def init(self, seeds, names, device, dtype=None) -> dict:
        """PyTorch's default Linear init (U(+-1/sqrt(fan_in))), drawn per run from its own stream."""
        dtype = dtype or torch.float32
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
        given, is added to the logits (the count form: token n stands for n_k equal tokens).
        Without gradients (the test loss, evaluation) the prompts go through in chunks of about
        CHUNK_FLOATS floats of activations, so its memory does not grow with the prompts."""
        e = self._features(x, y)
        R, B, T, D = e.shape
        rows = max(1, CHUNK_FLOATS // (R * self.floats_per_prompt(T)))
        if torch.is_grad_enabled() or B <= rows:
            return self._forward(params, e, log_n)
        parts = [self._forward(params, e[:, i:i + rows], None if log_n is None else log_n[:, i:i + rows])
                 for i in range(0, B, rows)]
        return torch.cat([q[0] for q in parts], 1), torch.cat([q[1] for q in parts], 1)

    def floats_per_prompt(self, T: int) -> int:
        """Activations of one prompt in a forward: the (T, d+2) products of the LayerNorm scales,
        about twenty width-W vectors and three of the feed-forward width at the query."""
        return 2 * T * (self.d + 2) + 20 * self.w + 3 * self.f

    def _forward(self, params, e, log_n):
        p = params
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
