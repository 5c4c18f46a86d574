"""Config validation: bad input is refused with one line naming the key; good input is completed."""
import copy

import pytest

from icl.config import ConfigError, validate
from icl.plan.shards import plan
from icl.jobs.runtime import stable_hash
from icl.sweep import expand


def _set(cfg, path, value):
    node = cfg["experiments"]["tiny"]
    keys = path.split(".")
    for k in keys[:-1]:
        node = node[int(k)] if isinstance(node, list) else node[k]
    if value is _DEL:
        del node[keys[-1]]
    elif isinstance(node, list):
        node[int(keys[-1])] = value
    else:
        node[keys[-1]] = value
    return cfg


_DEL = object()

BAD = [  # (path, value, words the message must contain)
    ("task.kind", "sine", ["experiments.tiny.task.kind", "cosine"]),
    ("task.L", -1.0, ["experiments.tiny.task.L", "> 0"]),
    ("task.L", "big", ["experiments.tiny.task.L", "number"]),
    ("task.c", 0, ["experiments.tiny.task.c", "> 0"]),
    ("tokens.kind", "cloud", ["experiments.tiny.tokens.kind", "discrete"]),
    ("tokens.K", 9, ["experiments.tiny.tokens.K", "K <= d"]),
    ("tokens.K", 0, ["experiments.tiny.tokens.K", ">= 2"]),
    ("tokens.d", 2.5, ["experiments.tiny.tokens.d", "integer"]),
    ("tokens.delta", 0, ["experiments.tiny.tokens.delta", "> 0"]),
    ("tokens.noise", -0.1, ["experiments.tiny.tokens.noise", ">= 0"]),
    ("tokens.probs", [0.5, 0.2, 0.2], ["experiments.tiny.tokens.probs", "sum to 1"]),
    ("tokens.probs", [0.5, 0.5], ["experiments.tiny.tokens.probs", "K=3"]),
    ("tokens.colour", "red", ["experiments.tiny.tokens", "colour"]),
    ("prompts.N", 0, ["experiments.tiny.prompts.N", ">= 1"]),
    ("prompts.train", _DEL, ["experiments.tiny.prompts", "missing key 'train'; required keys: N, train, test"]),
    ("models", [], ["experiments.tiny.models", "empty"]),
    ("models.0.kind", "rnn", ["experiments.tiny.models.0.kind", "softmax_q"]),
    ("models.0.lr", 0, ["experiments.tiny.models.0.lr", "> 0"]),
    ("models.0.optimizer", "sgd", ["experiments.tiny.models.0.optimizer", "adam"]),
    ("models.1.name", "sq", ["experiments.tiny.models", "duplicate model name 'sq'"]),
    ("models.0.width", 8, ["experiments.tiny.models.0", "width"]),
    ("models.0.lr_rule", "sometimes", ["experiments.tiny.models.0.lr_rule", "'sometimes' is not allowed", "clock"]),
    ("models.1.lr_rule", "clock", ["experiments.tiny.models.1", "unknown key 'lr_rule'"]),
    ("train.epochs", -5, ["experiments.tiny.train.epochs", ">= 1"]),
    ("train.log_every", 100, ["experiments.tiny.train.log_every", "larger than epochs"]),
    ("train.batch_size", 1000, ["experiments.tiny.train.batch_size", "prompts.train"]),
    ("sweep", {"task.L": []}, ["experiments.tiny.sweep.task.L", "empty"]),
    ("sweep", {"task.Lipschitz": [1.0]}, ["experiments.tiny.sweep.task.Lipschitz", "unknown key"]),
    ("sweep", {"models.nope.lr": [1.0]}, ["experiments.tiny.sweep.models.nope.lr", "no model named 'nope'"]),
    ("sweep", {"task.L": [0.5, -1]}, ["experiments.tiny.sweep.task.L", "-1", "> 0"]),
    ("sweep", {"tokens.K": [3, 10]}, ["experiments.tiny.sweep.tokens.K", "K <= d"]),
    ("sweep", {"task.L": 0.5}, ["experiments.tiny.sweep.task.L", "array"]),
    ("sweep", {"zip": {"task.L": [0.2, 1.0], "task.c": [0.5]}},
     ["experiments.tiny.sweep.zip", "different lengths", "task.L: 2", "task.c: 1"]),
    ("sweep", {"zip": {"task.L": [0.2], "task.c": [0.5]}, "task.L": [1.0]},
     ["experiments.tiny.sweep.zip.task.L", "swept twice"]),
    ("sweep", {"zip": [{"task.L": [0.2], "task.c": [0.5]}, {"task.c": [1.0]}]},
     ["experiments.tiny.sweep.zip.1.task.c", "swept twice"]),
    ("sweep", {"zip": {"task.L": [0.2, -1.0], "task.c": [0.5, 0.5]}},
     ["experiments.tiny.sweep.zip", "task.L=-1.0, task.c=0.5", "> 0"]),
    ("sweep", {"zip": {"task.L": [], "task.c": []}}, ["experiments.tiny.sweep.zip.task.L", "empty"]),
    ("sweep", {"zip": {"task.Lip": [1.0]}}, ["experiments.tiny.sweep.zip.task.Lip", "unknown key"]),
]


@pytest.mark.parametrize("path,value,words", BAD, ids=[(f"{p} deleted" if v is _DEL else f"{p}={v!r}")[:40] for p, v, _ in BAD])
def test_bad_config_named(tiny_raw, path, value, words):
    with pytest.raises(ConfigError) as e:
        validate(_set(tiny_raw, path, value))
    msg = str(e.value)
    assert "\n" not in msg
    for w in words:
        assert w in msg, msg


@pytest.mark.parametrize("name", ["../evil", "a/b", "", "-x", "a b"])
def test_experiment_names_cannot_escape(tiny_raw, name):
    tiny_raw["experiments"][name] = tiny_raw["experiments"].pop("tiny")
    with pytest.raises(ConfigError, match="experiment names use letters"):
        validate(tiny_raw)


def test_unknown_top_level_key(tiny_raw):
    tiny_raw["shardsize"] = 3
    with pytest.raises(ConfigError, match="unknown key 'shardsize'; allowed keys: device, experiments"):
        validate(tiny_raw)


def test_absurd_size_refused_by_memory_budget(tiny_raw):
    tiny_raw["experiments"]["tiny"]["prompts"] = {"N": 100000, "train": 100000, "test": 1000}
    cfg = validate(tiny_raw)
    with pytest.raises(ConfigError, match="memory_budget_mb"):
        plan(cfg, "tiny")


def test_defaults_filled(tiny_raw):
    cfg = validate(tiny_raw)
    exp = cfg["experiments"]["tiny"]
    assert exp["tokens"]["noise"] == 0.0 and exp["tokens"]["features"] == "orthogonal"
    assert exp["models"][1]["ffn_mult"] == 4 and "width" not in exp["models"][0]
    assert cfg["shard_size"] == 512 and cfg["device"] == "auto"


def test_sweep_expansion_and_stable_ids(tiny_raw):
    cfg = validate(tiny_raw)
    specs = expand(cfg["experiments"]["tiny"])
    assert len(specs) == 2 * 2 * 2                     # L x seed x models
    assert sorted({(s["task"]["L"], s["seed"]) for s in specs}) == [(0.2, 0), (0.2, 1), (1.5, 0), (1.5, 1)]
    a, b = plan(cfg, "tiny"), plan(copy.deepcopy(cfg), "tiny")
    assert [r.run_id for r in a] == [r.run_id for r in b]
    assert len({r.run_id for r in a}) == 8
    spec = a[0].spec
    assert a[0].run_id == stable_hash({**spec, "train": {k: v for k, v in spec["train"].items()
                                                            if k not in ("checkpoint_every", "compile")}})
    # checkpoint frequency does not change a run's numbers, so not its id; a learning rate does
    other = copy.deepcopy(tiny_raw)
    other["experiments"]["tiny"]["train"]["checkpoint_every"] = 2
    assert [r.run_id for r in plan(validate(other), "tiny")] == [r.run_id for r in a]
    other["experiments"]["tiny"]["models"][0]["lr"] = 2.5
    assert [r.run_id for r in plan(validate(other), "tiny")] != [r.run_id for r in a]
    # models trained on the same data share one dataset
    assert len({r.data_id for r in a}) == 4


def test_shards_group_identical_shapes(tiny_raw):
    tiny_raw["shard_size"] = 3
    cfg = validate(tiny_raw)
    runs = plan(cfg, "tiny")
    by_shard = {}
    for r in runs:
        by_shard.setdefault(r.shard, []).append(r)
    assert all(len(v) <= 3 for v in by_shard.values())
    assert 4 <= len(by_shard) <= 8                     # 4 runs per model in shards of at most 3
    for members in by_shard.values():
        assert len({m.spec["model"]["kind"] for m in members}) == 1


def test_model_sweep_by_name(tiny_raw):
    tiny_raw["experiments"]["tiny"]["sweep"] = {"models.sq.lr": [0.5, 1.0]}
    cfg = validate(tiny_raw)
    lrs = sorted(s["model"]["lr"] for s in expand(cfg["experiments"]["tiny"]) if s["model"]["name"] == "sq")
    assert lrs == [0.5, 1.0]


def test_sweep_points_are_checked_in_combination(tiny_raw):
    """K=6 fits d=6 and d=4 fits K=3, but K=6 with d=4 does not: the plan refuses that point."""
    tiny_raw["experiments"]["tiny"]["sweep"] = {"tokens.K": [3, 6], "tokens.d": [6, 4]}
    cfg = validate(tiny_raw)
    with pytest.raises(ConfigError, match=r"experiments.tiny.sweep: the point tokens.K=6, tokens.d=4 is invalid.*K <= d"):
        plan(cfg, "tiny")


def test_extending_a_sweep_keeps_most_shards(tiny_raw):
    """Seeds added to a sweep land in new shards; the others keep their runs (and so their trained
    results). `seed` is the outermost key of the plan's order (icl.sweep.sweep_keys), whatever order the
    config lists the keys in. Cutting every shard_size runs in sweep order would move every cut."""
    exp = tiny_raw["experiments"]["tiny"]
    exp["models"] = exp["models"][:1]
    exp["sweep"] = {"task.L": [round(0.1 * i, 1) for i in range(1, 21)], "seed": list(range(50))}
    tiny_raw["shard_size"] = 64

    def shards(raw):
        out = {}
        for r in plan(validate(raw), "tiny"):
            out.setdefault(r.shard, set()).add(r.run_id)
        return out

    before = shards(tiny_raw)
    assert all(len(v) <= 64 for v in before.values()) and sum(map(len, before.values())) == 1000
    assert shards(copy.deepcopy(tiny_raw)) == before                     # deterministic
    for new_seed in (50, 123, 1000):                                     # sorting as text: inside, inside, at the end
        grown = copy.deepcopy(tiny_raw)
        grown["experiments"]["tiny"]["sweep"]["seed"] = [*exp["sweep"]["seed"], new_seed]
        after = shards(grown)
        kept = set(before) & set(after)
        retrain = sum(len(after[s]) for s in set(after) - kept)
        assert len(kept) >= len(before) - 3 and retrain <= 20 + 2 * 64, (new_seed, len(kept), retrain)


def test_zipped_keys_move_together(tiny_raw):
    """A zip group is one axis of the product: 4 L-c pairs x 2 seeds x 2 models, not 4 x 4 x 2 x 2;
    its points are checked whole (K=6 alone does not fit d=6... here K=6 comes with d=8)."""
    exp = tiny_raw["experiments"]["tiny"]
    Ls = [0.1, 0.4, 1.0, 2.0]
    exp["sweep"] = {"zip": {"task.L": Ls, "task.c": Ls}, "seed": [0, 1]}
    specs = expand(validate(tiny_raw)["experiments"]["tiny"])
    assert len(specs) == 4 * 2 * 2
    assert all(s["task"]["L"] == s["task"]["c"] for s in specs)
    assert sorted({(s["task"]["L"], s["seed"]) for s in specs}) == [(L, seed) for L in Ls for seed in (0, 1)]
    # several groups, each its own axis
    exp["sweep"] = {"zip": [{"task.L": Ls, "task.c": Ls}, {"tokens.K": [3, 8], "tokens.d": [6, 8]}]}
    specs = expand(validate(tiny_raw)["experiments"]["tiny"])
    assert len(specs) == 4 * 2 * 2
    assert {(s["tokens"]["K"], s["tokens"]["d"]) for s in specs} == {(3, 6), (8, 8)}


def test_noise_levels_train_apart(tiny_raw):
    """Noiseless discrete tokens train in the count form and noisy ones in the token form, with
    different memory: a sweep over tokens.noise puts each level in shards of its own."""
    exp = tiny_raw["experiments"]["tiny"]
    exp["models"] = exp["models"][:1]
    exp["sweep"] = {"tokens.noise": [0.0, 0.1], "seed": [0, 1]}
    runs = plan(validate(tiny_raw), "tiny")
    by_shard = {}
    for r in runs:
        by_shard.setdefault(r.shard, set()).add(bool(r.spec["tokens"]["noise"]))
    assert len(by_shard) == 2 and all(len(v) == 1 for v in by_shard.values())


def test_clock_rule_needs_gd_discrete_tokens_and_a_known_label_covariance(tiny_raw):
    """lr_rule: clock reads the task's label covariance at the features and sets a GD step: each
    missing piece is named in one line."""
    for path, value, words in (("models.0.optimizer", "adam", "optimizer: gd"),
                               ("task", {"kind": "polynomial", "L": 1.0}, "label covariance")):
        raw = _set(copy.deepcopy(tiny_raw), "models.0.lr_rule", "clock")
        with pytest.raises(ConfigError) as e:
            validate(_set(raw, path, value))
        assert "experiments.tiny.models.0.lr_rule" in str(e.value) and words in str(e.value)
        assert "\n" not in str(e.value)


def test_clock_rule_gives_each_delta_and_L_its_step_and_leaves_other_ids_alone(tiny_raw):
    """With lr_rule: clock the plan sets each run's lr (what runs.parquet records and training
    uses) from Δ and L; without it nothing changes: the same ids as before the option existed."""
    before = {r.run_id for r in plan(validate(tiny_raw), "tiny")}
    tiny_raw["experiments"]["tiny"]["sweep"]["tokens.delta"] = [2.0, 4.0]
    plain = plan(validate(tiny_raw), "tiny")
    assert before <= {r.run_id for r in plain}
    _set(tiny_raw, "models.0.lr_rule", "clock")
    runs = [r for r in plan(validate(tiny_raw), "tiny") if r.spec["model"]["name"] == "sq"]
    lr = {(r.spec["tokens"]["delta"], r.spec["task"]["L"]): r.spec["model"]["lr"] for r in runs}
    assert len(set(lr.values())) == 4 and lr[(2.0, 0.2)] > lr[(4.0, 0.2)] > lr[(4.0, 1.5)]
    assert {r.spec["model"]["lr_ref"] for r in runs} == {2.0}
    assert len({r.shard for r in runs}) == 1                  # one shape: one ensemble, whatever its steps
    from icl.tables.build import runs_table
    df = runs_table([{"run_id": r.run_id, "data_id": r.data_id, "shard": r.shard, "spec": r.spec} for r in runs], "tiny", "h")
    assert sorted(df["lr"]) == sorted(lr[(r.spec["tokens"]["delta"], r.spec["task"]["L"])] for r in runs)
    assert (df["lr_rule"] == "clock").all() and (df["lr_ref"] == 2.0).all()
    from icl.analyse.claims.judge import settings
    assert "lr" not in settings(df) and "delta" in settings(df)      # the step moves with the settings, not a setting
