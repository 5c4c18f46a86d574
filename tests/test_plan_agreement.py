"""The plan is one function of the config: the DAG (planned from the config as Snakemake loaded it)
and plan.json (written by the `plan` job from the JSON the rule hands it) put every run in the
same shard, for the default and the paper-size configs, and for any order of the sweep's keys."""
import copy
import json
from pathlib import Path

import pytest
import yaml

from icl.cli import main as icl_main
from icl.config import load, validate
from icl.plan.shards import experiment_json, plan

REPO = Path(__file__).resolve().parent.parent
CONFIGS = [REPO / "config.yaml", REPO / "config" / "paper.yaml"]


def shard_of(runs):
    return {r.run_id: r.shard for r in runs}


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.name)
def test_plan_job_agrees_with_the_dag(path, tmp_path):
    cfg = load(str(path))
    several = 0
    for name in cfg["experiments"]:
        dag = shard_of(plan(cfg, name))
        out = tmp_path / name
        out.mkdir()
        icl_main(["plan", "--experiment", name, "--spec", experiment_json(cfg, name),
                  "--runs", str(out / "runs.parquet"), "--plan", str(out / "plan.json")])
        written = {r["run_id"]: r["shard"] for r in json.loads((out / "plan.json").read_text())["runs"]}
        assert written == dag, name
        several += len(set(dag.values())) > len({r.spec["model"]["kind"] for r in plan(cfg, name)})
    if path.name == "paper.yaml":   # the sizes that crashed: shape groups cut into several shards
        assert several >= 3


def test_order_of_sweep_keys_does_not_change_the_plan(tiny_raw):
    exp = tiny_raw["experiments"]["tiny"]
    exp["models"] = exp["models"][:1]
    exp["sweep"] = {"task.L": [0.1, 0.2, 0.4, 1.0], "seed": list(range(12)), "models.sq.lr": [1.0, 2.0]}
    tiny_raw["shard_size"] = 8
    base = shard_of(plan(validate(tiny_raw), "tiny"))
    assert len(set(base.values())) >= 6
    for keys in (["seed", "task.L", "models.sq.lr"], ["models.sq.lr", "task.L", "seed"]):
        other = copy.deepcopy(tiny_raw)
        other["experiments"]["tiny"]["sweep"] = {k: exp["sweep"][k] for k in keys}
        assert shard_of(plan(validate(other), "tiny")) == base, keys
    # through YAML with sorted keys and JSON, as configs travel
    travelled = json.loads(json.dumps(yaml.safe_load(yaml.safe_dump(tiny_raw, sort_keys=True)), sort_keys=True))
    assert shard_of(plan(validate(travelled), "tiny")) == base


def test_zip_group_is_one_key_of_the_plan_order(tiny_raw):
    """A zip group is one axis of the sweep, placed by its first key: the plan is the same for any
    order of the sweep's keys and of the keys inside the group, and a seed added to a zipped
    sweep lands in new shards (content-defined cuts), leaving the others trained."""
    exp = tiny_raw["experiments"]["tiny"]
    exp["models"] = exp["models"][:1]
    Ls = [round(0.1 * i, 1) for i in range(1, 21)]
    group = {"task.L": Ls, "task.c": Ls, "models.sq.lr": [float(i) for i in range(1, 21)]}
    exp["sweep"] = {"zip": group, "seed": list(range(50))}
    tiny_raw["shard_size"] = 64
    base = shard_of(plan(validate(tiny_raw), "tiny"))
    assert len(base) == 20 * 50 and len(set(base.values())) >= 16
    other = copy.deepcopy(tiny_raw)
    other["experiments"]["tiny"]["sweep"] = {"seed": list(range(50)), "zip": {k: group[k] for k in reversed(group)}}
    assert shard_of(plan(validate(other), "tiny")) == base
    travelled = json.loads(json.dumps(yaml.safe_load(yaml.safe_dump(tiny_raw, sort_keys=True)), sort_keys=True))
    assert shard_of(plan(validate(travelled), "tiny")) == base
    as_list = copy.deepcopy(tiny_raw)
    as_list["experiments"]["tiny"]["sweep"]["zip"] = [group]
    assert shard_of(plan(validate(as_list), "tiny")) == base

    grown = copy.deepcopy(tiny_raw)
    grown["experiments"]["tiny"]["sweep"]["seed"].append(123)
    after = shard_of(plan(validate(grown), "tiny"))
    before_shards, after_shards = set(base.values()), set(after.values())
    kept = before_shards & after_shards
    retrain = sum(1 for s in after.values() if s not in kept)
    # at most three shards' cuts move (a full shard pushes its cut on to the next boundary), so
    # what retrains is the 20 new runs and at most those three shards
    assert len(kept) >= len(before_shards) - 3 and retrain <= 20 + 3 * 64, (len(kept), retrain)
