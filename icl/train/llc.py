"""The local learning coefficient (LLC) of every run of an ensemble at once, by SGLD around its weights.

Singular learning theory measures how degenerate the loss is around a point w*: its learning
coefficient λ, estimated (Lau et al. 2023; the `devinterp` library; Hoogland et al. 2024, "The
developmental landscape of in-context learning") as

    λ̂(w*) = nβ · (E_w[L_n(w)] − L_n(w*)),

the expectation over the tempered posterior localised at w*, ∝ exp(−nβ L_n(w) − γ/2 |w − w*|²),
sampled by SGLD:

    w ← w − ε/2 · (nβ ∇L_m(w) + γ (w − w*)) + √ε · ξ,     ξ ~ N(0, I),

L_m the loss on a minibatch of m of the n prompts. This is devinterp's SGLD step (its optimizer
`SGLD`, noise_level 1, no weight decay) and its estimator (`LLCEstimator`: a chain's draws are the
minibatch losses at the weights each step starts from, after `burnin` steps; λ̂ per chain from their
mean; the estimate the mean over chains, its standard error their spread over √chains). L_n(w*)
is the loss on all n prompts (devinterp averages a few minibatches: the same expectation).

Here every run of a shard samples its own chains around its own weights in one batched step:
row c·R + r is chain c of run r. Its noise and minibatches come from the run's counter-based stream
(icl.train.streams) keyed by its seed, the epoch and the step, so a run's estimate does not depend on the
shard or chunk it trains in, nor on the device.

An estimate is reported only where its chains pass the check (`estimate`): every loss finite, the
draws stationary (burn-in reached), and λ̂ not negative beyond its error (a negative estimate means
the chains found lower loss near w*: w* is not near a local minimum, so λ̂ measures nothing).
"""
from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np
import torch

from icl.train import optim
from icl.models import Batch
from icl.train.streams import Stream

STREAM_LLC = 1 << 40          # + epoch · STEPS + step: the SGLD draws (far from icl.data's streams)
STEPS = 1 << 20               # at most this many SGLD steps an estimate
NOISE, MINIBATCH = 16, 4096   # purposes (+ chain): the noise ξ and the minibatch indices

# the chain check: the draws' second half against their first, and the estimate's sign
DRIFT_Z = 4.0                 # |z| of the halves' difference past which the chains are not stationary ...
DRIFT_SHARE = 0.2             # ... when it also moves λ̂ by this share of its value
NEGATIVE_Z = 2.0              # λ̂ below −NEGATIVE_Z standard errors: not at a local minimum
DIVERGED = 100.0              # a draw with nβ(L − L(w*)) past this many times the parameter count: diverged
                              # (at equilibrium its mean is λ ≤ d/2; a larger one is a step that amplifies)


def default_nbeta(m: int) -> float:
    """devinterp's default inverse temperature nβ for a minibatch of m: m / log m."""
    return m / math.log(m) if m > 1 else 1.0


class Chains(NamedTuple):
    """What SGLD around each run's weights gave: `draws` (R, C, draws) the chains' losses, `init`
    (R,) L_n(w*), `per_chain` (R, C) each chain's λ̂, `llc` and `se` (R,) their mean and standard
    error, `drift_z` (R,) the stationarity statistic and `status` (R,) int (icl.tables.measures.LLC_STATUS)."""
    draws: np.ndarray
    init: np.ndarray
    per_chain: np.ndarray
    llc: np.ndarray
    se: np.ndarray
    drift_z: np.ndarray
    status: np.ndarray


def sample(grad_fn_for, w0: torch.Tensor, init: torch.Tensor, n: int, s, seeds: torch.Tensor, epoch: int) -> Chains:
    """SGLD chains around every run's weights, in the passes of `s.passes()`: `w0` (R, P) flat weights,
    `init` (R,) L_n(w0), `n` the prompts L_n is over, `s` the settings (icl.settings.LLC), `seeds`
    (R,) int64 the runs' seeds on w0's device, `epoch` the checkpoint's (it keys the draws).
    `grad_fn_for(C)` gives the grad_fn of a pass of C chains: `grad_fn(w, idx)`, the minibatch loss
    (C·R,) and its gradient (C·R, P) at weights w (C·R, P), idx (C·R, m) the prompts of each row's
    minibatch (None when m = n: every prompt, every step)."""
    parts = [chain_losses(grad_fn_for(len(cs)), w0, n, s, seeds, epoch, cs) for cs in s.passes()]
    return estimate(np.concatenate(parts, axis=1), init.detach().double().cpu().numpy(), nbeta_of(s, n), w0.shape[1])


def nbeta_of(s, n: int) -> float:
    return s.nbeta or default_nbeta(s.minibatch(n))


def chain_losses(grad_fn, w0: torch.Tensor, n: int, s, seeds: torch.Tensor, epoch: int, chains: range) -> np.ndarray:
    """The draws' losses (R, len(chains), draws) of chains `chains` (their indices key their noise
    and minibatches, so a chain's draws do not depend on which chains run beside it)."""
    R, P = w0.shape
    C = len(chains)
    m = s.minibatch(n)
    nbeta, eps = nbeta_of(s, n), s.epsilon
    center = w0.repeat(C, 1)
    w = center.clone()
    losses = torch.empty(C, R, s.draws, dtype=torch.float64, device=w0.device)
    for t in range(s.burnin + s.draws):
        stream = Stream(seeds, STREAM_LLC + epoch * STEPS + t)
        idx = None if m >= n else torch.cat([
            (stream.uniform(MINIBATCH + c, (m,), torch.float64) * n).long().clamp_(max=n - 1) for c in chains])
        loss, grad = grad_fn(w, idx)
        if t >= s.burnin:
            losses[:, :, t - s.burnin] = loss.detach().double().view(C, R)
        xi = torch.cat([stream.normal(NOISE + c, (P,), w.dtype) for c in chains])
        w = w - (eps / 2) * (nbeta * grad + s.gamma * (w - center)) + math.sqrt(eps) * xi
    return losses.permute(1, 0, 2).cpu().numpy()


def estimate(draws: np.ndarray, init: np.ndarray, nbeta: float, n_params: int) -> Chains:
    """λ̂ and the chain check from the chains' losses `draws` (R, C, D), L_n(w*) `init` (R,) and
    the parameters a run has."""
    R, C, D = draws.shape
    with np.errstate(invalid="ignore", over="ignore"):
        per_chain = nbeta * (draws.mean(2) - init[:, None])
        llc = per_chain.mean(1)
        se = per_chain.std(1, ddof=1) / math.sqrt(C) if C > 1 else np.full(R, np.nan)
        z, shift = drift(draws)
        finite = np.isfinite(draws).all((1, 2)) & np.isfinite(init)
        finite &= (nbeta * (draws.max((1, 2)) - init) <= DIVERGED * n_params)
        status = np.zeros(R, int)
        status[(np.abs(z) > DRIFT_Z) & (np.abs(nbeta * shift) > DRIFT_SHARE * np.abs(llc))] = 2
        status[llc < -NEGATIVE_Z * np.nan_to_num(se, nan=0.0)] = 3
        status[~finite] = 1
    return Chains(draws, init, per_chain, llc, se, z, status)


def drift(draws: np.ndarray, batches: int = 10) -> tuple[np.ndarray, np.ndarray]:
    """Whether the chains still drift after burn-in: the mean of the draws' second half minus their
    first's, pooled over chains (R,), and that difference over its standard error (R,), the error
    from batch means (the draws cut into `batches` stretches, whose means are nearly independent
    where a stretch is longer than the chain's memory)."""
    R, C, D = draws.shape
    h = D // 2
    shift = draws[:, :, h:].mean((1, 2)) - draws[:, :, :h].mean((1, 2))
    b = max(2, min(batches, D // 2))
    size = D // b
    means = draws[:, :, :b * size].reshape(R, C, b, size).mean(3)          # (R, C, b)
    var_b = (np.diff(means, axis=2) ** 2).mean((1, 2)) / 2                 # a stretch mean's variance, from successive
                                                                           # differences (a slow trend does not inflate it)
    se = np.sqrt(2 * var_b / (C * b / 2))                                  # of the halves' difference
    with np.errstate(divide="ignore", invalid="ignore"):
        z = np.where(se > 0, shift / se, np.where(shift == 0, 0.0, np.inf))
    return z, shift


def model_grad_fn(model, params: dict, batch: Batch, chains: int):
    """grad_fn for `sample` of a model kind (icl.models.Model) on `batch` (R runs' prompts): the C·R
    rows' weights as the kind's parameters, each row's minibatch taken from its run's prompts, one
    `model.step` for all rows (its gradient is of each row's own mean loss)."""
    R = next(iter(params.values())).shape[0]
    rows = torch.arange(R, device=batch["target"].device).repeat(chains)
    like = {k: v.repeat(chains, *([1] * (v.dim() - 1))) for k, v in params.items()}
    runs = {k: v[rows] for k, v in batch.runs.items()}
    full = Batch({k: v[rows] for k, v in batch.prompts.items()}, runs)

    def grad_fn(w, idx):
        b = full if idx is None else Batch({k: v[rows.unsqueeze(1), idx] for k, v in batch.prompts.items()}, runs)
        out = model.step(optim.unflatten(w, like), b)
        return out.loss, optim.flatten(out.grads)
    return grad_fn


def measure(model, params: dict, batch: Batch, s, seeds: torch.Tensor, epoch: int, alive=None) -> Chains:
    """The LLC of every run of a shard at its weights `params` (name -> (R, ...)), over its training
    prompts `batch`; runs not `alive` (diverged in training) are reported with status 4."""
    with torch.no_grad():
        init = model.loss(params, batch)[0]
    n = batch["target"].shape[1]
    w0 = optim.flatten({k: v.detach() for k, v in params.items()}).clone()
    if alive is not None:
        w0[~alive] = 0.0
    out = sample(lambda C: model_grad_fn(model, params, batch, C), w0, init, n, s, seeds, epoch)
    if alive is not None:
        dead = ~alive.cpu().numpy()
        out.status[dead] = 4
    return out


def measure_plateau(model, params: dict, batch: Batch, s, seeds: torch.Tensor, epoch: int, alive=None) -> Chains:
    """The same estimate at the localisation γ × s.plateau (a weaker pull back to w*): where λ̂ reads λ
    it sits on a plateau in γ and does not move; where the localisation dominates (nβ·h ≲ γ along the
    loss's curved directions, λ̂ ≈ nβ·tr(H)/2γ, a curvature trace) it grows as γ falls. Its own draws
    (the checkpoint's epoch offset by PLATEAU_EPOCH), after a burn-in 1/plateau times as long: where γ
    sets the chains' pull, a weaker one relaxes that much slower."""
    return measure(model, params, batch, s.plateau_check(), seeds, epoch + PLATEAU_EPOCH, alive)


PLATEAU_EPOCH = 1 << 19       # the plateau check's draws: the checkpoint's stream, this many epochs on


class Record:
    """The LLC a training job measures, (runs, checkpoints, ...), NaN until measured: what the shard's
    .npz keeps under `llc_` (icl.tables.build makes llc.parquet of it) and a checkpoint restores. The
    last checkpoint is measured a second time at a weaker localisation (`plateau_llc`, `plateau_se`,
    `plateau_status`: measure_plateau), where train.llc.plateau asks for it."""

    KEYS = ("llc", "se", "init", "drift_z", "plateau_llc", "plateau_se")

    def __init__(self, R: int, epochs: list[int], s, n: int):
        chains = s.chains
        self.settings = {"gamma": s.gamma, "epsilon": s.epsilon, "nbeta": nbeta_of(s, n),
                         "plateau_gamma": s.gamma * s.plateau if s.plateau else math.nan}   # what every estimate used
        self.epochs = np.asarray(epochs, dtype=np.int64)
        self.arrays = {k: np.full((R, len(epochs)), np.nan) for k in self.KEYS}
        self.arrays["per_chain"] = np.full((R, len(epochs), chains), np.nan)
        self.arrays["status"] = np.full((R, len(epochs)), -1, dtype=np.int64)     # −1: not measured
        self.arrays["plateau_status"] = np.full((R, len(epochs)), -1, dtype=np.int64)

    def record(self, epoch: int, c: Chains, plateau: Chains | None = None) -> None:
        i = int(np.searchsorted(self.epochs, epoch))
        for k in ("llc", "se", "init", "drift_z"):
            self.arrays[k][:, i] = getattr(c, k)
        self.arrays["per_chain"][:, i] = c.per_chain
        self.arrays["status"][:, i] = c.status
        if plateau is not None:
            self.arrays["plateau_llc"][:, i], self.arrays["plateau_se"][:, i] = plateau.llc, plateau.se
            self.arrays["plateau_status"][:, i] = plateau.status

    def result(self) -> dict:
        return {"llc_epoch": self.epochs, **{f"llc_{k}": v for k, v in self.arrays.items()},
                **{f"llc_{k}": np.float64(v) for k, v in self.settings.items()}}
