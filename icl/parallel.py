"""Work shared with forked processes: the report's figures, the tables' phase fits beside their
writing. Forked workers see this process's data as it was at the fork, so nothing is pickled on
the way in. Where fork is not the platform's way (macOS, Windows), or with no workers, the work
is done in this process when its results are asked for."""
from __future__ import annotations

import multiprocessing
import sys

_WORK: tuple = ()       # (function, items) of the pool being started: its workers inherit it


def _call(i: int):
    fn, items = _WORK
    return fn(items[i])


class Forked:
    """fn(item) for every item, started now in `workers` forked processes; results() waits for
    them, in the order of the items."""

    def __init__(self, fn, items, workers: int):
        global _WORK
        self.fn, self.items, self.pool = fn, list(items), None
        if workers > 0 and len(self.items) and sys.platform.startswith("linux"):
            _WORK = (fn, self.items)
            self.pool = multiprocessing.get_context("fork").Pool(min(workers, len(self.items)))
            self.pending = self.pool.map_async(_call, range(len(self.items)), chunksize=1)

    def results(self) -> list:
        if self.pool is None:
            return [self.fn(x) for x in self.items]
        try:
            return self.pending.get()
        finally:
            self.pool.close()
            self.pool.join()
