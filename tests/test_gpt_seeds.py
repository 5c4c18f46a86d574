"""config/gpt_seeds.yaml is the default config's one-seed GPT experiments whole and over five seeds;
the default keeps a smaller version of each (some of the models, some of the sweep's values, one
seed) so that `make run` stays short (zfb_gpt, five seeds in the default, is not among them). Every other setting is the same, so that what the default shows is
one seed of what the five-seed config decides; the default's description says where the rest is,
and the README names the command."""
from pathlib import Path

import yaml

from icl.config import load
from icl.plan import plan

REPO = Path(__file__).resolve().parent.parent
CONFIG = REPO / "config" / "gpt_seeds.yaml"
COMMAND = ".venv/bin/snakemake --cores 2 --configfile config/gpt_seeds.yaml"


def test_each_default_gpt_experiment_is_one_seed_of_a_part_of_the_five_seed_one():
    default = load(str(REPO / "config.yaml"))
    seeds = load(str(CONFIG))
    assert sorted(seeds["experiments"]) == ["ldl_depth_seeds"]
    for name, exp in seeds["experiments"].items():
        base = name.removesuffix("_seeds")
        ref = default["experiments"][base]
        same = lambda e: {k: v for k, v in e.items() if k not in ("sweep", "description", "models")}
        assert same(exp) == same(ref), name
        assert all(m in exp["models"] for m in ref["models"]), name
        assert set(ref["sweep"]) == set(exp["sweep"]), name
        for key, values in ref["sweep"].items():
            if key != "seed":
                assert all(v in exp["sweep"][key] for v in values), (name, key)
        assert exp["sweep"]["seed"] == [0, 1, 2, 3, 4] and ref["sweep"]["seed"] == [0]
        assert "config/gpt_seeds.yaml" in ref["description"]
        ids = {r.run_id for r in plan(seeds, name)}
        mine = plan(default, base)
        assert {r.run_id for r in mine} <= ids, name     # the default's runs are the five-seed config's
        assert len(ids) >= 5 * len(mine)
        assert any(m["kind"] == "gpt" for m in exp["models"])


def test_the_smaller_version_is_smaller():
    """What the default leaves out is a real cut: fewer GPT runs than one seed of the whole."""
    default = load(str(REPO / "config.yaml"))
    seeds = load(str(CONFIG))
    for name in seeds["experiments"]:
        whole = [r for r in plan(seeds, name) if r.spec["seed"] == 0 and r.spec["model"]["kind"] == "gpt"]
        part = [r for r in plan(default, name.removesuffix("_seeds")) if r.spec["model"]["kind"] == "gpt"]
        assert 0 < len(part) < len(whole), name


def test_every_one_seed_gpt_experiment_of_the_default_is_here():
    """Every GPT experiment config.yaml runs on one seed is in this file, over five; one it runs on
    five seeds already is not."""
    default = yaml.safe_load((REPO / "config.yaml").read_text())["experiments"]
    gpt = {n for n, e in default.items() if any(m["kind"] == "gpt" for m in e["models"])
           and e["sweep"]["seed"] == [0]}
    assert "zfb_gpt" not in gpt and "ldl_depth" in gpt
    assert {f"{n}_seeds" for n in gpt} == set(yaml.safe_load(CONFIG.read_text())["experiments"])


def test_the_readme_and_the_config_show_the_command():
    assert COMMAND in CONFIG.read_text()
    assert COMMAND in (REPO / "README.md").read_text()
