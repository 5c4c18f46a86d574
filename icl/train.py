"""Train one shard: all its runs at once as a vectorized ensemble, logging the dynamics.

Resumable: every `train.checkpoint_every` epochs the whole state (parameters, optimizer, logs so
far) is written atomically next to the output; a rerun after a kill continues from there and,
because batches are a function of (seed, epoch), ends with the same numbers as an unbroken run.
A checkpoint is data, not code: tensors and plain values only, loaded with weights_only=True.
"""
from __future__ import annotations

import os
import pickle
import sys
import time
import zipfile

import numpy as np
import torch

from icl import models, optim
from icl.data import curriculum_stage, fresh_batch, read_datasets, with_tokens
from icl.files import atomic_path
from icl.runtime import LOAD_GROUP, log_epochs, pick_device
from icl.provenance import code_hash, code_version


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


class Trace:
    """What the measurements read at every epoch, whatever `log_every` is: the train loss, the
    own-feature attention and (softmax_q) the feature logits, (runs, epochs + 1, ...). Phases,
    crossing times and the logits' paths are measured on it (icl.measures), so they do not
    depend on the logging grid. A full-batch epoch records the state it starts from (the step's
    own forward); a minibatch or fresh-prompt epoch the mean over its steps."""

    KEYS = ("attn_own", "q_features")
    LOSSES = ("train_loss", "query_loss", "zero_loss")   # the objective; ½MSE at the query, and of predicting 0

    def __init__(self, R: int, epochs: int, shapes: dict):
        self.arrays = {k: np.full((R, epochs + 1), np.nan) for k in self.LOSSES}
        self.arrays.update({k: np.full((R, epochs + 1, *shapes[k]), np.nan) for k in self.KEYS if k in shapes})
        self._sum, self._n = {}, 0

    def add(self, losses: dict, values: dict) -> None:
        """One step's losses (LOSSES) and diagnostics, summed until `close`."""
        for k, v in {**losses, **{k: values[k] for k in self.KEYS if k in values}}.items():
            v = v.detach().double().cpu().numpy()
            self._sum[k] = self._sum.get(k, 0.0) + v
        self._n += 1

    def close(self, epoch: int, alive: np.ndarray) -> None:
        """The mean of the steps added since the last close, as epoch `epoch`'s values."""
        for k, v in self._sum.items():
            self.arrays[k][alive, epoch] = (v / self._n)[alive]
        self._sum, self._n = {}, 0


def reference_losses(split: str, arrays: dict) -> dict:
    """What needs no training on a run's own prompts (icl.baselines), from one split's arrays as
    read for training: the loss of uniform attention (the mean of the context labels) and, on the
    test prompts, of the feature oracle (discrete tokens only). Claims measure a model's learning
    against these, not against its own initial loss, which a random head can put anywhere."""
    from icl.baselines import REGISTRY
    y = arrays[f"{split}_y"].astype(float)
    half_mse = lambda pred: 0.5 * float(np.mean((pred - y[:, -1]) ** 2))
    out = {f"uniform_{split}_loss": half_mse(REGISTRY["uniform_attention"].predict(None, y, None, 0, None))}
    feat = arrays.get(f"{split}_feat")
    if split == "test" and feat is not None and (feat >= 0).all():
        out["oracle_test_loss"] = half_mse(REGISTRY["feature_oracle"].predict(None, y, feat, 0, None))
    return out


REFERENCE_KEYS = ("uniform_train_loss", "uniform_test_loss", "oracle_test_loss")


def load_prompts(model, runs: list[dict], cache: dict, split: str, dev, diagnose: bool = True,
                 group: int = LOAD_GROUP, references: dict | None = None) -> models.Batch:
    """One split of every run's prompts in the model's form, stacked along the run axis. Runs
    are prepared a group at a time, so a compact form (softmax_q's counts) never holds every
    run's tokens at once; each file is opened once. `references` (data_id -> values), where
    given, gets each dataset's reference losses of this split from the same arrays."""
    def arrays(members):
        stored = {d: cache[d].split(split) for d in dict.fromkeys(r["data_id"] for r in members)}   # one opening each
        if references is not None:
            for d, arrs in stored.items():
                references.setdefault(d, {}).update(reference_losses(split, arrs))

        name = lambda key: key if key == "features" else f"{split}_{key}"
        return lambda key: torch.from_numpy(np.stack([with_tokens(stored[r["data_id"]], name(key))
                                                      for r in members])).to(dev)
    out = None
    for i in range(0, len(runs), group):
        part = model.prepare(arrays(runs[i:i + group]), diagnose)
        if out is None:    # the whole shard's tensors, allocated once and filled group by group (no
            # concatenation at the end, and every allocation of a group is freed before the next one)
            full = lambda d: {k: v.new_empty((len(runs), *v.shape[1:])) for k, v in d.items()}
            out = models.Batch(full(part.prompts), full(part.runs))
        for mine, theirs in ((out.prompts, part.prompts), (out.runs, part.runs)):
            for k, v in theirs.items():
                mine[k][i:i + len(v)] = v
        del part
    return out


def fresh_prompts(model, runs, cache, epoch: int, dev, stage: dict | None = None) -> models.Batch:
    """train.fresh: new training prompts for every run, drawn from its own stream for this epoch
    (at the curriculum's `stage`, where it has one)."""
    parts = [{**fresh_batch(r["spec"], cache[r["data_id"]]["features"], epoch, stage),
              "features": cache[r["data_id"]]["features"]} for r in runs]
    return model.prepare(lambda key: torch.from_numpy(np.stack([p[key] for p in parts])).to(dev), diagnose=False)


class ShardTraining:
    """The state of one shard's training, all runs at once: model, prompts, parameters, optimizer,
    logs and which runs are still alive. `saved` (a checkpoint) resumes it where it stopped."""

    def __init__(self, runs: list[dict], data_paths: dict, dev, saved: dict | None = None):
        spec0 = runs[0]["spec"]
        self.runs, self.dev, self.tr = runs, dev, spec0["train"]
        self.seeds = [r["spec"]["seed"] for r in runs]
        self.model = models.build(spec0["model"], spec0["tokens"])
        self.cache = read_datasets(runs, data_paths)
        self.references: dict = {}
        self.train = load_prompts(self.model, runs, self.cache, "train", dev, references=self.references)
        self.test = load_prompts(self.model, runs, self.cache, "test", dev, False, references=self.references)
        self.train.runs.update(self.model.extras([r["spec"] for r in runs], dev))
        lr = torch.tensor([r["spec"]["model"]["lr"] for r in runs], dtype=torch.float32, device=dev)
        self.opt = optim.build(spec0["model"]["optimizer"], lr)
        self.M = self.train["target"].shape[1]
        self.batch = self.tr.get("batch_size") or self.M
        self.steps_per_epoch = -(-self.M // self.batch)
        self.schedule = optim.Schedule(lr, self.tr, self.steps_per_epoch)
        self.params = self.model.init(self.seeds, [r["spec"]["model"]["name"] for r in runs], dev)
        self.epochs = self.tr["epochs"]
        curriculum = {"curriculum_dims": (), "curriculum_points": ()} if self.tr.get("curriculum") else {}
        self.logs = Logs(len(runs), np.asarray(log_epochs(self.epochs, self.tr["log_every"])),
                         {**self.model.log_shapes(), **curriculum})
        self.pos = {int(e): i for i, e in enumerate(self.logs.epochs)}     # logged epoch -> column
        self.trace = Trace(len(runs), self.epochs, self.model.log_shapes())
        self.start, self.elapsed0 = 0, 0.0
        if saved:
            self.params, self.start, self.elapsed0 = saved["params"], saved["epoch"], saved["elapsed"]
            self.opt.load(saved["opt"])
            self.logs.arrays = {k: v.cpu().numpy() for k, v in saved["logs"].items()}
            self.logs.diverged_at = saved["diverged_at"].cpu().numpy()
            self.trace.arrays = {k: v.cpu().numpy() for k, v in saved["trace"].items()}
        self.active = torch.as_tensor(self.logs.diverged_at < 0, device=dev)
        # full batch on fixed prompts: the step's own forward is the state the epoch starts from
        self.full_batch = self.batch >= self.M and not self.tr.get("fresh")

    def log(self, epoch: int, train_loss=None, seen=None) -> None:
        """Record the state at the start of `epoch`: train loss and diagnostics from the step's
        forward when given, else from one more; the test loss from one more. The state training
        ended in is the trace's last epoch too."""
        with torch.no_grad():
            if seen is None:
                train_loss, seen = self.model.loss(self.params, self.train)
            diag = self.model.diagnostics(self.params, self.train, seen)
            values = {"train_loss": train_loss, **self.model.test_losses(self.params, self.test), **diag}
            stage = curriculum_stage(self.runs[0]["spec"], epoch * self.steps_per_epoch)
            if stage:                 # the curriculum's dims and points at this epoch's first step
                values.update({f"curriculum_{k}": torch.full((len(self.runs),), float(v)) for k, v in stage.items()})
        self.active.copy_(torch.as_tensor(self.logs.record(self.pos[epoch], values), device=self.dev))
        if epoch == self.epochs:
            self.trace.add(self.losses(train_loss, self.train), self.traced(self.train, seen))
            self.trace.close(epoch, self.active.cpu().numpy())

    def traced(self, batch, seen) -> dict:
        """What the trace keeps of a step besides its loss (Model.trace: the own attention, and
        softmax_q's feature logits), from the step's own forward; nothing for prompts prepared
        without diagnostics (fresh ones)."""
        if not ("near" in batch or "knn" in batch):
            return {}
        with torch.no_grad():
            return self.model.trace(self.params, batch, seen)

    def train_epoch(self, epoch: int) -> None:
        """One pass over the prompts (fresh ones with train.fresh), logged if on the grid."""
        logging = epoch in self.pos
        if logging and not self.full_batch:
            self.log(epoch)
        step0 = epoch * self.steps_per_epoch
        data = (fresh_prompts(self.model, self.runs, self.cache, epoch, self.dev,
                              curriculum_stage(self.runs[0]["spec"], step0))
                if self.tr.get("fresh") else self.train)
        for i, idx in enumerate(batch_index(self.seeds, epoch, self.M, self.batch)):
            b = data if self.batch >= self.M else data.take(torch.as_tensor(np.ascontiguousarray(idx), device=self.dev))
            loss, grads, seen = self.model.step(self.params, b)
            if logging and self.full_batch:
                self.log(epoch, loss, seen)
            self.trace.add(self.losses(loss, b, self.model.step_query_loss), self.traced(b, seen))
            self.stop_diverged(loss, grads, epoch)
            if self.tr.get("clip"):
                grads = optim.clip_grads(grads, float(self.tr["clip"]))
            self.opt.step(self.params, grads, self.active, self.schedule.at(step0 + i))
        self.trace.close(epoch, self.active.cpu().numpy())

    def losses(self, loss, batch, query_loss=None) -> dict:
        """What the trace keeps of a step's losses: the objective, the query's ½MSE (the objective
        itself unless the kind reads more positions) and that of predicting 0 on these prompts."""
        if query_loss is None:
            with torch.no_grad():
                query_loss = self.model.query_loss(self.model.predict(self.params, batch)[0], batch)
        return {"train_loss": loss, "query_loss": query_loss, "zero_loss": 0.5 * (batch["target"] ** 2).mean(1)}

    def stop_diverged(self, loss, grads: dict, epoch: int) -> None:
        """Runs whose loss or gradient is not finite are frozen and marked with this epoch."""
        bad = ~torch.isfinite(loss)
        for g in grads.values():
            bad |= ~torch.isfinite(g.flatten(1)).all(1)
        if bad.any():
            self.logs.diverged_at[(bad & self.active).cpu().numpy()] = epoch
            self.active &= ~bad

    def state(self, done: int, elapsed: float) -> dict:
        """What a checkpoint holds after `done` epochs: tensors and plain values (the logs' and the
        trace's numpy arrays as tensors of the same dtype, so they come back exactly)."""
        return {"params": self.params, "opt": self.opt.state(), "epoch": done,
                "logs": {k: torch.from_numpy(v) for k, v in self.logs.arrays.items()},
                "trace": {k: torch.from_numpy(v) for k, v in self.trace.arrays.items()},
                "diverged_at": torch.from_numpy(self.logs.diverged_at), "elapsed": float(elapsed)}

    def result(self, elapsed: float) -> dict:
        """The shard's .npz: logged arrays, final parameters, where and how long it trained."""
        dev = self.dev
        return {
            "run_id": np.asarray([r["run_id"] for r in self.runs]), "epoch": self.logs.epochs,
            "diverged_at": self.logs.diverged_at, "seconds": np.asarray(elapsed), "device": np.asarray(str(dev)),
            "device_name": np.asarray(torch.cuda.get_device_name(dev) if dev.type == "cuda" else _cpu_name()),
            "threads": np.asarray(torch.get_num_threads()),
            "code_version": np.asarray(code_version()), "code_hash": np.asarray(code_hash()),
            **self.logs.arrays,
            **{f"trace_{k}": v for k, v in self.trace.arrays.items()},
            **{k: np.asarray([self.references[r["data_id"]].get(k, np.nan) for r in self.runs]) for k in REFERENCE_KEYS},
            "tokens_K": np.asarray(self.model.K or 0), "prompts_N": np.asarray(self.runs[0]["spec"]["prompts"]["N"]),
            "train_fresh": np.asarray(bool(self.tr.get("fresh"))),
            **{f"param_{k}": v.detach().cpu().numpy() for k, v in self.params.items()},
        }


def train_shard(runs: list[dict], data_paths: dict, out_path: str, device: str = "auto",
                threads: int | None = None, label: str = "shard") -> dict:
    """runs: [{run_id, data_id, spec}] of one shard. Trains them, checkpointing as it goes, and
    writes an .npz with the logged arrays (ShardTraining.result)."""
    if threads:
        torch.set_num_threads(threads)
    dev = pick_device(device)
    print(f"[{label}] {len(runs)} runs on {dev}"
          + (f" ({torch.cuda.get_device_name(dev)}, CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES', 'unset')})"
             if dev.type == "cuda" else f" ({torch.get_num_threads()} threads)"), file=sys.stderr, flush=True)
    ckpt = Checkpoint(out_path + ".ckpt", [r["run_id"] for r in runs], label)
    t_setup = time.time()
    sh = ShardTraining(runs, data_paths, dev, ckpt.load(dev))
    prog, t0 = Progress(label, sh.epochs), time.time()
    every = sh.tr.get("checkpoint_every", 50)
    for epoch in range(sh.start, sh.epochs):
        sh.train_epoch(epoch)
        done = epoch + 1
        prog.update(done, sh.start, int(sh.active.sum()), len(runs))
        if done % every == 0 and done < sh.epochs:
            ckpt.save(sh.state(done, sh.elapsed0 + time.time() - t0))
    if sh.epochs in sh.pos:
        sh.log(sh.epochs)                   # the state training ended in
    prog.update(sh.epochs, sh.start, int(sh.active.sum()), len(runs), force=True)
    t_loop = time.time()
    out = sh.result(sh.elapsed0 + t_loop - t0)
    with atomic_path(out_path) as tmp:
        np.savez(tmp, **out)
    ckpt.remove()
    print(f"[{label}] done: setup {t0 - t_setup:.2f}s, training {t_loop - t0:.2f}s, writing {time.time() - t_loop:.2f}s, "
          f"{torch.get_num_threads()} threads",
          file=sys.stderr, flush=True)
    return out


class Checkpoint:
    """The whole training state of a shard, saved atomically every checkpoint_every epochs and
    taken up again by a rerun of the same runs (after a kill). It holds tensors, dicts, lists and
    numbers only and is loaded with torch.load(weights_only=True): a file that names any other
    Python object is refused, never unpickled (unpickling can run code)."""

    def __init__(self, path: str, run_ids: list[str], label: str):
        self.path, self.run_ids, self.label = path, run_ids, label

    def load(self, dev) -> dict | None:
        if not os.path.exists(self.path):
            return None
        try:
            ck = torch.load(self.path, map_location=dev, weights_only=True)
        except pickle.UnpicklingError:
            if not zipfile.is_zipfile(self.path):       # not a torch archive at all: damaged
                raise RuntimeError(f"checkpoint {self.path} is damaged (UnpicklingError); "
                                   "delete it to restart this shard from epoch 0") from None
            raise RuntimeError(f"checkpoint {self.path} holds Python objects besides tensors and plain values "
                               "(an older icl saved numpy arrays in it, or another program wrote it); it is not "
                               "loaded, as unpickling them could run code: delete it to restart this shard "
                               "from epoch 0") from None
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
