"""Every `snakemake` and `icl` command shown in README.md and docs/ works as written: each is
taken from the text, `my.yaml` is a tiny config and `EXP` a real experiment of it, and each runs
in a copy of the repository as a dry run (snakemake -n) or as written (icl check, --help). The
project's own entry points answer a wrong path or argument with one line, never a traceback."""
import re
import shlex
import subprocess
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parent.parent
DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
TOOLS = (".venv/bin/snakemake", ".venv/bin/icl")


def shown_commands() -> list[str]:
    """Command lines from fenced shell blocks and from inline code spans of the docs."""
    out = []
    for doc in DOCS:
        fenced = False
        for line in doc.read_text().splitlines():
            if line.startswith("```"):
                fenced = not fenced
            elif fenced:
                out.append(line.split(" #")[0].strip())
            else:
                out += re.findall(r"`([^`]+)`", line)
    return sorted({c for c in out if c.startswith(TOOLS)})


COMMANDS = shown_commands()


def test_the_docs_show_the_commands_a_user_needs():
    joined = "\n".join(COMMANDS)
    for must in ("icl check my.yaml", "--configfile my.yaml", "results/EXP/summary.parquet", "icl timing",
                 "--workflow-profile workflow/profiles/slurm", "snakemake --unlock"):
        assert must in joined, must


@pytest.fixture(scope="module")
def checkout(tmp_path_factory):
    """The tracked files, the repository's .venv, and my.yaml: a tiny config with experiment EXP."""
    from conftest import TINY
    wd = tmp_path_factory.mktemp("readme")
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=REPO, capture_output=True,
                           text=True, check=True).stdout.split("\n")
    for f in filter(None, files):
        src = REPO / f
        if src.is_file():
            (wd / f).parent.mkdir(parents=True, exist_ok=True)
            (wd / f).write_bytes(src.read_bytes())
    (wd / ".venv").symlink_to(REPO / ".venv")
    (wd / "my.yaml").write_text(yaml.safe_dump(TINY))
    return wd


def _marked(command):
    """The estimate of config/paper.yaml times every shape of the paper (minutes): under -m slow."""
    slow = "--estimate" in command and "config/paper.yaml" in command
    return pytest.param(command, marks=pytest.mark.slow if slow else ())


@pytest.mark.parametrize("command", [_marked(c) for c in COMMANDS])
def test_command_works_as_written(checkout, command):
    argv = [a.replace("EXP", "tiny").replace("<experiment>", "tiny") for a in shlex.split(command)]
    if "--report" in argv:
        pytest.skip("needs a finished run: tests/test_load.py::test_snakemake_report_zip runs it after one")
    if "--lint" in argv:          # exits 1 on any warning: there must be none
        res = subprocess.run(argv, cwd=checkout, capture_output=True, text=True, timeout=900)
        found = [line.strip()[2:] for line in (res.stdout + res.stderr).splitlines() if line.startswith("    * ")]
        assert res.returncode == 0 and not found, found
        assert "Traceback" not in res.stdout + res.stderr
        return
    if argv[0].endswith("snakemake") and "-n" not in argv:
        argv.append("-n")
    elif argv[0].endswith("icl") and argv[1:2] not in (["check"], ["--help"]):
        argv.append("--help")
    res = subprocess.run(argv, cwd=checkout, capture_output=True, text=True, timeout=900)
    out = res.stdout + res.stderr
    assert res.returncode == 0, out[-3000:]
    assert "Traceback" not in out and "Exception" not in out, out[-3000:]


WRONG = [  # (arguments to icl, words of the one line it must print)
    (["check", "missing.yaml"], "config file 'missing.yaml' not found"),
    (["bogus"], "invalid choice: 'bogus'"),
    (["train", "--plan", "nope.json", "--shard", "s", "--prompts-dir", "p", "--out", "o"], "plan file nope.json not found"),
    (["tables", "--runs", "missing.parquet", "--outdir", "o", "x.npz"], "table missing.parquet not found"),
    (["report", "--plan", "nope.json", "--results", "r", "--out", "o.html"], "plan file nope.json not found"),
    (["analyse", "nowhere"], "plan file nowhere/plan.json not found"),
    (["index", "--experiments", "{bad", "--out", "o.html"], "--experiments is not valid JSON"),
    (["plan", "--experiment", "x", "--spec", "{}", "--runs", "a", "--plan", "b"], "--experiment 'x' is not in --spec"),
    (["timing", "--logs", "nowhere"], "no benchmark files under nowhere"),
    (["train", "--plan", "my.yaml", "--shard", "s", "--prompts-dir", "p", "--out", "o"], "plan file my.yaml is unreadable"),
]


@pytest.mark.parametrize("args,words", WRONG, ids=[" ".join(a)[:40] for a, _ in WRONG])
def test_wrong_input_gets_one_line(checkout, args, words):
    res = subprocess.run([".venv/bin/icl", *args], cwd=checkout, capture_output=True, text=True, timeout=60)
    assert res.returncode != 0
    assert words in res.stderr, res.stderr
    assert "Traceback" not in res.stderr
    if args != ["bogus"]:             # argparse adds its usage line to an unknown step
        assert res.stderr.strip().count("\n") == 0, res.stderr


@pytest.mark.parametrize("target", ["results/nope/summary.parquet", "reports/nope.html"])
def test_target_of_an_unknown_experiment_is_named(checkout, target):
    res = subprocess.run([".venv/bin/snakemake", target, "--cores", "1", "--configfile", "my.yaml", "-n"],
                         cwd=checkout, capture_output=True, text=True, timeout=120)
    out = res.stdout + res.stderr
    assert res.returncode != 0
    assert f"No rule to produce {target}" in out and "Traceback" not in out, out[-2000:]


def test_readme_verdict_table_is_what_the_claim_functions_say():
    """The README's verdict table is `icl claims` (the first paragraph of each claim function's
    docstring), so the rule a reader sees is the rule the code runs."""
    from icl.claims import CLAIMS
    from icl.claims.readme import readme_table
    text = (REPO / "README.md").read_text()
    block = text.split("<!-- verdict-table")[1].split("-->", 1)[1].split("<!-- /verdict-table -->")[0].strip()
    assert block == readme_table()
    assert set(readme_table().split("`")[1::2]) >= {c for c in CLAIMS}
