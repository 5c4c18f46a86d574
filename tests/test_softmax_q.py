"""softmax_q: the analytic gradient against autograd and against central finite differences."""
import numpy as np
import torch

from icl.models import SoftmaxQ


def _batch(R=2, B=5, N=7, d=4, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(R, B, N + 1, d, generator=g, dtype=torch.float64)
    y = torch.randn(R, B, N + 1, generator=g, dtype=torch.float64)
    Q = 0.3 * torch.randn(R, d, d, generator=g, dtype=torch.float64)
    return x, y, Q


def _loss(Q, x, y):
    m = SoftmaxQ({}, x.shape[-1])
    pred, _ = m.forward({"Q": Q}, x, y)
    return 0.5 * ((pred - y[:, :, -1]) ** 2).mean(1)


def test_gradient_matches_autograd():
    x, y, Q = _batch()
    loss, grads = SoftmaxQ({}, 4).loss_and_grads({"Q": Q}, x, y)
    Qa = Q.clone().requires_grad_(True)
    (ga,) = torch.autograd.grad(_loss(Qa, x, y).sum(), Qa)
    assert torch.allclose(loss, _loss(Q, x, y))
    assert torch.allclose(grads["Q"], ga, rtol=1e-10, atol=1e-12)


def test_gradient_matches_finite_differences():
    x, y, Q = _batch(R=1, seed=3)
    _, grads = SoftmaxQ({}, 4).loss_and_grads({"Q": Q}, x, y)
    h = 1e-6
    fd = np.zeros((4, 4))
    for i in range(4):
        for j in range(4):
            E = torch.zeros_like(Q)
            E[0, i, j] = h
            fd[i, j] = (_loss(Q + E, x, y) - _loss(Q - E, x, y)).item() / (2 * h)
    np.testing.assert_allclose(grads["Q"][0].numpy(), fd, rtol=1e-6, atol=1e-9)


def test_zero_init_gives_uniform_attention():
    x, y, _ = _batch()
    m = SoftmaxQ({}, 4)
    p = m.init([0, 1], ["a", "a"], "cpu", torch.float64)
    pred, a = m.forward(p, x, y)
    assert torch.allclose(a, torch.full_like(a, 1 / 7))
    assert torch.allclose(pred, y[:, :, :-1].mean(-1))
