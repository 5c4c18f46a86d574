"""Work shared with forked processes: the report's figures, the tables' phase fits beside their
writing. Forked workers see this process's data as it was at the fork, so nothing is pickled on
the way in. Where fork is not the platform's way (macOS, Windows), or with no workers, the work
is done in this process when its results are asked for."""
from __future__ import annotations

import multiprocessing
import sys
from concurrent.futures import ProcessPoolExecutor

_WORK: tuple = ()       # (function, items) of the pool being started: its workers inherit it


def _call(i: int):
    fn, items = _WORK
    return fn(items[i])


class Forked:
    """fn(item) for every item, started now in `workers` forked processes; results() waits for
    them, in the order of the items. A worker's exception is raised by results(); a worker that
    dies (killed, out of memory) raises BrokenProcessPool there instead of hanging. Use it as a
    context manager so that an error in this process stops the workers too."""

    def __init__(self, fn, items, workers: int):
        global _WORK
        self.fn, self.items, self.pool = fn, list(items), None
        if workers > 0 and len(self.items) and sys.platform.startswith("linux"):
            _WORK = (fn, self.items)
            self.pool = ProcessPoolExecutor(min(workers, len(self.items)), mp_context=multiprocessing.get_context("fork"))
            self.futures = [self.pool.submit(_call, i) for i in range(len(self.items))]

    def results(self) -> list:
        if self.pool is None:
            return [self.fn(x) for x in self.items]
        return [f.result() for f in self.futures]

    def __enter__(self) -> Forked:
        return self

    def __exit__(self, *exc) -> None:
        global _WORK
        if self.pool is not None:
            self.pool.shutdown(wait=exc[0] is None, cancel_futures=True)
            _WORK = ()          # the items (figures, and the tables they hold) are not kept alive
