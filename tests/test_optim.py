"""The vectorized optimizers against torch.optim on each run separately."""
import torch

from icl.train.optim import GD, Adam


def _check(ours_cls, ref_cls, lrs, compiled=False, tol=1e-12):
    g = torch.Generator().manual_seed(0)
    R = len(lrs)
    p0 = torch.randn(R, 3, 4, generator=g, dtype=torch.float64)
    grads = [torch.randn(R, 3, 4, generator=g, dtype=torch.float64) for _ in range(5)]
    params = {"w": p0.clone()}
    opt = ours_cls(torch.tensor(lrs, dtype=torch.float64))
    if compiled:
        opt.compile()
    for gr in grads:
        opt.step(params, {"w": gr}, torch.ones(R, dtype=torch.bool))
    for r, lr in enumerate(lrs):
        w = p0[r].clone().requires_grad_(True)
        ref = ref_cls([w], lr=lr)
        for gr in grads:
            w.grad = gr[r].clone()
            ref.step()
        torch.testing.assert_close(params["w"][r], w.detach(), rtol=tol, atol=tol)


def test_gd_matches_torch_sgd():
    _check(GD, torch.optim.SGD, [0.1, 0.5, 2.0])


def test_adam_matches_torch_adam():
    _check(Adam, torch.optim.Adam, [1e-3, 1e-2, 0.3])


def test_inactive_runs_do_not_move():
    params = {"w": torch.ones(2, 3)}
    opt = Adam(torch.tensor([0.1, 0.1]))
    opt.step(params, {"w": torch.ones(2, 3)}, torch.tensor([True, False]))
    assert torch.all(params["w"][1] == 1.0) and torch.all(params["w"][0] < 1.0)


def test_the_compiled_updates_match_torch():
    """train.compile fuses each update into one kernel, Adam's bias corrections then from a step
    count kept on the device (float64 there, float32 in the update: a few ulp of float64 apart)."""
    _check(GD, torch.optim.SGD, [0.1, 0.5, 2.0], compiled=True)
    _check(Adam, torch.optim.Adam, [1e-3, 1e-2, 0.3], compiled=True, tol=1e-7)


def test_a_step_reads_the_parameters_it_left_without_copying_them():
    """After a step the parameters are views of one flat tensor, which the next step takes as it is;
    a dict that no longer holds those views (a resume, a caller's own tensors) is flattened anew."""
    params = {"a": torch.ones(2, 3), "b": torch.zeros(2, 2, 2)}
    opt = Adam(torch.tensor([0.1, 0.2]))
    live = torch.tensor([True, True])
    opt.step(params, {"a": torch.ones(2, 3), "b": torch.ones(2, 2, 2)}, live)
    flat = opt.flat_params(params)
    assert params["a"].data_ptr() == flat.data_ptr() and flat.shape == (2, 7)
    params["b"] = torch.full((2, 2, 2), 5.0)
    again = opt.flat_params(params)
    assert again.data_ptr() != flat.data_ptr() and torch.all(again[:, 3:] == 5.0)
