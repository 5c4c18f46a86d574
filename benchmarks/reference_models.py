"""Per-run reference models written the obvious way, one torch.nn.Module per run: the tests check
the ensembles against them (tests/test_gpt_model.py, tests/test_lsa_heads.py) and the throughput
benchmark trains them in the loop a researcher would write (benchmarks/throughput.py).

Independent code: nothing here calls icl.models; `load_from` copies one run of an ensemble's
parameters into the module (nn.Linear stores weights as (out, in), the ensemble as (in, out)).
"""
from __future__ import annotations

import math

import torch
from torch import nn
from torch.nn import functional as F


# ---------------------------------------------------------------- GPT: nanoGPT's blocks, Garg's read-in/out

class CausalSelfAttention(nn.Module):
    """nanoGPT's: one linear layer to query, key and value, heads, causal softmax, output projection."""

    def __init__(self, width: int, heads: int):
        super().__init__()
        self.c_attn = nn.Linear(width, 3 * width)
        self.c_proj = nn.Linear(width, width)
        self.heads = heads

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.c_attn(x).split(C, dim=2)
        q, k, v = (t.view(B, T, self.heads, C // self.heads).transpose(1, 2) for t in (q, k, v))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(k.size(-1))
        att = att.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), float("-inf"))
        y = F.softmax(att, dim=-1) @ v
        return self.c_proj(y.transpose(1, 2).contiguous().view(B, T, C))


class FlashCausalSelfAttention(CausalSelfAttention):
    """The same with torch's fused kernel, as nanoGPT uses when it can (the benchmark's loop)."""

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.c_attn(x).split(C, dim=2)
        q, k, v = (t.view(B, T, self.heads, C // self.heads).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.c_proj(y.transpose(1, 2).contiguous().view(B, T, C))


class MLP(nn.Module):
    def __init__(self, width: int, hidden: int):
        super().__init__()
        self.c_fc, self.gelu, self.c_proj = nn.Linear(width, hidden), nn.GELU(), nn.Linear(hidden, width)

    def forward(self, x):
        return self.c_proj(self.gelu(self.c_fc(x)))


class Block(nn.Module):
    def __init__(self, width: int, heads: int, hidden: int, flash: bool):
        super().__init__()
        self.ln_1, self.ln_2 = nn.LayerNorm(width), nn.LayerNorm(width)
        self.attn = (FlashCausalSelfAttention if flash else CausalSelfAttention)(width, heads)
        self.mlp = MLP(width, hidden)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPTReference(nn.Module):
    """Garg et al.'s TransformerModel with nanoGPT's GPT-2 blocks: read_in Linear(d, W), learned
    positions (or none), blocks, ln_f, read_out Linear(W, 1); the prompt's x's and y's interleaved,
    the prediction read at every x position."""

    def __init__(self, d: int, width: int, layers: int, heads: int, ffn_mult: int = 4, positions: int | None = 1024,
                 flash: bool = False):
        super().__init__()
        self.read_in = nn.Linear(d, width)
        self.wpe = nn.Embedding(positions, width) if positions else None
        self.h = nn.ModuleList(Block(width, heads, ffn_mult * width, flash) for _ in range(layers))
        self.ln_f = nn.LayerNorm(width)
        self.read_out = nn.Linear(width, 1)

    @staticmethod
    def combine(xs, ys):
        """Garg's _combine: x_1, (y_1, 0, ..., 0), x_2, ... (the query's label included, as there)."""
        B, n, d = xs.shape
        ys_wide = torch.cat([ys.view(B, n, 1), torch.zeros(B, n, d - 1, dtype=xs.dtype)], dim=2)
        return torch.stack([xs, ys_wide], dim=2).view(B, 2 * n, d)

    def forward(self, xs, ys):
        """Predictions at every x position (B, n): xs (B, n, d), ys (B, n), the query last."""
        h = self.read_in(self.combine(xs, ys))
        if self.wpe is not None:
            h = h + self.wpe(torch.arange(h.shape[1]))
        for block in self.h:
            h = block(h)
        return self.read_out(self.ln_f(h))[:, ::2, 0]

    def load_from(self, p: dict, r: int):
        """Run r of an ensemble's parameters (icl.models.gpt's names and layout)."""
        with torch.no_grad():
            self.read_in.weight.copy_(p["read_in_w"][r].T)
            self.read_in.bias.copy_(p["read_in_b"][r])
            if self.wpe is not None:
                self.wpe.weight.copy_(p["wpe"][r][: self.wpe.num_embeddings])
            for l, b in enumerate(self.h):
                for lin, key in ((b.attn.c_attn, "attn"), (b.attn.c_proj, "proj"), (b.mlp.c_fc, "fc"),
                                 (b.mlp.c_proj, "fc_proj")):
                    lin.weight.copy_(p[f"{key}_w"][r, l].T)
                    lin.bias.copy_(p[f"{key}_b"][r, l])
                for ln, key in ((b.ln_1, "ln1"), (b.ln_2, "ln2")):
                    ln.weight.copy_(p[f"{key}_g"][r, l])
                    ln.bias.copy_(p[f"{key}_b"][r, l])
            self.ln_f.weight.copy_(p["lnf_g"][r])
            self.ln_f.bias.copy_(p["lnf_b"][r])
            self.read_out.weight.copy_(p["read_out_w"][r][None])
            self.read_out.bias.copy_(p["read_out_b"][r])
        return self

    def grads_as(self, p: dict) -> dict:
        """This module's gradients under the ensemble's names and layout (one run)."""
        g = {"read_in_w": self.read_in.weight.grad.T, "read_in_b": self.read_in.bias.grad,
             "lnf_g": self.ln_f.weight.grad, "lnf_b": self.ln_f.bias.grad,
             "read_out_w": self.read_out.weight.grad[0], "read_out_b": self.read_out.bias.grad}
        if self.wpe is not None:
            g["wpe"] = self.wpe.weight.grad
        for key, get in (("attn_w", lambda b: b.attn.c_attn.weight.grad.T), ("attn_b", lambda b: b.attn.c_attn.bias.grad),
                         ("proj_w", lambda b: b.attn.c_proj.weight.grad.T), ("proj_b", lambda b: b.attn.c_proj.bias.grad),
                         ("fc_w", lambda b: b.mlp.c_fc.weight.grad.T), ("fc_b", lambda b: b.mlp.c_fc.bias.grad),
                         ("fc_proj_w", lambda b: b.mlp.c_proj.weight.grad.T), ("fc_proj_b", lambda b: b.mlp.c_proj.bias.grad),
                         ("ln1_g", lambda b: b.ln_1.weight.grad), ("ln1_b", lambda b: b.ln_1.bias.grad),
                         ("ln2_g", lambda b: b.ln_2.weight.grad), ("ln2_b", lambda b: b.ln_2.bias.grad)):
            g[key] = torch.stack([get(b) for b in self.h])
        return g


# ---------------------------------------------------------------- linear self-attention with heads

class LSAHeadsReference(nn.Module):
    """ZFB's f(E) = E + Σ_h W^V_h E (Eᵀ W^KQ_h E)/ρ on the whole prompt matrix E ((d+1) x (N+1),
    the query's label 0), ŷ = f(E)[-1, -1]; W^KQ_h = W_K_hᵀ W_Q_h with separate key and query
    matrices, W^V_h a full (d+1)x(d+1) matrix (only its last row reaches ŷ)."""

    def __init__(self, p: dict, r: int):
        super().__init__()
        self.separate = "W_k" in p
        if self.separate:
            self.W_k = nn.Parameter(p["W_k"][r].clone())
            self.W_q = nn.Parameter(p["W_q"][r].clone())
            H, D = p["w_v"][r].shape
            W_v = torch.zeros(H, D, D, dtype=p["w_v"].dtype)
            W_v[:, -1] = p["w_v"][r]
            self.W_v = nn.Parameter(W_v)
        else:
            self.W_v = nn.Parameter(p["W_pv"][r].clone())
            self.W_kq = nn.Parameter(p["W_kq"][r].clone())

    def forward(self, x, y):
        yin = y.clone()
        yin[:, -1] = 0
        E = torch.cat([x, yin[..., None]], -1).transpose(1, 2)                  # (B, D, T)
        out = E.clone()
        for h in range(self.W_v.shape[0]):
            W_kq = self.W_k[h].T @ self.W_q[h] if self.separate else self.W_kq[h]
            out = out + self.W_v[h] @ E @ (E.transpose(1, 2) @ W_kq @ E) / (x.shape[1] - 1)
        return out[:, -1, -1]

    def grads_as(self) -> dict:
        if self.separate:
            return {"W_k": self.W_k.grad, "W_q": self.W_q.grad, "w_v": self.W_v.grad[:, -1]}
        return {"W_pv": self.W_v.grad, "W_kq": self.W_kq.grad}
