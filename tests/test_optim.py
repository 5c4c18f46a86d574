"""The vectorized optimizers against torch.optim on each run separately."""
import torch

from icl.optim import GD, Adam


def _check(ours_cls, ref_cls, lrs):
    g = torch.Generator().manual_seed(0)
    R = len(lrs)
    p0 = torch.randn(R, 3, 4, generator=g, dtype=torch.float64)
    grads = [torch.randn(R, 3, 4, generator=g, dtype=torch.float64) for _ in range(5)]
    params = {"w": p0.clone()}
    opt = ours_cls(torch.tensor(lrs, dtype=torch.float64))
    for gr in grads:
        opt.step(params, {"w": gr}, torch.ones(R, dtype=torch.bool))
    for r, lr in enumerate(lrs):
        w = p0[r].clone().requires_grad_(True)
        ref = ref_cls([w], lr=lr)
        for gr in grads:
            w.grad = gr[r].clone()
            ref.step()
        torch.testing.assert_close(params["w"][r], w.detach(), rtol=1e-12, atol=1e-12)


def test_gd_matches_torch_sgd():
    _check(GD, torch.optim.SGD, [0.1, 0.5, 2.0])


def test_adam_matches_torch_adam():
    _check(Adam, torch.optim.Adam, [1e-3, 1e-2, 0.3])


def test_inactive_runs_do_not_move():
    params = {"w": torch.ones(2, 3)}
    opt = Adam(torch.tensor([0.1, 0.1]))
    opt.step(params, {"w": torch.ones(2, 3)}, torch.tensor([True, False]))
    assert torch.all(params["w"][1] == 1.0) and torch.all(params["w"][0] < 1.0)
