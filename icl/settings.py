"""A run's `train` and `tokens` sections as typed, frozen settings (and `train.llc`'s), built from the
validated config: a setting's default lives in the schema (Tokens reads its kind's defaults from the
schema itself, so a section made by hand reads as a validated one), or, for a train setting whose
absence means "off" (and which the schema leaves out so that setting it changes run ids only where
it is set), beside its field here. No code reads these sections with .get(key, default)
(tests/test_layers.py checks), so the schema and the code cannot disagree about a default. The
prompts section's one optional setting, `form`, is absent unless set (so existing run ids stay)."""
from __future__ import annotations

import math
from dataclasses import dataclass, fields, replace


def _known(cls, section: dict, name: str) -> None:
    """A key of a section that the dataclass lacks is an error, not a setting silently ignored."""
    unknown = sorted(set(section) - {f.name for f in fields(cls)})
    if unknown:
        raise ValueError(f"{name}: settings {unknown} have no field in icl.settings.{cls.__name__}")


@dataclass(frozen=True)
class LLC:
    """`train.llc`: the local learning coefficient measured during training (icl.train.llc), its SGLD's
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
    plateau: float = 0.1                    # schema default 0.1: the last checkpoint again at γ × this (0: not)

    @classmethod
    def of(cls, section: dict | None) -> "LLC | None":
        return None if section is None else cls(**section)

    def minibatch(self, n: int) -> int:
        """Prompts an SGLD step takes of a run's n training prompts."""
        return min(self.batch or n, n)

    def plateau_check(self) -> "LLC":
        """The settings of the last checkpoint's second estimate (icl.train.llc.measure_plateau): γ ×
        plateau, and a burn-in 1/plateau times as long (a weaker pull relaxes that much slower)."""
        return replace(self, gamma=self.gamma * self.plateau, burnin=int(math.ceil(self.burnin / self.plateau)))

    def passes(self) -> list[range]:
        """The chains in the passes they are sampled in, `together` a pass (all in one, absent)."""
        group = self.together or self.chains
        return [range(c, min(self.chains, c + group)) for c in range(0, self.chains, group)]


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
    precision: str | dict | None = None     # absent: the device's default (icl.jobs.runtime.precision_on)
    compile: bool | str | None = None       # absent: on CUDA
    curriculum: dict | None = None          # absent: full prompts from the first step
    llc: LLC | None = None                  # absent: no LLC measured

    def steps_per_epoch(self, n: int) -> int:
        """Optimisation steps an epoch takes over n training prompts: minibatches of batch_size (the
        last one shorter), one step without."""
        return -(-n // (self.batch_size or n))

    @classmethod
    def of(cls, section: dict) -> "Train":
        """The settings of a validated `train` section; a key the dataclass lacks is an error here,
        not a setting silently ignored."""
        _known(cls, section, "train")
        return cls(**{**section, **({"llc": LLC.of(section["llc"])} if "llc" in section else {})})


@dataclass(frozen=True)
class Prompts:
    """A run's `prompts` section. `form: counts` draws each prompt as its context's feature counts
    (a multinomial of N over p) and the labels at the features (icl.data.make_split): memory and
    time independent of N, for models that read a prompt only through its counts."""
    N: int
    train: int | None = None                # required by the schema; a helper may be given a part
    test: int | None = None                 # required by the schema
    form: str = "tokens"                    # absent: every token drawn

    TOKEN_MAX_N = 100_000                   # the token form's largest context (tokens drawn and stored one by one)

    @classmethod
    def of(cls, section: dict) -> "Prompts":
        _known(cls, section, "prompts")
        return cls(**section)

    @property
    def counts(self) -> bool:
        return self.form == "counts"


@dataclass(frozen=True)
class Tokens:
    """A run's `tokens` section, typed: the settings of its kind, each absent one at the schema's
    default for that kind (read from the schema itself, so a section made by hand reads as a
    validated one), the settings other kinds have None."""
    kind: str
    d: int | None = None                    # required by the schema; a helper of one kind's may be given a part
    K: int | None = None                    # discrete
    delta: float | None = None              # discrete
    noise: float | None = None              # discrete: schema default 0
    probs: list | None = None               # discrete; absent: uniform over the K features
    features: str | None = None             # discrete: schema default orthogonal
    covariance: str | list | dict | None = None   # gaussian: schema default identity
    distribution: str | None = None         # random_covariance: schema default exponential
    scale: float | None = None              # random_covariance: schema default 1

    @classmethod
    def of(cls, section: dict) -> "Tokens":
        _known(cls, section, "tokens")
        return cls(**{**_token_defaults(section["kind"]), **section})

    @property
    def discrete(self) -> bool:
        return self.kind == "discrete"


_DEFAULTS: dict = {}


def _token_defaults(kind: str) -> dict:
    """The schema's defaults of a token kind's settings (its if/then branch), read once."""
    if kind not in _DEFAULTS:
        import yaml
        from pathlib import Path
        schema = yaml.safe_load((Path(__file__).parent / "schema" / "config.schema.yaml").read_text())
        branches = [b["then"] for b in schema["$defs"]["tokens"]["allOf"]
                    if b["if"]["properties"]["kind"].get("const") == kind]
        _DEFAULTS[kind] = {k: v["default"] for b in branches for k, v in b.get("properties", {}).items()
                           if isinstance(v, dict) and "default" in v}
    return _DEFAULTS[kind]
