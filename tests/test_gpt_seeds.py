"""config/gpt_seeds.yaml asks the default's ldl_depth question of wider GPTs over five seeds: the same
task, tokens, prompts and training recipe, other (larger) models, the default's sweep; the README
names the command."""
from pathlib import Path

from icl.config import load
from icl.plan.shards import plan

REPO = Path(__file__).resolve().parent.parent
CONFIG = REPO / "config" / "gpt_seeds.yaml"
COMMAND = ".venv/bin/snakemake --cores 2 --configfile config/gpt_seeds.yaml"


def test_the_wider_gpt_experiment_is_the_defaults_but_for_its_models():
    default = load(str(REPO / "config.yaml"))
    seeds = load(str(CONFIG))
    assert sorted(seeds["experiments"]) == ["ldl_depth_seeds"]
    exp, ref = seeds["experiments"]["ldl_depth_seeds"], default["experiments"]["ldl_depth"]
    same = lambda e: {k: v for k, v in e.items() if k not in ("description", "models")}   # noqa: E731
    assert same(exp) == same(ref)
    assert exp["sweep"]["seed"] == [0, 1, 2, 3, 4]
    wide = {m["width"] for m in exp["models"]}
    assert all(m["kind"] == "gpt" for m in exp["models"]) and min(wide) > max(m["width"] for m in ref["models"])
    assert len({m["layers"] for m in exp["models"]}) >= 3            # depths for ldl.depth to compare
    assert len(plan(seeds, "ldl_depth_seeds")) == 5 * len(exp["models"])


def test_the_readme_and_the_config_show_the_command():
    assert COMMAND in CONFIG.read_text()
    assert COMMAND in (REPO / "README.md").read_text()
