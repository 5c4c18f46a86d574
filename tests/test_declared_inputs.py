"""Every file a job reads is one of its rule's declared inputs, so Snakemake knows when an output is
stale (a report that read an undeclared file would not be redone when that file changes).

A tiny LDL and a tiny ZFB experiment run under strace; every `python -m icl <step>` process (its
threads and forked workers included) has its successful reads under results/ and logs/ checked
against the inputs and outputs Snakemake lists for its job (--detailed-summary). Skipped where
strace is missing or may not trace."""
import ast
import io
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml

REPO = Path(__file__).resolve().parent.parent

ZFB = {"description": "tiny ZFB", "tokens": {"kind": "gaussian", "d": 3, "covariance": "identity"},
       "task": {"kind": "linear"}, "prompts": {"N": 6, "train": 16, "test": 16},
       "models": [{"name": "lsa", "kind": "lsa", "optimizer": "adam", "lr": 1e-2, "init_scale": 0.3}],
       "train": {"epochs": 6, "log_every": 3, "checkpoint_every": 3},
       "evaluate": {"lengths": [3, 6], "prompts": 50, "shifts": [{"kind": "none"}, {"kind": "scale", "c": [2]}]},
       "sweep": {"seed": [0, 1]}}

LINE = re.compile(r"^(\d+)\s+(.*)$")      # strace pads the PID column
EXECVE = re.compile(r'execve\("[^"]*", (\[.*\]), 0x[0-9a-f]+ .*\)\s+= 0$')
OPENAT = re.compile(r'openat\(AT_FDCWD, "([^"]+)", ([A-Z_|]+)')
CLONE = re.compile(r"\b(clone3?|vfork|fork)\b.*\s= (\d+)$")


def can_trace() -> bool:
    return shutil.which("strace") is not None and \
        subprocess.run(["strace", "-f", "-o", "/dev/null", "true"], capture_output=True).returncode == 0


def job_reads(trace: str, workdir: Path) -> dict[tuple, set[str]]:
    """{argv of an icl process: the files under results/ and logs/ it opened for reading}. A thread
    or forked child counts as its parent until it executes something else. With -f, a new thread's
    first lines can come before its parent's clone returns, so owners are resolved after the whole
    trace is read: a read belongs to the last program its thread executed before it, else to the
    program its parent ran when it made the thread."""
    parent, execs, opens = {}, {}, []            # execs: tid -> [(line number, argv or None)]
    pending = {}
    for i, raw in enumerate(trace.splitlines()):
        m = LINE.match(raw)
        if not m:
            continue
        tid, text = m.group(1), m.group(2)
        if text.endswith("<unfinished ...>"):
            pending[tid] = text.removesuffix("<unfinished ...>")
            continue
        if text.startswith("<..."):                          # "<... openat resumed>) = 3"
            text = pending.pop(tid, "") + text.split("resumed>", 1)[-1]
        if (e := EXECVE.search(text)):
            # strace prints argv as string literals, bytes beyond ASCII as octal escapes
            argv = tuple(a.encode("latin-1").decode("utf-8", "replace") for a in ast.literal_eval(e.group(1)))
            execs.setdefault(tid, []).append((i, argv if argv[1:3] == ("-m", "icl") else None))
        elif (c := CLONE.search(text)):
            parent[c.group(2)] = (tid, i)
        elif (o := OPENAT.search(text)) and not re.search(r"\s= -1 ", text):
            if not any(f in o.group(2) for f in ("O_WRONLY", "O_RDWR", "O_CREAT")):
                opens.append((tid, i, Path(o.group(1))))

    def owner(tid, i):
        for _ in range(100):                                 # up the chain of parents
            before = [argv for j, argv in execs.get(tid, []) if j < i]
            if before:
                return before[-1]
            if tid not in parent:
                return None
            tid, i = parent[tid]
        return None

    reads = {}
    for tid, i, path in opens:
        argv = owner(tid, i)
        rel = Path(os.path.relpath((workdir / path).resolve(), workdir.resolve()))    # jobs run in workdir
        if argv and rel.parts and rel.parts[0] in ("results", "logs"):
            reads.setdefault(argv, set()).add(rel.as_posix())
    return reads


@pytest.mark.skipif(not can_trace(), reason="needs strace, allowed to trace")
def test_every_file_a_job_reads_is_a_declared_input(tmp_path):
    from conftest import TINY
    cfg = yaml.safe_load(yaml.safe_dump(TINY))
    cfg["experiments"]["tiny"]["train"] = {"epochs": 6, "log_every": 3, "checkpoint_every": 6}
    cfg["experiments"]["zfb"] = ZFB
    (tmp_path / "cfg.yaml").write_text(yaml.safe_dump(cfg))
    snakemake = [sys.executable, "-m", "snakemake", "-s", str(REPO / "Snakefile"), "-d", str(tmp_path),
                 "--configfile", str(tmp_path / "cfg.yaml")]
    trace = tmp_path / "strace.txt"
    res = subprocess.run(["strace", "-f", "-qq", "-s", "100000", "-o", str(trace),
                          "-e", "trace=openat,execve,clone,clone3,fork,vfork", *snakemake, "--cores", "2"],
                         capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr[-3000:]
    reads = job_reads(trace.read_text(), tmp_path)

    res = subprocess.run([*snakemake, "--detailed-summary"], capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    summary = pd.read_csv(io.StringIO(res.stdout), sep="\t", dtype=str).fillna("")
    declared = {}                                            # shell command -> its job's inputs and outputs
    for row in summary.to_dict("records"):
        files = declared.setdefault(row["shellcmd"], set())
        files |= {row["output_file"], *row["input-file(s)"].split(",")}

    def job_of(argv):
        for cmd, files in declared.items():
            words = shlex.split(cmd)
            n = len(argv) - 1
            if any(tuple(words[i:i + n]) == argv[1:] for i in range(len(words) - n + 1)):
                return files
        raise AssertionError(f"no job runs {' '.join(argv)}")

    steps = {argv[3] for argv in reads}
    assert {"train", "evaluate", "tables", "theory", "analyse", "report", "index"} <= steps, steps   # plan reads none
    for argv, files in reads.items():
        allowed = job_of(argv)
        undeclared = {f for f in files - allowed
                      # the prompt cache: a training or evaluation job writes the files it lacks
                      if not re.fullmatch(r"results/[^/]+/prompts/[0-9a-f]+\.npz", f)
                      # a training job's own checkpoint, to resume from
                      and not f.endswith(".npz.ckpt")}
        assert not undeclared, f"icl {argv[3]} reads undeclared files: {sorted(undeclared)}"
