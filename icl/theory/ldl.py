"""Li, Duan & Liang (LDL): the flat/sharp threshold, the time scales of Theorems 1-2 and
Propositions 1-4 (unit constants inside Θ), and the mean-field loss curve of softmax_q.

The mean-field curve integrates the exact population gradient of LDL Lemma 2 before its Θ-step.
With feature matrix V (K x d), Gram matrix G = V V^T and S[n, k] = v_n^T Q v_k (the score a
query with feature k gives a token with feature n), the loss depends on Q only through S, and
one GD step on Q moves S by  ΔS = -η G (∂L/∂S) G.  For orthogonal features of norm ‖v‖ this is
ΔS = -η ‖v‖⁴ ∂L/∂S: Lemma 2's unit-norm derivation is the case ‖v‖ = 1. With balanced counts
|V_n| = p_n N the attention mass of feature n for query k is Attn_n = p_n e^{S[n,k]} / Σ_m p_m e^{S[m,k]}
and the population loss is
    L = ½ Σ_k p_k Σ_{n,m} Attn_n Attn_m D^{(k)}_{nm},   D^{(k)}_{nm} = E_f[(f(v_n) - f(v_k))(f(v_m) - f(v_k))],
with, for the cosine task, E_f[f(u) f(u')] = ½ (L/c)² Ω_d(c ‖u - u'‖), Ω_d(r) = E_w[cos(r w_1)] for w
uniform on the unit sphere of R^d.
"""
from __future__ import annotations

import math

import numpy as np

from icl.tasks import cosine_label_cov, sphere_cos_mean   # the cosine task's closed forms live with the task


def delta_conc(K: int, N: int) -> float:
    """δ = sqrt(20K/N): the concentration width of feature counts in a prompt (LDL §4)."""
    return math.sqrt(20.0 * K / N)


def L_star(K: int, N: int, delta: float) -> float:
    """L* = 1/(Δδ): flat regime for L <= L*, sharp for L > L*."""
    return 1.0 / (delta * delta_conc(K, N))


def regime(L: float, K: int, N: int, delta: float) -> str:
    return "flat" if L <= L_star(K, N, delta) else "sharp"


def T1(K: int, eta: float, L: float, delta: float) -> float:
    """End of phase I in the flat regime: K log K / (η L² Δ²)."""
    return K * math.log(K) / (eta * L**2 * delta**2)


def T_flat(K: int, N: int, eta: float, L: float, delta: float, eps: float) -> float:
    """Convergence time in the flat regime: K log(K/ε) / (η δ² L² Δ²)."""
    return K * math.log(K / eps) / (eta * delta_conc(K, N) ** 2 * L**2 * delta**2)


def T_sharp(K: int, N: int, eta: float, L: float, delta: float, eps: float) -> float:
    """Convergence time in the sharp regime: K log(K L Δ/ε) / (η ε δ² L² Δ²)."""
    return K * math.log(max(K * L * delta / eps, math.e)) / (eta * eps * delta_conc(K, N) ** 2 * L**2 * delta**2)


def predicted_phases(reg: str) -> int:
    """Two phases in the flat regime (Props. 2-3), three in the sharp one (Prop. 4)."""
    return 2 if reg == "flat" else 3


def diff_cov(C: np.ndarray) -> np.ndarray:
    """D[k, n, m] = E[(f(v_n) - f(v_k))(f(v_m) - f(v_k))] = C[n,m] - C[n,k] - C[m,k] + C[k,k]."""
    return C[None, :, :] - C.T[:, :, None] - C.T[:, None, :] + np.diag(C)[:, None, None]


def population_loss_and_grad(S: np.ndarray, p: np.ndarray, D: np.ndarray):
    """Balanced-count population loss and ∂L/∂S (S[n, k]: score of feature n for query k)."""
    logits = np.log(p)[:, None] + S                          # (n, k)
    logits -= logits.max(0, keepdims=True)
    A = np.exp(logits)
    A /= A.sum(0, keepdims=True)                             # A[n, k] = Attn_n for query k
    K = len(p)
    loss = 0.0
    grad = np.zeros_like(S)
    for k in range(K):
        a = A[:, k]
        Da = D[k] @ a
        quad = a @ Da
        loss += 0.5 * p[k] * quad
        grad[:, k] = p[k] * a * (Da - quad)                  # ∂(½ aᵀDa)/∂s_n = a_n((Da)_n - aᵀDa)
    return loss, grad, A


def mean_field_curve(V: np.ndarray, p: np.ndarray, L: float, c: float, eta: float, epochs: int):
    """Loss and attention of softmax_q under full-batch GD on the balanced-count population loss.

    Returns (loss[epochs + 1], attn[epochs + 1, K, K]) with attn[t, n, k] = Attn_n for query k.
    No free constant: η, V, p, L, c fully determine the curve.
    """
    return mean_field_curve_cov(V, p, cosine_label_cov(V, L, c), eta, epochs)


def mean_field_curve_cov(V: np.ndarray, p: np.ndarray, C: np.ndarray, eta: float, epochs: int):
    """mean_field_curve for any task family, given its label covariance C[n, m] = E_f[f(v_n) f(v_m)]
    (icl.tasks: Task.label_cov)."""
    D = diff_cov(C)
    losses, attns = zip(*(population_loss_and_grad(S, p, D)[::2] for S in mean_field_path(V, p, C, eta, epochs)))
    return np.asarray(losses), np.asarray(attns)


def collapse_rate(V: np.ndarray, C: np.ndarray, eta: float) -> float:
    """The rate of the clock τ = rate · t on which the mean-field curves of every L, c and Δ
    coincide (orthogonal features of one norm): GD moves S by −η‖v‖⁴ ∂L/∂S, and D, the label
    differences' covariance, is s times a shape fixed by K and p, with s = E[(f(v_n) − f(v_k))²]
    (n ≠ k); the loss is linear in D, so S(t) depends on η‖v‖⁴ s t alone. η L² Δ² / K, the
    theorems' rate, drops the ‖v‖⁴ and label-covariance factors: curves of different Δ or c do
    not collapse on it."""
    G = V @ V.T
    D = diff_cov(C)
    K = len(V)
    s = np.mean([D[k, n, n] for k in range(K) for n in range(K) if n != k])
    return float(eta * np.mean(np.diag(G)) ** 2 * s)


def split(K: int, N: int, delta: float, flat_max_L: float | None = None) -> float:
    """Where flat meets sharp: the config's report.flat_max_L where it sets one, else L* = 1/(Δδ)
    (unit constant). The one split every table, verdict and figure uses (theory.parquet's
    L_split and regime)."""
    return float(flat_max_L) if flat_max_L is not None else L_star(K, N, delta)


def mean_field_path(V: np.ndarray, p: np.ndarray, C: np.ndarray, eta: float, epochs: int) -> list[np.ndarray]:
    """The score matrices S(t) of the mean-field GD at every epoch 0..epochs."""
    G, D = V @ V.T, diff_cov(C)
    S, out = np.zeros((len(p), len(p))), []
    for _ in range(epochs + 1):
        out.append(S)
        S = S - eta * G @ population_loss_and_grad(S, p, D)[1] @ G
    return out


def mean_field_step(V: np.ndarray, p: np.ndarray, C: np.ndarray, eta: float, epochs: int, points: int = 6) -> float:
    """How large one GD step is against the population loss's curvature: the largest spectral
    radius, along the mean-field path, of the Jacobian of the step S ↦ −η G ∇L(S) G (for
    orthogonal features η‖v‖⁴λ_max of ∇²L). Below 1 each step moves well inside the curvature
    scale and GD follows the dynamics Lemma 2 describes; at 2 GD on the population loss turns
    unstable. Central differences in each of the K² scores; above EXACT_JACOBIAN of them (K = 16) the
    K⁴ Jacobian is not built: its spectral radius is found by power iteration on Jacobian-vector
    products (J = −η G ∇²L G has real eigenvalues, G ⪰ 0), two gradients a product."""
    G, D = V @ V.T, diff_cov(C)
    path = mean_field_path(V, p, C, eta, epochs)
    K, h, worst = len(p), 1e-5, 0.0

    def jvp(S, e):                 # J·e by central differences along e
        up = population_loss_and_grad(S + h * e.reshape(K, K), p, D)[1]
        dn = population_loss_and_grad(S - h * e.reshape(K, K), p, D)[1]
        return (-eta * G @ ((up - dn) / (2 * h)) @ G).ravel()

    for S in (path[i] for i in np.unique(np.linspace(0, epochs, points).astype(int))):
        if K * K <= EXACT_JACOBIAN:
            J = np.stack([jvp(S, np.eye(K * K)[i]) for i in range(K * K)], axis=1)
            worst = max(worst, float(np.abs(np.linalg.eigvals(J)).max()))
        else:
            worst = max(worst, _power_radius(lambda e, S=S: jvp(S, e), K * K))
    return worst


EXACT_JACOBIAN = 256      # scores up to which mean_field_step builds the Jacobian and takes its eigenvalues


def _power_radius(matvec, n: int, iters: int = 300, tol: float = 1e-7) -> float:
    """The largest |eigenvalue| of a linear map with real eigenvalues, by power iteration from a
    fixed start (two steps a round, so that ±λ of one modulus do not stall it)."""
    v = np.random.default_rng(0).standard_normal(n)
    v /= np.linalg.norm(v)
    lam = 0.0
    for _ in range(iters):
        w = matvec(matvec(v))
        nrm = float(np.linalg.norm(w))
        if nrm == 0.0:
            return 0.0
        new = math.sqrt(nrm)
        v = w / nrm
        if abs(new - lam) <= tol * max(new, 1e-300):
            return new
        lam = new
    return lam


# ----------------------------------------------------------------------------- the collapse clock as a step size

REF_DELTA, REF_L, REF_C = 3.0, 1.0, 1.0   # lr_rule: clock: the configured lr is the step at Δ = 3, L = c = 1
EQ4_MIN = 0.5       # Eq. 4 holds while the label gap per unit LΔ is at least this share of its small-LΔ value


def label_gap(C: np.ndarray) -> float:
    """sqrt(E[(f(v_k) − f(v_k'))²]), the root mean square over the ordered pairs k ≠ k' of the
    label differences' second moment D[k, k', k'] = C[k',k'] − 2C[k,k'] + C[k,k] (C: the task's
    label covariance at the features, icl.tasks.Task.label_cov)."""
    K = len(C)
    off = ~np.eye(K, dtype=bool)
    d2 = np.diag(C)[:, None] + np.diag(C)[None, :] - 2 * C
    return float(np.sqrt(max(float(d2[off].mean()), 0.0)))


def clock_weight(V: np.ndarray, C: np.ndarray) -> float:
    """‖v‖⁴·E[(f(v_k) − f(v_k'))²]: the collapse clock's rate per unit step (collapse_rate at η = 1)."""
    return collapse_rate(V, C, 1.0)


def one_clock(V: np.ndarray, C: np.ndarray, noise: float = 0.0, rtol: float = 1e-9) -> bool:
    """Whether softmax_q's population dynamics under GD at these features and labels follow one
    collapse clock: orthogonal features of one norm (G = ‖v‖²I), noise-free tokens and a label
    covariance aI + b·11ᵀ at the features (a rotation-invariant task at equidistant features).
    Then D^{(k)} = a·(a shape fixed by K and p), the b part cancelling in every prompt (attention
    sums to 1), so S(t) depends on η, L, c, Δ and N only through τ = t·η‖v‖⁴·E[(f(v_k) − f(v_k'))²]
    (collapse_rate): one curve in τ per K and p. What still differs between runs on it is the
    step's discreteness and the sampled feature counts."""
    if noise or C is None or not np.all(np.isfinite(C)):
        return False
    G = V @ V.T
    g = float(np.mean(np.diag(G)))
    if g <= 0 or not np.allclose(G, g * np.eye(len(V)), rtol=0, atol=rtol * g):
        return False
    off = C[~np.eye(len(C), dtype=bool)]
    scale = max(float(np.abs(np.diag(C)).max()), float(np.abs(off).max()) if off.size else 0.0, 1e-300)
    return bool(np.ptp(np.diag(C)) <= rtol * scale and (off.size == 0 or np.ptp(off) <= rtol * scale)
                and np.mean(np.diag(C)) - (off.mean() if off.size else 0.0) > rtol * scale)


def clock_lr(lr: float, V: np.ndarray, C: np.ndarray, V_ref: np.ndarray, C_ref: np.ndarray) -> float:
    """The step η at which a run's collapse clock, η‖v‖⁴·E[(f(v_k) − f(v_k'))²], runs as fast as
    that of step `lr` at the reference features and labels (V_ref, C_ref): η = lr·w_ref/w. Every
    run of a sweep then sees the same mean-field curve on the epoch axis (orthogonal features of
    one norm, one K and p), so one number of epochs resolves every setting."""
    w = clock_weight(V, C)
    if not (np.isfinite(w) and w > 0):
        raise ValueError("the collapse clock does not run here: the task's labels do not differ between features")
    return float(lr * clock_weight(V_ref, C_ref) / w)


def eq4_ratio(V: np.ndarray, C: np.ndarray, C_small: np.ndarray, shrink: float) -> float:
    """Eq. 4 (|f(v_k) − f(v_k')| = Θ(L)Δ), measured: the label gap per unit LΔ at these features
    against its small-LΔ value, read from the label covariance C at V and C_small at V·shrink
    (shrink ≪ 1: the same task at a separation shrink·Δ). 1 while the gap grows as LΔ; for the
    cosine (L/c)cos(c⟨w,x⟩ + φ) at separation Δ it is sqrt(2d(1 − Ω_d(cΔ)))/(cΔ) (cosine_eq4_ratio),
    which falls as the cosine's phase differences wrap around: the gap saturates at L/c·sqrt(…)."""
    small = label_gap(C_small) / shrink
    return float(label_gap(C) / small) if small > 0 else float("nan")


def cosine_eq4_ratio(c: float, delta: float, d: int) -> float:
    """eq4_ratio of the cosine task, closed form, at features a distance Δ apart: the gap² is
    (L/c)²(1 − Ω_d(cΔ)) and its small-cΔ limit is (LΔ)²/(2d) (Ω_d(r) = 1 − r²/(2d) + O(r⁴))."""
    r = c * delta
    return float(np.sqrt(2 * d * (1 - sphere_cos_mean(np.asarray(r), d))) / r)


def sampled_loss_and_grad(S: np.ndarray, counts: np.ndarray, query: np.ndarray, D: np.ndarray):
    """The population loss (averaged over the task functions, as the balanced form) and ∂L/∂S on
    prompts with the feature counts they actually have: counts (P, K) of each prompt's context
    features, query (P,) its query's feature. Attn_n = c_n e^{S[n,k]} / Σ_m c_m e^{S[m,k]} for the
    prompt's query k; L = (1/P) Σ_prompts ½ aᵀ D^{(k)} a. With every prompt's counts p_k N and
    queries in proportion p it is `population_loss_and_grad` exactly."""
    counts = np.asarray(counts, float)
    query = np.asarray(query, int)
    with np.errstate(divide="ignore"):
        logits = np.log(counts) + S[:, query].T                  # (P, K): -inf where a feature is absent
    logits -= logits.max(1, keepdims=True)
    A = np.exp(logits)
    A /= A.sum(1, keepdims=True)
    Dq = D[query]                                                # (P, K, K)
    Da = np.einsum("pnm,pm->pn", Dq, A)
    quad = (A * Da).sum(1)
    P, K = A.shape
    g = A * (Da - quad[:, None]) / P                             # ∂L/∂S[n, query_p], per prompt
    grad = np.zeros((K, K))
    np.add.at(grad.T, query, g)
    return 0.5 * float(quad.mean()), grad


def mean_field_curve_counts(V: np.ndarray, counts: np.ndarray, query: np.ndarray, C: np.ndarray, eta: float,
                            epochs: int) -> np.ndarray:
    """The mean-field loss at every epoch 0..epochs of full-batch GD on a run's own prompts' feature
    counts (`sampled_loss_and_grad`) instead of the balanced counts |V_k| = p_k N: beside
    `mean_field_curve_cov` it measures the balanced-count approximation's bias on that run."""
    G, D = V @ V.T, diff_cov(C)
    S, out = np.zeros((len(V), len(V))), []
    for _ in range(epochs + 1):
        loss, grad = sampled_loss_and_grad(S, counts, query, D)
        out.append(loss)
        S = S - eta * G @ grad @ G
    return np.asarray(out)
