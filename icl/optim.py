"""Optimizers over an ensemble: one step for all runs, a learning rate per run, and a mask that
freezes runs that diverged so they cannot poison anything else (they share no parameters, but
NaNs in a frozen run would still cost time and hide where it went wrong)."""
from __future__ import annotations

import torch


def _per_run(v: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    return v.view(-1, *([1] * (like.dim() - 1)))


class GD:
    def __init__(self, lr: torch.Tensor):
        self.lr = lr

    def state(self) -> dict:
        return {}

    def load(self, state: dict) -> None:
        pass

    def step(self, params: dict, grads: dict, active: torch.Tensor) -> None:
        for k, p in params.items():
            upd = p - _per_run(self.lr, p) * grads[k]
            params[k] = torch.where(_per_run(active, p), upd, p)


class Adam:
    """torch.optim.Adam's update (no weight decay), vectorized over runs."""

    def __init__(self, lr: torch.Tensor, betas=(0.9, 0.999), eps=1e-8):
        self.lr, self.b1, self.b2, self.eps = lr, betas[0], betas[1], eps
        self.t = 0
        self.m: dict = {}
        self.v: dict = {}

    def state(self) -> dict:
        return {"t": self.t, "m": self.m, "v": self.v}

    def load(self, state: dict) -> None:
        self.t, self.m, self.v = state["t"], state["m"], state["v"]

    def step(self, params: dict, grads: dict, active: torch.Tensor) -> None:
        self.t += 1
        c1, c2 = 1 - self.b1 ** self.t, 1 - self.b2 ** self.t
        for k, p in params.items():
            g = grads[k]
            m = self.m.get(k, torch.zeros_like(p)).mul(self.b1).add(g, alpha=1 - self.b1)
            v = self.v.get(k, torch.zeros_like(p)).mul(self.b2).addcmul(g, g, value=1 - self.b2)
            mask = _per_run(active, p)
            self.m[k] = torch.where(mask, m, self.m.get(k, torch.zeros_like(p)))
            self.v[k] = torch.where(mask, v, self.v.get(k, torch.zeros_like(p)))
            upd = p - _per_run(self.lr, p) / c1 * m / ((v / c2).sqrt() + self.eps)
            params[k] = torch.where(mask, upd, p)


def build(kind: str, lr: torch.Tensor):
    return {"gd": GD, "adam": Adam}[kind](lr)
