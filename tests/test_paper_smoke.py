"""config/paper.yaml end to end at its real shapes (d, K, N, width, layers, heads, test lengths),
cut by `--config smoke=true` to a few epochs, the first seed and a few prompts: every experiment
of the paper config from an empty results/ to its report, as docs/performance.md shows the command."""
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml

from icl.config import SMOKE, load, smoke_cut, validate
from quoted import misquoted

REPO = Path(__file__).resolve().parent.parent
PAPER = REPO / "config" / "paper.yaml"
COMMAND = ".venv/bin/snakemake --cores 2 --configfile config/paper.yaml --config smoke=true"


def test_the_docs_show_the_smoke_command():
    assert COMMAND in (REPO / "docs" / "performance.md").read_text()


def test_paper_config_has_every_default_experiment():
    """config/paper.yaml is config.yaml at the papers' sizes: every default experiment is in it,
    and docs/performance.md gives each one's estimated cost."""
    default = load(str(REPO / "config.yaml"))["experiments"]
    paper = load(str(PAPER))["experiments"]
    assert sorted(default) == sorted(paper)
    costs = (REPO / "docs" / "performance.md").read_text()
    for name in paper:
        assert re.search(rf"^{name} +\d+ +\d+ ", costs, re.M), f"no estimate of {name} in docs/performance.md"


def test_smoke_keeps_every_shape_and_cuts_epochs_seeds_and_prompts():
    full = load(str(PAPER))
    cut = validate({**yaml.safe_load(PAPER.read_text()), "smoke": "true"})   # as --config smoke=true passes it
    assert sorted(cut["experiments"]) == sorted(f"{n}_smoke" for n in full["experiments"])
    for name, exp in full["experiments"].items():
        s = cut["experiments"][f"{name}_smoke"]
        for key in ("tokens", "task", "models"):
            assert s[key] == exp[key], (name, key)
        assert s["prompts"]["N"] == exp["prompts"]["N"]
        assert s["train"]["epochs"] == min(exp["train"]["epochs"], SMOKE["epochs"]) < exp["train"]["epochs"]
        assert s["prompts"]["train"] <= SMOKE["train"] and s["prompts"]["test"] <= SMOKE["test"]
        if exp.get("evaluate"):
            assert s["evaluate"]["lengths"] == exp["evaluate"]["lengths"]
            assert s["evaluate"]["shifts"] == exp["evaluate"]["shifts"]
            assert s["evaluate"]["prompts"] == SMOKE["evaluate_prompts"]
        seeds = (exp.get("sweep") or {}).get("seed")
        if seeds:
            assert s["sweep"]["seed"] == seeds[:1]
        assert {k: v for k, v in s["sweep"].items() if k != "seed"} == \
            {k: v for k, v in exp["sweep"].items() if k != "seed"}
    assert smoke_cut(full)["experiments"].keys() == cut["experiments"].keys()


@pytest.fixture(scope="module")
def smoke_run(tmp_path_factory):
    """The command of docs/performance.md in a fresh directory: about 5 minutes here (148 jobs, most of them a
    Python start-up), so the test that reads it runs under `-m slow`, outside `make test`."""
    wd = tmp_path_factory.mktemp("paper")
    shutil.copytree(REPO / "config", wd / "config")
    (wd / ".venv").symlink_to(REPO / ".venv")
    argv = COMMAND.split()
    argv[0] = str(Path(sys.executable).parent / "snakemake")
    res = subprocess.run([*argv, "-s", str(REPO / "Snakefile")], cwd=wd, capture_output=True, text=True,
                         timeout=2700)   # 5 min alone on a fast day; past 15 beside a second worker on a slow one
    assert res.returncode == 0, (res.stdout + res.stderr)[-5000:]
    return wd, res.stdout + res.stderr


@pytest.mark.slow
def test_every_paper_experiment_runs_to_its_report(smoke_run):
    wd, out = smoke_run
    names = list(yaml.safe_load(PAPER.read_text())["experiments"])
    index = (wd / "reports" / "index.html").read_text()
    for name in names:
        exp = f"{name}_smoke"
        assert (wd / "reports" / f"{exp}.html").exists(), exp
        assert exp in index
        v = pd.read_parquet(wd / "results" / exp / "verdicts.parquet")
        assert len(v) and v["verdict"].notna().all(), exp
        assert not misquoted(v)[0], (exp, misquoted(v)[0])          # every reason quotes its row's numbers
        epochs = pd.read_parquet(wd / "results" / exp / "curves.parquet", columns=["epoch"])["epoch"]
        assert epochs.max() == SMOKE["epochs"], exp
        assert not (wd / "results" / name).exists()      # a real run's folder is never written
