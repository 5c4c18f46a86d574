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
from icl.plan import log_epochs
from icl.theory.table import lsa_target
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


def attention_map(a, feat_ctx, feat_q, K):
    """Attn[r, k, j]: mean mass a query with feature j puts on tokens with feature k (columns sum to 1)."""
    mass = torch.einsum("rbn,rbnk->rbk", a, torch.nn.functional.one_hot(feat_ctx, K).to(a.dtype))
    oh_q = torch.nn.functional.one_hot(feat_q, K).to(a.dtype)       # (R, B, K)
    sums = torch.einsum("rbk,rbj->rkj", mass, oh_q)
    count = oh_q.sum(1)                                              # (R, K)
    return sums / count.unsqueeze(1)                                 # NaN where a feature never queries


def knn_count(N: int) -> int:
    """How many nearest context tokens `attn_knn` sums over: a tenth of the context, at least 1."""
    return max(1, N // 10)


def nearest_tokens(x: torch.Tensor, k: int) -> torch.Tensor:
    """Indices (R, B, k) of the k context tokens closest to the query (Euclidean), ties by index.

    attn_knn (the attention mass on them) is the attention summary for continuous tokens, where
    there are no features. For discrete tokens it saturates below 1 (k = N/10 tokens of the
    ~N/K that share the query's feature): read attn_own there."""
    dist = ((x[:, :, :-1] - x[:, :, -1:]) ** 2).sum(-1)
    return torch.topk(dist, k, dim=-1, largest=False, sorted=True).indices


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


def _save_atomic(obj, path: str) -> None:
    tmp = path + ".tmp"
    torch.save(obj, tmp)
    os.replace(tmp, path)


def train_shard(runs: list[dict], data_paths: dict, out_path: str, device: str = "auto",
                threads: int | None = None, label: str = "shard") -> dict:
    """runs: [{run_id, data_id, spec}] of one shard. Writes an .npz with the logged arrays."""
    if threads:
        torch.set_num_threads(threads)
    dev = pick_device(device)
    print(f"[{label}] {len(runs)} runs on {dev}"
          + (f" ({torch.cuda.get_device_name(dev)}, CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES', 'unset')})"
             if dev.type == "cuda" else f" ({torch.get_num_threads()} threads)"), file=sys.stderr, flush=True)
    spec0 = runs[0]["spec"]
    R = len(runs)
    tok, tr = spec0["tokens"], spec0["train"]
    K = tok.get("K") if tok["kind"] == "discrete" else None
    seeds = [r["spec"]["seed"] for r in runs]
    names = [r["spec"]["model"]["name"] for r in runs]
    cache = read_datasets(runs, data_paths)
    stack = lambda key: torch.from_numpy(np.stack([cache[r["data_id"]][key] for r in runs])).to(dev)
    xtr, ytr, xte, yte = stack("train_x"), stack("train_y"), stack("test_x"), stack("test_y")
    ftr = stack("train_feat").long() if K else None
    feats = stack("features") if K else None

    model = models.build(spec0["model"], tok["d"])
    if not model.has_attention:       # the LSA's weights are not a distribution over tokens
        K = None
    lr = torch.tensor([r["spec"]["model"]["lr"] for r in runs], dtype=torch.float32, device=dev)
    opt = optim.build(spec0["model"]["optimizer"], lr)
    params = model.init(seeds, names, dev)
    epochs, every = tr["epochs"], tr["log_every"]
    log_at = np.asarray(log_epochs(epochs, every))
    E = len(log_at)
    logs = {
        "train_loss": np.full((R, E), np.nan), "test_loss": np.full((R, E), np.nan),
        "attn_own": np.full((R, E), np.nan),
        "attn_entropy": np.full((R, E), np.nan), "attn_knn": np.full((R, E), np.nan),
        "attn": np.full((R, E, K, K), np.nan) if K and model.has_attention else np.zeros((R, E, 0, 0)),
        "q_features": np.full((R, E, K, K), np.nan) if (K and model.kind == "softmax_q") else np.zeros((R, E, 0, 0)),
        "effective": np.full((R, E, tok["d"], tok["d"]), np.nan) if model.kind == "lsa" else np.zeros((R, E, 0, 0)),
        "dist_target": np.full((R, E), np.nan),
    }
    targets = [lsa_target(r["spec"]) for r in runs] if model.kind == "lsa" else []
    target = torch.as_tensor(np.stack(targets), dtype=torch.float32, device=dev) \
        if targets and all(t is not None for t in targets) else None
    active = torch.ones(R, dtype=torch.bool, device=dev)
    diverged_at = np.full(R, -1)
    start, elapsed0 = 0, 0.0
    ckpt_path = out_path + ".ckpt"
    run_ids = [r["run_id"] for r in runs]
    if os.path.exists(ckpt_path):
        try:
            ck = torch.load(ckpt_path, map_location=dev, weights_only=False)
        except Exception as e:
            raise RuntimeError(f"checkpoint {ckpt_path} is damaged ({type(e).__name__}); "
                               "delete it to restart this shard from epoch 0") from None
        if ck.get("run_ids") == run_ids:
            params, start, elapsed0 = ck["params"], ck["epoch"], ck["elapsed"]
            opt.load(ck["opt"])
            logs, diverged_at = ck["logs"], ck["diverged_at"]
            active = torch.as_tensor(diverged_at < 0, device=dev)
            print(f"[{label}] resuming from checkpoint at epoch {start}", file=sys.stderr, flush=True)
        else:
            print(f"[{label}] ignoring checkpoint of another run set", file=sys.stderr, flush=True)

    M = xtr.shape[1]
    batch = tr.get("batch_size") or M
    knn = nearest_tokens(xtr, knn_count(spec0["prompts"]["N"]))
    ar = torch.arange(R, device=dev).unsqueeze(1)
    prog = Progress(label, epochs)
    t0 = time.time()

    def evaluate(epoch_pos: int) -> None:
        with torch.no_grad():
            pred, a = model.forward(params, xtr, ytr)
            logs["train_loss"][:, epoch_pos] = (0.5 * ((pred - ytr[:, :, -1]) ** 2).mean(1)).cpu().numpy()
            pte, _ = model.forward(params, xte, yte)
            logs["test_loss"][:, epoch_pos] = (0.5 * ((pte - yte[:, :, -1]) ** 2).mean(1)).cpu().numpy()
            if model.kind == "lsa":
                B = model.effective(params)
                logs["effective"][:, epoch_pos] = B.cpu().numpy()
                if target is not None:
                    dist = torch.linalg.norm(B - target, dim=(1, 2)) / torch.linalg.norm(target, dim=(1, 2))
                    logs["dist_target"][:, epoch_pos] = dist.cpu().numpy()
            if a is not None:
                ent = -(a * torch.log(a.clamp_min(1e-30))).sum(-1).mean(1)
                logs["attn_entropy"][:, epoch_pos] = ent.cpu().numpy()
                logs["attn_knn"][:, epoch_pos] = torch.gather(a, 2, knn).sum(-1).mean(1).cpu().numpy()
            if K and a is not None:
                amap = attention_map(a, ftr[:, :, :-1], ftr[:, :, -1], K)
                logs["attn"][:, epoch_pos] = amap.cpu().numpy()
                logs["attn_own"][:, epoch_pos] = torch.diagonal(amap, dim1=1, dim2=2).nanmean(-1).cpu().numpy()
                if model.kind == "softmax_q":
                    # q_features[i, j] = v_j^T Q v_i (LDL §5.1: q_{k,k'} = v_k'^T Q v_k)
                    qf = torch.einsum("rjd,rde,rie->rij", feats, params["Q"], feats)
                    logs["q_features"][:, epoch_pos] = qf.cpu().numpy()
        dead = ~np.isfinite(logs["train_loss"][:, epoch_pos]) & (diverged_at < 0)
        diverged_at[dead] = log_at[epoch_pos]
        gone = diverged_at >= 0
        for key in logs:                                   # a diverged run logs NaN from then on
            logs[key][gone, epoch_pos] = np.nan
        active.copy_(torch.as_tensor(~gone, device=dev))

    pos = {int(e): i for i, e in enumerate(log_at)}
    for epoch in range(start, epochs + 1):
        if epoch in pos:
            evaluate(pos[epoch])
        if epoch == epochs:
            break
        if tr.get("fresh"):
            xfull, yfull = fresh_data(runs, cache, epoch, dev)
        else:
            xfull, yfull = xtr, ytr
        for idx in batch_index(seeds, epoch, M, batch):
            if batch >= M:
                xb, yb = xfull, yfull
            else:
                it = torch.as_tensor(np.ascontiguousarray(idx), device=dev)
                xb, yb = xfull[ar, it], yfull[ar, it]
            loss, grads = model.loss_and_grads(params, xb, yb)
            bad = ~torch.isfinite(loss)
            for g in grads.values():
                bad |= ~torch.isfinite(g.flatten(1)).all(1)
            if bad.any():
                diverged_at[(bad & active).cpu().numpy()] = epoch
                active &= ~bad
            opt.step(params, grads, active)
        done = epoch + 1
        prog.update(done, start, int(active.sum()), R)
        ck_every = tr.get("checkpoint_every", 50)
        if done % ck_every == 0 and done < epochs:
            _save_atomic({"run_ids": run_ids, "params": params, "opt": opt.state(), "epoch": done,
                          "logs": logs, "diverged_at": diverged_at,
                          "elapsed": elapsed0 + time.time() - t0}, ckpt_path)
    prog.update(epochs, start, int(active.sum()), R, force=True)
    seconds = elapsed0 + time.time() - t0
    out = {
        "run_id": np.asarray(run_ids), "epoch": log_at, "diverged_at": diverged_at,
        "seconds": np.asarray(seconds), "device": np.asarray(str(dev)),
        "device_name": np.asarray(torch.cuda.get_device_name(dev) if dev.type == "cuda" else _cpu_name()),
        "threads": np.asarray(torch.get_num_threads()),
        "code_version": np.asarray(code_version()), "code_hash": np.asarray(code_hash()),
        **logs,
        **{f"param_{k}": v.detach().cpu().numpy() for k, v in params.items()},
    }
    tmp = out_path + ".tmp.npz"
    np.savez(tmp, **out)
    os.replace(tmp, out_path)
    if os.path.exists(ckpt_path):
        os.remove(ckpt_path)
    return out


def fresh_data(runs, cache, epoch: int, dev):
    """train.fresh: new training prompts for every run, drawn from its own stream for this epoch."""
    parts = [fresh_batch(r["spec"], cache[r["data_id"]]["features"], epoch) for r in runs]
    return (torch.from_numpy(np.stack([p["x"] for p in parts])).to(dev),
            torch.from_numpy(np.stack([p["y"] for p in parts])).to(dev))


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
