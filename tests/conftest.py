import copy

import pytest

from numerics import PINNED

TINY = {
    "experiments": {
        "tiny": {
            "description": "tiny test experiment",
            "tokens": {"kind": "discrete", "d": 6, "K": 3, "delta": 2.0},
            "task": {"kind": "cosine", "L": 1.0, "c": 0.5},
            "prompts": {"N": 12, "train": 16, "test": 24},
            "models": [
                {"name": "sq", "kind": "softmax_q", "optimizer": "gd", "lr": 2.0},
                {"name": "blk", "kind": "transformer_block", "optimizer": "adam", "lr": 3e-3, "width": 8},
            ],
            "train": {"epochs": 12, "log_every": 3, "checkpoint_every": 5, **PINNED},
            "sweep": {"task.L": [0.2, 1.5], "seed": [0, 1]},
        }
    }
}


# Test files that take a minute or more of wall time (--durations of make test and make check,
# 2026-11-25), the -m slow ones' first. `make test` and `make check` run two workers, each taking a
# whole file at a time in this order (--dist loadfile --no-loadscope-reorder): started first, the
# long files end together, where last they would leave one worker idle while the other ran a
# minute-long file alone.
LONG_FILES = ("test_paper_smoke.py", "test_zfb_gpt_cpu.py", "slurm/test_slurm.py", "test_readme_commands.py",
              "test_memory.py", "test_declared_inputs.py", "test_workflow.py", "test_browser.py",
              "test_reliability.py", "test_evaluate.py", "test_load.py", "test_fresh.py", "test_grid_free.py",
              "test_estimate.py")


def pytest_collection_modifyitems(items):
    def rank(item):
        path = item.nodeid.split("::")[0]
        return next((i for i, name in enumerate(LONG_FILES) if path.endswith(name)), len(LONG_FILES))
    items.sort(key=rank)               # stable: every other file, and every file's tests, keep their order


@pytest.fixture
def tiny_raw():
    return copy.deepcopy(TINY)
