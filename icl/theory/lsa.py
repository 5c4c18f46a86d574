"""Closed forms for one-layer linear self-attention (LSA) on linear regression (Zhang, Frei & Bartlett).

Setting (ZFB §3): a test prompt has M tokens x_i ~ N(0, Λ_t) in R^d, labels y_i = <w, x_i>,
query x_q ~ N(0, Λ_q) (Λ_q = Λ_t in distribution; Λ_q ≠ Λ_t = "query shift"), w ~ N(0, I_d)
(optionally E[w wᵀ] = W), all independent. An LSA whose only non-zero prediction weights are
W11^{KQ} and w22^{PV} predicts

    ŷ = x_qᵀ B m̂,   m̂ = (1/M) Σ_i y_i x_i,   B = w22^{PV} · (W11^{KQ})ᵀ      (ZFB eq. 3.6, ρ = M)

Note the transpose: ŷ = w22 · m̂ᵀ W11 x_q, so the matrix acting as x_qᵀ B m̂ is w22·W11ᵀ. At the
optimum W11 ∝ Γ^{-1} is symmetric so it does not matter there, but along gradient flow with
anisotropic Λ, W11 need not stay symmetric. Also ZFB normalise by the prompt length (ρ = M at
test time, eq. (3) of the slides); an LSA that keeps dividing by the training N predicts M/N ŷ.

Conventions: every `risk*` returns E[(ŷ - y_q)²] (no 1/2) unless `half=True`, which gives the
project's loss 1/2·E[(ŷ - y_q)²]. Covariances may be given as a d×d matrix or as a vector of
eigenvalues (read as diag). Every fixed-covariance formula holds for a full, non-diagonal Λ (the
pipeline's rotated covariances, icl.data.covariance): Γ is a polynomial in Λ, so Λ and Γ^{-1}
always commute, and nothing assumes a diagonal (tests/test_theory_lsa.py checks the rotated case
against Monte Carlo). Only the random-covariance forms assume Λ_τ diagonal (ZFB Thm 4.5); they
hold for any B. Everything is numpy float64.

Derivations (checked against Monte Carlo in tests/test_theory_lsa.py):
* Gaussian fourth moment (Isserlis): E[x xᵀ A x xᵀ] = Λ(A + Aᵀ)Λ + tr(AΛ)Λ for any A (slides,
  Lemma D.2: correct). Hence for S = (1/M) Σ x_i x_iᵀ:
      E[S A S] = Λ A Λ + (Λ Aᵀ Λ + tr(AΛ) Λ)/M.
  Only for symmetric A does this reduce to (1 + 1/M) ΛAΛ + tr(AΛ)/M · Λ.
* Risk: with Γ_M(Λ) := (1 + 1/M)Λ + tr(Λ)/M · I and w ~ N(0, I),
      E[(ŷ - y_q)²] = tr(Λ_q B Γ_M(Λ_t) Λ_t Bᵀ) - 2 tr(Λ_q B Λ_t) + tr(Λ_q).
  It is a convex quadratic in B with gradient 2 Λ_q B Γ_M Λ_t - 2 Λ_q Λ_t, so for any invertible
  Λ_q the minimiser is B* = Γ_M(Λ_t)^{-1} = Γ^{-1} (ZFB Thm 4.1) at M = N.

Where the transcribed slides (shared/papers/003_*) are wrong or ambiguous:
* Thm 4.2: the variance term must be (1/M) tr[ΣΓ^{-2}Λ]; the slides drop the 1/M
  (see `zfb_thm42_error`). The 1/N² bracket is right.
* Eq. (5) (covariate scaling) drops the w in its middle expression; the statement ŷ ≈ c² x_qᵀw is
  right in the limit: the slope is c² tr(Γ^{-1}Λ²)/tr(Λ) exactly, for every M (`scaled_slope`).
* Eq. (7)-(8) (random covariance, "E ŷ → 1/3 <w, x_q>"): valid for a query independent of the
  prompt's covariance (x_q held fixed while averaging over Λ_new). With x_q ~ N(0, Λ_new), the
  setting stated just before, the best-linear slope of ŷ on y_q is 2/3 (`random_cov_slope`).
  Also, "Γ_τ → Λ_τ when M, N → ∞" depends on the training N only.
* The prediction is x_qᵀ w22 W11ᵀ m̂ (the slides' eq. (3) shows it with symmetric Γ^{-1}, where
  the transpose is invisible).
* Lemma 5.4 writes ‖Γ‖_∞ where Thm 4.1 writes ‖Γ‖_op (`init_scale_bound` uses the latter).
"""
from __future__ import annotations

import numpy as np

from icl.settings import Tokens

__all__ = [
    "as_cov", "gamma", "optimal_B", "effective_B", "zfb_optimum_weights", "init_scale_bound",
    "expected_SAS", "risk", "risk_grad", "optimum_risk", "zfb_thm42_error",
    "slope", "scaled_slope", "scaled_risk",
    "exp_moments", "random_cov_gamma_lam2", "random_cov_optimal_B", "random_cov_risk",
    "random_cov_slope", "lsa_predict", "lsa_forward", "risk_many", "random_cov_risk_many", "excess_ratio",
    "lsa_optimum", "lsa_target",
]


# ----------------------------------------------------------------------------- basics

def as_cov(Lam) -> np.ndarray:
    """A covariance as a float64 d×d matrix; a 1-D input is a vector of eigenvalues (diag)."""
    a = np.asarray(Lam, dtype=np.float64)
    if a.ndim == 0:
        a = a.reshape(1)
    if a.ndim == 1:
        return np.diag(a)
    if a.ndim != 2 or a.shape[0] != a.shape[1]:
        raise ValueError(f"covariance must be a vector or a square matrix, got shape {a.shape}")
    return a


def gamma(Lam, N: float) -> np.ndarray:
    """Γ = (1 + 1/N) Λ + tr(Λ)/N · I_d (ZFB Thm 4.1); N = training prompt length."""
    L = as_cov(Lam)
    return (1.0 + 1.0 / N) * L + (np.trace(L) / N) * np.eye(L.shape[0])


def optimal_B(Lam, N: float) -> np.ndarray:
    """Γ^{-1}: the global optimum's effective matrix w22^{PV}·(W11^{KQ})ᵀ (ZFB Thm 4.1).

    It is the unique minimiser over B of E[(x_qᵀ B m̂ - y_q)²] at training length N (see
    `risk_grad`); tests check this by finite differences and by a Monte Carlo least-squares fit.
    """
    return np.linalg.inv(gamma(Lam, N))


def effective_B(W_pv, W_kq) -> np.ndarray:
    """B = w22^{PV} · (W11^{KQ})ᵀ from full (d+1)×(d+1) LSA weights (ZFB eq. 3.5-3.6).

    Exact (ŷ = x_qᵀ B m̂ with ρ = M) only when w21^{PV} = 0 and w21^{KQ} = 0, which gradient flow
    from ZFB's initialisation keeps (Lemma 5.2); otherwise extra terms enter (use `lsa_forward`).
    """
    W_pv = np.asarray(W_pv, dtype=np.float64)
    W_kq = np.asarray(W_kq, dtype=np.float64)
    d = W_pv.shape[0] - 1
    return W_pv[d, d] * W_kq[:d, :d].T


def zfb_optimum_weights(Lam, N: float) -> tuple[np.ndarray, np.ndarray]:
    """(W_*^{PV}, W_*^{KQ}) of ZFB Thm 4.1: tr(Γ^{-2})^{±1/4}-balanced, effective B = Γ^{-1}."""
    Gi = optimal_B(Lam, N)
    d = Gi.shape[0]
    s = np.trace(Gi @ Gi) ** 0.25
    W_kq = np.zeros((d + 1, d + 1))
    W_kq[:d, :d] = Gi / s
    W_pv = np.zeros((d + 1, d + 1))
    W_pv[d, d] = s
    return W_pv, W_kq


def init_scale_bound(Lam, N: float) -> float:
    """Largest σ allowed by ZFB Thm 4.1: σ² ‖Γ‖_op √d < 2, i.e. σ < sqrt(2/(√d ‖Γ‖_op)).

    (The slides write ‖Γ‖_∞ once, in Lemma 5.4, and ‖Γ‖_op elsewhere; we read it as ‖·‖_op.)
    """
    G = gamma(Lam, N)
    d = G.shape[0]
    return float(np.sqrt(2.0 / (np.sqrt(d) * np.linalg.norm(G, 2))))


# ----------------------------------------------------------------------------- fixed covariance

def expected_SAS(A, Lam, M: float) -> np.ndarray:
    """E[S A S], S = (1/M) Σ_{i≤M} x_i x_iᵀ, x_i ~ N(0, Λ) i.i.d., any (non-symmetric) A.

    = Λ A Λ + (Λ Aᵀ Λ + tr(AΛ) Λ)/M  (Isserlis: E[xxᵀAxxᵀ] = Λ(A + Aᵀ)Λ + tr(AΛ)Λ for the M
    diagonal terms, E[S]AE[S] for the M(M-1) others). The form (1 + 1/M)ΛAΛ + tr(AΛ)/M·Λ holds
    only for symmetric A.
    """
    L = as_cov(Lam)
    A = np.asarray(A, dtype=np.float64)
    return L @ A @ L + (L @ A.T @ L + np.trace(A @ L) * L) / M


def _half(x, half):
    return 0.5 * x if half else x


def risk(B, Lam, M: float, Lam_query=None, w_cov=None, half: bool = False) -> float:
    """Exact E[(ŷ - y_q)²] of ŷ = x_qᵀ B (1/M Σ y_i x_i) (times 1/2 if `half`).

    Tokens x_i ~ N(0, Λ) (= `Lam`, the test covariance), M of them; query x_q ~ N(0, Λ_q)
    (`Lam_query`, default Λ); w with E[wwᵀ] = W (`w_cov`, default I; pass w wᵀ for a fixed task w).
        E[(ŷ - y_q)²] = tr(B E[S W S] Bᵀ Λ_q) - 2 tr(B Λ W Λ_q) + tr(W Λ_q),
        E[S W S] = ΛWΛ + (ΛWΛ + tr(WΛ)Λ)/M   (W symmetric),
    which for W = I is tr(Λ_q B Γ_M(Λ) Λ Bᵀ) - 2 tr(Λ_q B Λ) + tr(Λ_q).
    """
    L = as_cov(Lam)
    Lq = L if Lam_query is None else as_cov(Lam_query)
    W = np.eye(L.shape[0]) if w_cov is None else np.asarray(w_cov, dtype=np.float64)
    B = np.asarray(B, dtype=np.float64)
    SWS = expected_SAS(W, L, M)
    r = np.trace(B @ SWS @ B.T @ Lq) - 2.0 * np.trace(B @ L @ W @ Lq) + np.trace(W @ Lq)
    return float(_half(r, half))


def risk_grad(B, Lam, M: float, Lam_query=None, half: bool = False) -> np.ndarray:
    """∇_B of `risk` (w ~ N(0, I)): 2 Λ_q B Γ_M(Λ)Λ - 2 Λ_q Λ; zero iff B = Γ_M(Λ)^{-1}."""
    L = as_cov(Lam)
    Lq = L if Lam_query is None else as_cov(Lam_query)
    B = np.asarray(B, dtype=np.float64)
    g = 2.0 * Lq @ B @ gamma(L, M) @ L - 2.0 * Lq @ L
    return _half(g, half)


def optimum_risk(Lam, N: float, M: float, half: bool = False) -> float:
    """In-distribution test error of the optimum B = Γ_N^{-1} on prompts of length M (ZFB Thm 4.2).

    With w ~ N(0, I) (Λ and Γ commute for any Λ, diagonal or not):
        E[(ŷ - y_q)²] = (1/M) tr[(Λ² + tr(Λ)Λ) Γ^{-2} Λ] + (1/N²) tr[(Λ + tr(Λ)I)² Γ^{-2} Λ],
    which is `zfb_thm42_error` averaged over w (E_w Σ = Λ² + tr(Λ)Λ, E_w aaᵀ = I); at M = N it
    equals tr(Λ) - tr(Λ²Γ^{-1}) (= 2·(ℓ̃_min + tr(Λ)/2) of the slides' Corollary A.2).
    """
    return risk(optimal_B(Lam, N), Lam, M, half=half)


def zfb_thm42_error(Lam, N: float, M: float, w) -> float:
    """ZFB Thm 4.2 for y = <w, x> with a fixed w (the theorem's D is one fixed distribution):

        E(ŷ - y_q)² = [best linear error = 0] + (1/M) tr[Σ Γ^{-2} Λ]
                      + (1/N²)[‖a‖²_{Γ^{-2}Λ³} + 2 tr(Λ)‖a‖²_{Γ^{-2}Λ²} + tr(Λ)²‖a‖²_{Γ^{-2}Λ}],
        a = Λ^{-1} E[xy] = w,  Σ = Cov(xy) = Λwwᵀ Λ + (wᵀΛw) Λ.

    Source discrepancy: the slides (and DESIGN.md) write the variance term as tr[ΣΓ^{-2}Λ] without
    the factor 1/M. Our derivation (m̂ has covariance Σ/M) and Monte Carlo both need the 1/M;
    without it the error would not vanish as M, N → ∞. The 1/N² bracket agrees with the slides
    exactly (it is (Γ^{-1}Λa - a)ᵀΛ(Γ^{-1}Λa - a), since Γ^{-1}Λ - I = -Γ^{-1}(Λ + tr(Λ)I)/N),
    so the "O(1/N²)" in DESIGN.md is exact, not just an order.
    """
    L = as_cov(Lam)
    w = np.asarray(w, dtype=np.float64)
    Gi = optimal_B(L, N)
    Gi2 = Gi @ Gi
    Sigma = L @ np.outer(w, w) @ L + (w @ L @ w) * L
    t = np.trace(L)
    nrm = lambda P: float(w @ P @ w)  # noqa: E731
    bias = (nrm(Gi2 @ L @ L @ L) + 2 * t * nrm(Gi2 @ L @ L) + t * t * nrm(Gi2 @ L)) / N**2
    return float(np.trace(Sigma @ Gi2 @ L) / M + bias)


# ----------------------------------------------------------------------------- covariate scaling

def slope(B, Lam_test, Lam_query=None, M: float | None = None, w_cov=None) -> float:
    """Regression coefficient of ŷ on y_q: E[ŷ y_q]/E[y_q²] = tr(B Λ_t W Λ_q)/tr(W Λ_q).

    Exact at every finite M: E[S] = Λ_t, so it does not depend on M (the argument is accepted
    for symmetry with `risk` and ignored). Also E[ŷ | x_q, w] = x_qᵀ B Λ_t w exactly.
    """
    Lt = as_cov(Lam_test)
    Lq = Lt if Lam_query is None else as_cov(Lam_query)
    W = np.eye(Lt.shape[0]) if w_cov is None else np.asarray(w_cov, dtype=np.float64)
    B = np.asarray(B, dtype=np.float64)
    return float(np.trace(B @ Lt @ W @ Lq) / np.trace(W @ Lq))


def scaled_slope(Lam, N: float, c: float) -> float:
    """Slope of the optimum (trained on Λ, length N) when test tokens and query are x → c·x.

    = c² tr(Γ_N^{-1} Λ²)/tr(Λ), for every M; → c² as N → ∞ (the slides' eq. (5): ŷ ≈ c² x_qᵀw).
    For Λ = I_d: c²/(1 + (d+1)/N).
    """
    L = as_cov(Lam)
    return slope(optimal_B(L, N), c * c * L)


def scaled_risk(Lam, N: float, M: float, c: float, half: bool = False) -> float:
    """Exact E[(ŷ - y_q)²] of the optimum Γ_N^{-1} on test prompts with x → c·x (Λ_t = Λ_q = c²Λ).

    As M, N → ∞ it tends to c²(c² - 1)² tr(Λ).
    """
    L = as_cov(Lam)
    return risk(optimal_B(L, N), c * c * L, M, half=half)


# ----------------------------------------------------------------------------- random covariance

def exp_moments(scale: float = 1.0) -> tuple[float, float, float]:
    """(E λ, E λ², E λ³) for λ ~ scale·Exp(1): E λ^k = k!·scale^k."""
    s = float(scale)
    return s, 2.0 * s**2, 6.0 * s**3


def _moments(scale, moments):
    return exp_moments(scale) if moments is None else tuple(float(m) for m in moments)


def random_cov_gamma_lam2(d: int, N: float, scale: float = 1.0, moments=None) -> np.ndarray:
    """Diagonal of E[Γ_τ Λ_τ²] for Λ_τ = diag(λ), λ_i i.i.d. (ZFB Thm 4.5), as a length-d vector.

    Γ_τ = (1 + 1/N)Λ_τ + tr(Λ_τ)/N · I and tr(Λ_τ) = Σ_j λ_j contains λ_i itself, so
        E[(Γ_τ Λ_τ²)_ii] = (1 + 1/N) m3 + E[λ_i² Σ_j λ_j]/N = (1 + 2/N) m3 + (d - 1) m1 m2 / N,
    m_k = E λ^k (`moments`, default λ ~ scale·Exp(1): m_k = k! scale^k, giving
    scale³ (6 + (2d + 10)/N)).
    """
    m1, m2, m3 = _moments(scale, moments)
    return np.full(d, (1.0 + 2.0 / N) * m3 + (d - 1) * m1 * m2 / N)


def random_cov_optimal_B(d: int, N: float, scale: float = 1.0, moments=None) -> np.ndarray:
    """E[Λ_τ²] (E[Γ_τ Λ_τ²])^{-1}: the optimum's effective matrix when trained on random
    diagonal covariances (ZFB Thm 4.5; both factors are diagonal, so the order is immaterial).

    It is the exact minimiser of `random_cov_risk(B, d, N, ...)`: that risk is Σ_ij K_ij B_ij² -
    2 m2 tr(B) + d m1, so off-diagonals vanish and B_ii = m2/K_ii. For scale·Exp(1):
        B = I / (scale · (3 + (d + 5)/N))   →   I/(3 scale) as N → ∞.
    """
    m2 = _moments(scale, moments)[1]
    return np.diag(m2 / random_cov_gamma_lam2(d, N, scale, moments))


def _K_matrix(d, M, m1, m2, m3):
    """K_ij = E[λ_i λ_j (Γ_M(Λ)Λ)_jj] for i.i.d. diagonal λ."""
    off = (1.0 + 3.0 / M) * m1 * m2 + (d - 2) * m1**3 / M
    diag = (1.0 + 2.0 / M) * m3 + (d - 1) * m1 * m2 / M
    K = np.full((d, d), off)
    np.fill_diagonal(K, diag)
    return K


def random_cov_risk(B, d: int, M: float, scale: float = 1.0, moments=None, Lam_query=None,
                    half: bool = False) -> float:
    """Exact E[(ŷ - y_q)²] of ŷ = x_qᵀ B m̂ when each prompt has Λ = diag(λ), λ_i i.i.d.
    (scale·Exp(1) by default, or any law with moments (m1, m2, m3)), M tokens x_i ~ N(0, Λ).

    (a) `Lam_query=None`: in-distribution query x_q ~ N(0, Λ) with the prompt's own Λ:
        Σ_ij K_ij B_ij² - 2 m2 tr(B) + d m1,
        K_ii = (1 + 2/M) m3 + (d-1) m1 m2/M,  K_ij = (1 + 3/M) m1 m2 + (d-2) m1³/M (i ≠ j).
        With M = N this is the training objective of ZFB (4.10) (times 2).
    (b) `Lam_query` given: x_q ~ N(0, Λ_q) independent of Λ:
        tr(Λ_q B D Bᵀ) - 2 m1 tr(Λ_q B) + tr(Λ_q),  D = [(1 + 2/M) m2 + (d-1) m1²/M] I.
    Both follow from `risk` conditional on Λ, averaged with E[λ_i T] etc., T = Σ_j λ_j.
    """
    m1, m2, m3 = _moments(scale, moments)
    B = np.asarray(B, dtype=np.float64)
    if Lam_query is None:
        K = _K_matrix(d, M, m1, m2, m3)
        r = np.sum(K * B * B) - 2.0 * m2 * np.trace(B) + d * m1
    else:
        Lq = as_cov(Lam_query)
        Dg = (1.0 + 2.0 / M) * m2 + (d - 1) * m1**2 / M
        r = Dg * np.trace(Lq @ B @ B.T) - 2.0 * m1 * np.trace(Lq @ B) + np.trace(Lq)
    return float(_half(r, half))


def random_cov_slope(B, d: int, scale: float = 1.0, moments=None, Lam_query=None) -> float:
    """E[ŷ y_q]/E[y_q²] on test prompts with a new random Λ = diag(λ) (exact, any M).

    (a) `Lam_query=None` (query from the prompt's own Λ): m2 tr(B)/(d m1).
    (b) query x_q ~ N(0, Λ_q) independent of Λ: m1 tr(B Λ_q)/tr(Λ_q); here moreover
        E[ŷ | x_q, w] = m1 x_qᵀ B w exactly.
    For B = `random_cov_optimal_B(d, N, s_train)` and test λ ~ s_test·Exp(1):
        (a) 2 (s_test/s_train)/(3 + (d+5)/N) → 2/3,   (b) (s_test/s_train)/(3 + (d+5)/N) → 1/3.
    The slides' "E[ŷ] → 1/3 <w, x_q>" (their eq. (7)-(8)) averages over Λ_new with x_q held fixed,
    i.e. case (b); with an in-distribution query (case (a), the setting the slides state just
    before) the best linear coefficient is 2/3, because x_q is large along the coordinates where
    λ_i is large. (ZFB's test prompts use covariance c·diag(λ), so s_test = c there, not c².)
    """
    m1, m2, _ = _moments(scale, moments)
    B = np.asarray(B, dtype=np.float64)
    if Lam_query is None:
        return float(m2 * np.trace(B) / (d * m1))
    Lq = as_cov(Lam_query)
    return float(m1 * np.trace(B @ Lq) / np.trace(Lq))


# ----------------------------------------------------------------------------- many matrices at once

def risk_many(Bs, Lam, M: float) -> np.ndarray:
    """`risk` in distribution (x_q ~ N(0, Λ), w ~ N(0, I)) of every matrix of a stack Bs (..., d, d):
    tr(Λ B E Bᵀ) − 2 tr(B Λ²) + tr(Λ), E = E[S S] = ΛΛ + (ΛΛ + tr(Λ)Λ)/M, vectorised."""
    L = as_cov(Lam)
    B = np.asarray(Bs, dtype=np.float64)
    E = expected_SAS(np.eye(L.shape[0]), L, M)
    quad = np.einsum("ai,...ij,jk,...ak->...", L, B, E, B)
    return quad - 2.0 * np.einsum("...ij,ji->...", B, L @ L) + np.trace(L)


def random_cov_risk_many(Bs, d: int, M: float, scale: float = 1.0, moments=None) -> np.ndarray:
    """`random_cov_risk` with an in-distribution query for every matrix of a stack Bs (..., d, d):
    Σ_ij K_ij B_ij² − 2 m2 tr(B) + d m1, vectorised."""
    m1, m2, m3 = _moments(scale, moments)
    B = np.asarray(Bs, dtype=np.float64)
    K = _K_matrix(d, M, m1, m2, m3)
    return np.einsum("ij,...ij->...", K, B * B) - 2.0 * m2 * np.einsum("...ii->...", B) + d * m1


def excess_ratio(Bs, opt, limit, risk_fn) -> np.ndarray:
    """(R(B) − R(B*)) / (R(B∞) − R(B*)) for every matrix of a stack: a learned matrix's excess
    population risk over the optimum B* (Γ⁻¹) in units of the gap from B* to its N → ∞ limit B∞
    (Λ⁻¹), both at the training length. 0 at B*, 1 at B∞; `risk_fn` maps a stack to its risks
    (`risk_many` or `random_cov_risk_many` with the law's parameters). Along B* + t(B∞ − B*) it is
    t² exactly (the risk is quadratic with its minimum at B*)."""
    r_opt, r_lim = risk_fn(np.asarray(opt, float)), risk_fn(np.asarray(limit, float))
    return (risk_fn(Bs) - r_opt) / (r_lim - r_opt)


# ----------------------------------------------------------------------------- predictions

def lsa_predict(B, x, y, xq) -> np.ndarray:
    """ŷ = x_qᵀ B (1/M Σ_i y_i x_i) for a batch: x (P, M, d), y (P, M), xq (P, d) → (P,).

    The "LSA limit" baseline: B = `optimal_B(Λ, N_train)` (or `random_cov_optimal_B`). Also
    accepts a single prompt (x (M, d), y (M,), xq (d,)) and returns a scalar array.
    """
    x = np.asarray(x, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    xq = np.asarray(xq, dtype=np.float64)
    B = np.asarray(B, dtype=np.float64)
    m = (y[..., None, :] @ x)[..., 0, :] / x.shape[-2]           # batched products (BLAS), not einsum
    return ((xq @ B) * m).sum(-1)


def lsa_forward(W_pv, W_kq, x, y, xq, rho: float | None = None) -> np.ndarray:
    """Bottom-right entry of f(E) = E + W^{PV} E (Eᵀ W^{KQ} E)/ρ (ZFB eq. 3.3), batched.

    E = [[x_1 .. x_M, x_q], [y_1 .. y_M, 0]] of shape (d+1)×(M+1); ρ defaults to M (ZFB).
    x (P, M, d), y (P, M), xq (P, d) → (P,). Only the last column of f(E) is computed.
    """
    x = np.asarray(x, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    xq = np.asarray(xq, dtype=np.float64)
    M = x.shape[-2]
    rho = float(M) if rho is None else float(rho)
    top = np.concatenate([np.swapaxes(x, -1, -2), xq[..., :, None]], axis=-1)   # (P, d, M+1)
    bot = np.concatenate([y, np.zeros_like(y[..., :1])], axis=-1)[..., None, :]  # (P, 1, M+1)
    E = np.concatenate([top, bot], axis=-2)                                       # (P, d+1, M+1)
    eq = E[..., :, -1]                                                            # (P, d+1)
    v = np.einsum("ij,...j->...i", np.asarray(W_kq, dtype=np.float64), eq)
    a = np.einsum("...ik,...i->...k", E, v)                                       # Eᵀ W^KQ e_q
    b = np.einsum("...ik,...k->...i", E, a)
    out = eq + np.einsum("ij,...j->...i", np.asarray(W_pv, dtype=np.float64), b) / rho
    return out[..., -1]


# ----------------------------------------------------------------------------- on a run's spec
# (here, not in icl.theory.table, so the LSA model reads its target without importing the table,
# which asks icl.models for the kinds' traits)

def lsa_optimum(spec: dict):
    """(B, train_kind, Λ as a d×d matrix or the scale of random covariances) of the LSA optimum
    for the run's training distribution."""
    from icl.data import covariance   # local: the closed forms above need no run spec
    tok, N = spec["tokens"], spec["prompts"]["N"]
    if tok["kind"] == "gaussian":
        lam = covariance(tok)
        return optimal_B(lam, N), "gaussian", lam
    if tok["kind"] == "random_covariance":
        scale = Tokens.of(tok).scale
        return random_cov_optimal_B(tok["d"], N, scale), "random_covariance", scale
    return None, None, None


def lsa_target(spec: dict):
    """The LSA optimum's effective matrix for a linear task (None where there is no theory)."""
    return lsa_optimum(spec)[0] if spec["task"]["kind"] == "linear" else None
