"""Plain files: every file the pipeline writes appears whole or not at all: it is written beside its final
name and renamed over it only once complete, so a kill never leaves a half-written result that a
rerun would take for a finished one."""
from __future__ import annotations

import json
import os
from contextlib import contextmanager


@contextmanager
def atomic_path(path: str):
    """Yield a temporary path to write to (same extension, so numpy and pyarrow keep it); on
    success it replaces `path`, on failure it is removed."""
    tmp = f"{path}.{os.getpid()}.tmp{os.path.splitext(path)[1]}"   # jobs writing the same file do not collide
    try:
        yield tmp
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


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
