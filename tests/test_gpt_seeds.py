"""config/gpt_seeds.yaml is the default config's GPT experiments over five seeds: the same
experiments in every setting but the seeds (and the name and description), so that what it decides
is what the default's one-seed version shows; the default's description says where the five are,
and the README names the command."""
from pathlib import Path

import yaml

from icl.config import load
from icl.plan import plan

REPO = Path(__file__).resolve().parent.parent
CONFIG = REPO / "config" / "gpt_seeds.yaml"
COMMAND = ".venv/bin/snakemake --cores 2 --configfile config/gpt_seeds.yaml"


def test_each_experiment_is_the_defaults_over_five_seeds():
    default = load(str(REPO / "config.yaml"))
    seeds = load(str(CONFIG))
    assert sorted(seeds["experiments"]) == ["ldl_depth_seeds", "zfb_gpt_seeds"]
    for name, exp in seeds["experiments"].items():
        base = name.removesuffix("_seeds")
        ref = default["experiments"][base]
        assert {k: v for k, v in exp.items() if k not in ("sweep", "description")} == \
            {k: v for k, v in ref.items() if k not in ("sweep", "description")}, name
        assert {k: v for k, v in exp["sweep"].items() if k != "seed"} == \
            {k: v for k, v in ref["sweep"].items() if k != "seed"}, name
        assert exp["sweep"]["seed"] == [0, 1, 2, 3, 4] and ref["sweep"]["seed"] == [0]
        assert "config/gpt_seeds.yaml" in ref["description"]
        assert len(plan(seeds, name)) == 5 * len(plan(default, base))
        assert any(m["kind"] == "gpt" for m in exp["models"])


def test_the_default_has_a_gpt_experiment_only_here():
    """Every GPT experiment of config.yaml is in this file: one seed there, five here."""
    default = yaml.safe_load((REPO / "config.yaml").read_text())["experiments"]
    gpt = {n for n, e in default.items() if any(m["kind"] == "gpt" for m in e["models"])}
    assert {f"{n}_seeds" for n in gpt} == set(yaml.safe_load(CONFIG.read_text())["experiments"])


def test_the_readme_and_the_config_show_the_command():
    assert COMMAND in CONFIG.read_text()
    assert COMMAND in (REPO / "README.md").read_text()
