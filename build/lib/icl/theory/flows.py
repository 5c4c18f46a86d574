"""The mean-field count flows (`ldl.mean_field_curve_counts`) of many runs, compiled: the theory
step integrates one per softmax_q run, over every epoch, on the run's own prompts' feature counts,
which is the training's own arithmetic in float64. Eager numpy or torch spend it in passes over
memory (several per step); one compiled pass per step costs a fifth of that (benchmarks/README.md),
so the theory step stays a small share of the pipeline it explains. Imported only by the theory
table, so training jobs never load numba.
"""
from __future__ import annotations

import math

import numba
import numpy as np

TINY = 1e-300    # a prompt's summed attention weights below this are recomputed in log space


def count_flows(G: np.ndarray, D: np.ndarray, counts: np.ndarray, query: np.ndarray, weight: np.ndarray,
                eta: np.ndarray, epochs: int) -> tuple[np.ndarray, np.ndarray]:
    """`ldl.mean_field_curve_counts` for R flows at once, float64: G (R, K, K) the features' Gram
    matrices, D (R, K, K, K) the label differences' covariances (`ldl.diff_cov`), counts (R, P, K)
    and query (R, P) each prompt's context counts and query feature, weight (R, P) each prompt's
    share of the loss (1/P for a run's own prompts; p_k for the K prompts of the balanced counts p,
    query k: `ldl.population_loss_and_grad`), eta (R,) the steps.
    Returns the loss and the own attention (the prompts' mean mass on their query's feature), both
    (R, epochs + 1).

    The prompts are sorted by run and query, each feature's counts contiguous (K, R·P), so a step
    takes exp of the K x K scores only (a prompt's weights are its counts times its query's column,
    as softmax_q's count form trains), and its loops over a query's prompts are vector loops."""
    counts = np.asarray(counts, float)
    R, P, K = counts.shape
    group = (np.arange(R)[:, None] * K + np.asarray(query, np.int64)).ravel()   # (run, query) of each prompt
    order = np.argsort(group, kind="stable")
    loss, own = np.empty((R, epochs + 1)), np.empty((R, epochs + 1))
    _integrate(np.ascontiguousarray(G, float), np.ascontiguousarray(D, float),
               np.ascontiguousarray(counts.reshape(R * P, K)[order].T),
               np.ascontiguousarray(np.asarray(weight, float).ravel()[order]),
               np.concatenate([[0], np.cumsum(np.bincount(group, minlength=R * K))]).astype(np.int64),
               np.ascontiguousarray(eta, float), int(epochs), float(TINY), loss, own)
    return loss, own


@numba.njit(cache=True, fastmath={"reassoc", "contract"}, error_model="numpy")
def _integrate(G, D, ct, wt, start, eta, epochs, tiny, loss, own):   # pragma: no cover (compiled)
    """count_flows' loop: ct (K, R·P) the counts sorted by (run, query), wt their weights, start
    (R·K + 1) where each (run, query)'s prompts begin. Per step and query k: x = e^{S[:, k] − max},
    a prompt's attention a = c·x / Σ c·x (in log space where Σ c·x < tiny), (D^{(k)} a), its
    quadratic form q, and ∂L/∂S[n, k] = Σ_p w a_n ((D a)_n − q); then S −= η G (∂L/∂S) G.
    Its vector loops run over one row of contiguous values each (a row's slice, not a[n, p]), and the
    log-space branch is entered only for a query whose prompts need it: so they vectorise (half the
    time of indexing a[n, p] with the branch in the loop, benchmarks/README.md)."""
    R, K, P = G.shape[0], G.shape[1], ct.shape[1] // G.shape[0]
    width = 0
    for g in range(R * K):
        width = max(width, start[g + 1] - start[g])
    S, x, grad, GS = np.empty((K, K)), np.empty(K), np.empty((K, K)), np.empty((K, K))
    a, Da, tot, q = np.empty((K, width)), np.empty((K, width)), np.empty(width), np.empty(width)
    for r in range(R):
        S[:] = 0.0
        for t in range(epochs + 1):
            L, o = 0.0, 0.0
            for k in range(K):
                g0, ng = start[r * K + k], start[r * K + k + 1] - start[r * K + k]
                m = S[0, k]
                for n in range(1, K):
                    m = max(m, S[n, k])
                for n in range(K):
                    x[n] = math.exp(S[n, k] - m)
                t_ = tot[:ng]
                t_[:] = 0.0
                for n in range(K):
                    an, cn, xn = a[n, :ng], ct[n, g0:g0 + ng], x[n]
                    for p in range(ng):
                        v = cn[p] * xn
                        an[p] = v
                        t_[p] += v
                low = False
                for p in range(ng):
                    low |= t_[p] < tiny
                if low:
                    for p in range(ng):
                        if t_[p] < tiny:
                            zm = -np.inf
                            for n in range(K):
                                if ct[n, g0 + p] > 0:
                                    zm = max(zm, S[n, k] + math.log(ct[n, g0 + p]))
                            t_[p] = 0.0
                            for n in range(K):
                                a[n, p] = math.exp(S[n, k] + math.log(ct[n, g0 + p]) - zm) if ct[n, g0 + p] > 0 else 0.0
                                t_[p] += a[n, p]
                for p in range(ng):
                    t_[p] = 1.0 / t_[p]
                q_ = q[:ng]
                q_[:] = 0.0
                for n in range(K):
                    an = a[n, :ng]
                    for p in range(ng):
                        an[p] *= t_[p]
                for n in range(K):
                    dn = Da[n, :ng]
                    dn[:] = 0.0
                    for j in range(K):
                        d = D[r, k, n, j]
                        aj = a[j, :ng]
                        for p in range(ng):
                            dn[p] += d * aj[p]
                    an = a[n, :ng]
                    for p in range(ng):
                        q_[p] += an[p] * dn[p]
                wg = wt[g0:g0 + ng]
                ak = a[k, :ng]
                for p in range(ng):
                    L += wg[p] * q_[p]
                    o += ak[p]
                for n in range(K):
                    an, dn = a[n, :ng], Da[n, :ng]
                    s = 0.0
                    for p in range(ng):
                        s += wg[p] * an[p] * (dn[p] - q_[p])
                    grad[n, k] = s
            loss[r, t], own[r, t] = 0.5 * L, o / P
            for i in range(K):                  # S −= η G grad G
                for j in range(K):
                    s = 0.0
                    for l in range(K):
                        s += G[r, i, l] * grad[l, j]
                    GS[i, j] = s
            for i in range(K):
                for j in range(K):
                    s = 0.0
                    for l in range(K):
                        s += GS[i, l] * G[r, l, j]
                    S[i, j] -= eta[r] * s
