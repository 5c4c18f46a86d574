"""torch imported on first use (`lazy_torch`): the plan runs at Snakemake's parse time and the tables
and report jobs never train, and importing torch costs 1-3 s a process."""
from __future__ import annotations


class _LazyTorch:
    """Stands for `torch` in a module's globals until the module first uses it, then puts the real
    module in its place (so later uses cost nothing)."""

    def __init__(self, namespace: dict):
        self._namespace = namespace

    def __getattr__(self, name):
        import torch as real
        self._namespace["torch"] = real
        return getattr(real, name)


def lazy_torch(namespace: dict):
    """`torch = lazy_torch(globals())`: torch, imported when the module first touches it."""
    return _LazyTorch(namespace)
