"""What the planner and the jobs it plans share, so a training or evaluation job never imports
the planner: run ids (`stable_hash`), the logged epochs, how many runs' prompt files a training
job loads at once, the device a job runs on and its precision. Imports nothing of the package; torch only when
a device is picked (the planner runs at the workflow's parse time)."""
from __future__ import annotations

import hashlib
import json

LOAD_GROUP = 16        # runs whose prompt files a training job holds at once while preparing them (icl.train)


def stable_hash(obj, n: int = 12) -> str:
    text = json.dumps(obj, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:n]


def log_epochs(epochs: int, every: int) -> list[int]:
    e = list(range(0, epochs + 1, every))
    if e[-1] != epochs:
        e.append(epochs)
    return e


def pick_device(setting: str = "auto") -> "torch.device":  # noqa: F821
    import torch
    if setting == "cuda" or (setting == "auto" and torch.cuda.is_available()):
        if not torch.cuda.is_available():
            raise RuntimeError("device: cuda was asked for but torch sees no CUDA device")
        return torch.device("cuda")
    return torch.device("cpu")


def pick_precision(setting: str | None, dev) -> str:
    """train.precision as a job applies it: absent, float32 on a CPU and tf32 on CUDA; tf32 on a CPU
    is float32 (a CPU has no TF32 matmuls). Sets torch's matmul precision for the whole process."""
    import torch
    precision = setting or ("tf32" if dev.type == "cuda" else "float32")
    if dev.type != "cuda" and precision == "tf32":
        precision = "float32"
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = precision == "tf32"
    return precision
