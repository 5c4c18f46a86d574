"""Fresh training prompts (train.fresh) made where the model trains: one batched draw per epoch for
every run of an ensemble, from a counter-based stream per run (icl.train.streams), so that a run's prompts
depend on its seed and epoch alone, never on the shard, the chunk or the device it trains on.

What a run's prompts are drawn from is read once per job (its features, feature probabilities,
covariance, task settings) and held on the device; each epoch then costs a few kernels for all runs.
The fixed prompt files (train and test splits) are drawn by numpy in icl.data, as before.
"""
from __future__ import annotations

import numpy as np
import torch

from icl.data import STREAM_FRESH, eigenvalues, feature_probs, rotation
from icl.models.compiled import guarded
from icl.train.streams import Stream
from icl.tasks import family
from icl.settings import Tokens

TOKENS, NOISE, SCALES = 1, 2, 3      # purposes of the tokens' draws (the tasks' start at icl.tasks.PURPOSE)
# the stream's name as the shards record it (kept when its module moved to icl/train/: the draws are the same)
STREAM_KIND = "icl.streams triple32 counter hash, seed hashed before the stream (integers equal on CPU and CUDA; normals rounded from float64)"


class FreshPrompts:
    """The fresh training prompts of an ensemble's runs: `specs` (their run specs, one shard's: one
    d, K, N and train size; discrete tokens, or continuous ones of any mix of kinds: a fixed
    covariance on some runs, random covariances on others), `features` (R, K, d) float32 of discrete
    tokens (else None)."""

    def __init__(self, specs: list[dict], features, device):
        self.device, self.specs = device, specs
        self.seeds = [s["seed"] for s in specs]
        kinds = [s["tokens"]["kind"] for s in specs]
        self.discrete = kinds[0] == "discrete"
        if any((k == "discrete") != self.discrete for k in kinds):
            raise ValueError("one ensemble mixes discrete and continuous tokens (icl.plan.shards.shape_key keeps them apart)")
        self.d, self.P = specs[0]["tokens"]["d"], specs[0]["prompts"]["train"]
        self.N = specs[0]["prompts"]["N"]
        t = lambda a: torch.as_tensor(np.asarray(a, dtype=np.float32), device=device)
        noise = [Tokens.of(s["tokens"]).noise or 0.0 for s in specs]
        self.noise = t(noise).view(-1, 1, 1, 1) if any(noise) else None
        self.scale = self.sqrt_eig = self.rot_t = self.random_rows = None
        if self.discrete:
            self.features = features.to(device)
            cdf = np.stack([np.cumsum(feature_probs(s["tokens"]) / feature_probs(s["tokens"]).sum()) for s in specs])
            self.edges = torch.as_tensor(cdf[:, :-1] / cdf[:, -1:], dtype=torch.float64, device=device)
        else:                     # each run its own: random covariances on some, a fixed one on the others
            random = [k == "random_covariance" for k in kinds]
            if any(random):
                self.scale = t([Tokens.of(s["tokens"]).scale if r else 1.0 for s, r in zip(specs, random)]).view(-1, 1, 1, 1)
                if not all(random):
                    self.random_rows = torch.as_tensor(random, device=device).view(-1, 1, 1, 1)
            if not all(random):
                self.sqrt_eig = t([np.ones(self.d) if r else np.sqrt(eigenvalues(s["tokens"]))
                                   for s, r in zip(specs, random)]).view(len(specs), 1, 1, -1)
                rots = [None if r else rotation(s["tokens"]) for s, r in zip(specs, random)]
                self.rot_t = (t([np.eye(self.d) if R is None else R.T for R in rots]).unsqueeze(1)
                              if any(R is not None for R in rots) else None)
        self.seed_t = torch.as_tensor(self.seeds, dtype=torch.int64, device=device)
        self._draw, self._failed = self.draw_at, None
        by_kind: dict[str, list[int]] = {}
        for i, s in enumerate(specs):
            by_kind.setdefault(s["task"]["kind"], []).append(i)
        self.tasks = []          # (family, its runs' rows, their settings on the device)
        for k, ix in by_kind.items():
            fam = family(k)
            settings = fam.fresh_settings([specs[i]["task"] for i in ix], self.d)
            self.tasks.append((fam, torch.as_tensor(ix, device=device), {n: t(v) for n, v in settings.items()}))

    def draw(self, epoch: int, stage: dict | None = None) -> dict:
        """Epoch `epoch`'s prompts of every run: x (R, P, T, d), y (R, P, T), feat (R, P, T) (−1 for
        continuous tokens) and the features; `stage` (icl.data.curriculum_stage) shortens them to its
        points and zeroes x past its dims (the task's w is still drawn in all d)."""
        stream = torch.full((), STREAM_FRESH + epoch, dtype=torch.int64, device=self.device)   # no copy from the host
        T, dims = stage["points"] if stage else self.N + 1, stage["dims"] if stage else self.d
        return guarded(lambda: self._draw(stream, T, dims), self._failed)

    def compile(self, failed=None) -> None:
        """Draw through torch.compile (the hash's few dozen integer operations become a kernel or
        two; one graph per curriculum stage, the epoch a tensor); a draw that raises calls
        `failed(error)` and is made again eagerly (icl.models.compiled)."""
        self._draw, self._failed = torch.compile(self.draw_at, dynamic=False), failed

    def uncompile(self) -> None:
        self._draw, self._failed = self.draw_at, None

    def draw_at(self, stream: torch.Tensor, T: int, dims: int) -> dict:
        st = Stream(self.seed_t, stream)
        x, feat = self.tokens(st, (self.P, T, self.d))
        if dims < self.d:
            x[..., dims:] = 0.0
        if len(self.tasks) == 1:
            y = self.tasks[0][0].draw_fresh(self.tasks[0][2], x, st)
        else:                                # a shard mixing task families: each on its own runs' rows
            y = x.new_empty(x.shape[:-1])
            for fam, ix, settings in self.tasks:
                y[ix] = fam.draw_fresh(settings, x[ix], Stream(self.seed_t[ix], stream))
        out = {"x": x, "y": y, "feat": feat}
        if self.discrete:
            out["features"] = self.features
        return out

    def tokens(self, st: Stream, shape: tuple) -> tuple[torch.Tensor, torch.Tensor]:
        """Tokens x (R, P, T, d) and their feature index (−1 where tokens are continuous)."""
        P, T, d = shape
        R = len(self.seeds)
        if self.discrete:
            u = st.uniform(TOKENS, (P, T), torch.float64)
            idx = (u.unsqueeze(-1) >= self.edges.view(R, 1, 1, -1)).sum(-1)
            x = self.features[torch.arange(R, device=self.device).view(R, 1, 1), idx]
            if self.noise is not None:
                x = x + self.noise * st.normal(NOISE, shape)
            return x, idx
        z = st.normal(TOKENS, shape)
        x = None
        if self.sqrt_eig is not None:                 # a fixed covariance: x = R·diag(√λ)·z
            x = z * self.sqrt_eig
            if self.rot_t is not None:
                x = x @ self.rot_t
        if self.scale is not None:                    # random covariances: Λ_τ = diag(λ) per prompt, λ_i ~ scale·Exp(1)
            xr = z * torch.sqrt(self.scale * st.exponential(SCALES, (P, 1, d)))
            x = xr if x is None else torch.where(self.random_rows, xr, x)
        return x, torch.full((R, P, T), -1, dtype=torch.int64, device=self.device)
