"""What the planner and the jobs it plans share, so a training or evaluation job never imports
the planner: run ids (`stable_hash`), the logged epochs and the LLC's (`log_grid`), how many runs' prompt files a training
job loads at once, the device a job runs on and its precision. Imports nothing of the package; torch only when
a device is picked (the planner runs at the workflow's parse time)."""
from __future__ import annotations

import hashlib
import json

import numpy as np

LOAD_GROUP = 16        # runs whose prompt files a training job holds at once while preparing them (icl.train.loop)


def stable_hash(obj, n: int = 12) -> str:
    text = json.dumps(obj, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:n]


def log_epochs(epochs: int, every: int) -> list[int]:
    e = list(range(0, epochs + 1, every))
    if e[-1] != epochs:
        e.append(epochs)
    return e


def log_grid(epochs: int, points: int) -> list[int]:
    """`points` epochs from 1 to `epochs`, evenly spaced in log t (rounded, repeats dropped): where
    the LLC is measured. Stages are read against log t, so the grid is even there."""
    if points < 2 or epochs < 1:
        return [epochs] if epochs >= 1 else []
    return sorted({int(round(x)) for x in np.geomspace(1, epochs, points)})


def device_setting(flag: str | None, settings: dict) -> str:
    """The device a command was asked for: its --device, else the config's `device` (the schema's
    default, auto)."""
    return flag or settings["device"]


def cuda_here() -> bool:
    """Whether torch sees a CUDA device: the one probe (pick_device and the estimate ask it)."""
    import torch
    return torch.cuda.is_available()


def pick_device(setting: str = "auto") -> "torch.device":  # noqa: F821
    """The device a job computes on, resolved once per job from its setting (auto: CUDA where there
    is one)."""
    import torch
    if setting == "cuda" or (setting == "auto" and cuda_here()):
        if not cuda_here():
            raise RuntimeError("device: cuda was asked for but torch sees no CUDA device")
        return torch.device("cuda")
    return torch.device("cpu")


def precision_on(setting: str | dict | None, device_type: str, bf16_blocks: bool = True) -> str:
    """train.precision as a job on this type of device ("cpu", "cuda") applies it. A mapping gives
    each device its own ({cuda: bf16} and float32 on a CPU, nanoGPT's choice: a CPU without bf16
    units autocasts many times slower); absent, or a device the mapping leaves out, float32 on a CPU
    and tf32 on CUDA. tf32 on a CPU is float32 (a CPU has no TF32 matmuls), and bf16 for a kind with
    no blocks to autocast (the LSA beside a GPT) is the device's default."""
    default = "tf32" if device_type == "cuda" else "float32"
    precision = (setting.get(device_type) if isinstance(setting, dict) else setting) or default
    if precision == "tf32" and device_type != "cuda" or precision == "bf16" and not bf16_blocks:
        precision = default
    return precision


def pick_precision(setting: str | dict | None, dev, bf16_blocks: bool = True) -> str:
    """precision_on for this job's device; sets torch's matmul precision for the whole process."""
    import torch
    precision = precision_on(setting, dev.type, bf16_blocks)
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = precision == "tf32"
    return precision
