"""Optimizers over an ensemble: one step for all runs, a learning rate per run, and a mask that
freezes runs that diverged so they cannot poison anything else (they share no parameters, but
NaNs in a frozen run would still cost time and hide where it went wrong)."""
from __future__ import annotations

import math

import torch

from icl.models.compiled import guarded


def _per_run(v: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    return v.view(-1, *([1] * (like.dim() - 1)))


def flatten(tensors) -> torch.Tensor:
    """Every run's tensors of a dict (name -> (R, ...)) side by side, (R, total): one tensor, so an
    update is a dozen operations whatever the number of parameters (each a kernel launch on a GPU).
    A tensor passes through."""
    if isinstance(tensors, torch.Tensor):
        return tensors
    return torch.cat([t.reshape(t.shape[0], -1) for t in tensors.values()], 1)


def unflatten(flat: torch.Tensor, like: dict) -> dict:
    """flatten's inverse: views of `flat` with the names and shapes of `like`."""
    parts = flat.split([t[0].numel() for t in like.values()], 1)
    return {k: part.view(t.shape) for (k, t), part in zip(like.items(), parts)}


def gd_update(p, g, lr, mask):
    """One GD step of the runs in `mask`: p − lr·g (flat (R, total); lr (R, 1))."""
    return torch.where(mask, p - lr * g, p)


def adam_update(p, g, m, v, lr, mask, c1, c2, b1: float, b2: float, eps: float):
    """One Adam step of the runs in `mask` (flat (R, total)), bias corrections c1, c2 given: new p, m, v."""
    m1 = m.mul(b1).add(g, alpha=1 - b1)
    v1 = v.mul(b2).addcmul(g, g, value=1 - b2)
    upd = p - lr / c1 * m1 / ((v1 / c2).sqrt() + eps)
    return torch.where(mask, upd, p), torch.where(mask, m1, m), torch.where(mask, v1, v)


class _Flat:
    """What GD and Adam share: the parameters kept as views of one flat (R, total) tensor, so a step
    reads them without copying (flatten's copy only where the dict no longer holds those views:
    a first step, a resume), and the update compiled into one fused kernel with the step (`compile`:
    on a GPU a dozen passes over the parameters, moments and gradients become one)."""
    update = None           # the kind's update function (the eager one unless compiled)

    def __init__(self):
        self._flat, self._views = None, {}
        self._fused = self._failed = None

    def compile(self, failed=None) -> None:
        """The update through torch.compile; one that raises calls `failed(error)` and is made
        again eagerly (icl.models.compiled)."""
        self._fused, self._failed = torch.compile(type(self).update, dynamic=False), failed

    def uncompile(self) -> None:
        self._fused = self._failed = None

    def made(self, update):
        """update(), through the compiled update while there is one (see compile)."""
        return guarded(update, self._failed)

    def flat_params(self, params: dict) -> torch.Tensor:
        if self._flat is not None and len(params) == len(self._views) and all(
                params.get(k) is v for k, v in self._views.items()):
            return self._flat
        return flatten(params)

    def keep(self, params: dict, flat: torch.Tensor) -> None:
        self._views = unflatten(flat, params)
        params.update(self._views)
        self._flat = flat


class GD(_Flat):
    update = staticmethod(gd_update)

    def __init__(self, lr: torch.Tensor):
        super().__init__()
        self.lr = lr

    def state(self) -> dict:
        return {}

    def load(self, state: dict) -> None:
        pass

    def step(self, params: dict, grads, active: torch.Tensor, lr: torch.Tensor | None = None) -> None:
        """`grads`: a dict like params, or already flattened (R, total)."""
        lr = (self.lr if lr is None else lr).unsqueeze(1)
        p, g = self.flat_params(params), flatten(grads)
        self.keep(params, self.made(lambda: (self._fused or gd_update)(p, g, lr, active.unsqueeze(1))))


class Adam(_Flat):
    """torch.optim.Adam's update (no weight decay), vectorized over runs, on all of a run's
    parameters at once (flattened; the moments are kept flat)."""
    update = staticmethod(adam_update)

    def __init__(self, lr: torch.Tensor, betas=(0.9, 0.999), eps=1e-8):
        super().__init__()
        self.lr, self.b1, self.b2, self.eps = lr, betas[0], betas[1], eps
        self.t = 0
        self.m = self.v = None

    def state(self) -> dict:
        return {"t": self.t, "m": self.m, "v": self.v}

    def load(self, state: dict) -> None:
        self.t, self.m, self.v = state["t"], state["m"], state["v"]

    def step(self, params: dict, grads, active: torch.Tensor, lr: torch.Tensor | None = None) -> None:
        """`grads`: a dict like params, or already flattened (R, total)."""
        lr = (self.lr if lr is None else lr).unsqueeze(1)
        p, g = self.flat_params(params), flatten(grads)
        if self.m is None:
            self.m, self.v = torch.zeros_like(p), torch.zeros_like(p)
        t = self.t + 1              # counted once the update is made (a compile that fails leaves the state as it was)

        def update():
            if self._fused is None:     # the bias corrections as Python numbers, as torch.optim.Adam
                c1, c2, fn = 1 - self.b1 ** t, 1 - self.b2 ** t, adam_update
            else:                       # as tensors filled on the device: a number that changes every step would recompile
                tt = torch.full((), float(t), dtype=torch.float64, device=p.device)
                c1, c2, fn = (1 - self.b1 ** tt).float(), (1 - self.b2 ** tt).float(), self._fused
            return fn(p, g, self.m, self.v, lr, active.unsqueeze(1), c1, c2, self.b1, self.b2, self.eps)
        new, self.m, self.v = self.made(update)
        self.t = t
        self.keep(params, new)


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

    def __init__(self, lrs, train, steps_per_epoch: int):
        """`train`: the shard's icl.settings.Train."""
        self.lrs, self.warmup, self.schedule = lrs, int(train.warmup), train.schedule
        self.total = int(train.epochs) * steps_per_epoch

    def at(self, step: int):
        if self.warmup == 0 and self.schedule == "constant":
            return self.lrs
        return self.lrs * lr_factor(step, self.total, self.warmup, self.schedule)


def clip_grads(grads, clip: float):
    """Each run's gradient scaled to a norm of at most `clip` (its norm over all its parameters),
    as torch.nn.utils.clip_grad_norm_ on that run alone: factor clip / (norm + 1e-6), capped at 1.
    One run's large gradient never scales another's. `grads`: a dict (returned as one) or flat."""
    g = flatten(grads)
    coef = (clip / (g.double().pow(2).sum(1).sqrt() + 1e-6)).clamp(max=1.0).to(g.dtype).unsqueeze(1)
    return unflatten(g * coef, grads) if isinstance(grads, dict) else g * coef
