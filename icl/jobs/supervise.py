"""A training job's work runs in a child process, so that a kill the work cannot catch (the
kernel's out-of-memory killer, SIGKILL) is still reported in one line that says what probably
happened, instead of a bare exit 137. The parent holds no model and no data: of a job's processes
it is the one the OOM killer spares. Signals a scheduler sends the job (SIGTERM, SIGUSR1, SIGHUP)
are passed on to the child, whose exit status becomes the job's."""
from __future__ import annotations

import os
import signal
import sys
import traceback
from typing import Callable

PASSED_ON = (signal.SIGTERM, signal.SIGUSR1, signal.SIGHUP)


def in_child(work: Callable[[], None], explain: Callable[[int], str]) -> None:
    """work() in a forked child, which exits as this process would have. This one waits and exits
    with the child's status; where a signal killed the child, it first prints `explain(signal)`, one
    line. Without fork (macOS, Windows) work() runs in this process."""
    if not sys.platform.startswith("linux"):
        return work()
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        os._exit(_exit_code(work))
    for s in PASSED_ON:
        signal.signal(s, lambda signum, frame: _pass_on(pid, signum))
    signal.signal(signal.SIGINT, signal.SIG_IGN)    # Ctrl-C reaches the child with the process group
    try:
        _, status = os.waitpid(pid, 0)              # retried across the signals passed on (PEP 475)
    except ChildProcessError:                       # reaped by someone else: say so, not a traceback
        sys.exit("error: the training process disappeared before its exit status was read")
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        print(f"error: {explain(sig)}", file=sys.stderr, flush=True)
        sys.exit(128 + sig)
    if os.WEXITSTATUS(status):
        sys.exit(os.WEXITSTATUS(status))


def _exit_code(work: Callable[[], None]) -> int:
    """Run work() as a program's main would: its exit status, SystemExit's message printed."""
    code = 0
    try:
        work()
    except SystemExit as e:
        if isinstance(e.code, int):
            code = e.code
        elif e.code is not None:
            print(e.code, file=sys.stderr)
            code = 1
    except BaseException:
        traceback.print_exc()
        code = 1
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
    return code


def _pass_on(pid: int, signum: int) -> None:
    try:
        os.kill(pid, signum)
    except ProcessLookupError:
        pass


def killed(sig: int, estimate: str, limit: str) -> str:
    """The line for a child killed by `sig`: SIGKILL out of the blue is the kernel's OOM killer far
    more often than anything else on a cluster node."""
    try:
        name = signal.Signals(sig).name
    except ValueError:
        name = f"signal {sig}"
    why = "probably out of memory" if sig == signal.SIGKILL else "by a signal the training does not catch"
    return (f"the training process was killed ({name}), {why} (estimate {estimate}, limit {limit}); "
            "the checkpoint and finished chunks are kept: the retry asks for twice the memory (mem_mb), "
            "or lower memory_budget_mb or shard_size and rerun snakemake (the same command)")
