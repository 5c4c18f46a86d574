"""Optimizers over an ensemble: one step for all runs, a learning rate per run, and a mask that
freezes runs that diverged so they cannot poison anything else (they share no parameters, but
NaNs in a frozen run would still cost time and hide where it went wrong)."""
from __future__ import annotations

import math

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

    def step(self, params: dict, grads: dict, active: torch.Tensor, lr: torch.Tensor | None = None) -> None:
        lr = self.lr if lr is None else lr
        for k, p in params.items():
            upd = p - _per_run(lr, p) * grads[k]
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

    def step(self, params: dict, grads: dict, active: torch.Tensor, lr: torch.Tensor | None = None) -> None:
        lr = self.lr if lr is None else lr
        self.t += 1
        c1, c2 = 1 - self.b1 ** self.t, 1 - self.b2 ** self.t
        for k, p in params.items():
            g = grads[k]
            m = self.m.get(k, torch.zeros_like(p)).mul(self.b1).add(g, alpha=1 - self.b1)
            v = self.v.get(k, torch.zeros_like(p)).mul(self.b2).addcmul(g, g, value=1 - self.b2)
            mask = _per_run(active, p)
            self.m[k] = torch.where(mask, m, self.m.get(k, torch.zeros_like(p)))
            self.v[k] = torch.where(mask, v, self.v.get(k, torch.zeros_like(p)))
            upd = p - _per_run(lr, p) / c1 * m / ((v / c2).sqrt() + self.eps)
            params[k] = torch.where(mask, upd, p)


def build(kind: str, lr: torch.Tensor):
    return {"gd": GD, "adam": Adam}[kind](lr)


# ----------------------------------------------------------------------------- schedules and clipping

SCHEDULES = ("constant", "linear", "cosine")


def lr_factor(step: int, total: int, warmup: int = 0, schedule: str = "constant") -> float:
    """The factor on a run's `lr` at optimisation step `step` (0-based) of `total`, as
    transformers' get_{constant,linear,cosine}_schedule_with_warmup (the anchors' recipes:
    timaeus-research/icl, Raventós et al.): a linear warmup from 0 over `warmup` steps
    (step/warmup), then 1 (constant), or a linear or half-cosine decay that reaches 0 at the
    step after the last."""
    if step < warmup:
        return step / warmup
    if schedule == "constant":
        return 1.0
    progress = (step - warmup) / max(1, total - warmup)
    if schedule == "linear":
        return max(0.0, 1.0 - progress)
    if schedule == "cosine":
        return max(0.0, 0.5 * (1.0 + math.cos(math.pi * progress)))
    raise ValueError(f"train.schedule: unknown schedule {schedule!r}; allowed: {', '.join(SCHEDULES)}")


class Schedule:
    """Every run's learning rate at each step: its own `lr` (swept per run) times lr_factor of the
    shard's `train` settings (warmup and schedule are part of a shard's shape: one per shard)."""

    def __init__(self, lrs, train: dict, steps_per_epoch: int):
        self.lrs, self.warmup, self.schedule = lrs, int(train.get("warmup", 0)), train.get("schedule", "constant")
        self.total = int(train["epochs"]) * steps_per_epoch

    def at(self, step: int):
        if self.warmup == 0 and self.schedule == "constant":
            return self.lrs
        return self.lrs * lr_factor(step, self.total, self.warmup, self.schedule)


def clip_grads(grads: dict, clip: float) -> dict:
    """Each run's gradient scaled to a norm of at most `clip` (its norm over all its parameters),
    as torch.nn.utils.clip_grad_norm_ on that run alone: factor clip / (norm + 1e-6), capped at 1.
    One run's large gradient never scales another's."""
    norm = sum(g.flatten(1).double().pow(2).sum(1) for g in grads.values()).sqrt()
    coef = (clip / (norm + 1e-6)).clamp(max=1.0)
    return {k: g * _per_run(coef.to(g.dtype), g) for k, g in grads.items()}
