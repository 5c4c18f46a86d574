"""Closed forms of icl.theory.lsa (ZFB's LSA optimum) against Monte Carlo.

Every Monte Carlo check uses a fixed seed and passes when the closed form lies within K_SE
standard errors (computed from the samples) of the Monte Carlo estimate.
"""
import numpy as np
import pytest

from icl.theory import lsa

K_SE = 5.0  # tolerance in standard errors for every Monte Carlo comparison


# ----------------------------------------------------------------------------- helpers

def _chol(cov):
    return np.linalg.cholesky(lsa.as_cov(cov))


def sample_prompts(rng, P, M, tok, query=None, w=None):
    """P prompts of M tokens. `tok`/`query`: a covariance (vector or matrix) shared by all
    prompts, or an array (P, d) of per-prompt diagonal variances. query=None: same as tokens.
    w=None: w ~ N(0, I) per prompt; else a fixed vector."""
    d = np.asarray(tok).shape[-1]

    def draw(cov, shape):
        cov = np.asarray(cov, dtype=np.float64)
        z = rng.standard_normal(shape)
        if cov.ndim == 2 and cov.shape == (P, d):   # per-prompt diagonal variances
            s = np.sqrt(cov)
            return z * (s[:, None, :] if z.ndim == 3 else s)
        return z @ _chol(cov).T

    x = draw(tok, (P, M, d))
    xq = draw(tok if query is None else query, (P, d))
    W = rng.standard_normal((P, d)) if w is None else np.broadcast_to(w, (P, d))
    y = np.einsum("pmd,pd->pm", x, W)
    yq = np.einsum("pd,pd->p", xq, W)
    return x, y, xq, yq


def assert_mc_mean(samples, expected, k=K_SE):
    samples = np.asarray(samples)
    mean = samples.mean(axis=0)
    se = samples.std(axis=0, ddof=1) / np.sqrt(samples.shape[0])
    z = np.abs(mean - expected) / se
    assert np.all(z < k), f"MC {mean} vs closed form {expected}: z = {z}"
    return z


def assert_mc_ratio(num, den, expected, k=K_SE):
    """E[num]/E[den] by the delta method."""
    r = num.mean() / den.mean()
    se = np.std(num - r * den, ddof=1) / np.sqrt(num.size) / den.mean()
    z = abs(r - expected) / se
    assert z < k, f"MC ratio {r} vs closed form {expected}: z = {z}"
    return z


def ls_fit_B(x, y, xq, yq):
    """Least-squares fit of B in ŷ = x_qᵀ B m̂ with sandwich (heteroscedastic) standard errors."""
    d = xq.shape[1]
    m = np.einsum("pm,pmd->pd", y, x) / x.shape[1]
    F = np.einsum("pj,pk->pjk", xq, m).reshape(len(yq), d * d)
    G = F.T @ F
    beta = np.linalg.solve(G, F.T @ yq)
    r = yq - F @ beta
    Gi = np.linalg.inv(G)
    cov = Gi @ ((F * r[:, None] ** 2).T @ F) @ Gi
    return beta.reshape(d, d), np.sqrt(np.diag(cov)).reshape(d, d)


def rand_spd(rng, d):
    Q, _ = np.linalg.qr(rng.standard_normal((d, d)))
    return Q @ np.diag(rng.uniform(0.4, 2.0, d)) @ Q.T


# ----------------------------------------------------------------------------- basics

def test_gamma_vector_matrix_and_identity():
    lam = np.array([0.5, 1.0, 2.0])
    assert np.allclose(lsa.gamma(lam, 7), lsa.gamma(np.diag(lam), 7))
    assert np.allclose(lsa.gamma(lam, 7), np.diag(lam * 8 / 7 + 3.5 / 7))
    d, N = 4, 10
    assert np.allclose(lsa.gamma(np.ones(d), N), (1 + (d + 1) / N) * np.eye(d))
    assert np.allclose(lsa.optimal_B(lam, 7) @ lsa.gamma(lam, 7), np.eye(3))
    assert lsa.init_scale_bound(np.ones(d), N) == pytest.approx(np.sqrt(2 / (2 * 1.5)))


def test_expected_SAS_nonsymmetric_monte_carlo():
    rng = np.random.default_rng(1)
    d, M, P = 3, 4, 200_000
    Lam = rand_spd(rng, d)
    A = rng.standard_normal((d, d)) + 2.0 * np.triu(np.ones((d, d)))   # far from symmetric
    x = rng.standard_normal((P, M, d)) @ _chol(Lam).T
    S = np.einsum("pmi,pmj->pij", x, x) / M
    SAS = S @ A @ S
    assert_mc_mean(SAS, lsa.expected_SAS(A, Lam, M))
    # The symmetric-only shortcut (1 + 1/M)ΛAΛ + tr(AΛ)/M·Λ is wrong here and MC rejects it.
    naive = (1 + 1 / M) * Lam @ A @ Lam + np.trace(A @ Lam) / M * Lam
    se = SAS.std(axis=0, ddof=1) / np.sqrt(P)
    assert np.max(np.abs(SAS.mean(axis=0) - naive) / se) > 10


@pytest.mark.parametrize("case", ["in_dist", "query_shift", "full_cov"])
def test_risk_and_slope_monte_carlo(case):
    rng = np.random.default_rng({"in_dist": 2, "query_shift": 3, "full_cov": 4}[case])
    d, N, M, P = 3, 10, 6, 200_000
    lam = np.array([0.5, 1.0, 2.0])
    tok, query = lam, None
    if case == "query_shift":
        query = np.array([2.0, 0.3, 1.0])
    if case == "full_cov":
        tok, query = rand_spd(rng, d), rand_spd(rng, d)
    B = lsa.optimal_B(lam, N) + 0.2 * rng.standard_normal((d, d))
    x, y, xq, yq = sample_prompts(rng, P, M, tok, query)
    yh = lsa.lsa_predict(B, x, y, xq)
    assert_mc_mean((yh - yq) ** 2, lsa.risk(B, tok, M, Lam_query=query))
    assert lsa.risk(B, tok, M, query, half=True) == pytest.approx(0.5 * lsa.risk(B, tok, M, query))
    assert_mc_ratio(yh * yq, yq**2, lsa.slope(B, tok, query, M))


def test_risk_gradient_and_minimizer():
    rng = np.random.default_rng(5)
    d, N = 3, 8
    Lam = rand_spd(rng, d)
    Bs = lsa.optimal_B(Lam, N)
    for Lq in (None, rand_spd(rng, d)):   # the minimiser does not depend on the query covariance
        assert np.allclose(lsa.risk_grad(Bs, Lam, N, Lq), 0, atol=1e-12)
        B0 = Bs + 0.3 * rng.standard_normal((d, d))
        h, fd = 1e-6, np.zeros((d, d))
        for i in range(d):
            for j in range(d):
                E = np.zeros((d, d))
                E[i, j] = h
                fd[i, j] = (lsa.risk(B0 + E, Lam, N, Lq) - lsa.risk(B0 - E, Lam, N, Lq)) / (2 * h)
        assert np.allclose(fd, lsa.risk_grad(B0, Lam, N, Lq), atol=1e-6)
        r0 = lsa.risk(Bs, Lam, N, Lq)
        for _ in range(20):
            D = rng.standard_normal((d, d))
            assert lsa.risk(Bs + 1e-3 * D, Lam, N, Lq) > r0
    # Slides, Corollary A.2 (12)-(13), written for B = u·U11ᵀ:
    G, Gi = lsa.gamma(Lam, N), Bs
    r0 = lsa.risk(Bs, Lam, N, half=True)
    assert r0 - 0.5 * np.trace(Lam) == pytest.approx(-0.5 * np.trace(Lam @ Lam @ Gi))
    ev, V = np.linalg.eigh(Lam)
    Lh = V @ np.diag(np.sqrt(ev)) @ V.T
    ev, V = np.linalg.eigh(G)
    Gh = V @ np.diag(np.sqrt(ev)) @ V.T
    B = rng.standard_normal((d, d))
    excess = 0.5 * np.linalg.norm(Gh @ (Lh @ B.T @ Lh - Lam @ Gi)) ** 2
    assert lsa.risk(B, Lam, N, half=True) - r0 == pytest.approx(excess)


def test_minimizer_monte_carlo_least_squares():
    """The population minimiser over B (fitted by least squares on samples) is Γ^{-1}."""
    rng = np.random.default_rng(6)
    d, N, P = 3, 5, 200_000
    lam = np.array([0.5, 1.0, 2.0])
    x, y, xq, yq = sample_prompts(rng, P, N, lam)
    Bhat, se = ls_fit_B(x, y, xq, yq)
    Bs = lsa.optimal_B(lam, N)
    assert np.all(np.abs(Bhat - Bs) / se < K_SE), (Bhat, Bs, se)
    # ... and not Λ^{-1} (the N → ∞ limit) at this small N.
    assert np.max(np.abs(Bhat - np.diag(1 / lam)) / se) > 10


def test_thm42_fixed_w_and_average():
    rng = np.random.default_rng(7)
    d, N, M, P = 3, 12, 5, 200_000
    lam = np.array([0.5, 1.0, 2.0])
    w = np.array([1.0, -0.5, 0.8])
    x, y, xq, yq = sample_prompts(rng, P, M, lam, w=w)
    e2 = (lsa.lsa_predict(lsa.optimal_B(lam, N), x, y, xq) - yq) ** 2
    thm = lsa.zfb_thm42_error(lam, N, M, w)
    assert thm == pytest.approx(lsa.risk(lsa.optimal_B(lam, N), lam, M, w_cov=np.outer(w, w)))
    assert_mc_mean(e2, thm)
    # The slides' version without 1/M on tr[ΣΓ^{-2}Λ] is rejected by the samples.
    L, Gi = np.diag(lam), lsa.optimal_B(lam, N)
    Sigma = L @ np.outer(w, w) @ L + (w @ L @ w) * L
    var = np.trace(Sigma @ Gi @ Gi @ L)
    slides = thm + var * (1 - 1 / M)
    assert abs(e2.mean() - slides) / (e2.std() / np.sqrt(P)) > 10
    # Thm 4.2 is quadratic in w, so E_w over N(0, I) = sum over basis vectors; equals optimum_risk.
    avg = sum(lsa.zfb_thm42_error(lam, N, M, e) for e in np.eye(d))
    assert avg == pytest.approx(lsa.optimum_risk(lam, N, M))


def test_optimum_risk_closed_forms():
    lam = np.array([0.5, 1.0, 2.0])
    L, t = np.diag(lam), lam.sum()
    for N, M in [(10, 10), (10, 40), (40, 10), (100, 1000)]:
        Gi = lsa.optimal_B(lam, N)
        Gi2 = Gi @ Gi
        expected = (np.trace((L @ L + t * L) @ Gi2 @ L) / M
                    + np.trace((L + t * np.eye(3)) @ (L + t * np.eye(3)) @ Gi2 @ L) / N**2)
        assert lsa.optimum_risk(lam, N, M) == pytest.approx(expected)
        if N == M:
            assert expected == pytest.approx(t - np.trace(L @ L @ Gi))
    assert lsa.optimum_risk(lam, 10**7, 10**7) < 1e-5
    # Isotropic case: ((d+1)² d / N² + (d+1) d / M) / (1 + (d+1)/N)².
    d, N, M = 4, 20, 30
    g = 1 + (d + 1) / N
    assert lsa.optimum_risk(np.ones(d), N, M) == pytest.approx(
        ((d + 1) ** 2 * d / N**2 + (d + 1) * d / M) / g**2)


def test_covariate_scaling_monte_carlo():
    rng = np.random.default_rng(8)
    d, N, M, P, c = 3, 20, 8, 200_000, 2.0
    lam = np.array([0.5, 1.0, 2.0])
    Bs = lsa.optimal_B(lam, N)
    x, y, xq, yq = sample_prompts(rng, P, M, c * c * lam)
    yh = lsa.lsa_predict(Bs, x, y, xq)
    assert_mc_ratio(yh * yq, yq**2, lsa.scaled_slope(lam, N, c))
    assert_mc_mean((yh - yq) ** 2, lsa.scaled_risk(lam, N, M, c))
    assert lsa.scaled_slope(lam, N, c) == pytest.approx(
        c * c * np.trace(Bs @ np.diag(lam) ** 2) / lam.sum())
    assert lsa.scaled_slope(np.ones(d), N, c) == pytest.approx(c * c / (1 + (d + 1) / N))
    assert lsa.scaled_slope(lam, 10**8, c) == pytest.approx(c * c, rel=1e-6)
    assert lsa.scaled_risk(lam, 10**8, 10**8, c) == pytest.approx(
        c * c * (c * c - 1) ** 2 * lam.sum(), rel=1e-5)


def test_lsa_forward_matches_effective_B():
    rng = np.random.default_rng(9)
    d, M, P, N = 3, 7, 50, 10
    lam = np.array([0.5, 1.0, 2.0])
    x, y, xq, _ = sample_prompts(rng, P, M, lam)
    W_pv = rng.standard_normal((d + 1, d + 1))
    W_kq = rng.standard_normal((d + 1, d + 1))
    W_pv[d, :d] = 0.0   # w21^{PV} = 0
    W_kq[d, :d] = 0.0   # w21^{KQ} = 0
    B = lsa.effective_B(W_pv, W_kq)
    assert np.allclose(lsa.lsa_forward(W_pv, W_kq, x, y, xq), lsa.lsa_predict(B, x, y, xq))
    # Not w22·W11 (without the transpose) for a non-symmetric W11.
    assert not np.allclose(lsa.lsa_forward(W_pv, W_kq, x, y, xq),
                           lsa.lsa_predict(W_pv[d, d] * W_kq[:d, :d], x, y, xq))
    # ρ = N instead of M rescales by M/N.
    assert np.allclose(lsa.lsa_forward(W_pv, W_kq, x, y, xq, rho=N),
                       M / N * lsa.lsa_predict(B, x, y, xq))
    # Full E-matrix computation for one prompt.
    E = np.zeros((d + 1, M + 1))
    E[:d, :M], E[:d, M], E[d, :M] = x[0].T, xq[0], y[0]
    f = E + W_pv @ E @ (E.T @ W_kq @ E) / M
    assert f[d, M] == pytest.approx(lsa.lsa_forward(W_pv, W_kq, x[0], y[0], xq[0]))
    W_pv_s, W_kq_s = lsa.zfb_optimum_weights(lam, N)
    assert np.allclose(lsa.effective_B(W_pv_s, W_kq_s), lsa.optimal_B(lam, N))
    assert lsa.lsa_predict(B, x[0], y[0], xq[0]) == pytest.approx(lsa.lsa_predict(B, x, y, xq)[0])


# ----------------------------------------------------------------------------- random covariance

def test_random_cov_gamma_lam2_monte_carlo():
    rng = np.random.default_rng(10)
    d, N, P, s = 4, 6, 300_000, 1.5
    lam = s * rng.exponential(size=(P, d))
    g = (1 + 1 / N) * lam + lam.sum(1, keepdims=True) / N
    closed = lsa.random_cov_gamma_lam2(d, N, scale=s)
    assert np.allclose(closed, s**3 * (6 + (2 * d + 10) / N))
    assert_mc_mean(g * lam**2, closed)
    # Ignoring the correlation of tr(Λ) with λ_i (E[T]E[λ²]) would be wrong:
    wrong = (1 + 1 / N) * 6 * s**3 + d * s * 2 * s**2 / N
    assert abs((g * lam**2).mean() - wrong) > 0.05 * wrong
    B = lsa.random_cov_optimal_B(d, N, scale=s)
    assert np.allclose(B, np.eye(d) / (s * (3 + (d + 5) / N)))


def test_random_cov_risk_coefficients_monte_carlo():
    """random_cov_risk(E_ij) - random_cov_risk(0) = K_ij - 2 m2 δ_ij with
    K_ij = E[λ_i λ_j (Γ_M(Λ)Λ)_jj]; check every K_ij (diagonal and off-diagonal) by sampling λ."""
    rng = np.random.default_rng(14)
    d, M, P, s = 4, 3, 300_000, 1.5
    lam = s * rng.exponential(size=(P, d))
    g = (1 + 1 / M) * lam + lam.sum(1, keepdims=True) / M
    samples = lam[:, :, None] * (lam * g)[:, None, :]          # [p, i, j] = λ_i λ_j g_j
    r0 = lsa.random_cov_risk(np.zeros((d, d)), d, M, scale=s)
    K = np.zeros((d, d))
    for i in range(d):
        for j in range(d):
            E = np.zeros((d, d))
            E[i, j] = 1.0
            K[i, j] = lsa.random_cov_risk(E, d, M, scale=s) - r0 + (2 * 2 * s**2 if i == j else 0)
    assert_mc_mean(samples, K)
    assert r0 == pytest.approx(d * s)
    # case (b): the coefficient of tr(Λ_q B Bᵀ) is E[(Γ_M(Λ)Λ)_jj]
    Lq = np.ones(d)
    Dg = lsa.random_cov_risk(np.eye(d), d, M, scale=s, Lam_query=Lq) + 2 * s * d - d
    assert_mc_mean((lam * g).ravel(), Dg / d)


@pytest.mark.parametrize("which", ["optimum", "random_B"])
def test_random_cov_risk_and_slope_monte_carlo(which):
    rng = np.random.default_rng({"optimum": 11, "random_B": 12}[which])
    d, N, M, P, s = 3, 8, 6, 200_000, 2.0
    B = lsa.random_cov_optimal_B(d, N)   # trained on Exp(1); tested on s·Exp(1)
    if which == "random_B":
        B = B + 0.2 * rng.standard_normal((d, d))
    lam = s * rng.exponential(size=(P, d))
    # (a) in-distribution query: x_q ~ N(0, Λ_new)
    x, y, xq, yq = sample_prompts(rng, P, M, lam)
    yh = lsa.lsa_predict(B, x, y, xq)
    assert_mc_mean((yh - yq) ** 2, lsa.random_cov_risk(B, d, M, scale=s))
    assert_mc_ratio(yh * yq, yq**2, lsa.random_cov_slope(B, d, scale=s))
    # (b) query independent of Λ_new: x_q ~ N(0, I)
    Lq = np.ones(d)
    x, y, xq, yq = sample_prompts(rng, P, M, lam, query=Lq)
    yh = lsa.lsa_predict(B, x, y, xq)
    assert_mc_mean((yh - yq) ** 2, lsa.random_cov_risk(B, d, M, scale=s, Lam_query=Lq))
    assert_mc_ratio(yh * yq, yq**2, lsa.random_cov_slope(B, d, scale=s, Lam_query=Lq))


def test_random_cov_minimizer():
    rng = np.random.default_rng(13)
    d, N = 3, 8
    Bs = lsa.random_cov_optimal_B(d, N)
    r0 = lsa.random_cov_risk(Bs, d, N)
    h = 1e-5
    for i in range(d):
        for j in range(d):
            E = np.zeros((d, d))
            E[i, j] = h
            fd = (lsa.random_cov_risk(Bs + E, d, N) - lsa.random_cov_risk(Bs - E, d, N)) / (2 * h)
            assert abs(fd) < 1e-7
    for _ in range(20):
        assert lsa.random_cov_risk(Bs + 1e-3 * rng.standard_normal((d, d)), d, N) > r0
    # Monte Carlo: least squares over B on prompts with random covariances recovers Bs.
    P = 200_000
    lam = rng.exponential(size=(P, d))
    x, y, xq, yq = sample_prompts(rng, P, N, lam)
    Bhat, se = ls_fit_B(x, y, xq, yq)
    assert np.all(np.abs(Bhat - Bs) / se < K_SE), (Bhat, Bs, se)


def test_random_cov_slope_limits():
    d = 5
    for N in (10, 100):
        B = lsa.random_cov_optimal_B(d, N)
        assert lsa.random_cov_slope(B, d) == pytest.approx(2 / (3 + (d + 5) / N))
        assert lsa.random_cov_slope(B, d, Lam_query=np.ones(d)) == pytest.approx(1 / (3 + (d + 5) / N))
        # test covariance scaled by c (ZFB: c·diag(λ)) scales both by c
        assert lsa.random_cov_slope(B, d, scale=4.0, Lam_query=np.ones(d)) == pytest.approx(
            4 / (3 + (d + 5) / N))
    B = lsa.random_cov_optimal_B(d, 10**9)
    assert lsa.random_cov_slope(B, d) == pytest.approx(2 / 3)
    assert lsa.random_cov_slope(B, d, Lam_query=np.ones(d)) == pytest.approx(1 / 3)
    # general moments: a fixed covariance (λ ≡ 1) gives back Γ^{-1}
    assert np.allclose(lsa.random_cov_optimal_B(d, 7, moments=(1, 1, 1)), lsa.optimal_B(np.ones(d), 7))


# ----------------------------------------------------------------------------- full (rotated) covariance
# Every formula the pipeline uses with a non-diagonal, anisotropic Λ = R diag(λ) Rᵀ (icl.data),
# against Monte Carlo on prompts drawn by the project's own samplers, within K_SE standard errors.

ROT = {"kind": "gaussian", "d": 3, "covariance": {"eigenvalues": [2.5, 1.0, 0.3], "rotation_seed": 4}}


def test_rotated_covariance_sampler():
    from icl.data import covariance, eigenvalues, rng, sample_tokens
    Lam = covariance(ROT)
    assert np.allclose(np.linalg.eigvalsh(Lam), sorted(eigenvalues(ROT)))
    assert np.abs(Lam - np.diag(np.diag(Lam))).max() > 0.2          # really non-diagonal
    x, _ = sample_tokens(ROT, None, 100_000, 2, rng(0, 1))
    outer = np.einsum("pi,pj->pij", x[:, 0], x[:, 0])
    assert_mc_mean(outer, Lam)
    # the rotation is part of the distribution: the same for every run seed, another for another rotation_seed
    assert np.allclose(covariance(ROT), Lam)
    other = {**ROT, "covariance": {**ROT["covariance"], "rotation_seed": 5}}
    assert not np.allclose(covariance(other), Lam)
    assert np.allclose(covariance({**ROT, "covariance": [2.5, 1.0, 0.3]}), np.diag([2.5, 1.0, 0.3]))


def test_rotated_minimizer_is_full_gamma_inverse():
    """Least squares over B on rotated-Λ prompts finds Γ⁻¹ of the full matrix, not Λ⁻¹, nor Γ⁻¹
    of the eigenvalues alone (the rotation forgotten), nor its diagonal."""
    from icl.data import covariance, rng, sample_tokens
    from icl.tasks import sample_labels
    N, P = 5, 200_000
    Lam = covariance(ROT)
    g = rng(1, 2)
    x, _ = sample_tokens(ROT, None, P, N + 1, g)
    y = sample_labels({"kind": "linear"}, x, g)
    Bhat, se = ls_fit_B(x[:, :-1], y[:, :-1], x[:, -1], y[:, -1])
    Gi = lsa.optimal_B(Lam, N)
    assert np.all(np.abs(Bhat - Gi) / se < K_SE), (Bhat, Gi, se)
    for wrong in (np.linalg.inv(Lam), lsa.optimal_B([2.5, 1.0, 0.3], N), np.diag(np.diag(Gi))):
        assert np.max(np.abs(Bhat - wrong) / se) > 10


@pytest.mark.parametrize("kind,c", [("none", None), ("scale", 2.0), ("query_only", 2.0),
                                    ("random_covariance", 1.5), ("random_covariance_indep_query", 1.0)])
def test_rotated_shift_theory_monte_carlo(kind, c):
    """icl.evaluate.shifts.theory_cell at the optimum and at an arbitrary non-symmetric B,
    against the MSE and slope of x_qᵀ B m̂ on the evaluation prompts of that shift."""
    from icl.data import covariance
    from icl.evaluate.cells import _stats, eval_prompts
    from icl.evaluate.shifts import theory_cell
    M = 6
    spec = {"tokens": ROT, "task": {"kind": "linear"}, "prompts": {"N": 8}, "seed": 3,
            "evaluate": {"prompts": 200_000}}
    x, y, _ = eval_prompts(spec, None, kind, c, M, 11)
    Gi = lsa.optimal_B(covariance(ROT), 8)
    B = Gi + 0.3 * np.random.default_rng(0).standard_normal((3, 3))     # not symmetric
    for Bm in (None, B):
        pred = lsa.lsa_predict(Gi if Bm is None else Bm, x[:, :-1], y[:, :-1], x[:, -1])
        mse, se, slope, slope_se = _stats(pred[None], y[None, :, -1])
        th_mse, th_slope = theory_cell(spec, kind, 1.0 if c is None else c, M, B=Bm)
        assert abs(mse[0] - th_mse) < K_SE * se[0], (Bm is None, mse[0], th_mse)
        assert abs(slope[0] - th_slope) < K_SE * slope_se[0], (Bm is None, slope[0], th_slope)


def test_rotated_thm42_and_closed_forms():
    from icl.data import covariance
    Lam = covariance(ROT)
    rng = np.random.default_rng(15)
    N, M, P = 12, 5, 200_000
    w = np.array([1.0, -0.5, 0.8])
    x, y, xq, yq = sample_prompts(rng, P, M, Lam, w=w)
    Gi = lsa.optimal_B(Lam, N)
    e2 = (lsa.lsa_predict(Gi, x, y, xq) - yq) ** 2
    thm = lsa.zfb_thm42_error(Lam, N, M, w)
    assert thm == pytest.approx(lsa.risk(Gi, Lam, M, w_cov=np.outer(w, w)))
    assert_mc_mean(e2, thm)
    # E_w over N(0, I) of Thm 4.2 is optimum_risk; its closed form holds for a full Λ
    assert sum(lsa.zfb_thm42_error(Lam, N, M, e) for e in np.eye(3)) == pytest.approx(lsa.optimum_risk(Lam, N, M))
    t, I = np.trace(Lam), np.eye(3)
    closed = (np.trace((Lam @ Lam + t * Lam) @ Gi @ Gi @ Lam) / M
              + np.trace((Lam + t * I) @ (Lam + t * I) @ Gi @ Gi @ Lam) / N**2)
    assert lsa.optimum_risk(Lam, N, M) == pytest.approx(closed)
    assert lsa.optimum_risk(Lam, N, N) == pytest.approx(t - np.trace(Lam @ Lam @ Gi))
    assert lsa.scaled_slope(Lam, N, 2.0) == pytest.approx(4 * np.trace(Gi @ Lam @ Lam) / t)


# ----------------------------------------------------------------------------- excess risk (zfb.optimum)

def test_risk_many_is_risk_matrix_by_matrix():
    rng = np.random.default_rng(21)
    d, M = 3, 7
    Lam = rand_spd(rng, d)
    Bs = rng.standard_normal((5, 2, d, d))
    np.testing.assert_allclose(lsa.risk_many(Bs, Lam, M), [[lsa.risk(b, Lam, M) for b in row] for row in Bs], rtol=1e-12)
    np.testing.assert_allclose(lsa.random_cov_risk_many(Bs, d, M, scale=1.5),
                               [[lsa.random_cov_risk(b, d, M, scale=1.5) for b in row] for row in Bs], rtol=1e-12)


@pytest.mark.parametrize("law", ["fixed", "random"])
def test_excess_ratio_against_monte_carlo(law):
    """zfb.optimum's statistic, (R(B̄) − R(Γ⁻¹))/(R(Λ⁻¹) − R(Γ⁻¹)) at M = N, against the same ratio of
    squared errors on common Monte Carlo prompts (400k, delta method, within K_SE standard errors):
    B̄ a third of the way from the optimum to its limit plus an off-optimum perturbation, as a
    trained LSA's time-averaged matrix. Along B* + t(B∞ − B*) the ratio is t² exactly."""
    rng = np.random.default_rng({"fixed": 31, "random": 32}[law])
    d, N, P = 3, 8, 400_000
    if law == "fixed":
        Lam = rand_spd(rng, d)
        opt, lim = lsa.optimal_B(Lam, N), np.linalg.inv(Lam)
        risk_fn = lambda Bs: lsa.risk_many(Bs, Lam, N)                          # noqa: E731
        x, y, xq, yq = sample_prompts(rng, P, N, Lam)
    else:
        opt, lim = lsa.random_cov_optimal_B(d, N), np.eye(d) / 3.0
        risk_fn = lambda Bs: lsa.random_cov_risk_many(Bs, d, N)                 # noqa: E731
        lam = rng.standard_exponential((P, 1, d))
        x = rng.standard_normal((P, N, d)) * np.sqrt(lam)
        xq = rng.standard_normal((P, d)) * np.sqrt(lam[:, 0])
        w = rng.standard_normal((P, d))
        y, yq = np.einsum("pmd,pd->pm", x, w), np.einsum("pd,pd->p", xq, w)
    B = opt + (lim - opt) / 3 + 0.05 * np.linalg.norm(opt) * rng.standard_normal((d, d))
    err = {k: (lsa.lsa_predict(b, x, y, xq) - yq) ** 2 for k, b in (("B", B), ("opt", opt), ("lim", lim))}
    expected = float(lsa.excess_ratio(B, opt, lim, risk_fn))
    assert 0.05 < expected < 0.5
    assert_mc_ratio(err["B"] - err["opt"], err["lim"] - err["opt"], expected)
    for t in (0.3, 0.8):
        assert float(lsa.excess_ratio(opt + t * (lim - opt), opt, lim, risk_fn)) == pytest.approx(t * t, rel=1e-9)
    # a wrong excess (the risk at the wrong length, 2N) is caught by the same Monte Carlo
    at_2N = (lambda Bs: lsa.risk_many(Bs, Lam, 2 * N)) if law == "fixed" else \
        (lambda Bs: lsa.random_cov_risk_many(Bs, d, 2 * N))
    wrong = float(lsa.excess_ratio(B, opt, lim, at_2N))
    with pytest.raises(AssertionError):
        assert_mc_ratio(err["B"] - err["opt"], err["lim"] - err["opt"], wrong)
