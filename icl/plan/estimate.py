"""What a config costs before it runs: per experiment and in total, the training time on this
machine and what each training job asks its scheduler for.

Calibrated, not guessed: for each shape of ensemble an experiment plans (icl.plan.shards.shape_key), its
largest shard trains a few epochs here (one run of it first; the whole shard where that takes
seconds), from its own prompt files, with the threads its job would get; the timed parts (prompt
files, set-up, one epoch, one logged state, the result) are scaled to every shard of that shape by
its runs, epochs and logged states, and one Python start-up (measured) is added per job. The LLC's
SGLD steps (train.llc) are training steps of the same kind on their chains' prompts, priced as such
(llc_work). Evaluation under shift is a step of its own and not included.

Where `--device cuda` is asked for and torch sees no CUDA device, nothing can be timed on one: each
shape's training FLOPs are counted here instead (torch's FlopCounterMode, on this CPU) and divided
by the rate the GPT ensemble reached on one H100, every step taking at least what the smallest GPT's
step took there (`FlopCalibration`); the rows say `basis: FLOPs`, and the command says so.

    icl check --estimate config/paper.yaml
    icl check --estimate config/paper.yaml --device cuda     # on a GPU node: that node's figures
"""
from __future__ import annotations

import copy
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass

import numpy as np

from icl import models
from icl.data import data_spec
from icl.plan.shards import Run, plan, shape_key, shard_mem_mb, shards, train_threads
from icl.jobs.runtime import cuda_here, log_epochs, log_grid, pick_device, precision_on, stable_hash
from icl.settings import Train

CALIBRATION_EPOCHS = 3
TIMED_S, MAX_EPOCHS = 1.0, 50   # a cheap shape is timed over about a second of epochs (their median), not one:
                                # one timed step of a one-run GPT shard is one sample of a noisy machine
# Without a CUDA device to time on: matmul FLOP/s by precision, of the GPT ensemble at the seed's §5
# shape on one H100 80GB (benchmarks/gpt_throughput.py, 32 runs, compiled: bf16 117 on 2026-11-27,
# tf32 50.7 on 2026-11-25; float32 from issue 34's measurement, 80 run-steps/s at ~0.31 TFLOP a
# run-step), and the least a step took there (the default zfb_gpt's shape, 256 runs, bf16 compiled:
# 26,944 run-steps/s, 9.5 ms a step, 2026-11-27), which no smaller step undercuts: kernel launches
# and elementwise work, not FLOPs, bound it.
GPU_FLOP_RATE = {"float32": 25e12, "tf32": 50e12, "bf16": 117e12}
GPU_STEP_FLOOR_S = 0.0095
SMALL = 4             # prompts of the first, cheapest timing
BUDGET_S = 5.0        # seconds of training a shape's calibration may take beyond its first run


@dataclass
class Calibration:
    """Seconds measured on one shard of `runs` runs: prompt files and set-up, one epoch (the
    median of those after the first), one logged state, and writing the result."""
    runs: int
    prepare_s: float
    epoch_s: float
    log_s: float
    write_s: float

    def seconds(self, n_runs: int, epochs: int, log_every: int, startup_s: float, llc_epochs: float = 0.0) -> float:
        """A job of n_runs runs of this shape: its start-up plus the calibrated parts, scaled by
        runs (an ensemble's work grows with its runs) and by epochs, logged states and the LLC's
        SGLD steps as that many epochs' worth of training steps (`llc_epochs`, llc_epochs())."""
        logged = len(log_epochs(epochs, log_every))
        per_shard = self.prepare_s + (epochs + llc_epochs) * self.epoch_s + logged * self.log_s + self.write_s
        return startup_s + per_shard * n_runs / self.runs


@dataclass
class FlopCalibration:
    """A CUDA job's training predicted from its FLOPs, for a machine without a CUDA device: one
    run's matmul FLOPs an epoch (counted on this CPU), its steps an epoch and the precision's rate.
    Training steps only (prompt files, logging and writing are small beside them on a GPU)."""
    run_epoch_flops: float
    steps_per_epoch: int
    rate: float

    def seconds(self, n_runs: int, epochs: int, log_every: int, startup_s: float, llc=None) -> float:
        """Training steps at the rate, each at least the least step; the LLC's SGLD steps (`llc`:
        (steps, prompts a step in training steps' units), llc_work()) the same, each its own launch."""
        step_flops = self.run_epoch_flops / self.steps_per_epoch
        out = startup_s + epochs * self.steps_per_epoch * max(n_runs * step_flops / self.rate, GPU_STEP_FLOOR_S)
        if llc:
            steps, size = llc
            out += steps * max(n_runs * step_flops * size / self.rate, GPU_STEP_FLOOR_S)
        return out


def llc_work(spec: dict) -> tuple[int, float]:
    """The LLC's SGLD steps in a job of this spec (train.llc; (0, 0) without): how many (each
    checkpoint's burn-in and draws, the plateau check's too, for each pass of `together` chains) and how large, in training
    steps: together x m prompts a run against the training step's batch. An SGLD step is a training
    step of the same kind on those prompts (the model's own `step`), so it is priced as one."""
    tr = Train.of(spec["train"])
    if not tr.llc:
        return 0, 0.0
    s, n = tr.llc, spec["prompts"]["train"]
    passes = s.passes()
    steps = len(log_grid(tr.epochs, s.points)) * (s.burnin + s.draws) * len(passes)
    if s.plateau:                                   # the last checkpoint again at γ × plateau (icl.settings.LLC.plateau_check)
        check = s.plateau_check()
        steps += (check.burnin + check.draws) * len(passes)
    return steps, len(passes[0]) * s.minibatch(n) / (tr.batch_size or n)


def llc_epochs(spec: dict) -> float:
    """The LLC's SGLD steps as epochs of training (llc_work over the steps an epoch takes)."""
    steps, size = llc_work(spec)
    return steps * size / Train.of(spec["train"]).steps_per_epoch(spec["prompts"]["train"])


WORK_UNIT = 1e6      # floats of step activations per unit of a training job's priority (2 decimals kept)


def train_work(members: list[Run]) -> float:
    """A training job's work, needing no timing: its runs x the prompts each steps through (its
    epochs, and the LLC's SGLD steps priced as training: llc_epochs) x the floats a prompt's step
    keeps (the kind's `step_floats`, icl.models.memory). Of the default config's 28 training jobs
    (2026-11-28, 2 cores: 7-226 s) it puts the five longest first, in their measured order (the
    GPTs' and ldl_cosine's block, 4.9-5.4 s per 1e9); below 30 s neighbours swap, where start-up
    and elementwise work rather than the step's activations set a job's time."""
    spec = members[0].spec
    per_prompt = models.MODELS[spec["model"]["kind"]].step_floats(spec)
    return len(members) * (spec["train"]["epochs"] + llc_epochs(spec)) * spec["prompts"]["train"] * per_prompt


def priorities(runs: list[Run]) -> dict[str, float]:
    """Each training job's scheduling priority (shard -> 1 + its work in WORK_UNITs): the longest
    first, so that on a few cores the long jobs start together and the short ones fill in around
    them, rather than a long one starting last and holding up the end (2026-11-28: `make run`'s
    3-layer GPT started at 330 s of 574 and its experiment ended the run)."""
    return {shard: round(1 + train_work(members) / WORK_UNIT, 2) for shard, members in shards(runs).items()}


def startup_seconds() -> float:
    """What a training job spends before its first line of work: a Python that imports torch and
    the training code (the better of two tries)."""
    times = []
    for _ in range(2):
        t = time.perf_counter()
        subprocess.run([sys.executable, "-c", "import icl.train.loop, icl.data"], check=True)
        times.append(time.perf_counter() - t)
    return min(times)


def calibrate(members: list[Run], device: str, threads: int) -> Calibration:
    """Time this shard's training, cheapest first. One run on SMALL and on 4 x SMALL prompts, one
    epoch each after a warm-up, gives a line (fixed cost + cost per prompt); where that line says
    an epoch of one run on its own prompts takes over a second (a GPT at the paper's size on a
    CPU), the line's figures stand. Else one run on its own prompts; and where the whole shard
    would train CALIBRATION_EPOCHS epochs within BUDGET_S, the whole shard (an ensemble's fixed
    costs spread over its runs); each timed over about TIMED_S seconds of epochs (at most
    MAX_EPOCHS, at least CALIBRATION_EPOCHS - 1, their median)."""
    p = members[0].spec["prompts"]
    big = 4 * SMALL
    if p["train"] > big and p["test"] > big:
        a, b = (_timed(members[:1], device, threads, epochs=2, prompts=n) for n in (SMALL, big))
        at = lambda x, y, n: x + (y - x) * (n - SMALL) / (big - SMALL)      # the line through both
        if at(a.epoch_s, b.epoch_s, p["train"]) > 1.0:
            return Calibration(1, at(a.prepare_s, b.prepare_s, (p["train"] + p["test"]) / 2),
                               at(a.epoch_s, b.epoch_s, p["train"]), at(a.log_s, b.log_s, (p["train"] + p["test"]) / 2),
                               b.write_s)
    one = _timed(members[:1], device, threads, epochs=MAX_EPOCHS + 1, within_s=TIMED_S)
    shard_epoch = len(members) * one.epoch_s
    if len(members) == 1 or shard_epoch * CALIBRATION_EPOCHS > BUDGET_S:
        return one
    return _timed(members, device, threads, MAX_EPOCHS + 1, within_s=TIMED_S)


def flop_calibrate(members: list[Run]) -> FlopCalibration:
    """One run of this shard, its training epoch's matmul FLOPs counted on this CPU: on its own
    prompts, or, where it has more than 4 x SMALL, on SMALL and 4 x SMALL and carried along the
    line through both (an epoch's FLOPs grow linearly with the prompts it passes over)."""
    spec = members[0].spec
    p, tr = spec["prompts"], Train.of(spec["train"])
    big = 4 * SMALL
    if p["train"] > big and p["test"] > big:
        a, b = (_counted(members[:1], n) for n in (SMALL, big))
        flops = a + (b - a) * (p["train"] - SMALL) / (big - SMALL)
    else:
        flops = _counted(members[:1], None)
    steps = tr.steps_per_epoch(p["train"])
    from icl.models import MODELS       # local: torch, which _counted has loaded already
    precision = precision_on(tr.precision, "cuda", MODELS[spec["model"]["kind"]].bf16_blocks)
    return FlopCalibration(flops, steps, GPU_FLOP_RATE[precision])


def _counted(members: list[Run], prompts: int | None) -> float:
    """Matmul FLOPs of one training epoch of these runs on this CPU (FlopCounterMode), after a
    first epoch; float32 and eager, as a FLOP is a FLOP at any precision."""
    from torch.utils.flop_counter import FlopCounterMode
    from icl.data import ensure_datasets
    from icl.train.loop import ShardTraining
    runs = _cut(members, 2, prompts)
    for r in runs:
        r["spec"]["train"].update(precision="float32", compile=False)
    with tempfile.TemporaryDirectory(prefix="icl-estimate-") as tmp:
        sh = ShardTraining(runs, ensure_datasets(runs, tmp), pick_device("cpu"))
        sh.train_epoch(0)
        with FlopCounterMode(display=False) as fc:
            sh.train_epoch(1)
    return float(fc.get_total_flops())


def _cut(members: list[Run], epochs: int, prompts: int | None) -> list[dict]:
    """These runs as a job would train them, with `epochs` epochs (all logged at the end) and, given
    `prompts`, that many training and test prompts."""
    runs = []
    for r in members:
        spec = copy.deepcopy(r.spec)
        spec["train"].update(epochs=epochs, log_every=epochs)
        spec["train"].pop("curriculum", None)     # timed at its end, full prompts: its early, shorter steps cost less
        if prompts:
            spec["prompts"].update(train=prompts, test=prompts)
            if Train.of(spec["train"]).batch_size:
                spec["train"]["batch_size"] = min(spec["train"]["batch_size"], prompts)
        runs.append({"run_id": r.run_id, "data_id": stable_hash(data_spec(spec)), "spec": spec})
    return runs


def _timed(members: list[Run], device: str, threads: int, epochs: int, prompts: int | None = None,
           within_s: float = 0.0) -> Calibration:
    """Train these runs for `epochs` epochs (their own specs, epochs cut, and with `prompts` the
    training and test prompts too) from their own prompt files in a temporary folder, and time
    the parts; with `within_s`, stop timing epochs once they took that long (at least
    CALIBRATION_EPOCHS - 1 of them, or as many as `epochs` allows)."""
    import torch
    from icl.data import ensure_datasets
    from icl.train.loop import ShardTraining
    torch.set_num_threads(threads)
    dev = pick_device(device)
    runs = _cut(members, epochs, prompts)
    with tempfile.TemporaryDirectory(prefix="icl-estimate-") as tmp:
        t = time.perf_counter()
        paths = ensure_datasets(runs, tmp)
        sh = ShardTraining(runs, paths, dev)
        prepare = time.perf_counter() - t
        sh.train_epoch(0)                                   # the first epoch warms up, untimed
        times = []
        for e in range(1, epochs):
            t = time.perf_counter()
            sh.train_epoch(e)
            if dev.type == "cuda":
                torch.cuda.synchronize()
            times.append(time.perf_counter() - t)
            if within_s and len(times) >= CALIBRATION_EPOCHS - 1 and sum(times) >= within_s:
                break
        t = time.perf_counter()
        sh.log(epochs)
        log = time.perf_counter() - t
        t = time.perf_counter()
        np.savez(os.path.join(tmp, "result.npz"), **sh.result(0.0))
        write = time.perf_counter() - t
    return Calibration(len(members), prepare, float(np.median(times)), log, write)


def estimate(cfg: dict, device: str = "auto", progress=None) -> list[dict]:
    """One row per training job of every experiment of a validated config: experiment, shard,
    runs, predicted seconds, the memory it asks for (mem_mb) and the basis of the figure ('timed'
    here, or 'FLOPs' for `cuda` where there is none to time on). Calibrates each shape once."""
    by_flops = device == "cuda" and not cuda_here()
    startup = startup_seconds()
    rows = []
    for name in cfg["experiments"]:
        by_shard = shards(plan(cfg, name))
        threads = train_threads(len(by_shard))
        by_shape: dict[str, list[str]] = {}
        for shard, members in by_shard.items():
            by_shape.setdefault(stable_hash(shape_key(members[0].spec)), []).append(shard)
        for names in by_shape.values():
            largest = max(names, key=lambda s: len(by_shard[s]))
            if progress:
                what = "counting the FLOPs of an epoch of" if by_flops else "timing a few epochs of"
                progress(f"{name}: {what} {largest} ({len(by_shard[largest])} runs)")
            cal = flop_calibrate(by_shard[largest]) if by_flops else calibrate(by_shard[largest], device, threads)
            for shard in names:
                members = by_shard[shard]
                tr = members[0].spec["train"]
                rows.append({"experiment": name, "shard": shard, "runs": len(members), "threads": threads,
                             "seconds": cal.seconds(len(members), tr["epochs"], tr["log_every"], startup,
                                                    llc_work(members[0].spec) if by_flops else llc_epochs(members[0].spec)),
                             "mem_mb": shard_mem_mb(members), "basis": "FLOPs" if by_flops else "timed"})
    return rows


def flop_note() -> str:
    """What a FLOP-based estimate assumed, for the command to print with it."""
    rates = ", ".join(f"{k} {v / 1e12:g}" for k, v in GPU_FLOP_RATE.items())
    return ("FLOP-based, not timed: torch sees no CUDA device here. Each shape's training FLOPs were counted on "
            f"this CPU and divided by the GPT ensemble's rate on one H100 ({rates} TFLOP/s), every step taking "
            f"at least {GPU_STEP_FLOOR_S * 1e3:g} ms (zfb_gpt's shape there); prompt files, logging and writing "
            "left out. A lower bound where a model is far from that rate; time it on the GPU node itself.")


def report(rows: list[dict], cores: int) -> str:
    """The estimate as text, per experiment and in total: runs, jobs, job time, wall time at
    `cores` cores (jobs side by side, a core per thread; never less than the longest job), the
    longest job and the largest memory request."""
    import pandas as pd
    df = pd.DataFrame(rows)
    head = f"{'experiment':<24} {'runs':>6} {'jobs':>5} {'job time':>9} {'wall, ' + str(cores) + ' cores':>13} " \
           f"{'longest job':>11} {'largest mem_mb':>14}"

    def line(name, g):
        wall = max(g["seconds"].max(), (g["seconds"] * g["threads"]).sum() / cores)
        return (f"{name:<24} {g['runs'].sum():>6} {len(g):>5} {_hms(g['seconds'].sum()):>9} {_hms(wall):>13} "
                f"{_hms(g['seconds'].max()):>11} {g['mem_mb'].max():>14}")
    body = [line(name, g) for name, g in df.groupby("experiment", sort=False)]
    return "\n".join([head, *body, line("total", df)])


def _hms(s: float) -> str:
    s = int(round(s))
    return f"{s // 3600}h{s % 3600 // 60:02d}m" if s >= 3600 else f"{s // 60}m{s % 60:02d}s"
