"""Train one shard: all its runs at once as a vectorized ensemble, logging the dynamics.

Resumable: every `train.checkpoint_every` epochs the whole state (parameters, optimizer, logs so
far) is written atomically next to the output; a rerun after a kill continues from there and,
because batches are a function of (seed, epoch), ends with the same numbers as an unbroken run.
"""
from __future__ import annotations

import os
import sys
import time

import numpy as np
import torch

from icl import models, optim
from icl.data import fresh_batch, read_datasets
from icl.files import atomic_path
from icl.plan import log_epochs
from icl.provenance import code_hash, code_version


def pick_device(setting: str = "auto") -> torch.device:
    if setting == "cuda" or (setting == "auto" and torch.cuda.is_available()):
        if not torch.cuda.is_available():
            raise RuntimeError("device: cuda was asked for but torch sees no CUDA device")
        return torch.device("cuda")
    return torch.device("cpu")


def batch_index(seeds, epoch: int, n: int, batch: int) -> list[np.ndarray]:
    """Per-run minibatch order for one epoch: a function of (seed, epoch) only."""
    if batch >= n:
        return [np.broadcast_to(np.arange(n), (len(seeds), n))]
    perms = np.stack([np.random.Generator(np.random.PCG64(np.random.SeedSequence([s, 2000, epoch]))).permutation(n)
                      for s in seeds])
    return [perms[:, i:i + batch] for i in range(0, n, batch)]


class Progress:
    """A line to stderr at most every few seconds: epochs, runs, time used and left."""

    def __init__(self, label: str, total: int, every_s: float = 5.0):
        self.label, self.total, self.every = label, total, every_s
        self.t0 = time.time()
        self.last = 0.0

    def update(self, done: int, start: int, n_live: int, n_runs: int, force=False) -> None:
        now = time.time()
        if not force and now - self.last < self.every:
            return
        self.last = now
        el = now - self.t0
        rate = (done - start) / el if el > 0 and done > start else 0
        left = (self.total - done) / rate if rate else float("nan")
        print(f"[{self.label}] epoch {done}/{self.total}  runs {n_live}/{n_runs} live  "
              f"{el:.1f}s elapsed, ~{left:.0f}s left", file=sys.stderr, flush=True)


class Logs:
    """The logged arrays of a shard, (runs, logged epochs, ...), NaN until written. A run that
    diverged logs NaN from then on, and `diverged_at` holds the epoch it went."""

    STANDARD = ("train_loss", "test_loss", "attn_own", "attn_entropy", "attn_knn", "dist_target")
    MATRICES = ("attn", "q_features", "effective")

    def __init__(self, R: int, epochs: np.ndarray, shapes: dict):
        E = len(epochs)
        self.epochs = epochs
        self.arrays = {k: np.full((R, E), np.nan) for k in self.STANDARD}
        self.arrays.update({k: np.zeros((R, E, 0, 0)) for k in self.MATRICES})
        self.arrays.update({k: np.full((R, E, *shape), np.nan) for k, shape in shapes.items()})
        self.diverged_at = np.full(R, -1)

    def record(self, pos: int, values: dict) -> np.ndarray:
        """Write one logged epoch; returns the mask of runs still alive."""
        for k, v in values.items():
            self.arrays[k][:, pos] = v.detach().cpu().numpy()
        dead = ~np.isfinite(self.arrays["train_loss"][:, pos]) & (self.diverged_at < 0)
        self.diverged_at[dead] = self.epochs[pos]
        gone = self.diverged_at >= 0
        for arr in self.arrays.values():
            arr[gone, pos] = np.nan
        return ~gone


def load_prompts(model, runs: list[dict], cache: dict, split: str, dev, diagnose: bool = True,
                 group: int = 16) -> models.Batch:
    """One split of every run's prompts in the model's form, stacked along the run axis. Runs
    are prepared a group at a time, so a compact form (softmax_q's counts) never holds every
    run's tokens at once, and only the arrays the model asks for are read from the files."""
    def arrays(members):
        name = lambda key: key if key == "features" else f"{split}_{key}"
        return lambda key: torch.from_numpy(np.stack([cache[r["data_id"]][name(key)] for r in members])).to(dev)
    return models.Batch.cat([model.prepare(arrays(runs[i:i + group]), diagnose) for i in range(0, len(runs), group)])


def fresh_prompts(model, runs, cache, epoch: int, dev) -> models.Batch:
    """train.fresh: new training prompts for every run, drawn from its own stream for this epoch."""
    parts = [{**fresh_batch(r["spec"], cache[r["data_id"]]["features"], epoch),
              "features": cache[r["data_id"]]["features"]} for r in runs]
    return model.prepare(lambda key: torch.from_numpy(np.stack([p[key] for p in parts])).to(dev), diagnose=False)


def train_shard(runs: list[dict], data_paths: dict, out_path: str, device: str = "auto",
                threads: int | None = None, label: str = "shard") -> dict:
    """runs: [{run_id, data_id, spec}] of one shard. Writes an .npz with the logged arrays."""
    if threads:
        torch.set_num_threads(threads)
    dev = pick_device(device)
    print(f"[{label}] {len(runs)} runs on {dev}"
          + (f" ({torch.cuda.get_device_name(dev)}, CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES', 'unset')})"
             if dev.type == "cuda" else f" ({torch.get_num_threads()} threads)"), file=sys.stderr, flush=True)
    spec0, R = runs[0]["spec"], len(runs)
    tr = spec0["train"]
    seeds = [r["spec"]["seed"] for r in runs]
    model = models.build(spec0["model"], spec0["tokens"])
    cache = read_datasets(runs, data_paths)
    train, test = load_prompts(model, runs, cache, "train", dev), load_prompts(model, runs, cache, "test", dev, False)
    extras = model.extras([r["spec"] for r in runs], dev)
    train.runs.update(extras)
    lr = torch.tensor([r["spec"]["model"]["lr"] for r in runs], dtype=torch.float32, device=dev)
    opt = optim.build(spec0["model"]["optimizer"], lr)
    params = model.init(seeds, [r["spec"]["model"]["name"] for r in runs], dev)
    epochs = tr["epochs"]
    logs = Logs(R, np.asarray(log_epochs(epochs, tr["log_every"])), model.log_shapes())
    run_ids = [r["run_id"] for r in runs]
    ckpt = Checkpoint(out_path + ".ckpt", run_ids, label)
    start, elapsed0 = 0, 0.0
    saved = ckpt.load(dev)
    if saved:
        params, start, elapsed0 = saved["params"], saved["epoch"], saved["elapsed"]
        opt.load(saved["opt"])
        logs.arrays, logs.diverged_at = saved["logs"], saved["diverged_at"]
    active = torch.as_tensor(logs.diverged_at < 0, device=dev)

    M = train["target"].shape[1]
    batch = tr.get("batch_size") or M
    full_batch = batch >= M and not tr.get("fresh")
    pos = {int(e): i for i, e in enumerate(logs.epochs)}
    prog = Progress(label, epochs)
    t0 = time.time()

    def record(p: int, train_loss, seen) -> None:
        """Log the state at the start of an epoch: the train loss and diagnostics from the
        forward that the step itself makes (full batch), the test loss from one more."""
        with torch.no_grad():
            if seen is None:
                train_loss, seen = model.loss(params, train)
            values = {"train_loss": train_loss, "test_loss": model.loss(params, test)[0],
                      **model.diagnostics(params, train, seen)}
        active.copy_(torch.as_tensor(logs.record(p, values), device=dev))

    for epoch in range(start, epochs + 1):
        logging = epoch in pos
        if logging and (not full_batch or epoch == epochs):
            record(pos[epoch], None, None)
        if epoch == epochs:
            break
        data = fresh_prompts(model, runs, cache, epoch, dev) if tr.get("fresh") else train
        for idx in batch_index(seeds, epoch, M, batch):
            b = data if batch >= M else data.take(torch.as_tensor(np.ascontiguousarray(idx), device=dev))
            loss, grads, seen = model.step(params, b)
            if logging and full_batch:
                record(pos[epoch], loss, seen)
            bad = ~torch.isfinite(loss)
            for g in grads.values():
                bad |= ~torch.isfinite(g.flatten(1)).all(1)
            if bad.any():
                logs.diverged_at[(bad & active).cpu().numpy()] = epoch
                active &= ~bad
            opt.step(params, grads, active)
        done = epoch + 1
        prog.update(done, start, int(active.sum()), R)
        if done % tr.get("checkpoint_every", 50) == 0 and done < epochs:
            ckpt.save({"params": params, "opt": opt.state(), "epoch": done, "logs": logs.arrays,
                       "diverged_at": logs.diverged_at, "elapsed": elapsed0 + time.time() - t0})
    prog.update(epochs, start, int(active.sum()), R, force=True)
    out = {
        "run_id": np.asarray(run_ids), "epoch": logs.epochs, "diverged_at": logs.diverged_at,
        "seconds": np.asarray(elapsed0 + time.time() - t0), "device": np.asarray(str(dev)),
        "device_name": np.asarray(torch.cuda.get_device_name(dev) if dev.type == "cuda" else _cpu_name()),
        "threads": np.asarray(torch.get_num_threads()),
        "code_version": np.asarray(code_version()), "code_hash": np.asarray(code_hash()),
        **logs.arrays,
        **{f"param_{k}": v.detach().cpu().numpy() for k, v in params.items()},
    }
    with atomic_path(out_path) as tmp:
        np.savez(tmp, **out)
    ckpt.remove()
    return out


class Checkpoint:
    """The whole training state of a shard, saved atomically every checkpoint_every epochs and
    taken up again by a rerun of the same runs (after a kill)."""

    def __init__(self, path: str, run_ids: list[str], label: str):
        self.path, self.run_ids, self.label = path, run_ids, label

    def load(self, dev) -> dict | None:
        if not os.path.exists(self.path):
            return None
        try:
            ck = torch.load(self.path, map_location=dev, weights_only=False)
        except Exception as e:
            raise RuntimeError(f"checkpoint {self.path} is damaged ({type(e).__name__}); "
                               "delete it to restart this shard from epoch 0") from None
        if ck.get("run_ids") != self.run_ids:
            print(f"[{self.label}] ignoring checkpoint of another run set", file=sys.stderr, flush=True)
            return None
        print(f"[{self.label}] resuming from checkpoint at epoch {ck['epoch']}", file=sys.stderr, flush=True)
        return ck

    def save(self, state: dict) -> None:
        with atomic_path(self.path) as tmp:
            torch.save({"run_ids": self.run_ids, **state}, tmp)

    def remove(self) -> None:
        if os.path.exists(self.path):
            os.remove(self.path)


def _cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    import platform
    return platform.processor() or "cpu"
