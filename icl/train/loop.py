"""Train one shard: all its runs at once as a vectorized ensemble, logging the dynamics.

`train_ensemble` is the loop, epoch after epoch: `ShardTraining.train_epoch` draws the prompts,
steps, traces, clips and updates; the hooks at its boundaries log (`start_epoch`, on the log grid)
and, at the epoch's end, measure the LLC, print the progress line and checkpoint. What is
recorded lives in icl.train.logs, how a job resumes (checkpoints, chunk files) in icl.train.checkpoints:
because batches are a function of (seed, epoch), a rerun after a kill ends with the same numbers
as an unbroken run.
"""
from __future__ import annotations

import os
import sys
import time
from concurrent.futures.process import BrokenProcessPool

import numpy as np
import torch

from icl.train import llc, optim

from icl import models
from icl.train.stopping import StopRequests, Stopped, job_deadline
from icl.train.checkpoints import Checkpoint, chunk_paths, merge_chunks, restore, snapshot
from icl.data import curriculum_stage, read_datasets, with_tokens
from icl.train.fresh import STREAM_KIND, FreshPrompts
from icl.jobs import memory
from icl.store.files import atomic_path, shard_lock
from icl.train.logs import Logs, Progress, Trace
from icl.jobs.parallel import Forked
from icl.jobs.runtime import LOAD_GROUP, log_epochs, log_grid, pick_device, pick_precision
from icl.settings import Train
from icl.jobs.provenance import code_hash, code_version, cpu_name


def batch_index(seeds, epoch: int, n: int, batch: int, dev=None) -> list:
    """Per-run minibatch order for one epoch, (R, batch) index tensors on `dev`: a function of
    (seed, epoch) only, copied to the device once per epoch. [None] for a full batch."""
    if batch >= n:
        return [None]
    perms = torch.from_numpy(np.stack([
        np.random.Generator(np.random.PCG64(np.random.SeedSequence([s, 2000, epoch]))).permutation(n) for s in seeds]))
    if dev is not None and dev.type == "cuda":
        perms = perms.pin_memory().to(dev, non_blocking=True)
    return [perms[:, i:i + batch] for i in range(0, n, batch)]


def reference_losses(split: str, arrays: dict) -> dict:
    """What needs no training on a run's own prompts (icl.evaluate.baselines), from one split's arrays as
    read for training: the loss of uniform attention (the mean of the context labels) and, on the
    test prompts, of the feature oracle (discrete tokens only). Claims measure a model's learning
    against these, not against its own initial loss, which a random head can put anywhere."""
    from icl.evaluate.baselines import REGISTRY
    if f"{split}_counts" in arrays:
        return _count_references(split, arrays)
    y = arrays[f"{split}_y"].astype(float)
    half_mse = lambda pred: 0.5 * float(np.mean((pred - y[:, -1]) ** 2))
    out = {f"uniform_{split}_loss": half_mse(REGISTRY["uniform_attention"].predict(None, y, None, 0, None))}
    feat = arrays.get(f"{split}_feat")
    if split == "test" and feat is not None and (feat >= 0).all():
        out["oracle_test_loss"] = half_mse(REGISTRY["feature_oracle"].predict(None, y, feat, 0, None))
    return out


def _count_references(split: str, arrays: dict) -> dict:
    """reference_losses of prompts drawn as counts: uniform attention predicts the context's mean
    label Σ n_k f_k / N; the feature oracle the mean label of the query's feature's tokens, f_query
    (labels are the task's function at the features), the context's mean where none is present."""
    n, f = arrays[f"{split}_counts"].astype(float), arrays[f"{split}_labels"].astype(float)
    q = arrays[f"{split}_query"].astype(np.int64)
    target = np.take_along_axis(f, q[:, None], 1)[:, 0]
    uniform = (n * f).sum(1) / n.sum(1)
    out = {f"uniform_{split}_loss": 0.5 * float(np.mean((uniform - target) ** 2))}
    if split == "test":
        present = np.take_along_axis(n, q[:, None], 1)[:, 0] > 0
        out["oracle_test_loss"] = 0.5 * float(np.mean((np.where(present, target, uniform) - target) ** 2))
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


def feature_tensor(runs: list[dict], cache: dict) -> torch.Tensor | None:
    """The features (R, K, d) of discrete-token runs, read once per job (None for other tokens)."""
    if runs[0]["spec"]["tokens"]["kind"] != "discrete":
        return None
    per_data = {d: cache[d]["features"] for d in dict.fromkeys(r["data_id"] for r in runs)}
    return torch.from_numpy(np.stack([per_data[r["data_id"]] for r in runs]))


class ShardTraining:
    """The state of one shard's training, all runs at once: model, prompts, parameters, optimizer,
    logs and which runs are still alive. `saved` (a checkpoint) resumes it where it stopped.

    Nothing in the step loop waits for the host: fresh prompts are drawn on the device
    (icl.train.fresh), the trace and the divergence marks stay there, and they are copied at the logged
    epochs and checkpoints (`sync`)."""

    def __init__(self, runs: list[dict], data_paths: dict, dev, saved: dict | None = None):
        spec0 = runs[0]["spec"]
        self.runs, self.dev, self.tr = runs, dev, Train.of(spec0["train"])
        self.seeds = [r["spec"]["seed"] for r in runs]
        kind = models.MODELS[spec0["model"]["kind"]]
        self.model = models.build(spec0["model"], spec0["tokens"], dev.type,
                                  pick_precision(self.tr.precision, dev, kind.bf16_blocks))
        self.cache = read_datasets(runs, data_paths)
        self.references: dict = {}
        self.train = load_prompts(self.model, runs, self.cache, "train", dev, references=self.references)
        self.test = load_prompts(self.model, runs, self.cache, "test", dev, False, references=self.references)
        self.train.runs.update(self.model.extras([r["spec"] for r in runs], dev))
        self.fresh = (FreshPrompts([r["spec"] for r in runs], feature_tensor(runs, self.cache), dev)
                      if self.tr.fresh else None)
        lr = torch.tensor([r["spec"]["model"]["lr"] for r in runs], dtype=torch.float32, device=dev)
        self.opt = optim.build(spec0["model"]["optimizer"], lr)
        self.M = self.train["target"].shape[1]
        self.batch = self.tr.batch_size or self.M
        self.steps_per_epoch = self.tr.steps_per_epoch(self.M)
        self.schedule = optim.Schedule(lr, self.tr, self.steps_per_epoch)
        self.params = self.model.init(self.seeds, [r["spec"]["model"]["name"] for r in runs], dev)
        self.epochs = self.tr.epochs
        curriculum = {"curriculum_dims": (), "curriculum_points": ()} if self.tr.curriculum else {}
        self.logs = Logs(len(runs), np.asarray(log_epochs(self.epochs, self.tr.log_every)),
                         {**self.model.log_shapes(), **curriculum})
        self.pos = {int(e): i for i, e in enumerate(self.logs.epochs)}     # logged epoch -> column
        self.trace = Trace(len(runs), self.epochs, self.model.log_shapes())
        self.llc = (llc.Record(len(runs), log_grid(self.epochs, self.tr.llc.points), self.tr.llc, self.M)
                    if self.tr.llc else None)
        self.start, self.elapsed0 = 0, 0.0
        if saved:
            restore(self, saved)
        self.diverged_at = torch.as_tensor(self.logs.diverged_at, device=dev)     # marked on the device
        self.active = self.diverged_at < 0
        # full batch on fixed prompts: the step's own forward is the state the epoch starts from
        self.full_batch = self.batch >= self.M and not self.tr.fresh
        self.taken = None            # a step start_epoch took for the epoch (full batch, a logged epoch)

    def sync(self) -> None:
        """The device's trace and divergence marks into the host's logs (a logged epoch, a checkpoint)."""
        self.trace.flush()
        self.logs.diverged_at = self.diverged_at.cpu().numpy()

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
        self.sync()
        alive = self.logs.record(self.pos[epoch], values)
        self.diverged_at.copy_(torch.as_tensor(self.logs.diverged_at, device=self.dev))
        self.active.copy_(torch.as_tensor(alive, device=self.dev))
        if epoch == self.epochs:
            self.trace.add(self.losses(train_loss, self.train), self.traced(self.train, seen))
            self.trace.close(epoch, self.active)

    def traced(self, batch, seen) -> dict:
        """What the trace keeps of a step besides its loss (Model.trace: the own attention, and
        softmax_q's feature logits), from the step's own forward; nothing for prompts prepared
        without diagnostics (fresh ones)."""
        if not ("near" in batch or "knn" in batch):
            return {}
        with torch.no_grad():
            return self.model.trace(self.params, batch, seen)

    def prompts(self, epoch: int, step0: int) -> models.Batch:
        """This epoch's training prompts: the fixed set, or (train.fresh) new ones for every run,
        drawn on the device from its own stream, at the curriculum's stage where it has one."""
        if self.fresh is None:
            return self.train
        arrays = self.fresh.draw(epoch, curriculum_stage(self.runs[0]["spec"], step0))
        return self.model.prepare(arrays.__getitem__, diagnose=False)

    def start_epoch(self, epoch: int) -> None:
        """The hook at an epoch's start: where the epoch is on the log grid, record the state it
        starts from. With a full batch on fixed prompts the epoch's one step is taken here, before
        it is logged, and its forward is that state (`taken`, which train_epoch steps with): one
        forward, not two."""
        if epoch not in self.pos:
            return
        if self.full_batch:
            self.taken = self.model.step(self.params, self.train)
            self.log(epoch, self.taken.loss, self.taken.seen)
        else:
            self.log(epoch)

    def train_epoch(self, epoch: int) -> None:
        """One pass over the prompts (fresh ones with train.fresh): draw, step, trace, clip, update."""
        self.start_epoch(epoch)
        step0 = epoch * self.steps_per_epoch
        data = self.prompts(epoch, step0)
        for i, idx in enumerate(batch_index(self.seeds, epoch, self.M, self.batch, self.dev)):
            b = data if idx is None else data.take(idx)
            step, self.taken = self.taken or self.model.step(self.params, b), None    # start_epoch's, else this batch's
            loss, grads, seen, query_loss = step
            self.trace.add(self.losses(loss, b, query_loss), self.traced(b, seen))
            grads = optim.flatten(grads)                  # (R, total): a few operations a step, not a few per tensor
            self.stop_diverged(loss, grads, epoch)
            if self.tr.clip:
                grads = optim.clip_grads(grads, float(self.tr.clip))
            self.opt.step(self.params, grads, self.active, self.schedule.at(step0 + i))
        self.trace.close(epoch, self.active)

    def measure_llc(self, epoch: int) -> None:
        """The LLC of every run at the weights it has at the start of `epoch`, if that epoch is one
        of train.llc's checkpoints (icl.train.llc: SGLD over the run's training prompts)."""
        if self.llc is None or epoch not in self.llc.epochs:
            return
        seeds = torch.as_tensor(self.seeds, dtype=torch.int64, device=self.dev)
        args = (self.model, self.params, self.train, self.tr.llc, seeds, epoch, self.active)
        last = epoch == int(self.llc.epochs[-1]) and self.tr.llc.plateau
        self.llc.record(epoch, llc.measure(*args), llc.measure_plateau(*args) if last else None)

    def losses(self, loss, batch, query_loss=None) -> dict:
        """What the trace keeps of a step's losses: the objective, the query's ½MSE (the objective
        itself unless the kind reads more positions) and that of predicting 0 on these prompts."""
        if query_loss is None:
            with torch.no_grad():
                query_loss = self.model.query_loss(self.model.predict(self.params, batch)[0], batch)
        return {"train_loss": loss, "query_loss": query_loss, "zero_loss": 0.5 * (batch["target"] ** 2).mean(1)}

    def stop_diverged(self, loss, grads: torch.Tensor, epoch: int) -> None:
        """Runs whose loss or gradient (flat, (R, total)) is not finite are frozen and marked with
        this epoch, on the device (no host round trip: the marks reach the logs at the next sync)."""
        bad = ~torch.isfinite(loss) | ~torch.isfinite(grads).all(1)
        self.diverged_at.masked_fill_(bad & self.active, epoch)
        self.active &= ~bad

    def n_live(self) -> int:
        return int(self.active.sum())

    def result(self, elapsed: float) -> dict:
        """The shard's .npz: logged arrays, final parameters, where, how and how long it trained."""
        dev = self.dev
        self.sync()
        return {
            "run_id": np.asarray([r["run_id"] for r in self.runs]), "epoch": self.logs.epochs,
            "diverged_at": self.logs.diverged_at, "seconds": np.asarray(elapsed), "device": np.asarray(str(dev)),
            "device_name": np.asarray(torch.cuda.get_device_name(dev) if dev.type == "cuda" else cpu_name()),
            "threads": np.asarray(torch.get_num_threads()), "precision": np.asarray(self.model.precision),
            "compiled": np.asarray(("graphs" if self.model.__dict__.get("_graphs") else "yes")
                                   if "_compiled" in self.model.__dict__ else ""),
            "fresh_stream": np.asarray(STREAM_KIND if self.fresh is not None else ""),
            "code_version": np.asarray(code_version()), "code_hash": np.asarray(code_hash()),
            **self.logs.arrays,
            **{f"trace_{k}": v for k, v in self.trace.arrays.items()},
            **{k: np.asarray([self.references[r["data_id"]].get(k, np.nan) for r in self.runs]) for k in REFERENCE_KEYS},
            "tokens_K": np.asarray(self.model.K or 0), "prompts_N": np.asarray(self.runs[0]["spec"]["prompts"]["N"]),
            "train_fresh": np.asarray(bool(self.tr.fresh)),
            **{f"param_{k}": v.detach().cpu().numpy() for k, v in self.params.items()},
            **(self.llc.result() if self.llc else {}),
        }




def chunk_size(runs: list[dict], dev) -> int:
    """How many of a shard's runs one ensemble trains at once on `dev`: on a CPU the kind's
    ensemble_cap (past it a step is slower per run than smaller ensembles side by side); on CUDA as
    many as fit in 80 % of the free device memory (Model.train_bytes a run). The plan's shards do not
    depend on the device; the job decides this."""
    spec = runs[0]["spec"]
    kind = models.MODELS[spec["model"]["kind"]]
    if dev.type == "cuda":
        free, _ = torch.cuda.mem_get_info(dev)
        return max(1, int(0.8 * free // max(1, kind.train_bytes(spec))))
    return kind.ensemble_cap(spec) or len(runs)


def per_run_bytes(runs: list[dict]) -> int:
    """One run's estimated memory in a training ensemble of these runs (the kind's Model.train_bytes)."""
    return max(1, models.MODELS[runs[0]["spec"]["model"]["kind"]].train_bytes(runs[0]["spec"]))


def fitting(runs: list[dict], size: int, mem_mb: int | None, label: str) -> int:
    """`size` cut to the runs that fit in the memory this CPU job has (icl.jobs.memory.limit, less
    what the process holds already, at the kind's estimate a run, Model.train_bytes); a shard of
    which not one run fits is refused in one line naming the estimate and the limit. Chunks cut
    for memory train one at a time (side by side they would need the memory twice)."""
    total, what = memory.limit(mem_mb)
    if total is None:
        return size
    per_run = per_run_bytes(runs)
    room = total - memory.resident()
    fit = int(room // per_run)
    if fit < 1:
        raise RuntimeError(f"[{label}] does not fit: one run needs an estimated {memory.gb(per_run)} and the job has "
                           f"{memory.gb(max(room, 0))} left of {memory.gb(total)} ({what}); give the job more memory "
                           "(mem_mb) or make its runs smaller (prompts.N, prompts.train, the model's width)")
    if fit < size:
        print(f"[{label}] {len(runs)} runs at an estimated {memory.gb(per_run)} each do not fit in the "
              f"{memory.gb(room)} left ({what}): trained {fit} at a time", file=sys.stderr, flush=True)
    return min(size, fit)


def memory_words(runs: list[dict], mem_mb: int | None) -> tuple[str, str]:
    """(the estimated memory of the runs a CPU job trains at once, the job's limit) in words, for the
    line that reports a job the kernel killed (icl.jobs.supervise)."""
    per_run = per_run_bytes(runs)
    at_once = min(len(runs), chunk_size(runs, torch.device("cpu")))
    total, what = memory.limit(mem_mb)
    return (f"{memory.gb(per_run * at_once)} for {at_once} runs at once",
            f"{memory.gb(total)}, {what}" if total else "none found")


def train_shard(runs: list[dict], data_paths: dict, out_path: str, device: str = "auto",
                threads: int | None = None, label: str = "shard", mem_mb: int | None = None) -> dict:
    """runs: [{run_id, data_id, spec}] of one shard. Trains them, checkpointing as it goes, and
    writes an .npz with the logged arrays (ShardTraining.result). A shard larger than what suits the
    device (chunk_size) trains in chunks, each with a file of its own beside the output until the
    shard's is written (so a killed job keeps its finished chunks); on a CPU with several threads
    the chunks train side by side in forked one-thread processes. One trainer at a time per shard
    (icl.store.files.shard_lock): a second one waits, and finds the shard done."""
    with shard_lock(out_path, label) as todo:       # a double submission trains the shard once
        if not todo:
            with np.load(out_path) as z:
                return {k: z[k] for k in z.files}
        return _train_shard(runs, data_paths, out_path, device, threads, label, mem_mb)


def _train_shard(runs, data_paths, out_path, device, threads, label, mem_mb) -> dict:
    dev = pick_device(device)
    size = chunk_size(runs, dev)
    fit = fitting(runs, size, mem_mb, label) if dev.type == "cpu" else size
    size, cut = fit, fit < size
    if size >= len(runs):
        return train_ensemble(runs, data_paths, out_path, dev, threads, label)
    parts = [runs[i:i + size] for i in range(0, len(runs), size)]
    paths = chunk_paths(parts, out_path)
    todo = [(part, p, f"{label}/{i + 1}-of-{len(parts)}") for i, (part, p) in enumerate(zip(parts, paths))
            if not os.path.exists(p)]
    print(f"[{label}] {len(runs)} runs in {len(parts)} chunks of at most {size} on {dev} "
          f"({len(parts) - len(todo)} done before)", file=sys.stderr, flush=True)
    workers = min(threads or 1, len(todo)) if dev.type == "cpu" and not cut else 1
    if workers > 1:
        with Forked(_chunk_job, [(part, data_paths, p, dev, 1, lbl) for part, p, lbl in todo], workers) as work:
            try:
                work.results()
            except BrokenProcessPool:
                total, what = memory.limit(mem_mb)
                raise RuntimeError(f"[{label}] a training worker was killed, probably out of memory: {workers} chunks of "
                                   f"at most {size} runs at once, limit {memory.gb(total) if total else 'unknown'} "
                                   f"({what or 'none found'}); the finished chunks are kept: rerun with more memory "
                                   "or fewer threads") from None
    else:
        for part, p, lbl in todo:
            train_ensemble(part, data_paths, p, dev, threads, lbl)
    return merge_chunks(paths, out_path, workers)


def _chunk_job(item) -> None:
    part, data_paths, path, dev, threads, label = item
    train_ensemble(part, data_paths, path, dev, threads, label)


def train_ensemble(runs: list[dict], data_paths: dict, out_path: str, dev, threads: int | None = None,
                   label: str = "shard") -> dict:
    """Train these runs as one ensemble, whatever their number, and write its .npz (atomically; its
    checkpoint beside it). train_shard calls it on each chunk; benchmarks/memory.py on a shard whole,
    since the per-run memory it measures is an ensemble's."""
    if threads:
        torch.set_num_threads(threads)
    print(f"[{label}] {len(runs)} runs on {dev}"
          + (f" ({torch.cuda.get_device_name(dev)}, CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES', 'unset')})"
             if dev.type == "cuda" else f" ({torch.get_num_threads()} thread{'s' if torch.get_num_threads() != 1 else ''})"), file=sys.stderr, flush=True)
    ckpt = Checkpoint(out_path + ".ckpt", [r["run_id"] for r in runs], label)
    t_setup = time.time()
    sh = ShardTraining(runs, data_paths, dev, ckpt.load(dev))
    print(f"[{label}] precision {sh.model.precision}", file=sys.stderr, flush=True)
    compile_step(sh, dev.type == "cuda" if sh.tr.compile is None else sh.tr.compile, label)
    prog, t0 = Progress(label, sh.epochs), time.time()
    every = sh.tr.checkpoint_every
    with StopRequests(job_deadline()) as stop:
        for epoch in range(sh.start, sh.epochs):
            t_epoch = time.time()
            sh.train_epoch(epoch)
            done = epoch + 1
            sh.measure_llc(done)
            prog.update(done, sh.start, sh.n_live, len(runs))
            why = stop.due(time.time() - t_epoch)
            if (done % every == 0 or why) and done < sh.epochs:
                ckpt.save(snapshot(sh, done, sh.elapsed0 + time.time() - t0))
            if why and done < sh.epochs:
                raise Stopped(f"[{label}] stopped by {why} after epoch {done} of {sh.epochs}: checkpoint saved "
                              f"to {ckpt.path}; the same job run again resumes there")
    if sh.epochs in sh.pos:
        sh.log(sh.epochs)                   # the state training ended in
    prog.update(sh.epochs, sh.start, sh.n_live, len(runs), force=True)
    t_loop = time.time()
    out = sh.result(sh.elapsed0 + t_loop - t0)
    with atomic_path(out_path) as tmp:
        np.savez(tmp, **out)
    ckpt.remove()
    print(f"[{label}] done: setup {t0 - t_setup:.2f}s, training {t_loop - t0:.2f}s, writing {time.time() - t_loop:.2f}s, "
          f"{torch.get_num_threads()} thread{'s' if torch.get_num_threads() != 1 else ''}",
          file=sys.stderr, flush=True)
    return out


def compile_step(sh: ShardTraining, want, label: str) -> bool:
    """torch.compile the model's forward and loss, the optimizer's update and the fresh prompts'
    draw, where `want` (train.compile: True, or "graphs" for CUDA graphs of the forward and
    backward; absent: on CUDA). Where torch cannot compile, at the first step or a later one, that
    call is made again eagerly and so is the rest of the training (icl.models.compiled): one path
    for every epoch."""
    if not want:
        return False

    def eager(e: Exception) -> None:
        print(f"[{label}] compiling the step failed ({type(e).__name__}: {str(e).splitlines()[0][:300] if str(e) else ''}); "
              "training eagerly", file=sys.stderr, flush=True)
        sh.model.uncompile()
        sh.opt.uncompile()
        if sh.fresh is not None:
            sh.fresh.uncompile()
    try:
        sh.model.compile(graphs=want == "graphs", failed=eager)
        sh.opt.compile(failed=eager)
        if sh.fresh is not None:
            sh.fresh.compile(failed=eager)
    except Exception as e:          # no compiler backend here: eager, and say why
        print(f"[{label}] not compiled ({type(e).__name__}: {e}); training eagerly", file=sys.stderr, flush=True)
        return False
    print(f"[{label}] step compiled with torch.compile{' and CUDA graphs' if want == 'graphs' else ''} "
          "(the first epoch's time includes compiling it)", file=sys.stderr, flush=True)
    return True
