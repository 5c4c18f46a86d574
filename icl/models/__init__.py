"""The model kinds, one module each (the Model interface and what they share: base.py).

`build(spec, tokens)` makes the model of a run's `model` section; `MODELS` maps a kind's name
to its class, which the plan, the tables and the report ask for what depends on the kind
(columns, memory, checks, traits) without importing torch; `kinds(trait)` names the kinds with
a trait, which is what code outside this package asks instead of a kind's name. A new kind is a
module here, one entry in `MODELS`, and its settings in the schema (icl/schema/config.schema.yaml).
"""
from __future__ import annotations

from icl.models.base import (Batch, Model, attention_logs, count_attention_logs, count_batch, init_rng,  # noqa: F401
                             knn_count, lazy_torch, nearest, nearest_tokens, token_attention_logs, token_batch)
from icl.models.block import TransformerBlock
from icl.models.gpt import GPT
from icl.models.lsa import LSA
from icl.models.softmax_q import SoftmaxQ

MODELS = {m.kind: m for m in (SoftmaxQ, TransformerBlock, LSA, GPT)}


def kinds(trait: str) -> set[str]:
    """The names of the model kinds that have `trait` (a trait of icl.models.Model: linear_attention,
    linear_in_labels, label_average, mean_field, has_positions, nonlinear): what a claim, a theory
    table or a figure asks instead of testing a kind's name."""
    if not isinstance(getattr(Model, trait, None), bool):
        raise AttributeError(f"{trait!r} is not a trait of icl.models.Model")
    return {k for k, m in MODELS.items() if getattr(m, trait)}


def build(spec: dict, tokens, device_type: str = "cpu", precision: str = "float32"):
    """The model of a run spec's `model` section, for its `tokens` section (or just d), computing
    on `device_type` in `precision` (icl.jobs.runtime.pick_precision's answer; evaluation: float32)."""
    model = MODELS[spec["kind"]](spec, tokens)
    model.place(device_type, precision)
    return model


def setting_columns() -> dict:
    """Every kind's settings columns of runs.parquet, name -> pandas dtype, in one fixed order
    (a run has None where its kind lacks the setting)."""
    out: dict = {}
    for m in MODELS.values():
        for col, dtype in m.column_types.items():
            if out.setdefault(col, dtype) != dtype:
                raise TypeError(f"model kinds disagree on the dtype of runs.parquet column {col!r}")
    return out


def columns(spec: dict) -> dict:
    """The runs.parquet model-setting columns of one run: its kind's, None for the others'."""
    return {**dict.fromkeys(setting_columns()), **MODELS[spec["model"]["kind"]].columns(spec)}
