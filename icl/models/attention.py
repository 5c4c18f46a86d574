"""Attention summaries of a model's forward, per run: the mass on the query's own feature (attn_own),
the K x K maps, the entropy and the mass on the nearest context tokens, from token-level attention or
from the count form's per-feature mass. Every kind's `diagnostics` and the trace compute them here,
so the logged and the traced attn_own are one function of the same numbers."""
from __future__ import annotations

from icl.models.lazy import lazy_torch

torch = lazy_torch(globals())


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


def token_attention_logs(a, batch, K) -> dict:
    """attention_logs of token-level attention a (R, B, N)."""
    ent = -(a * torch.log(a.clamp_min(1e-30))).sum(-1)
    knn = torch.gather(a, 2, batch["knn"]).sum(-1)
    if not K:
        return attention_logs(None, None, ent, knn, None)
    mass = torch.zeros(*a.shape[:2], K, dtype=a.dtype, device=a.device).scatter_add_(2, batch["feat"][:, :, :-1], a)
    return attention_logs(mass, batch["query"], ent, knn, K, own=token_own(a, batch))


def token_own(a, batch) -> torch.Tensor:
    """Each prompt's attention mass on the context tokens of its query's feature, (R, B), from
    token-level attention a (R, B, N)."""
    return (a * batch["same"]).sum(-1)


def count_attention_logs(mass, batch, K: int) -> dict:
    """attention_logs of the count form: mass (R, B, K) the attention on each feature's tokens
    together (mass / n_k on each of them)."""
    n = batch["n"]
    w = torch.where(n > 0, mass / n.clamp_min(1), torch.zeros_like(n))
    ent = -(n * w * torch.log(w.clamp_min(1e-30))).sum(-1)
    return attention_logs(mass, batch["query"], ent, (batch["near"] * w).sum(-1), K)
