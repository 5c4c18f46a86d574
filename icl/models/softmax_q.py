"""softmax_q (LDL eq. 6): the theory's model, only Q trained."""
from __future__ import annotations

from dataclasses import dataclass

from icl.models.base import (Batch, Model, Step, count_attention_logs, count_batch, lazy_torch, token_attention_logs,
                             tokens_are_features)

torch = lazy_torch(globals())

TINY = 1e-30     # a prompt's summed attention weights below this are recomputed in log space


@dataclass(frozen=True)
class SoftmaxQSettings:
    """softmax_q's one setting of its own (the plan reads it: icl.plan.shards.with_step)."""
    lr_rule: str = "fixed"       # fixed: train at lr; clock: lr is the step at the reference setting
    # a filled-in default would enter every existing softmax_q run's id
    unfilled = ("lr_rule",)


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
    Settings = SoftmaxQSettings
    linear_in_labels = True
    label_average = True
    mean_field = True
    reads_counts = True

    @classmethod
    def prompt_floats(cls, spec: dict, diagnose: bool) -> float:
        """The count form: n, S, the query's one-hot (and the nearest tokens' features) per
        feature, absent (bytes), the target, and the feature-major copy (log n, mean label, query)."""
        if not tokens_are_features(spec["tokens"]):
            return super().prompt_floats(spec, diagnose)
        K = spec["tokens"]["K"]
        return (4 if diagnose else 3) * K + K / 4 + 1 + 3 * K

    @classmethod
    def step_floats(cls, spec: dict) -> float:
        """The count form's (K, B) temporaries; the token form's scores, attention and coefficients,
        and the context's contiguous copy (N·d) that einsum makes of the slice x[:, :, :-1]
        (benchmarks/memory.py: without it the estimate read 0.77x the measured slope)."""
        s = cls._prompts(spec)
        return 6 * s["K"] if tokens_are_features(spec["tokens"]) else 6 * s["N"] + 2 * s["d"] + s["N"] * s["d"]

    @classmethod
    def forward_floats(cls, spec: dict) -> float:
        s = cls._prompts(spec)
        return 4 * s["K"] if tokens_are_features(spec["tokens"]) else 3 * s["N"]

    @classmethod
    def n_params(cls, spec: dict) -> int:
        return spec["tokens"]["d"] ** 2

    def __init__(self, spec: dict, tokens):
        super().__init__(spec, tokens)
        self.by_feature = tokens_are_features(self.tokens)

    def init(self, seeds, names, device, dtype=None) -> dict:
        dtype = dtype or torch.float32
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
        return Step(loss, {"Q": grad}, a, loss)

    # ---- the feature-count form (discrete tokens without noise)

    def log_shapes(self) -> dict:
        return {**super().log_shapes(), **({"q_features": (self.K, self.K)} if self.K else {})}

    def prepare(self, arrays, diagnose: bool = True) -> Batch:
        return count_batch(arrays, diagnose, self.K) if self.by_feature else super().prepare(arrays, diagnose)

    def _feature_major(self, b: Batch) -> dict:
        """The count form's per-prompt arrays with the feature axis before the prompt axis,
        (R, K, B), contiguous: n_k and log n_k (-inf where feature k is absent), the mean label of
        each feature's tokens, and the query's one-hot. A sum over K is then K adds of contiguous
        rows instead of a reduction over a last axis of length 4 (3-6x faster at LDL's sizes).
        Made once per batch: full-batch training and the test loss pass the same batch every epoch."""
        cache = self.__dict__.setdefault("_major_cache", [])
        for batch, out in cache:
            if batch is b:
                return out
        n = b["n"]
        out = {"n": n.transpose(1, 2).contiguous(), "log_n": torch.log(n).transpose(1, 2).contiguous(),
               "mean_y": torch.where(n > 0, b["S"] / n.clamp_min(1), torch.zeros_like(n)).transpose(1, 2).contiguous(),
               "query": b["query"].transpose(1, 2).contiguous(), "target": b["target"]}
        cache.append((b, out))
        if len(cache) > 2:
            cache.pop(0)
        return out

    def _feature_mass(self, params, b: Batch):
        """Attention mass on each feature, (R, K, B): softmax over k of s_{k j} + log n_k, with
        s_{kj} = v_k^T Q v_j for the query's feature j (a prompt's n_k tokens of feature k share
        one score), so an absent feature gets none.

        exp(s_jk + log n_k) = n_k exp(s_jk): the exponentials are taken of the K x K scores (shifted
        by each row's largest) and a prompt's weights are its counts times its query's row, no
        exponential per prompt. Where a prompt's weights all underflow (its features' scores far
        below an absent feature's) the weights are taken in log space, shifted per prompt: on the CPU
        for every prompt once any needs it (a check there costs nothing); elsewhere for the prompts
        that need it, selected on the device (torch.where), so a step never waits for the host."""
        f = self._feature_major(b)
        V = b["features"]
        s = torch.einsum("rkd,rde,rje->rjk", V, params["Q"], V)      # [r, query j, key k] = v_k^T Q v_j
        st = s.transpose(1, 2)
        e = torch.bmm(torch.exp(st - st.amax(1, keepdim=True)), f["query"]) * f["n"]     # [r, k, b]
        total = e.sum(1, keepdim=True)
        under = total < TINY
        if host_checks(e.device):
            if bool(under.any()):
                e, total = _log_space(st, f)
        else:
            le, ltotal = _log_space(st, f)
            e, total = torch.where(under, le, e), torch.where(under, ltotal, total)
        return e / total, f

    def predict(self, params, batch: Batch):
        if "x" in batch:
            return super().predict(params, batch)
        mass, f = self._feature_mass(params, batch)
        return (mass * f["mean_y"]).sum(1), mass.transpose(1, 2)

    def step(self, params, batch: Batch):
        if "x" in batch:
            return self._token_step(params, batch["x"], batch["y"])
        mass, f = self._feature_mass(params, batch)
        pred = (mass * f["mean_y"]).sum(1)
        err = pred - f["target"]
        B, V = err.shape[1], batch["features"]
        # dL/ds_{jk} = (1/B) sum_{b: query j} (p_b - t_b) a_k (S_k - n_k p_b), a_k = mass_k / n_k
        coef = mass * (f["mean_y"] - pred.unsqueeze(1)) * (err / B).unsqueeze(1)
        C = torch.bmm(f["query"], coef.transpose(1, 2))                   # [r, query j, key k]
        grad = torch.einsum("rjk,rkd,rje->rde", C, V, V)
        loss = 0.5 * (err ** 2).mean(1)
        return Step(loss, {"Q": grad}, mass.transpose(1, 2), loss)

    def diagnostics(self, params, batch: Batch, seen) -> dict:
        out = token_attention_logs(seen, batch, self.K) if "x" in batch else count_attention_logs(seen, batch, self.K)
        if self.K:
            out["q_features"] = self.q_features(params, batch)
        return out

    def trace(self, params, batch: Batch, seen) -> dict:
        out = super().trace(params, batch, seen)
        if self.K:
            out["q_features"] = self.q_features(params, batch)
        return out

    def own_mass(self, batch: Batch, seen):
        return super().own_mass(batch, seen) if "x" in batch else (seen * batch["query"]).sum(-1)

    @staticmethod
    def q_features(params, batch: Batch):
        """q_features[i, j] = v_j^T Q v_i (LDL §5.1: q_{k,k'} = v_k'^T Q v_k), (R, K, K)."""
        V = batch["features"]
        return torch.einsum("rjd,rde,rie->rij", V, params["Q"], V)


def host_checks(device: torch.device) -> bool:
    """Whether a step may ask the host a question (a `bool(tensor)`): on the CPU it costs nothing; on
    an accelerator it waits for the device every step, so the model selects on the device instead."""
    return device.type == "cpu"


def _log_space(st: torch.Tensor, f: dict) -> tuple[torch.Tensor, torch.Tensor]:
    """_feature_mass's weights in log space, each prompt shifted by its own largest: (weights, total)."""
    z = torch.bmm(st, f["query"]) + f["log_n"]
    e = torch.exp(z - z.amax(1, keepdim=True))
    return e, e.sum(1, keepdim=True)
