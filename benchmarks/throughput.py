"""Training throughput: the project's ensemble against the per-run loop a researcher would write.

The baseline for each model is what a competent researcher writes for it: one `nn.Module` and
one `torch.optim` optimizer per run, autograd, the train loss recorded every epoch (`.item()`),
one thread per process and two processes side by side (what `snakemake --cores 2` would run):
  softmax_q       scores of the query row only (the loss reads nothing else), SGD;
  block64         one pre-LN transformer block on full sequences, Adam;
  lsa             ZFB's f(E) = E + W^PV E (E^T W^KQ E)/N on the full prompt matrix, Adam;
  softmax_q_full  (a labelled extra, never the headline) LDL eq. 6 as written, with the full
                  N x (N+1) score matrix;
  gpt             nanoGPT's blocks with Garg et al.'s read-in/out on the interleaved prompt, torch's
                  fused causal attention, loss at every x position, Adam
                  (benchmarks/reference_models.py: the module the tests hold the ensemble to);
  lsa_heads       eight rank-one heads with separate key and query matrices on the full prompt
                  matrix, f(E) = E + Σ_h W^V_h E (Eᵀ W_K_hᵀ W_Q_h E)/N, Adam (reference_models.py).
The ensemble is `icl.train.loop.train_shard` with 2 threads, logging everything every epoch
(log_every 1: train and test loss, attention maps, q_features), setup and data reading included.
Before anything is timed, each loop and the ensemble start from the same parameters and must give
the same train-loss curve (max relative difference over 5 epochs below 2e-3).

Workloads: LDL §6 sizes for softmax_q and the block (d=15, K=4, Δ=3, N=100, 300 training and
1000 test prompts, 6 values of L x S seeds); ZFB for the LSA (Gaussian d=20, N=40, 1000 training
and 1000 test prompts, 6 x S seeds, or --runs R); the GPT (3 layers, 2 heads, width 64) on
Gaussian d=5, N=20, 64 training and 64 test prompts (--runs R); the multi-head LSA on ZFB's data
(--runs R). The machine's ceilings are measured in the same run:
float32 matmul GFLOP/s and copy bandwidth GB/s, both with 2 threads.

    .venv/bin/python benchmarks/throughput.py                       # all models, S = 30, 400 epochs
    .venv/bin/python benchmarks/throughput.py --models softmax_q --seeds 5 --epochs 50
    .venv/bin/python benchmarks/throughput.py --models gpt lsa_heads --runs 64 --epochs 20
    .venv/bin/python benchmarks/throughput.py --device cuda        # the ensemble on a GPU
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
from icl.data import read_dataset, write_dataset
from icl.models import MODELS as MODELS_OF, build
from icl.plan.shards import plan
from icl.train.loop import train_shard
from reference_models import GPTReference, LSAHeadsReference

LS = [0.1, 0.2, 0.4, 1.0, 1.5, 2.0]
LDL = {"tokens": {"kind": "discrete", "d": 15, "K": 4, "delta": 3.0},
       "task": {"kind": "cosine", "L": 1.0, "c": 0.5}, "prompts": {"N": 100, "train": 300, "test": 1000}}
ZFB = {"tokens": {"kind": "gaussian", "d": 20}, "task": {"kind": "linear"},
       "prompts": {"N": 40, "train": 1000, "test": 1000}}
GPT_DATA = {"tokens": {"kind": "gaussian", "d": 5}, "task": {"kind": "linear"}, "prompts": {"N": 20, "train": 64, "test": 64}}
MODELS = {   # name: (data, model, the loop's module)
    "softmax_q": (LDL, {"name": "m", "kind": "softmax_q", "optimizer": "gd", "lr": 5.0}, "QueryRowSoftmaxQ"),
    "block64": (LDL, {"name": "m", "kind": "transformer_block", "optimizer": "adam", "lr": 1e-3, "width": 64},
                "BlockModule"),
    "lsa": (ZFB, {"name": "m", "kind": "lsa", "optimizer": "adam", "lr": 1e-2, "init_scale": 0.3}, "LSAModule"),
    "softmax_q_full": (LDL, {"name": "m", "kind": "softmax_q", "optimizer": "gd", "lr": 5.0}, "FullSoftmaxQ"),
    "gpt": (GPT_DATA, {"name": "m", "kind": "gpt", "optimizer": "adam", "lr": 1e-3, "width": 64, "layers": 3, "heads": 2,
                       "positions": 81}, "GPTReference"),
    "lsa_heads": (ZFB, {"name": "m", "kind": "lsa", "optimizer": "adam", "lr": 1e-2, "init_scale": 0.3, "heads": 8,
                        "separate_kq": True, "rank": 1}, "LSAHeadsReference"),
}


def workload(model_key: str, seeds: int, epochs: int, tmp: str, n_runs: int | None = None):
    data, model, _ = MODELS[model_key]
    sweep = {"task.L": LS, "seed": list(range(seeds))} if "L" in data["task"] else {"seed": list(range(n_runs or 6 * seeds))}
    cfg = validate({"shard_size": 100000, "memory_budget_mb": 100000, "experiments": {"bench": {
        **data, "models": [model], "sweep": sweep,
        "train": {"epochs": epochs, "log_every": 1, "checkpoint_every": 10**7}}}})
    runs = plan(cfg, "bench")
    paths = {}
    for r in runs:
        if r.data_id not in paths:
            paths[r.data_id] = os.path.join(tmp, f"{r.data_id}.npz")
            if not os.path.exists(paths[r.data_id]):
                write_dataset(r.data_spec, paths[r.data_id])
    return [{"run_id": r.run_id, "data_id": r.data_id, "shard": r.shard, "spec": r.spec} for r in runs], paths


# ---------------------------------------------------------------- the loops a researcher would write

class QueryRowSoftmaxQ(torch.nn.Module):
    """LDL eq. 6 for the query only: ŷ = Σ_i y_i softmax_i(x_iᵀ Q x_q)."""

    def __init__(self, d):
        super().__init__()
        self.Q = torch.nn.Parameter(torch.zeros(d, d))

    def forward(self, x, y):
        s = torch.einsum("bnd,de,be->bn", x[:, :-1], self.Q, x[:, -1])
        return (torch.softmax(s, -1) * y[:, :-1]).sum(-1)


class FullSoftmaxQ(QueryRowSoftmaxQ):
    """LDL eq. 6 as written: F = y · softmax(Xᵀ Q X̄) over the full (N x N+1) score matrix."""

    def forward(self, x, y):
        scores = x[:, :-1] @ self.Q @ x.transpose(1, 2)                    # (B, N, N+1)
        return (y[:, None, :-1] @ torch.softmax(scores, dim=1)).squeeze(1)[:, -1]


class BlockModule(torch.nn.Module):
    """One pre-LN block on full sequences, as typical research code writes it."""

    def __init__(self, d, w):
        super().__init__()
        self.emb = torch.nn.Linear(d + 1, w)
        self.ln1, self.ln2, self.lnf = torch.nn.LayerNorm(w), torch.nn.LayerNorm(w), torch.nn.LayerNorm(w)
        self.q, self.k, self.v, self.o = (torch.nn.Linear(w, w, bias=False) for _ in range(4))
        self.ff1, self.ff2 = torch.nn.Linear(w, 4 * w), torch.nn.Linear(4 * w, w)
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


class LSAModule(torch.nn.Module):
    """ZFB eq. 3.3 on the whole prompt matrix E (D x T): f(E) = E + W^PV E (Eᵀ W^KQ E)/N, ŷ = f(E)[-1, -1]."""

    def __init__(self, p: dict, r: int):
        super().__init__()
        self.W_pv = torch.nn.Parameter(p["W_pv"][r].clone())
        self.W_kq = torch.nn.Parameter(p["W_kq"][r].clone())

    def forward(self, x, y):
        yin = y.clone()
        yin[:, -1] = 0
        E = torch.cat([x, yin[..., None]], -1).transpose(1, 2)                  # (B, D, T)
        f = E + self.W_pv @ E @ (E.transpose(1, 2) @ self.W_kq @ E) / (x.shape[1] - 1)
        return f[:, -1, -1]


def loop_module(model_key: str, init: dict, i: int, d: int):
    kind = MODELS[model_key][2]
    if kind == "BlockModule":
        m = BlockModule(d, MODELS[model_key][1]["width"])
        m.load_from(init, i)
    elif kind == "LSAModule":
        m = LSAModule(init, i)
    elif kind == "GPTReference":
        s = MODELS[model_key][1]
        m = GPTReference(d, s["width"], s["layers"], s["heads"], 4, s["positions"], flash=True).load_from(init, i)
    elif kind == "LSAHeadsReference":
        m = LSAHeadsReference(init, i)
    else:
        m = globals()[kind](d)
    return m


def loop_train(model_key, runs, paths, epochs):
    """The per-run loop; returns the train loss of every run at every epoch (before its step)."""
    spec = runs[0]["spec"]["model"]
    d = runs[0]["spec"]["tokens"]["d"]
    init = build(spec, d).init([r["spec"]["seed"] for r in runs], [r["spec"]["model"]["name"] for r in runs], "cpu")
    curves = np.zeros((len(runs), epochs))
    every = spec["kind"] == "gpt" and spec.get("loss", "all") == "all"   # the GPT's loss: every x position
    for i, r in enumerate(runs):
        ds = read_dataset(paths[r["data_id"]])
        x, y = torch.from_numpy(ds["train_x"]), torch.from_numpy(ds["train_y"])
        m = loop_module(model_key, init, i, d)
        opt = (torch.optim.SGD if spec["optimizer"] == "gd" else torch.optim.Adam)(m.parameters(), lr=spec["lr"])
        for e in range(epochs):
            opt.zero_grad()
            loss = 0.5 * ((m(x, y) - (y if every else y[:, -1])) ** 2).mean()
            loss.backward()
            opt.step()
            curves[i, e] = loss.item()
    return curves


def ensemble_train(runs, paths, epochs, device, log_every=1):
    for r in runs:
        r["spec"]["train"] = {**r["spec"]["train"], "epochs": epochs, "log_every": log_every}
    with tempfile.TemporaryDirectory() as t:
        return train_shard(runs, paths, os.path.join(t, "s.npz"), device=device, label="bench")


# ---------------------------------------------------------------- what the machine can do

def matmul_gflops(device) -> float:
    n = 2048
    a, b = torch.randn(n, n, device=device), torch.randn(n, n, device=device)
    for _ in range(2):
        a @ b
    reps = 10
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    sync()
    t = time.perf_counter()
    for _ in range(reps):
        a @ b
    sync()
    return 2 * n**3 * reps / (time.perf_counter() - t) / 1e9


def copy_gbps(device) -> float:
    """Read + write bandwidth of a 256 MB float32 copy."""
    a = torch.randn(64 * 2**20, device=device)
    b = torch.empty_like(a)
    b.copy_(a)
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    reps = 10
    sync()
    t = time.perf_counter()
    for _ in range(reps):
        b.copy_(a)
    sync()
    return 2 * a.numel() * 4 * reps / (time.perf_counter() - t) / 1e9


def flops_per_epoch(model_key, path, runs, paths, device) -> float:
    """FLOPs of one training step, counted by torch's FlopCounterMode (matmuls and einsums)."""
    spec, d = runs[0]["spec"]["model"], runs[0]["spec"]["tokens"]["d"]
    if path == "loop":
        ds = read_dataset(paths[runs[0]["data_id"]])
        x, y = torch.from_numpy(ds["train_x"]), torch.from_numpy(ds["train_y"])
        init = build(spec, d).init([0], ["m"], "cpu")
        m = loop_module(model_key, init, 0, d)
        every = spec["kind"] == "gpt"
        with FlopCounterMode(display=False) as fc:
            (0.5 * ((m(x, y) - (y if every else y[:, -1])) ** 2).mean()).backward()
        return fc.get_total_flops() * len(runs)
    from icl.train.loop import load_prompts
    from icl.data import read_datasets
    ens = build(spec, runs[0]["spec"]["tokens"])
    p = ens.init([0] * len(runs), ["m"] * len(runs), device)
    batch = load_prompts(ens, runs, read_datasets(runs, paths), "train", device)
    with FlopCounterMode(display=False) as fc:
        ens.step(p, batch)
    return fc.get_total_flops()


# ---------------------------------------------------------------- one timing, in a process of its own

def one(args) -> None:
    torch.set_num_threads(args.threads)
    runs, paths = workload(args.model, args.seeds, args.epochs, args.data, args.runs)
    if args.path == "shards":                       # a CPU job's cut: chunks of the kind's ensemble_cap
        cap = MODELS_OF[runs[0]["spec"]["model"]["kind"]].ensemble_cap(runs[0]["spec"])
        n = -(-len(runs) // cap)                     # as few shards as the cap allows, of even sizes
        shards = [list(part) for part in np.array_split(np.asarray(runs, dtype=object), max(2, n))][args.part::2]
        runs = [r for sh in shards for r in sh]
    elif args.part is not None:                     # one of the loop's two processes: its half
        runs = runs[args.part::2]
    t = time.perf_counter()
    if args.path == "loop":
        loop_train(args.model, runs, paths, args.epochs)
    elif args.path == "shards":
        for sh in shards:
            ensemble_train(sh, paths, args.epochs, args.device, args.log_every)
    else:
        ensemble_train(runs, paths, args.epochs, args.device, args.log_every)
        if args.device == "cuda":
            torch.cuda.synchronize()
    secs = time.perf_counter() - t
    flops = flops_per_epoch(args.model, args.path, runs, paths, args.device) * args.epochs
    print(json.dumps({"seconds": secs, "runs": len(runs), "flops": flops,
                      "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                      "gpu_peak_mb": torch.cuda.max_memory_allocated() / 2**20 if args.device == "cuda" else 0.0}))


def child(model, path, seeds, args, threads, device, part=None, n_runs=None):
    cmd = [sys.executable, __file__, "--one", "--model", model, "--seeds", str(seeds), "--epochs", str(args.epochs),
           "--log-every", str(getattr(args, "log_every", 1)),
           "--threads", str(threads), "--device", device, "--path", path, "--data", args.data]
    if part is not None:
        cmd += ["--part", str(part)]
    if n_runs:
        cmd += ["--runs", str(n_runs)]
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)


def result(proc) -> dict:
    out, _ = proc.communicate()
    if proc.returncode:
        sys.exit(f"a timing process failed (exit {proc.returncode})")
    return json.loads(out.strip().splitlines()[-1])


def check_equal(model, data, device) -> float:
    """Both paths from the same start: max relative difference of the train loss over 5 epochs."""
    runs, paths = workload(model, 1, 5, data)
    runs = runs[:2] if "L" not in MODELS[model][0]["task"] else runs[::3][:2]
    a = loop_train(model, runs, paths, 5)
    b = ensemble_train(runs, paths, 5, device)["train_loss"][:, :5]
    return float(np.max(np.abs(a - b) / np.abs(a)))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--models", nargs="+", default=["softmax_q", "block64", "lsa", "softmax_q_full"], choices=list(MODELS))
    p.add_argument("--seeds", type=int, default=30, help="S: seeds per value of L (6 S runs)")
    p.add_argument("--runs", type=int, help="runs of the models without L (default 6 S)")
    p.add_argument("--epochs", type=int, default=400, help="epochs per run, as in a real run")
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"], help="where the ensemble trains")
    p.add_argument("--log-every", type=int, default=1,
                   help="the ensemble logs train and test loss, attention and matrices every this many epochs "
                        "(the loop records its train loss every epoch either way)")
    p.add_argument("--loop-runs", type=int, default=12,
                   help="the loop is timed on this many runs (split over its two processes) and its rate "
                        "per run used for the 6 S runs: a loop's time is linear in runs")
    for hidden in ("--model", "--path", "--data"):
        p.add_argument(hidden, help=argparse.SUPPRESS)
    p.add_argument("--part", type=int, help=argparse.SUPPRESS)
    p.add_argument("--threads", type=int, default=1, help=argparse.SUPPRESS)
    p.add_argument("--one", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.one:
        return one(args)
    torch.set_num_threads(2)
    gflops, gbps = matmul_gflops(args.device), copy_gbps(args.device)
    print(f"ensemble on {args.device}, 2 threads, logging every {args.log_every} epochs; loop: 2 processes x 1 thread; "
          f"{args.epochs} epochs; "
          f"measured ceilings: matmul {gflops:.1f} GFLOP/s, copy {gbps:.1f} GB/s")
    print(f"{'model':<15} {'runs':>5} {'path':<9} {'model-epochs/s':>15} {'ratio':>7} {'GFLOP/s':>8} "
          f"{'% FLOP peak':>11} {'peak RSS MB':>12}")
    with tempfile.TemporaryDirectory() as data:
        args.data = data
        for model in args.models:
            err = check_equal(model, data, args.device)
            ok = err < 2e-3
            print(f"{model:<15} curves equal: max relative difference {err:.2e} ({'ok' if ok else 'MISMATCH'})")
            if not ok:
                sys.exit(f"{model}: the loop and the ensemble disagree; not timing")
            workload(model, args.seeds, args.epochs, data, args.runs)   # the prompt files, once, before the children read them
            loop_seeds = max(1, args.loop_runs // len(LS))
            loop_runs = args.loop_runs if args.runs else None
            # side by side; each times its own training (not its start-up), the pair takes the longer
            halves = [result(pr) for pr in [child(model, "loop", loop_seeds, args, 1, "cpu", part, loop_runs)
                                            for part in (0, 1)]]
            loop = {"runs": sum(h["runs"] for h in halves), "seconds": max(h["seconds"] for h in halves),
                    "flops": sum(h["flops"] for h in halves), "peak_rss_mb": sum(h["peak_rss_mb"] for h in halves)}
            ens = result(child(model, "ensemble", args.seeds, args, 2, args.device, n_runs=args.runs))
            rows = [("loop", loop), ("ensemble", ens)]
            spec = MODELS[model][1]
            if args.device == "cpu" and MODELS_OF[spec["kind"]].ensemble_cap(workload(model, 1, 1, data, 1)[0][0]["spec"]):
                # what a 2-thread job trains on a CPU: chunks of ensemble_cap runs, two one-thread processes side by side
                two = [result(pr) for pr in [child(model, "shards", args.seeds, args, 1, "cpu", part, args.runs)
                                             for part in (0, 1)]]
                rows.append(("shards", {"runs": sum(h["runs"] for h in two), "seconds": max(h["seconds"] for h in two),
                                        "flops": sum(h["flops"] for h in two),
                                        "peak_rss_mb": sum(h["peak_rss_mb"] for h in two)}))
            base = loop["runs"] * args.epochs / loop["seconds"]
            for path, r in rows:
                rate = r["runs"] * args.epochs / r["seconds"]
                gf = r["flops"] / r["seconds"] / 1e9
                mem = r["gpu_peak_mb"] if path == "ensemble" and args.device == "cuda" else r["peak_rss_mb"]
                print(f"{model:<15} {r['runs']:>5} {path:<9} {rate:>15.1f} {rate / base:>6.1f}x {gf:>8.2f} "
                      f"{100 * gf / gflops:>10.1f}% {mem:>12.0f}")


if __name__ == "__main__":
    main()
