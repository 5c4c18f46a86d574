"""The GPT ensemble against the per-run loop a researcher writes for it, on the same device.

The loop is `../shared/reference/gpt_loop.py` (nanoGPT-style blocks with torch's fused causal
attention, Garg's interleaving, Adam, fresh Gaussian linear-regression prompts drawn on the device
every step), timed in each of its set-ups: float32, `--bf16`, `--compile`, both; one process, and
`--procs` processes side by side (the set-up of the best single process), each with its own runs.
The ensemble is `icl.train.loop.ShardTraining` on the same recipe (fresh prompts every step, Adam, the
loss at every x position), R runs at once, at each `--precision`, compiled or not; it is timed over
its steps after a warm-up (where it compiles), logging as zfb_gpt does (every 100 steps).

Equal numbers first: the ensemble's step and benchmarks/reference_models.GPTReference (the
nanoGPT module, loaded with the ensemble's initial parameters) must give the same losses over 5
Adam steps on the same prompts (max relative difference below 2e-3), else nothing is timed.

Each row: run-steps/s, achieved TFLOP/s (the step's matmul FLOPs as torch's FlopCounterMode counts
them; the loop's with the same counter on its module), and that as a share of the device's measured
matmul rate in the same precision (a batched matmul of the ensemble's largest shape: the rate its
own form can reach) and of the card's dense bf16 rate (8192³ products).

Shapes: `zfb` (the default zfb_gpt's: 2 layers, 2 heads, width 32, d = 3, N = 10, 64 prompts a
step), `zfb64` (4 heads, width 64, d = 5, N = 20: its shape before), `s5` (the seed's §5 shape: 12
layers, 8 heads, width 256, d = 20, N = 40), `s5n100` (N = 100). The ensemble's `--compile`: no
(eager), yes (compiled forward, backward and optimizer update), graphs (the same, the forward and
backward replayed as CUDA graphs). `--profile` prints, for the last ensemble timed at each shape,
where a step's time goes (torch.profiler over 10 steps: host time against device time, and the
kernels that take most).

    .venv/bin/python benchmarks/gpt_throughput.py --device cpu --shapes zfb --runs 16 --steps 30
    python benchmarks/gpt_throughput.py --device cuda --shapes zfb --runs 64 --procs 8
    python benchmarks/gpt_throughput.py --device cuda --shapes s5 s5n100 --runs 16 --procs 8
"""
from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time

import numpy as np
import torch
from torch.utils.flop_counter import FlopCounterMode

from icl.config import validate
from icl.data import write_dataset
from icl.plan.shards import plan
from icl.train.loop import ShardTraining, compile_step, load_prompts

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from reference_models import GPTReference  # noqa: E402

LOOP = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "shared", "reference", "gpt_loop.py")
LOOP = os.environ.get("GPT_LOOP", LOOP)     # the reference loop, where ../shared is not beside the checkout
SHAPES = {   # layers, heads, width, d, N, prompts a step
    "zfb": (2, 2, 32, 3, 10, 64),       # the default config's zfb_gpt
    "zfb64": (2, 4, 64, 5, 20, 64),     # zfb_gpt before 2026-11-27 (config/zfb_gpt_cpu.yaml's width)
    "s5": (12, 8, 256, 20, 40, 64),
    "s5n100": (12, 8, 256, 20, 100, 64),
}
LOOP_SETUPS = (("float32", []), ("bf16", ["--bf16"]), ("compiled", ["--compile"]), ("bf16+compiled", ["--bf16", "--compile"]))


def recipe(shape: str, runs: int, steps: int, precision: str | None = None, compiled: bool = False) -> dict:
    L, H, W, d, N, B = SHAPES[shape]
    train = {"epochs": steps, "log_every": min(100, steps), "checkpoint_every": 10**7, "fresh": True,
             "warmup": min(300, steps), "compile": compiled, **({"precision": precision} if precision else {})}
    return validate({"shard_size": 100000, "memory_budget_mb": 100000, "experiments": {"g": {
        "tokens": {"kind": "gaussian", "d": d}, "task": {"kind": "linear"}, "prompts": {"N": N, "train": B, "test": 64},
        "models": [{"name": "gpt", "kind": "gpt", "optimizer": "adam", "lr": 1e-3, "layers": L, "heads": H,
                    "width": W, "positions": 2 * N + 2}],
        "train": train, "sweep": {"seed": list(range(runs))}}}})


def shard(cfg: dict, tmp: str):
    runs = plan(cfg, "g")
    paths = {}
    for r in runs:
        paths[r.data_id] = os.path.join(tmp, f"{r.data_id}.npz")
        if not os.path.exists(paths[r.data_id]):
            write_dataset(r.data_spec, paths[r.data_id])
    return [{"run_id": r.run_id, "data_id": r.data_id, "spec": r.spec} for r in runs], paths


def sync(dev):
    if dev.type == "cuda":
        torch.cuda.synchronize()


def check_equal(dev, tmp: str) -> float:
    """The ensemble's losses against the nanoGPT module's over 5 Adam steps on fixed prompts."""
    cfg = recipe("zfb", 2, 5, "float32")
    cfg["experiments"]["g"]["train"]["fresh"] = False
    recs, paths = shard(cfg, tmp)
    sh = ShardTraining(recs, paths, dev)
    ens = []
    for e in range(5):
        loss, grads, *_ = sh.model.step(sh.params, sh.train)
        ens.append(loss.cpu().numpy())
        sh.opt.step(sh.params, grads, sh.active)
    init = sh.model.init([r["spec"]["seed"] for r in recs], ["gpt"] * 2, "cpu")
    L, H, W, d, N, B = SHAPES["zfb"]
    x, y = sh.train["x"].cpu(), sh.train["y"].cpu()
    worst = 0.0
    for i in range(2):
        m = GPTReference(d, W, L, H, 4, 2 * N + 2, flash=True).load_from(init, i)
        opt = torch.optim.Adam(m.parameters(), lr=1e-3)
        for e in range(5):
            loss = 0.5 * ((m(x[i], y[i]) - y[i]) ** 2).mean()
            worst = max(worst, abs(loss.item() - float(ens[e][i])) / abs(loss.item()))
            opt.zero_grad()
            loss.backward()
            opt.step()
    return worst


def step_flops(sh: ShardTraining) -> float:
    """Matmul FLOPs of one training step of the whole ensemble."""
    batch = sh.prompts(0, 0)
    with FlopCounterMode(display=False) as fc:
        sh.model.forward_loss({k: v.detach().requires_grad_(True) for k, v in sh.params.items()}, batch)[0].sum().backward()
    return fc.get_total_flops()


def loop_flops(shape: str) -> float:
    """Matmul FLOPs of one step of the loop's model, counted on the reference module (CPU)."""
    L, H, W, d, N, B = SHAPES[shape]
    m = GPTReference(d, W, L, H, 4, 2 * N + 2, flash=True)
    x, y = torch.randn(B, N + 1, d), torch.randn(B, N + 1)
    with FlopCounterMode(display=False) as fc:
        (0.5 * ((m(x, y) - y) ** 2).mean()).backward()
    return fc.get_total_flops()


def time_ensemble(shape, runs, steps, precision, compiled, dev, tmp, profile=False) -> dict:
    cfg = recipe(shape, runs, steps, precision, compiled)
    recs, paths = shard(cfg, tmp)
    sh = ShardTraining(recs, paths, dev)
    used = sh.model.precision
    flops = step_flops(sh)
    did = compile_step(sh, compiled, "bench") if compiled else False
    warm = 3
    for e in range(warm):
        sh.train_epoch(e)
    sync(dev)
    t = time.perf_counter()
    for e in range(warm, steps):
        sh.train_epoch(e)
    sync(dev)
    secs = time.perf_counter() - t
    rate = runs * (steps - warm) / secs
    if profile:                 # past the last logged epoch (`steps`): steps alone, as between logs
        where_the_step_goes(sh, steps + 1, dev)
    return {"rate": rate, "tflops": flops * (steps - warm) / secs / 1e12, "precision": used, "compiled": did,
            "peak_mb": torch.cuda.max_memory_allocated() / 2**20 if dev.type == "cuda" else float("nan")}


def where_the_step_goes(sh: ShardTraining, epoch0: int, dev, n: int = 10) -> None:
    """torch.profiler over n steps: the host's time a step against the device's, and the kernels
    (or, on a CPU, the operators) that take most of it."""
    from torch.profiler import ProfilerActivity, profile
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if dev.type == "cuda" else [])
    sync(dev)
    t = time.perf_counter()
    with profile(activities=acts) as prof:
        for e in range(epoch0, epoch0 + n):
            sh.train_epoch(e)
        sync(dev)
    wall = (time.perf_counter() - t) / n
    ev = prof.key_averages()
    key = "self_device_time_total" if dev.type == "cuda" else "self_cpu_time_total"
    busy = sum(getattr(e, key) for e in ev) / n / 1e3
    launches = sum(e.count for e in ev if dev.type == "cuda" and getattr(e, key) > 0) / n
    print(f"   profile, {n} steps: {1e3 * wall:.2f} ms a step wall, {busy:.2f} ms busy on the "
          f"{'device' if dev.type == 'cuda' else 'host'}" + (f", {launches:.0f} kernels a step" if dev.type == "cuda" else ""))
    for e in sorted(ev, key=lambda e: -getattr(e, key))[:12]:
        print(f"     {getattr(e, key) / n / 1e3:8.3f} ms  {e.count / n:6.1f}x  {e.key[:90]}")


def time_loop(shape, setup_flags, procs, steps, runs_each, device, threads) -> float:
    """run-steps/s of `procs` loop processes side by side, each over its own `runs_each` runs."""
    L, H, W, d, N, B = SHAPES[shape]
    cmd = [sys.executable, LOOP, "--device", device, "--layers", str(L), "--heads", str(H), "--width", str(W),
           "--d", str(d), "--N", str(N), "--batch", str(B), "--steps", str(steps), "--runs", str(runs_each),
           "--threads", str(threads), *setup_flags]
    ps = [subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(procs)]
    rates = []
    for p in ps:
        out, err = p.communicate()
        m = re.search(r"([0-9.]+) run-steps/s", out)
        if not m:
            raise RuntimeError(f"gpt_loop.py failed: {err.strip().splitlines()[-1] if err.strip() else out}")
        rates.append(float(m.group(1)))
    return sum(rates)      # each times its own steps; side by side they add up


def matmul_rate(dev, dtype, shape=None) -> float:
    """TFLOP/s of a batched matmul (R, M, K) @ (R, K, N) (`shape`), or of 8192³ products."""
    R, M, K, N = shape or ((1, 8192, 8192, 8192) if dev.type == "cuda" else (1, 2048, 2048, 2048))
    tf32 = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = dtype == "tf32"
    dt = torch.bfloat16 if dtype == "bf16" else torch.float32
    a, b = torch.randn(R, M, K, device=dev, dtype=dt), torch.randn(R, K, N, device=dev, dtype=dt)
    reps = 3 if dev.type == "cpu" else 20
    for _ in range(2):
        torch.bmm(a, b)
    sync(dev)
    t = time.perf_counter()
    for _ in range(reps):
        torch.bmm(a, b)
    sync(dev)
    torch.backends.cuda.matmul.allow_tf32 = tf32
    return 2 * R * M * K * N * reps / (time.perf_counter() - t) / 1e12


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    p.add_argument("--shapes", nargs="+", default=["zfb"], choices=list(SHAPES))
    p.add_argument("--runs", type=int, default=16, help="runs the ensemble trains at once")
    p.add_argument("--steps", type=int, default=60, help="steps of each timing (the first 3 of the ensemble's, "
                                                          "the first 10 of the loop's, are not timed)")
    p.add_argument("--procs", type=int, default=None, help="loop processes side by side, one thread each (default: 8 on "
                                                          "cuda; on cpu 2, and the ensemble gets as many threads)")
    p.add_argument("--loop-runs", type=int, default=2, help="runs each loop process trains one after another")
    p.add_argument("--precisions", nargs="+", default=None,
                   help="the ensemble's train.precision values (default: float32 on cpu; tf32 bf16 on cuda)")
    p.add_argument("--compile", nargs="+", choices=["no", "yes", "graphs"], default=None,
                   help="the ensemble's train.compile values timed (default: no yes graphs on cuda, no on cpu)")
    p.add_argument("--profile", action="store_true", help="where the last ensemble's step goes, at each shape")
    p.add_argument("--side-by-side-only", action="store_true",
                   help="time the first loop set-up in --procs processes only (no single-process rows)")
    p.add_argument("--loop-setups", nargs="+", default=None, choices=[s for s, _ in LOOP_SETUPS],
                   help="the loop's set-ups (default: all on cuda; float32 on cpu)")
    a = p.parse_args()
    dev = torch.device(a.device)
    cuda = dev.type == "cuda"
    procs = a.procs or (8 if cuda else 2)
    precisions = a.precisions or (["tf32", "bf16"] if cuda else ["float32"])
    compiles = [{"no": False, "yes": True, "graphs": "graphs"}[c] for c in (a.compile or (["no", "yes", "graphs"] if cuda else ["no"]))]
    setups = [s for s in LOOP_SETUPS if s[0] in (a.loop_setups or ([s for s, _ in LOOP_SETUPS] if cuda else ["float32"]))]
    if not cuda:
        torch.set_num_threads(procs)      # the ensemble gets the cores the loop's processes get
    name = torch.cuda.get_device_name(dev) if cuda else "cpu"
    with tempfile.TemporaryDirectory() as tmp:
        err = check_equal(dev, tmp)
        print(f"{name}: ensemble against the nanoGPT module, 5 Adam steps: max relative difference {err:.2e} "
              f"({'ok' if err < 2e-3 else 'MISMATCH'})", flush=True)
        if err >= 2e-3:
            sys.exit("the ensemble and the reference disagree; not timing")
        peak = {dt: matmul_rate(dev, dt) for dt in (["float32", "tf32", "bf16"] if cuda else ["float32"])}
        print(f"dense matmul ({'8192³' if cuda else f'2048³, {procs} threads'}): "
              + ", ".join(f"{k} {v:.3g} TFLOP/s" for k, v in peak.items()), flush=True)
        for shape in a.shapes:
            L, H, W, d, N, B = SHAPES[shape]
            own = (a.runs, B * (2 * N + 1), W, 4 * W)       # the ensemble's MLP matmul: its largest
            form = {dt: matmul_rate(dev, dt, own) for dt in peak}
            print(f"\n== {shape}: {L} layers, {H} heads, width {W}, d = {d}, N = {N}, {B} prompts a step; "
                  f"the ensemble's own matmul {own}: " + ", ".join(f"{k} {v:.3g}" for k, v in form.items()) + " TFLOP/s",
                  flush=True)
            print(f"{'path':<34} {'runs':>5} {'run-steps/s':>12} {'TFLOP/s':>8} {'% own form':>10} {'% bf16 peak':>11}")
            fl = loop_flops(shape)
            best, rows = ("", [], 0.0), []
            for label, flags in ([] if a.side_by_side_only else setups):
                try:
                    rate = time_loop(shape, flags, 1, a.steps, a.loop_runs, a.device, 1)
                except RuntimeError as e:
                    print(f"loop, {label}: {e}")
                    continue
                rows.append((f"loop, 1 process, {label}", a.loop_runs, rate, "bf16" if "bf16" in label else "float32"))
                if rate > best[2]:
                    best = (label, flags, rate)
            if a.side_by_side_only:
                best = (*setups[0], 0.0)
            if procs > 1 and best[0]:
                rate = time_loop(shape, best[1], procs, a.steps, a.loop_runs, a.device, 1)
                rows.append((f"loop, {procs} processes, {best[0]}", procs * a.loop_runs, rate,
                             "bf16" if "bf16" in best[0] else "float32"))
            strongest = max(r[2] for r in rows) if rows else float("nan")
            for label, n, rate, dt in rows:
                tf = fl * rate / 1e12
                print(f"{label:<34} {n:>5} {rate:>12.1f} {tf:>8.3g} {'—':>10} "      # its matmuls are not the ensemble's form
                      f"{100 * tf / peak.get('bf16', peak['float32']):>10.1f}%", flush=True)
            for precision in precisions:
                for comp in compiles:
                    last = precision == precisions[-1] and comp == compiles[-1]
                    r = time_ensemble(shape, a.runs, a.steps, precision, comp, dev, tmp, a.profile and last)
                    label = (f"ensemble, {r['precision']}{', compiled' if r['compiled'] else ''}"
                             f"{', CUDA graphs' if r['compiled'] and comp == 'graphs' else ''}")
                    dt = r["precision"] if r["precision"] in form else "float32"
                    print(f"{label:<34} {a.runs:>5} {r['rate']:>12.1f} {r['tflops']:>8.3g} "
                          f"{100 * r['tflops'] / form[dt]:>9.1f}% {100 * r['tflops'] / peak.get('bf16', peak['float32']):>10.1f}%"
                          f"   {r['rate'] / strongest:.2f}x the strongest loop"
                          + (f", GPU peak {r['peak_mb']:.0f} MB" if cuda else ""), flush=True)


if __name__ == "__main__":
    main()
