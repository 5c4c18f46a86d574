"""Every `snakemake` and `icl` command shown in README.md and docs/ works as written: each is
taken from the text, `my.yaml` is a tiny config and `EXP` a real experiment of it, and each runs
in a copy of the repository as a dry run (snakemake -n) or as written (icl check, --help). The
README's first experiment (`first.yaml`, written out as the README shows it) runs for real, to its
report. Every other command shown (make, SLURM, containers) is listed in NOT_RUN with the reason
it cannot run here and the test that covers it, so that none is dropped silently. The project's
own entry points answer a wrong path or argument with one line, never a traceback."""
import re
import shlex
import subprocess
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parent.parent
DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
TOOLS = (".venv/bin/snakemake", ".venv/bin/icl")
# an inline code span that starts with one of these and has arguments is a command line too
PROGRAMS = ("make ", "bash ", "sudo ", "docker ", "apptainer ", "rsync ", "python3 ", "TORCH_SPEC=", ".venv/bin/",
            "squeue ", "sacct ", "sbatch ", "tail ", "ls ")
# commands shown that a test cannot run as written: (how the command starts, why, and what covers it)
NOT_RUN = {
    "make run": "the eleven default experiments, ~10 minutes; tests/test_workflow.py runs the same Snakefile",
    "TORCH_SPEC=": "make run with another torch, from a package index",
    "make test": "the test suite itself",
    "bash benchmarks/gpu_check.sh": "needs a lent GPU and the wheels it carries; test_benchmarks.py runs its usage line, "
                                    "and gpt_throughput.py on the CPU",
    "make check": "the test suite itself, -m slow included",
    "bash .ci/run": "CI's entry point: the test suite itself",
    ".venv/bin/python -m pytest": "the test suite itself",
    "make setup": "scripts/setup.sh, which made the venv these tests run in",
    "python3 -m venv": "a fresh venv with torch from a package index",
    "docker ": "needs a container engine",
    "apptainer ": "needs a container engine",
    "sudo tests/slurm/start-slurm.sh": "needs root; tests/slurm/test_slurm.py starts the cluster with it",
    "sbatch ": "how the SLURM plugin submits each job (needs a cluster); tests/slurm/test_slurm.py",
    "squeue ": "watches a SLURM cluster; tests/slurm/test_slurm.py",
    "sacct ": "watches a SLURM cluster; tests/slurm/test_slurm.py",
    "ls .snakemake/slurm_logs/": "a SLURM run's logs; tests/slurm/test_slurm.py reads them",
    "tail -f logs/": "follows a running training job's log; tests/test_workflow.py checks every rule logs",
    "rsync ": "copies reports from a cluster",
}


def all_shown_commands() -> list[str]:
    """Every command line of the docs: each line of a fenced bash block, and each inline code span
    that starts with a program (PROGRAMS) and gives it arguments."""
    out = []
    for doc in DOCS:
        fenced = None
        for line in doc.read_text().splitlines():
            if line.startswith("```"):
                fenced = line[3:].strip() if fenced is None else None
            elif fenced is not None:
                if fenced == "bash" and line.split(" #")[0].strip():
                    out.append(line.split(" #")[0].strip())
            else:
                out += [c for c in re.findall(r"`([^`]+)`", line) if c.startswith(PROGRAMS) and " " in c]
    return sorted(set(out))


def shown_commands() -> list[str]:
    """The commands of the project's own tools: these run here."""
    return [c for c in all_shown_commands() if c.startswith(TOOLS) and not c.startswith(tuple(NOT_RUN))]


COMMANDS = shown_commands()


def first_experiment() -> tuple[str, str]:
    """The README's first experiment: the YAML block that starts `# first.yaml`, and the command
    shown that runs it."""
    text = (REPO / "README.md").read_text()
    block = "# first.yaml" + text.split("```yaml\n# first.yaml", 1)[1].split("```", 1)[0]
    run = [c for c in COMMANDS if c.startswith(".venv/bin/snakemake") and "--configfile first.yaml" in c]
    assert len(run) == 1, run
    return block, run[0]


def test_every_command_shown_runs_here_or_says_why_not():
    """A command the tests cannot run (a cluster, a container, the suite itself) is named in
    NOT_RUN with its reason; none is left out silently, and no entry there is stale."""
    shown = all_shown_commands()
    silent = [c for c in shown if not c.startswith(TOOLS) and not c.startswith(tuple(NOT_RUN))]
    assert not silent, f"commands shown in the docs that no test runs and NOT_RUN does not name: {silent}"
    stale = [k for k in NOT_RUN if not any(c.startswith(k) for c in shown)]
    assert not stale, f"NOT_RUN names commands the docs no longer show: {stale}"


def test_the_docs_show_the_commands_a_user_needs():
    joined = "\n".join(COMMANDS)
    for must in ("icl check my.yaml", "--configfile my.yaml", "results/EXP/summary.parquet", "icl timing",
                 "--workflow-profile workflow/profiles/slurm", "snakemake --unlock", "first.yaml"):
        assert must in joined, must


def test_ci_runs_the_readme_full_check():
    """.ci/run runs the command the README's set-up block names as what CI runs, and nothing else:
    what CI proves is what a user gets from that command."""
    block = re.search(r"## Set-up: two commands\n+```bash\n(.*?)```", (REPO / "README.md").read_text(), re.S).group(1)
    ci_lines = [line.split(" #")[0].strip() for line in block.splitlines() if "CI" in line]
    assert len(ci_lines) == 1, block
    steps = [line.strip() for line in (REPO / ".ci" / "run").read_text().splitlines()
             if line.strip() and not line.startswith("#")]
    assert steps[-1] == ci_lines[0] == "make check", (steps, ci_lines)
    assert all(s.startswith(("set -", "cd ")) for s in steps[:-1]), steps


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
    (wd / "first.yaml").write_text(first_experiment()[0])
    return wd


def _marked(command):
    """The estimate of a shipped config (config/paper.yaml, config/gpt_seeds.yaml) times every shape
    of it, GPTs among them (a minute or more): under -m slow."""
    slow = "--estimate" in command and "config/" in command
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


def test_first_experiment_runs_as_written(checkout):
    """The README's first experiment, the file and the command exactly as shown, runs to its report
    (under a minute on 2 cores)."""
    block, command = first_experiment()
    assert yaml.safe_load(block)["experiments"].keys() == {"first"}
    res = subprocess.run(shlex.split(command), cwd=checkout, capture_output=True, text=True, timeout=900)
    out = res.stdout + res.stderr
    assert res.returncode == 0, out[-3000:]
    assert "reports/first.html" in (REPO / "README.md").read_text()
    for made in ("reports/first.html", "reports/index.html", "results/first/verdicts.parquet"):
        assert (checkout / made).is_file(), made


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


def test_docs_verdict_table_is_what_the_claim_functions_say():
    """docs/claims.md's verdict table is `icl claims` (the first paragraph of each claim function's
    docstring), so the rule a reader sees is the rule the code runs."""
    from icl.analyse.claims import CLAIMS
    from icl.analyse.claims.readme import readme_table
    text = (REPO / "docs" / "claims.md").read_text()
    block = text.split("<!-- verdict-table")[1].split("-->", 1)[1].split("<!-- /verdict-table -->")[0].strip()
    assert block == readme_table()
    assert set(readme_table().split("`")[1::2]) >= {c for c in CLAIMS}
