"""A job asked to stop (SLURM's SIGTERM at preemption or at its time limit, or SIGUSR1, which
`--signal` can send ahead of it) finishes its epoch, saves a checkpoint and exits with RETRY, the code
the workflow retries on: the retry resumes there, so a shard longer than its time limit completes
across retries and a preempted one loses nothing.

Under SLURM the job also stops on its own ahead of its time limit (job_deadline): SLURM enforces a
limit up to about 30 s late, so a job that finished its shard just past the limit would be killed
while Snakemake records it, read as TIMEOUT, and lose the shard it wrote (its checkpoint gone with it)."""
from __future__ import annotations

import os
import signal
import subprocess
import threading
import time

RETRY = 75          # EX_TEMPFAIL: stopped on request, the checkpoint saved; run the same job again
SIGNALS = (signal.SIGTERM, signal.SIGUSR1)


def job_deadline() -> float | None:
    """When this SLURM job should stop to stay clear of its time limit (epoch seconds): its end time
    less a tenth of its limit, 10 s to 2 min. None outside SLURM or where squeue does not say."""
    job = os.environ.get("SLURM_JOB_ID", "")
    if not job.isdigit():
        return None
    try:
        out = subprocess.run(["squeue", "-h", "-j", job, "-o", "%S|%e"], capture_output=True, text=True,
                             timeout=20).stdout.strip().splitlines()
        start, end = (time.mktime(time.strptime(x, "%Y-%m-%dT%H:%M:%S")) for x in out[0].split("|"))
    except (OSError, subprocess.SubprocessError, ValueError, IndexError):     # no squeue, "N/A", UNLIMITED
        return None
    return end - min(120.0, max(10.0, 0.1 * (end - start)))


class Stopped(RuntimeError):
    """Training stopped on a signal after saving its checkpoint; the message says where."""


class StopRequests:
    """While entered, SIGTERM and SIGUSR1 set `signal` (their name) instead of killing the process;
    the training loop reads it at each epoch's end. Outside the main thread (where Python cannot
    install handlers) it does nothing."""

    def __init__(self, deadline: float | None = None):
        self.signal: str | None = None
        self.deadline = deadline            # stop on its own where the next epoch would end past it
        self._old = {}

    def _set(self, signum, frame) -> None:
        self.signal = signal.Signals(signum).name

    def due(self, epoch_seconds: float) -> str | None:
        """Why to stop after this epoch: a signal's name, the job's time limit where the next epoch
        (as long as this one) would end past the deadline, or None."""
        if self.signal is None and self.deadline is not None and time.time() + epoch_seconds > self.deadline:
            self.signal = "the job's time limit ahead (SLURM)"
        return self.signal

    def __enter__(self) -> StopRequests:
        if threading.current_thread() is threading.main_thread():
            self._old = {s: signal.signal(s, self._set) for s in SIGNALS}
        return self

    def __exit__(self, *exc) -> None:
        for s, h in self._old.items():
            signal.signal(s, h)
