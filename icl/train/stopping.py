"""A job asked to stop (SLURM's SIGTERM at preemption or at its time limit, or SIGUSR1, which
`--signal` can send ahead of it) finishes its epoch, saves a checkpoint and exits with RETRY, the code
the workflow retries on: the retry resumes there, so a shard longer than its time limit completes
across retries and a preempted one loses nothing."""
from __future__ import annotations

import signal
import threading

RETRY = 75          # EX_TEMPFAIL: stopped on request, the checkpoint saved; run the same job again
SIGNALS = (signal.SIGTERM, signal.SIGUSR1)


class Stopped(RuntimeError):
    """Training stopped on a signal after saving its checkpoint; the message says where."""


class StopRequests:
    """While entered, SIGTERM and SIGUSR1 set `signal` (their name) instead of killing the process;
    the training loop reads it at each epoch's end. Outside the main thread (where Python cannot
    install handlers) it does nothing."""

    def __init__(self):
        self.signal: str | None = None
        self._old = {}

    def _set(self, signum, frame) -> None:
        self.signal = signal.Signals(signum).name

    def __enter__(self) -> StopRequests:
        if threading.current_thread() is threading.main_thread():
            self._old = {s: signal.signal(s, self._set) for s in SIGNALS}
        return self

    def __exit__(self, *exc) -> None:
        for s, h in self._old.items():
            signal.signal(s, h)
