"""The settings a model's runs sweep (L, Δ, N, the training law ...) and which of them tell the lines of
one figure apart: what the page and the figure modules name in titles and legends, so no figure pools
runs of different settings under one line without saying so."""
from __future__ import annotations

import numpy as np
import pandas as pd

RUN_IDENTITY = {"run_id", "experiment", "shard", "data_id", "config_hash", "code_version", "model_kind", "model"}


def swept_columns(runs: pd.DataFrame) -> list[str]:
    """The run settings that vary within a model's runs (what the sweep sets: L, Δ, N, the training
    law, the seed, a step the clock sets ...), in runs.parquet's order; `lr` always."""
    cols = [c for c in runs.columns if c not in RUN_IDENTITY and not runs[c].isna().all()]
    if not cols:
        return []
    varies = runs[cols].astype(str).groupby(runs["model"]).nunique().max() > 1     # every column at once
    return [c for c in cols if c == "lr" or varies[c]]


def settings_of(runs: pd.DataFrame, by: str) -> list[str]:
    """The run settings besides `by` and the seed that vary among `runs` (Δ, c, lr ...): a band
    over runs that differ in one would pool settings (it spanned 10⁻¹ to 10⁻¹⁴), not seeds."""
    return [c for c in swept_columns(runs) if c not in (by, "seed") and runs[c].astype(str).nunique() > 1]


def distinct_settings(runs: pd.DataFrame, by: str) -> list[str]:
    """settings_of less the settings another one fixes (a step the clock sets from Δ and N, a c tied
    to L): the columns that tell the lines of one `by` value apart, each named once."""
    keys = settings_of(runs, by)
    for k in list(keys):
        rest = [c for c in keys if c != k]
        if runs.groupby([by, *rest], dropna=False)[k].nunique(dropna=False).max() <= 1:
            keys.remove(k)
    return keys


def setting_label(keys: list[str], key) -> str:
    """A group's setting as "token_kind=gaussian, N=20"."""
    return ", ".join(f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}" for k, v in zip(keys, np.atleast_1d(key)))
