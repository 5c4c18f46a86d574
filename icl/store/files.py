"""Plain files: every file the pipeline writes appears whole or not at all: it is written beside its final
name and renamed over it only once complete, so a kill never leaves a half-written result that a
rerun would take for a finished one."""
from __future__ import annotations

import errno
import fcntl
import json
import os
import shutil
import socket
import sys
import time
from contextlib import contextmanager


class DiskFull(RuntimeError):
    """A write that failed for space: names the file, what was written of it and the free space."""


def _no_space(e: BaseException) -> bool:
    """Whether an exception (or one it was raised from) is a full disk or quota: ENOSPC/EDQUOT, or
    the words torch's and arrow's writers use for it."""
    while e is not None:
        if isinstance(e, OSError) and e.errno in (errno.ENOSPC, errno.EDQUOT):
            return True
        text = str(e)
        if "No space left on device" in text or "Disk quota exceeded" in text or \
                ("enforce fail at inline_container" in text and "unexpected pos" in text):
            return True
        e = e.__cause__ or e.__context__
    return False


def disk_full(path: str, tmp: str, e: BaseException) -> DiskFull:
    """The one line a write that ran out of space says."""
    written = os.path.getsize(tmp) if os.path.exists(tmp) else 0
    free = shutil.disk_usage(os.path.dirname(os.path.abspath(path)) or ".").free
    return DiskFull(f"no space left on the device to write {path}: it failed after {written:,} bytes were written, "
                    f"with {free:,} bytes free; nothing partial was kept; free some space and rerun the same command")


@contextmanager
def atomic_path(path: str):
    """Yield a temporary path to write to (same extension, so numpy and pyarrow keep it); on
    success it replaces `path`, on failure it is removed. A write that fails for space raises
    DiskFull, one line naming the file, the bytes written and the free space."""
    tmp = f"{path}.{os.getpid()}.tmp{os.path.splitext(path)[1]}"   # jobs writing the same file do not collide
    try:
        yield tmp
        os.replace(tmp, path)
    except Exception as e:
        if _no_space(e):
            raise disk_full(path, tmp, e) from e
        raise
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


def move_aside(path: str) -> str:
    """A damaged file renamed out of the way (kept for inspection) so that the step that makes it
    runs again; returns where it went."""
    dest = f"{path}.damaged-{time.strftime('%Y%m%d-%H%M%S')}"
    try:
        os.replace(path, dest)
    except FileNotFoundError:          # another reader of the same file moved it first
        return f"{path}.damaged-* (by another reader)"
    return dest


@contextmanager
def shard_lock(out_path: str, label: str):
    """Only one trainer at a time for one shard: an exclusive lock on `out_path`.lock, held while it
    trains. A second trainer (a double submission, or a resubmitted job while the first still
    runs) says so in one line and waits; it yields whether it must still train (False where the
    other finished the shard meanwhile)."""
    lock = out_path + ".lock"
    with open(lock, "a+") as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            fh.seek(0)
            who = fh.read().strip() or "another process"
            print(f"[{label}] {who} is training this shard already; waiting for it", file=sys.stderr, flush=True)
            fcntl.flock(fh, fcntl.LOCK_EX)
        fh.seek(0)
        fh.truncate()
        fh.write(f"pid {os.getpid()} on {socket.gethostname()}")
        fh.flush()
        try:
            todo = not os.path.exists(out_path)
            if not todo:
                print(f"[{label}] another trainer finished this shard meanwhile: nothing to do", file=sys.stderr, flush=True)
            yield todo
            if todo and os.path.exists(out_path) and os.path.exists(lock):
                os.remove(lock)         # done: a trainer still waiting holds the lock's file, and finds the shard
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def read_plan(path: str) -> dict:
    """plan.json (written by `icl plan`): the experiment's name, validated config and run specs. Here,
    beside the other plain files, so that a training job reads it without importing pandas."""
    if not os.path.exists(path):
        raise RuntimeError(f"plan file {path} not found; the workflow writes it (snakemake results/<experiment>/plan.json)")
    try:
        with open(path) as fh:
            return json.load(fh)
    except (OSError, json.JSONDecodeError) as e:
        raise RuntimeError(f"plan file {path} is unreadable ({e}); delete it and rerun snakemake") from None
