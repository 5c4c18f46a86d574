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


@pytest.fixture
def tiny_raw():
    return copy.deepcopy(TINY)
