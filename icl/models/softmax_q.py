"""softmax_q (LDL eq. 6): the theory's model, only Q trained."""
from __future__ import annotations

from icl.models.base import Batch, Model, count_attention_logs, count_batch, lazy_torch, token_attention_logs

torch = lazy_torch(globals())


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
