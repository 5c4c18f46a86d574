"""One list of dependencies: pyproject.toml's [project].dependencies is what `pip install .` gives
and what the rules' conda environment (workflow/envs/icl.yaml) installs; and what the SLURM
profile loads comes from that list (the workflow, its jobs and `snakemake --report` are checked
the same way in tests/test_load.py::test_snakemake_report_zip)."""
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from packaging.requirements import Requirement

from deps import imported_modules, undeclared

REPO = Path(__file__).resolve().parent.parent
tomllib = pytest.importorskip("tomllib")


def test_conda_environment_installs_the_package_dependencies():
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    env = yaml.safe_load((REPO / "workflow/envs/icl.yaml").read_text())
    pip = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict))
    assert [str(Requirement(r)) for r in pip] == [str(Requirement(r)) for r in project["dependencies"]]
    python = next(d for d in env["dependencies"] if isinstance(d, str) and d.startswith("python"))
    version = lambda text: tuple(int(x) for x in text.split("."))
    assert version(python.split("=")[-1]) >= version(project["requires-python"].removeprefix(">="))


def test_every_rule_names_the_environment():
    rules = sorted((REPO / "workflow/rules").glob("*.smk"))
    for path in rules:
        text = path.read_text()
        assert text.count("\nrule ") == text.count('    conda:\n        "../envs/icl.yaml"'), path.name


def test_the_slurm_profile_loads_only_declared_dependencies(tmp_path):
    from conftest import TINY
    (tmp_path / "tiny.yaml").write_text(yaml.safe_dump(TINY))
    res = subprocess.run([sys.executable, "-X", "importtime", "-m", "snakemake", "-n", "-s", str(REPO / "Snakefile"),
                          "-d", str(tmp_path), "--workflow-profile", str(REPO / "workflow/profiles/slurm"),
                          "--configfile", str(tmp_path / "tiny.yaml")], capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    imported = imported_modules(res.stderr)
    assert "snakemake_executor_plugin_slurm" in imported
    assert undeclared(imported) == {}


def test_what_setuptools_vendors_counts_as_setuptools():
    """torch requires setuptools, and a process that imports it (torch.compile's inductor does) puts
    setuptools/_vendor on sys.path: its `backports.tarfile` then looks like a distribution of its own.
    Checked in a fresh process, as after make check's compile test, which made this test flaky."""
    code = ("import sys; sys.path.insert(0, 'tests'); import setuptools, jaraco.context; "
            "from deps import undeclared; print(sorted(undeclared({'backports', 'jaraco', 'torch', 'pytest'})))")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=120)
    assert res.returncode == 0, res.stderr[-2000:]
    assert res.stdout.split("\n")[-2] == "['pytest']"
