"""lsa (ZFB eq. 3.3): linear self-attention, merged or with separate key and query matrices."""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from icl.models.base import Batch, Model, init_rng, lazy_torch

torch = lazy_torch(globals())


@dataclass(frozen=True)
class LSASettings:
    """An LSA's settings, each defaulted here and nowhere else."""
    init_scale: float = 0.3      # ZFB's σ: W^PV(0) = σ e e^T, W^KQ(0) = σ ΘΘ^T
    init_noise: float = 0.0      # std of Gaussian noise added to every initial entry
    heads: int = 1               # heads, their outputs summed (1: ZFB's single head)
    separate_kq: bool = False    # separate key and query matrices (Zhang, Singh, Latham & Saxe 2025)
    rank: int | None = None      # rows of W_K and W_Q with separate_kq (None: d+1)
    # defaults the schema leaves out: filled in, they would enter every existing LSA run's id
    unfilled = ("heads", "separate_kq", "rank")


class LSA(Model):
    """ZFB eq. (3.3): f(E) = E + W^PV E (E^T W^KQ E)/ρ, ŷ = f(E)[d+1, N+1], full (d+1)x(d+1)
    matrices, all entries trained; ρ = the prompt's own number of context tokens (ZFB).

    Only the query column is computed: with e_q = [x_q; 0] and E including the query column,
    f(E) e_q-column = e_q + W^PV (sum_t e_t (e_t . W^KQ e_q)) / ρ.
    Init (ZFB Assumption): W^PV(0) = σ e_{d+1} e_{d+1}^T, W^KQ(0) = σ [[ΘΘ^T, 0], [0, 0]] with
    ΘΘ^T = I/√d (so ‖ΘΘ^T‖_F = 1), plus optional i.i.d. N(0, init_noise²) on every entry.

    Several heads (`heads: H`), their outputs summed (D = d + 1, Ĉ = Σ_t e_t e_tᵀ / ρ):
      merged (`separate_kq: false`): ŷ = Σ_h W^PV_h[D, :] Ĉ W^KQ_h e_q; parameters W_pv, W_kq of
        shape (H, D, D). Init: every head ZFB's, with W^KQ_h(0) = σ ΘΘᵀ / H (the same effective
        matrix as one head), plus init_noise: without noise the heads stay identical.
      separate (`separate_kq: true`, Zhang, Singh, Latham & Saxe 2025): per head a key and a query
        matrix W_K_h, W_Q_h of shape (r, D) (`rank: r`, default D) and the value row v_h in R^D (the
        row of W^V_h that writes the label slot; no other row reaches ŷ):
        ŷ = Σ_h v_hᵀ Ĉ W_K_hᵀ W_Q_h e_q, i.e. W^KQ_h = W_K_hᵀ W_Q_h of rank ≤ r. Parameters W_k, W_q
        (H, r, D) and w_v (H, D); init: every entry i.i.d. N(0, σ²/D) (small σ shows the steps of
        the loss along the covariance's eigen-directions).
    One merged head (the default) is computed exactly as before: its numbers do not change.
    `effective` is Σ_h (value row's label entry) · (W^KQ_h's x-block)ᵀ, ZFB's w22·W11ᵀ summed over
    heads: ŷ = x_qᵀ B m̂ when the other blocks are zero, so zfb.optimum's distances apply.
    """

    kind = "lsa"
    Settings = LSASettings
    has_attention = False
    linear_attention = True
    linear_in_labels = True
    column_types = {"init_scale": "Float64", "init_noise": "Float64", "heads": "Int64", "separate_kq": "boolean",
                    "rank": "Int64"}

    def __init__(self, spec: dict, tokens):
        super().__init__(spec, tokens)
        s = self.settings(spec)
        self.sigma, self.noise, self.heads, self.separate = s.init_scale, s.init_noise, s.heads, s.separate_kq
        self.rank = s.rank or self.d + 1
        self.legacy = self.heads == 1 and not self.separate       # ZFB's single merged head

    @classmethod
    def columns(cls, spec: dict) -> dict:
        s = cls.settings(spec["model"])
        return {"init_scale": s.init_scale, "init_noise": s.init_noise, "heads": s.heads,
                "separate_kq": s.separate_kq, "rank": (s.rank or spec["tokens"]["d"] + 1) if s.separate_kq else None}

    @classmethod
    def check(cls, model: dict, exp: dict) -> list[tuple[str, str]]:
        D, s = exp["tokens"]["d"] + 1, cls.settings(model)
        out = []
        if s.rank is not None:
            if not s.separate_kq:
                out.append(("rank", "rank applies to separate key and query matrices only; allowed: set "
                                    "separate_kq: true, or leave rank out (a merged W^KQ is full (d+1)×(d+1))"))
            elif s.rank > D:
                out.append(("rank", f"{s.rank} is larger than d+1 = {D} (token dimension plus the label "
                                    f"slot); allowed: 1 to {D}"))
        if s.separate_kq and s.init_noise:
            out.append(("init_noise", "separate key and query matrices are drawn at random already (std "
                                      "init_scale/√(d+1)); init_noise applies to the merged form only; allowed: 0"))
        return out

    @classmethod
    def cache_floats(cls, spec: dict) -> float:
        return (spec["prompts"]["N"] + 1) * (spec["tokens"]["d"] + 1)       # the prompt matrix's columns

    @classmethod
    def step_floats(cls, spec: dict) -> float:
        """Per token e_t · W^KQ e_q (and the value products, per head), kept for the backward pass."""
        H, T, D = cls.settings(spec["model"]).heads, spec["prompts"]["N"] + 1, spec["tokens"]["d"] + 1
        return 3 * T * H + 3 * H * D

    @classmethod
    def n_params(cls, spec: dict) -> int:
        s, D = cls.settings(spec["model"]), spec["tokens"]["d"] + 1
        if s.separate_kq:
            return s.heads * (2 * (s.rank or D) * D + D)
        return 2 * s.heads * D * D

    @classmethod
    def log_matrix_floats(cls, spec: dict) -> int:
        return spec["tokens"]["d"] ** 2

    @classmethod
    def eval_bytes(cls, spec: dict, width: int = 1) -> int:
        s, D = cls.settings(spec["model"]), spec["tokens"]["d"] + 1
        if s.heads == 1 and not s.separate_kq:
            return super().eval_bytes(spec)
        P, T, H = spec["evaluate"]["prompts"], max(spec["evaluate"]["lengths"]) + 1, s.heads
        return super().eval_bytes(spec) + 4 * P * (3 * T * H + 2 * H * D)

    def init(self, seeds, names, device, dtype=None) -> dict:
        dtype = dtype or torch.float32
        D, H = self.d + 1, self.heads
        if self.separate:
            per_run = []
            for seed, name in zip(seeds, names):
                g = init_rng(seed, name)
                std = self.sigma / math.sqrt(D)
                per_run.append({"W_k": std * g.standard_normal((H, self.rank, D)),
                                "W_q": std * g.standard_normal((H, self.rank, D)),
                                "w_v": std * g.standard_normal((H, D))})
            return {k: torch.tensor(np.stack([p[k] for p in per_run]), dtype=dtype, device=device)
                    for k in ("W_k", "W_q", "w_v")}
        pv, kq = [], []
        for seed, name in zip(seeds, names):
            g = init_rng(seed, name)
            a = np.zeros((D, D))
            a[-1, -1] = self.sigma
            b = np.zeros((D, D))
            b[:-1, :-1] = self.sigma * np.eye(self.d) / math.sqrt(self.d)
            if self.legacy:
                if self.noise:
                    a += self.noise * g.standard_normal((D, D))
                    b += self.noise * g.standard_normal((D, D))
            else:
                a = np.broadcast_to(a, (H, D, D)).copy()
                b = np.broadcast_to(b / H, (H, D, D)).copy()
                if self.noise:
                    a += self.noise * g.standard_normal((H, D, D))
                    b += self.noise * g.standard_normal((H, D, D))
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
        if not self.legacy:
            return self._heads_forward(params, e, eq), None
        v = torch.einsum("rij,rbj->rbi", params["W_kq"], eq)
        a = torch.einsum("rbtd,rbd->rbt", e, v)                         # e_t . W^KQ e_q over all columns
        b = torch.einsum("rbt,rbtd->rbd", a, e) / (x.shape[2] - 1)
        pred = torch.einsum("rj,rbj->rb", params["W_pv"][:, -1, :], b)  # last row of W^PV b (+ e_q's 0)
        return pred, None

    @staticmethod
    def _heads_forward(params, e, eq):
        """Σ_h Σ_t (v_h · e_t)(e_t · W^KQ_h e_q) / ρ: per token one product with each head's value
        row (one matmul over the run's tokens) and with W^KQ_h e_q, O(T D H) per prompt."""
        if "W_k" in params:
            q = torch.einsum("rhkj,rbj->rbhk", params["W_q"], eq)             # W_Q e_q: (R, B, H, r)
            g = torch.einsum("rhkj,rbhk->rbhj", params["W_k"], q)             # W_Kᵀ W_Q e_q: (R, B, H, D)
            v = params["w_v"]
        else:
            g = torch.einsum("rhij,rbj->rbhi", params["W_kq"], eq)
            v = params["W_pv"][:, :, -1, :]
        R, B, T, D = e.shape
        s = torch.bmm(e.reshape(R, B * T, D), v.transpose(1, 2)).view(R, B, T, -1)   # v_h · e_t
        a = torch.einsum("rbtd,rbhd->rbth", e, g)                                     # e_t · W^KQ_h e_q
        return (a * s).sum((2, 3)) / (T - 1)

    @staticmethod
    def effective(params) -> torch.Tensor:
        """B = w22^PV · (W11^KQ)^T: the matrix with ŷ = x_q^T B m̂ when w21 blocks are zero; summed
        over heads (the separate form's W^KQ_h = W_K_hᵀ W_Q_h, w22 = v_h's last entry)."""
        if "W_k" in params:
            Wk, Wq = params["W_k"][..., :-1], params["W_q"][..., :-1]        # (R, H, r, d)
            return torch.einsum("rh,rhki,rhkj->rij", params["w_v"][:, :, -1], Wq, Wk)
        if params["W_pv"].dim() == 4:
            return torch.einsum("rh,rhji->rij", params["W_pv"][:, :, -1, -1], params["W_kq"][:, :, :-1, :-1])
        return params["W_pv"][:, -1, -1, None, None] * params["W_kq"][:, :-1, :-1].transpose(1, 2)

    def log_shapes(self) -> dict:
        return {"effective": (self.d, self.d), "dist_target": ()}

    def extras(self, specs: list[dict], device) -> dict:
        from icl.theory.lsa import lsa_target
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
