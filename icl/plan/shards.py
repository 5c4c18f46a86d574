"""Expand an experiment's sweep into runs, and group runs of identical tensor shapes into shards.

A pure function of the config: the Snakefile calls it at parse time, so shards are known when
the DAG is built. Ids are hashes of canonical JSON, so they do not change between invocations.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field

from icl import models
from icl.config import check_experiment
from icl.data import data_spec, features, prompt_file_bytes
from icl.jobs.errors import ConfigError
from icl.jobs.runtime import LOAD_GROUP, stable_hash
from icl.settings import Tokens
from icl.sweep import expand, sweep_keys


@dataclass
class Run:
    run_id: str
    data_id: str
    shard: str = ""
    spec: dict = field(default_factory=dict)   # tokens, task, prompts, model, train, seed

    @property
    def data_spec(self) -> dict:
        return data_spec(self.spec)


def identity(spec: dict) -> dict:
    """What a run's numbers depend on, hashed into its id. Left out: how often it checkpoints,
    whether its step is compiled (the same arithmetic), and the evaluate section (evaluation is its
    own step, so new shifts never retrain)."""
    train = {k: v for k, v in spec["train"].items() if k not in ("checkpoint_every", "compile")}
    return {**{k: v for k, v in spec.items() if k != "evaluate"}, "train": train}


def shape_key(spec: dict) -> dict:
    """Runs that agree on this have identical tensor shapes and one optimizer: one ensemble. Of the
    tokens only what changes the step's shapes counts: discrete or continuous (features, K), d, and
    noise; continuous kinds (a fixed covariance, random covariances) and their settings train side by
    side, each run drawing its own (icl.train.fresh), so a sweep over them is one shard, not one a kind."""
    model = {k: v for k, v in spec["model"].items() if k not in ("lr", "lr_ref", "name")}
    tok = Tokens.of(spec["tokens"])
    return {
        "model": model,
        "tokens": {"discrete": tok.discrete, "d": tok.d, "K": tok.K, "noise": bool(tok.noise)},
        "prompts": spec["prompts"],
        "train": spec["train"],
    }


def run_bytes(spec: dict) -> int:
    """Peak memory of one run inside a training ensemble: the model kind's own estimate
    (Model.train_bytes; benchmarks/memory.py measures it against the slope of the real peak over
    two shard sizes, within 25 % at the paper's shapes). Evaluation under shift is a step of its
    own, budgeted by eval_bytes."""
    return models.MODELS[spec["model"]["kind"]].train_bytes(spec)


JOB_BASE_MB = 1500     # Python, torch, and on a cluster Snakemake twice (~170 MB each) beside the job


def load_bytes(spec: dict, n_runs: int) -> int:
    """What a training job holds once, whatever its runs: the prompt files of one group of runs
    as they are read, before the model's form of them (a shard's fixed cost, not a run's)."""
    return min(n_runs, LOAD_GROUP) * prompt_file_bytes(spec)


def shard_mem_mb(members: list[Run]) -> int:
    """The memory a training job of these runs asks its scheduler for (mem_mb)."""
    return JOB_BASE_MB + (sum(run_bytes(r.spec) for r in members) + load_bytes(members[0].spec, len(members))) // 2**20


def train_threads(n_shards: int) -> int:
    """Threads of a training (or evaluation) job: 2 for an experiment of one shard; 1 where there
    are several: a training job starts in 1-2 s and softmax_q's count form trains 180 runs x 400
    epochs in about as long, so two one-thread jobs side by side do more than one job with two
    threads (benchmarks/README.md)."""
    return 2 if n_shards == 1 else 1


def eval_bytes(spec: dict) -> int:
    """Rough peak memory of evaluating one run on its largest cell (Model.eval_bytes)."""
    return models.MODELS[spec["model"]["kind"]].eval_bytes(spec)


def experiment_json(cfg: dict, name: str) -> str:
    """One experiment of a validated config plus the global settings, as the JSON the `plan`
    job receives (keys sorted: the plan must come out the same either way)."""
    settings = {k: v for k, v in cfg.items() if k != "experiments"}
    return json.dumps({**settings, "experiments": {name: cfg["experiments"][name]}}, sort_keys=True)


def plan(cfg: dict, name: str) -> list[Run]:
    """Runs of one experiment, each with its shard assigned; the same for any order of the
    config's keys."""
    exp = cfg["experiments"][name]
    budget = cfg["memory_budget_mb"] * 2**20
    runs: dict[str, Run] = {}
    try:
        specs = expand(exp, check_experiment)
    except ConfigError as e:
        raise ConfigError(f"experiments.{name}.{e}") from None
    for spec in map(with_step, specs):
        rid = stable_hash(identity(spec))
        if rid not in runs:  # a sweep that repeats a point trains it once
            runs[rid] = Run(run_id=rid, data_id=stable_hash(data_spec(spec)), spec=spec)
    groups: dict[str, list[Run]] = {}
    keys = sweep_keys(exp)
    for run in runs.values():
        groups.setdefault(stable_hash(shape_key(run.spec)), []).append(run)
    for key, members in groups.items():
        need = run_bytes(members[0].spec)
        alone = need + load_bytes(members[0].spec, 1)          # a shard of one run
        if alone > budget:
            raise ConfigError(
                f"experiments.{name}: one run needs about {alone / 2**20:.0f} MB, "
                f"more than memory_budget_mb={cfg['memory_budget_mb']}; reduce prompts.N/train/test or model width, "
                "or raise memory_budget_mb")
        fixed = load_bytes(members[0].spec, len(members))
        size = max(1, min(cfg["shard_size"], (budget - fixed) // need if budget > fixed else 1))
        model = members[0].spec["model"]["kind"]
        order = lambda r: sweep_position(r.spec, keys) + [r.run_id]
        for chunk in chunks(sorted(members, key=order), size):
            shard = f"{model}-{stable_hash(sorted(r.run_id for r in chunk), 10)}"
            for r in chunk:
                r.shard = shard
    return list(runs.values())


def with_step(spec: dict) -> dict:
    """The run spec with the GD step it trains with. A model without `lr_rule` (or with
    `lr_rule: fixed`) trains at its `lr`, and its spec, so its run id, is unchanged. With
    `lr_rule: clock` (softmax_q under GD, discrete tokens, a task with a label covariance: checked
    by icl.config) the configured lr is the step at the reference setting Δ = 3, L = c = 1
    (icl.theory.ldl.REF_*; same d, K, features and task family), and the run's step is the one
    whose collapse clock η‖v‖⁴·E[(f(v_k) − f(v_k'))²] runs as fast there (icl.theory.ldl.clock_lr):
    `lr` becomes that step (what runs.parquet records and training uses, to 6 significant digits)
    and `lr_ref` keeps the configured value."""
    model = spec["model"]
    if model.get("lr_rule", "fixed") != "clock":
        return spec
    from icl.tasks import family
    from icl.theory import ldl
    tok, task = spec["tokens"], spec["task"]
    fam = family(task["kind"])
    ref_tok = {**tok, "delta": ldl.REF_DELTA}
    ref_task = {**task, "L": ldl.REF_L, **({"c": ldl.REF_C} if "c" in task else {})}
    V, V_ref = features(tok, spec["seed"]).astype(float), features(ref_tok, spec["seed"]).astype(float)
    eta = ldl.clock_lr(model["lr"], V, fam.label_cov(task, V), V_ref, fam.label_cov(ref_task, V_ref))
    return {**spec, "model": {**model, "lr": float(f"{eta:.6g}"), "lr_ref": model["lr"]}}


def sweep_position(spec: dict, keys: list[str]) -> list[str]:
    """A run's values of the swept settings, in sweep_keys order, as sortable text. Runs
    sorted by it sit where the sweep's cartesian product puts them, keyed by values, not list
    positions: a value added to a sweep list lands as one contiguous block."""
    out = []
    for key in keys:
        parts = key.split(".")
        if parts[0] == "models":
            node = spec["model"] if spec["model"]["name"] == parts[1] else {}
            parts = parts[2:]
        else:
            node = spec
        for p in parts:
            node = node.get(p) if isinstance(node, dict) else None
        out.append(json.dumps(node, sort_keys=True))
    return out


def chunks(members: list[Run], size: int) -> list[list[Run]]:
    """Cut runs of one shape, in sweep order, into shards of at most `size`, so that extending a
    sweep leaves most shards (and their trained results) as they are.

    Content-defined, as rsync cuts files: a shard ends when it is full, or, once it holds a
    quarter of `size`, after a run whose id hashes to a boundary (one run in size/4 is one). Runs
    added to the sweep change only the shards they fall into (a full shard can push cuts on to
    the next boundary); cutting every `size` runs would move every cut after the first new run.
    A shape with at most `size` runs is one shard."""
    if len(members) <= size:
        return [members]
    out, cur = [], []
    for r in members:
        cur.append(r)
        if len(cur) >= size or (len(cur) >= size // 4 and int(r.run_id, 16) % max(2, size // 4) == 0):
            out.append(cur)
            cur = []
    if cur:
        out.append(cur)
    return out


def shards(runs: list[Run]) -> dict[str, list[Run]]:
    out: dict[str, list[Run]] = {}
    for r in runs:
        out.setdefault(r.shard, []).append(r)
    return out
