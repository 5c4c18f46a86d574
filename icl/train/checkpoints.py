"""How a training job survives a kill: the shard's whole state (`snapshot`, `restore`) saved
atomically every checkpoint_every epochs and taken up again by a rerun of the same runs, and a shard trained in
chunks keeping each finished chunk in a file of its own until the shard's file is written. A
checkpoint is data, not code: tensors and plain values only, loaded with weights_only=True."""
from __future__ import annotations

import os
import pickle
import sys
import zipfile

import numpy as np
import torch

from icl.store.files import atomic_path, move_aside
from icl.jobs.runtime import stable_hash

PER_SHARD = ("epoch", "seconds", "device", "device_name", "threads", "precision", "compiled", "fresh_stream",
             "code_version", "code_hash", "tokens_K", "prompts_N", "train_fresh")   # a shard's .npz: not per run


def snapshot(training, done: int, elapsed: float) -> dict:
    """What a checkpoint holds of a ShardTraining after `done` epochs: tensors and plain values (the
    logs' and the trace's numpy arrays as tensors of the same dtype, so they come back exactly)."""
    training.sync()
    return {"params": training.params, "opt": training.opt.state(), "epoch": done,
            "logs": {k: torch.from_numpy(v) for k, v in training.logs.arrays.items()},
            "trace": {k: torch.from_numpy(v) for k, v in training.trace.arrays.items()},
            "diverged_at": torch.from_numpy(training.logs.diverged_at), "elapsed": float(elapsed),
            **({"llc": {k: torch.from_numpy(v) for k, v in training.llc.arrays.items()}} if training.llc else {})}


def restore(training, saved: dict) -> None:
    """A ShardTraining, just built, put back where `saved` (a snapshot) left it."""
    training.params, training.start, training.elapsed0 = saved["params"], saved["epoch"], saved["elapsed"]
    training.opt.load(saved["opt"])
    training.logs.arrays = {k: v.cpu().numpy() for k, v in saved["logs"].items()}
    training.logs.diverged_at = saved["diverged_at"].cpu().numpy()
    training.trace.arrays = {k: v.cpu().numpy() for k, v in saved["trace"].items()}
    if training.llc:
        training.llc.arrays.update({k: v.cpu().numpy() for k, v in saved["llc"].items()})   # a key it lacks stays unmeasured


class Checkpoint:
    """The whole training state of a shard, saved atomically every checkpoint_every epochs and
    taken up again by a rerun of the same runs (after a kill). It holds tensors, dicts, lists and
    numbers only and is loaded with torch.load(weights_only=True): a file that names any other
    Python object is refused, never unpickled (unpickling can run code)."""

    def __init__(self, path: str, run_ids: list[str], label: str):
        self.path, self.run_ids, self.label = path, run_ids, label

    def load(self, dev) -> dict | None:
        """The saved state, or None (no checkpoint, another run set's, or a damaged one: moved aside,
        kept for inspection, and the shard restarts from epoch 0, said in one line)."""
        if not os.path.exists(self.path):
            return None
        try:
            ck = torch.load(self.path, map_location=dev, weights_only=True)
        except pickle.UnpicklingError:
            if not zipfile.is_zipfile(self.path):       # not a torch archive at all: damaged
                return self._aside("damaged (UnpicklingError)")
            raise RuntimeError(f"checkpoint {self.path} holds Python objects besides tensors and plain values "
                               "(an older icl saved numpy arrays in it, or another program wrote it); it is not "
                               "loaded, as unpickling them could run code: delete it to restart this shard "
                               "from epoch 0") from None
        except Exception as e:
            return self._aside(f"damaged ({type(e).__name__})")
        if ck.get("run_ids") != self.run_ids:
            print(f"[{self.label}] ignoring checkpoint of another run set", file=sys.stderr, flush=True)
            return None
        print(f"[{self.label}] resuming from checkpoint at epoch {ck['epoch']}", file=sys.stderr, flush=True)
        return ck

    def _aside(self, what: str) -> None:
        print(f"[{self.label}] checkpoint {self.path} is {what}: moved aside to {move_aside(self.path)} (kept for "
              f"inspection); this shard restarts from epoch 0", file=sys.stderr, flush=True)
        return None

    def save(self, state: dict) -> None:
        with atomic_path(self.path) as tmp:
            torch.save({"run_ids": self.run_ids, **state}, tmp)

    def remove(self) -> None:
        if os.path.exists(self.path):
            os.remove(self.path)


def chunk_paths(parts: list[list[dict]], out_path: str) -> list[str]:
    """The file each chunk of a shard trains into, beside the shard's (named by its runs, so a rerun
    finds the chunks a killed job finished)."""
    return [f"{out_path}.chunk-{stable_hash(sorted(r['run_id'] for r in part), 10)}.npz" for part in parts]


def merge_chunks(paths: list[str], out_path: str, workers: int) -> dict:
    """The chunks' files as the shard's .npz (runs concatenated, a shard's own values once, the
    seconds summed), written atomically; the chunk files removed only then."""
    chunks = [dict(np.load(p)) for p in paths]
    out = {k: (np.concatenate([c[k] for c in chunks]) if k not in PER_SHARD else chunks[0][k]) for k in chunks[0]}
    out["seconds"] = np.asarray(sum(float(c["seconds"]) for c in chunks))
    out["threads"] = np.asarray(max(int(c["threads"]) for c in chunks) * workers)
    with atomic_path(out_path) as tmp:
        np.savez(tmp, **out)
    for p in paths:
        os.remove(p)
    return out
