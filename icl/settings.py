"""A run's `train` section as typed, frozen settings, built once from the validated config (whose
schema fills in log_every, checkpoint_every and fresh): a setting's default lives in the schema, or,
for one whose absence means "off" (and which the schema leaves out so that setting it changes run
ids only where it is set), beside its field here. No code reads the section with .get(key, default)
(tests/test_layers.py checks), so the schema and the code cannot disagree about a default."""
from __future__ import annotations

from dataclasses import dataclass, fields


@dataclass(frozen=True)
class LLC:
    """`train.llc`: the local learning coefficient measured during training (icl.llc), its SGLD's
    settings with the schema's defaults (devinterp's, and Hoogland et al.'s chains and draws in
    config/paper.yaml)."""
    points: int                             # checkpoints, evenly spaced in log t from epoch 1 to the last
    chains: int                             # schema default 4
    draws: int                              # schema default 200
    burnin: int                             # schema default 100
    epsilon: float                          # schema default 1e-3: the SGLD step ε
    gamma: float                            # schema default 100: the localization γ
    nbeta: float | None = None              # absent: devinterp's default m / log m (m the minibatch)
    batch: int | None = None                # absent: every training prompt each step
    together: int | None = None             # absent: every chain side by side in one pass

    @classmethod
    def of(cls, section: dict | None) -> "LLC | None":
        return None if section is None else cls(**section)


@dataclass(frozen=True)
class Train:
    epochs: int
    log_every: int                          # schema default 1
    checkpoint_every: int                   # schema default 50
    fresh: bool                             # schema default false
    batch_size: int | None = None           # absent: every prompt in one step (full batch)
    warmup: int = 0                         # absent: no warmup
    schedule: str = "constant"              # absent: the lr stays after the warmup
    clip: float | None = None               # absent: no clipping
    precision: str | dict | None = None     # absent: the device's default (icl.runtime.precision_on)
    compile: bool | str | None = None       # absent: on CUDA
    curriculum: dict | None = None          # absent: full prompts from the first step
    llc: LLC | None = None                  # absent: no LLC measured

    @classmethod
    def of(cls, section: dict) -> "Train":
        """The settings of a validated `train` section; a key the dataclass lacks is an error here,
        not a setting silently ignored."""
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(section) - known)
        if unknown:
            raise ValueError(f"train: settings {unknown} have no field in icl.settings.Train")
        return cls(**{**section, **({"llc": LLC.of(section["llc"])} if "llc" in section else {})})
