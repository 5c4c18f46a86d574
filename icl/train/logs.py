"""What a training job records as it goes: the progress line on stderr, the logged arrays of a
shard (every log_every epochs: losses, attention, matrices) and the trace (every epoch: the losses
and the own attention the measurements read), kept on the training device until a logged epoch or
a checkpoint copies them to the host."""
from __future__ import annotations

import sys
import time

import numpy as np
import torch


class Progress:
    """A line to stderr at most every few seconds: epochs, runs, time used and left."""

    def __init__(self, label: str, total: int, every_s: float = 5.0):
        self.label, self.total, self.every = label, total, every_s
        self.t0 = time.time()
        self.last = 0.0

    def update(self, done: int, start: int, n_live, n_runs: int, force=False) -> None:
        """`n_live`: a function giving the runs still alive, asked only when a line is printed (on a
        GPU it waits for the queued steps)."""
        now = time.time()
        if not force and now - self.last < self.every:
            return
        n_live = n_live()
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
    crossing times and the logits' paths are measured on it (icl.tables.measures), so they do not
    depend on the logging grid. A full-batch epoch records the state it starts from (the step's
    own forward); a minibatch or fresh-prompt epoch the mean over its steps.

    The sums and each epoch's means stay on the training device; `flush` copies the epochs closed
    since the last one to the host in one transfer a key (the loop calls it at each logged epoch and
    checkpoint, and every FLUSH_EPOCHS epochs), so a step never waits for the host."""

    KEYS = ("attn_own", "q_features")
    LOSSES = ("train_loss", "query_loss", "zero_loss")   # the objective; ½MSE at the query, and of predicting 0
    FLUSH_EPOCHS = 256

    def __init__(self, R: int, epochs: int, shapes: dict):
        self.arrays = {k: np.full((R, epochs + 1), np.nan) for k in self.LOSSES}
        self.arrays.update({k: np.full((R, epochs + 1, *shapes[k]), np.nan) for k in self.KEYS if k in shapes})
        self._sum, self._n = {}, 0
        self._closed: dict = {}      # key -> ([epochs], [device tensors (R, ...)]) not yet on the host

    def add(self, losses: dict, values: dict) -> None:
        """One step's losses (LOSSES) and diagnostics, summed (on their device) until `close`."""
        for k, v in {**losses, **{k: values[k] for k in self.KEYS if k in values}}.items():
            v = v.detach().double()
            self._sum[k] = self._sum[k] + v if k in self._sum else v
        self._n += 1

    def close(self, epoch: int, alive) -> None:
        """The mean of the steps added since the last close, as epoch `epoch`'s values; NaN for runs
        not `alive` (a bool tensor on the values' device)."""
        for k, v in self._sum.items():
            mean = torch.where(alive.view(-1, *[1] * (v.dim() - 1)), v / self._n, torch.nan)
            epochs, values = self._closed.setdefault(k, ([], []))
            epochs.append(epoch)
            values.append(mean)
        self._sum, self._n = {}, 0
        if any(len(e) >= self.FLUSH_EPOCHS for e, _ in self._closed.values()):
            self.flush()

    def flush(self) -> None:
        """The closed epochs' values into the host arrays."""
        for k, (epochs, values) in self._closed.items():
            self.arrays[k][:, epochs] = torch.stack(values, 1).cpu().numpy()
        self._closed = {}
