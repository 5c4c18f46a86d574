"""Sweep throughput: the project's ensemble training against a straightforward per-run loop.

The same workload (LDL §6 sizes: d=15, K=4, N=100, 300 prompts; 6 values of L x S seeds) is
trained two ways in one run of this script:
  loop      one nn.Module and one torch.optim optimizer per run, full sequences through the
            attention (every token attends to every token; the query row masked to the context),
            autograd, a Python loop over runs;
  ensemble  icl.train.train_shard: all runs of the shard at once, only the query position.
Both start from the same parameters and must give the same loss curves (checked first, float32
tolerance rtol 2e-3 on the loss after 5 epochs) before anything is timed. Each timing runs in a
fresh subprocess so that its peak memory (max RSS) is its own.

    .venv/bin/python benchmarks/throughput.py                  # all configurations, S in {5, 30}
    .venv/bin/python benchmarks/throughput.py --seeds 5 --epochs 20 --models softmax_q
    .venv/bin/python benchmarks/throughput.py --device cuda   # on a GPU machine
"""
from __future__ import annotations

import argparse
import json
import math
import os
import resource
import subprocess
import sys
import tempfile
import time

import numpy as np
import torch
from torch.utils.flop_counter import FlopCounterMode

from icl.config import validate
from icl.data import write_dataset
from icl.models import build
from icl.plan import plan
from icl.train import train_shard

LS = [0.1, 0.2, 0.4, 1.0, 1.5, 2.0]
MODELS = {
    "softmax_q": {"name": "m", "kind": "softmax_q", "optimizer": "gd", "lr": 5.0},
    "block32": {"name": "m", "kind": "transformer_block", "optimizer": "adam", "lr": 1e-3, "width": 32},
    "block64": {"name": "m", "kind": "transformer_block", "optimizer": "adam", "lr": 1e-3, "width": 64},
}


def workload(model_key: str, seeds: int, epochs: int, tmp: str):
    cfg = validate({"shard_size": 100000, "memory_budget_mb": 100000, "experiments": {"bench": {
        "tokens": {"kind": "discrete", "d": 15, "K": 4, "delta": 3.0},
        "task": {"kind": "cosine", "L": 1.0, "c": 0.5},
        "prompts": {"N": 100, "train": 300, "test": 300},
        "models": [MODELS[model_key]],
        "train": {"epochs": epochs, "log_every": epochs, "checkpoint_every": 10**7},
        "sweep": {"task.L": LS, "seed": list(range(seeds))}}}})
    runs = plan(cfg, "bench")
    paths = {}
    for r in runs:
        if r.data_id not in paths:
            paths[r.data_id] = os.path.join(tmp, f"{r.data_id}.npz")
            if not os.path.exists(paths[r.data_id]):
                write_dataset(r.data_spec, paths[r.data_id])
    return [{"run_id": r.run_id, "data_id": r.data_id, "shard": r.shard, "spec": r.spec} for r in runs], paths


# ---------------------------------------------------------------- the straightforward per-run loop

class SoftmaxQModule(torch.nn.Module):
    """LDL eq. 6 as written: F = y · softmax(Xᵀ Q X̄) over the full (N x N+1) score matrix."""

    def __init__(self, d):
        super().__init__()
        self.Q = torch.nn.Parameter(torch.zeros(d, d))

    def forward(self, x, y):
        X, Xbar = x[:, :-1], x                                  # (B, N, d), (B, N+1, d)
        scores = X @ self.Q @ Xbar.transpose(1, 2)              # (B, N, N+1)
        F = (y[:, None, :-1] @ torch.softmax(scores, dim=1)).squeeze(1)   # softmax over the N keys
        return F[:, -1]


class BlockModule(torch.nn.Module):
    """One pre-LN block on full sequences, as typical research code writes it."""

    def __init__(self, d, w, f):
        super().__init__()
        self.emb = torch.nn.Linear(d + 1, w)
        self.ln1, self.ln2, self.lnf = torch.nn.LayerNorm(w), torch.nn.LayerNorm(w), torch.nn.LayerNorm(w)
        self.q, self.k, self.v, self.o = (torch.nn.Linear(w, w, bias=False) for _ in range(4))
        self.ff1, self.ff2 = torch.nn.Linear(w, f), torch.nn.Linear(f, w)
        self.head = torch.nn.Linear(w, 1)
        self.w = w

    def forward(self, x, y):
        yin = y.clone()
        yin[:, -1] = 0
        h = self.emb(torch.cat([x, yin[..., None]], -1))
        z = self.ln1(h)
        T = h.shape[1]
        s = self.q(z) @ self.k(z).transpose(1, 2) / math.sqrt(self.w)
        mask = torch.zeros(T, T, dtype=torch.bool)
        mask[-1, -1] = True                                      # the query attends to the context only
        a = torch.softmax(s.masked_fill(mask, float("-inf")), -1)
        h = h + self.o(a @ self.v(z))
        h = h + self.ff2(torch.relu(self.ff1(self.ln2(h))))
        return self.head(self.lnf(h))[:, -1, 0]

    def load_from(self, p: dict, r: int):
        """Copy run r of the ensemble's initial parameters (same numbers, nn.Linear layout)."""
        with torch.no_grad():
            self.emb.weight.copy_(torch.cat([p["emb_x"][r], p["emb_y"][r][None]], 0).T)
            self.emb.bias.copy_(p["emb_b"][r])
            for ln, key in ((self.ln1, "ln1"), (self.ln2, "ln2"), (self.lnf, "lnf")):
                ln.weight.copy_(p[f"{key}_g"][r])
                ln.bias.copy_(p[f"{key}_b"][r])
            for lin, key in ((self.q, "wq"), (self.k, "wk"), (self.v, "wv"), (self.o, "wo")):
                lin.weight.copy_(p[key][r].T)
            self.ff1.weight.copy_(p["w1"][r].T)
            self.ff1.bias.copy_(p["b1"][r])
            self.ff2.weight.copy_(p["w2"][r].T)
            self.ff2.bias.copy_(p["b2"][r])
            self.head.weight.copy_(p["head_w"][r][None])
            self.head.bias.copy_(p["head_b"][r])


def loop_train(runs, paths, epochs):
    """Per-run loop; returns the train loss of every run at every epoch (before its step)."""
    from icl.data import read_dataset
    spec = runs[0]["spec"]["model"]
    ens = build(spec, 15)
    init = ens.init([r["spec"]["seed"] for r in runs], [r["spec"]["model"]["name"] for r in runs], "cpu")
    curves = np.zeros((len(runs), epochs))
    for i, r in enumerate(runs):
        ds = read_dataset(paths[r["data_id"]])
        x, y = torch.from_numpy(ds["train_x"]), torch.from_numpy(ds["train_y"])
        if spec["kind"] == "softmax_q":
            m = SoftmaxQModule(15)
            opt = torch.optim.SGD(m.parameters(), lr=spec["lr"])
        else:
            m = BlockModule(15, spec["width"], spec["width"] * 4)
            m.load_from(init, i)
            opt = torch.optim.Adam(m.parameters(), lr=spec["lr"])
        for e in range(epochs):
            opt.zero_grad()
            loss = 0.5 * ((m(x, y) - y[:, -1]) ** 2).mean()
            loss.backward()
            opt.step()
            curves[i, e] = loss.item()
    return curves


def ensemble_train(runs, paths, epochs, device, log_every):
    for r in runs:
        r["spec"]["train"] = {**r["spec"]["train"], "epochs": epochs, "log_every": log_every}
    with tempfile.TemporaryDirectory() as t:
        out = train_shard(runs, paths, os.path.join(t, "s.npz"), device=device, label="bench")
    return out


def flops_per_epoch(kind: str, runs, paths, device) -> float:
    """FLOPs of one training epoch (forward + backward), counted by torch's FlopCounterMode."""
    from icl.data import read_dataset
    spec = runs[0]["spec"]["model"]
    if kind == "loop":
        ds = read_dataset(paths[runs[0]["data_id"]])
        x, y = torch.from_numpy(ds["train_x"]), torch.from_numpy(ds["train_y"])
        m = SoftmaxQModule(15) if spec["kind"] == "softmax_q" else BlockModule(15, spec["width"], 4 * spec["width"])
        with FlopCounterMode(display=False) as fc:
            (0.5 * ((m(x, y) - y[:, -1]) ** 2).mean()).backward()
        return fc.get_total_flops() * len(runs)
    ens = build(spec, 15)
    p = ens.init([0] * len(runs), ["m"] * len(runs), device)
    xs = torch.from_numpy(np.stack([read_dataset(paths[r["data_id"]])["train_x"] for r in runs])).to(device)
    ys = torch.from_numpy(np.stack([read_dataset(paths[r["data_id"]])["train_y"] for r in runs])).to(device)
    with FlopCounterMode(display=False) as fc:
        ens.loss_and_grads(p, xs, ys)
    return fc.get_total_flops()   # softmax_q: its analytic gradient's einsums are the whole step


def matmul_peak(device) -> float:
    n = 2048
    a = torch.randn(n, n, device=device)
    b = torch.randn(n, n, device=device)
    for _ in range(2):
        a @ b
    reps = 10
    if device == "cuda":
        torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(reps):
        a @ b
    if device == "cuda":
        torch.cuda.synchronize()
    return 2 * n**3 * reps / (time.perf_counter() - t) / 1e9


def one(args) -> None:
    """Child process: time one (model, seeds, path) and print a JSON line."""
    torch.set_num_threads(args.threads)
    runs, paths = workload(args.model, args.seeds, args.epochs, args.data)
    t = time.perf_counter()
    if args.path == "loop":
        loop_train(runs, paths, args.epochs)
    else:
        ensemble_train(runs, paths, args.epochs, args.device, args.epochs)
        if args.device == "cuda":
            torch.cuda.synchronize()
    secs = time.perf_counter() - t
    flops = flops_per_epoch(args.path, runs, paths, args.device) * args.epochs
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    gpu_peak = torch.cuda.max_memory_allocated() / 2**20 if args.device == "cuda" else 0.0
    print(json.dumps({"seconds": secs, "runs": len(runs), "flops": flops, "peak_rss_mb": peak, "gpu_peak_mb": gpu_peak}))


def check_equal(model, seeds, data, device) -> float:
    """Both paths from the same start: max relative difference of the loss over 5 epochs."""
    runs, paths = workload(model, min(seeds, 2), 5, data)
    a = loop_train(runs, paths, 5)
    b = ensemble_train(runs, paths, 5, device, 1)["train_loss"][:, :5]
    return float(np.max(np.abs(a - b) / np.abs(a)))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--models", nargs="+", default=list(MODELS), choices=list(MODELS))
    p.add_argument("--seeds", nargs="+", type=int, default=[5, 30], help="S: seeds per value of L")
    p.add_argument("--epochs", type=int, default=50,
                   help="epochs timed per configuration (setup and the two evaluations are amortized over them, as in a real run of 400)")
    p.add_argument("--threads", type=int, default=torch.get_num_threads())
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    p.add_argument("--loop-max-runs", type=int, default=12,
                   help="time the per-run loop on at most this many runs and scale (it is linear in runs)")
    p.add_argument("--one", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--model", help=argparse.SUPPRESS)
    p.add_argument("--path", help=argparse.SUPPRESS)
    p.add_argument("--data", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.one:
        args.seeds = args.seeds[0]
        return one(args)
    peak = matmul_peak(args.device)
    print(f"device {args.device}, {args.threads} threads; measured float32 matmul peak {peak:.1f} GFLOP/s")
    print(f"{'model':<10} {'S':>3} {'runs':>5} {'path':<9} {'model-epochs/s':>15} {'ratio':>7} {'GFLOP/s':>8} "
          f"{'% peak':>7} {'peak RSS MB':>12}")
    with tempfile.TemporaryDirectory() as data:
        for model in args.models:
            err = check_equal(model, 2, data, args.device)
            ok = err < 2e-3
            print(f"{model:<10} curves equal: max relative difference {err:.2e} ({'ok' if ok else 'MISMATCH'})")
            if not ok:
                sys.exit(f"{model}: the two paths disagree; not timing")
            for S in args.seeds:
                res = {}
                for path in ("loop", "ensemble"):
                    s_eff = S if path == "ensemble" else max(1, min(S, args.loop_max_runs // len(LS)))
                    cmd = [sys.executable, __file__, "--one", "--model", model, "--seeds", str(s_eff),
                           "--epochs", str(args.epochs), "--threads", str(args.threads), "--device",
                           args.device if path == "ensemble" else "cpu", "--path", path, "--data", data]
                    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout.strip().splitlines()[-1]
                    res[path] = json.loads(out)
                for path in ("loop", "ensemble"):
                    r = res[path]
                    rate = r["runs"] * args.epochs / r["seconds"]
                    ratio = rate / (res["loop"]["runs"] * args.epochs / res["loop"]["seconds"])
                    gf = r["flops"] / r["seconds"] / 1e9
                    mem = r["peak_rss_mb"] if path == "loop" or args.device == "cpu" else r["gpu_peak_mb"]
                    print(f"{model:<10} {S:>3} {r['runs']:>5} {path:<9} {rate:>15.1f} {ratio:>6.1f}x {gf:>8.2f} "
                          f"{100 * gf / peak:>6.1f}% {mem:>12.0f}")


if __name__ == "__main__":
    main()
