"""icl.load (the notebook entry point) on hand-made tables, and `snakemake --report report.zip`
on a tiny finished workflow."""
import json
import os
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pandas as pd
import pytest
import yaml

import icl
from icl.store.io import write_parquet

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture
def results(tmp_path):
    """results/<exp>/ with four runs (2 models x 2 L), two logged epochs, two curve metrics."""
    d = tmp_path / "results" / "exp"
    d.mkdir(parents=True)
    runs = pd.DataFrame({"run_id": ["r0", "r1", "r2", "r3"], "model": ["sq", "sq", "blk", "blk"],
                         "L": pd.array([0.2, 1.5, 0.2, 1.5], dtype="Float64"), "seed": [0, 0, 0, 0],
                         "code_version": "v1"})
    write_parquet(runs, str(d / "runs.parquet"))
    write_parquet(pd.DataFrame({"run_id": ["r3", "r2", "r1", "r0"], "final_train_loss": [4.0, 3.0, 2.0, 1.0],
                                "code_version": "v0"}), str(d / "summary.parquet"))
    curves = pd.DataFrame([(r, e, m, i + e + (10 if m == "test_loss" else 0))
                           for i, r in enumerate(runs["run_id"]) for e in (0, 5)
                           for m in ("train_loss", "test_loss")], columns=["run_id", "epoch", "metric", "value"])
    curves["value"] = curves["value"].astype("float64")
    write_parquet(curves, str(d / "curves.parquet"))
    write_parquet(pd.DataFrame({"group": ["all"], "slope": [-2.0]}), str(d / "slopes.parquet"))
    write_parquet(pd.DataFrame({"run_id": ["r0", "r2"], "epoch": [5, 5], "attn": [0.9, 0.5]}),
                  str(d / "attention.parquet"))
    return d


def test_runs_summary_and_table_carry_the_parameters(results):
    exp = icl.load(str(results))
    assert exp.runs.shape == (4, 5)
    s = exp.summary
    assert len(s) == 4 and list(s.columns[:2]) == ["run_id", "final_train_loss"]
    assert {"model", "L", "seed"} <= set(s.columns)
    assert s.columns.is_unique and not [c for c in s.columns if c.endswith(("_x", "_y"))]
    assert set(s["code_version"]) == {"v0"}                       # the table's own column wins
    assert s.set_index("run_id").loc["r2", "model"] == "blk"      # joined on run_id, not by position
    assert str(s["L"].dtype) == "Float64" and s["seed"].dtype == "int64"
    assert exp.runs is exp.runs and exp.summary is exp.summary   # read once
    att = exp.table("attention")
    assert att.shape == (2, 3 + 4) and list(att["model"]) == ["sq", "blk"]
    assert list(exp.table("slopes").columns) == ["group", "slope"]   # no run_id: nothing joined


def test_curves_one_metric_with_parameters(results):
    exp = icl.load(str(results))
    tl = exp.curves("train_loss")
    assert len(tl) == 4 * 2 and set(tl["metric"]) == {"train_loss"}
    assert {"run_id", "epoch", "metric", "value", "model", "L", "seed"} <= set(tl.columns)
    med = tl.groupby(["model", "L", "epoch"])["value"].median()
    assert med.loc[("sq", 1.5, 5)] == 6.0 and med.loc[("blk", 0.2, 0)] == 2.0
    assert exp.curves("test_loss")["value"].min() == 10.0
    with pytest.raises(ValueError, match=r"'trainloss'.*curves\.parquet.*test_loss, train_loss"):
        exp.curves("trainloss")


def test_verdicts_empty_or_read(results):
    from icl.analyse import claims
    v = icl.load(str(results)).verdicts
    assert list(v.columns) == ["experiment", "claim_id", "model", "group", "claim", "prediction", "measurement",
                               "value", "ci_lo", "ci_hi", "verdict", "reason", "domain", "fragile", "scope", "flow_value",
                               "flow_lo", "flow_hi", "against", "hypotheses", "setting", "setting_hypotheses", "seed_values",
                               "curve"] and v.empty
    row = claims.table("exp", [claims.verdict("ldl.phases", "holds", model="sq", prediction="p", measurement="m", ci_lo=2.0, ci_hi=2.0)])
    write_parquet(row, str(results / "verdicts.parquet"))
    assert icl.load(str(results)).verdicts["verdict"].tolist() == ["holds"]


def test_errors_name_the_file_and_the_fix(results, tmp_path):
    with pytest.raises(FileNotFoundError, match=r"nowhere.*run snakemake"):
        icl.load(str(tmp_path / "nowhere"))
    exp = icl.load(str(results))
    with pytest.raises(Exception, match=r"theory\.parquet not found; run snakemake"):
        exp.table("theory")
    (results / "summary.parquet").write_bytes(b"not parquet")
    with pytest.raises(Exception, match=r"summary\.parquet is unreadable.*rerun snakemake"):
        icl.load(str(results)).summary


def test_snakemake_report_zip(tmp_path):
    """A finished tiny workflow: `snakemake --report report.zip` holds the experiment's HTML report and
    its tables under the experiment's category; icl.load reads the same results. The workflow, its
    jobs and the report import nothing that `pip install .` (no extras) leaves out."""
    from conftest import TINY
    from deps import imported_modules, undeclared
    cfg = yaml.safe_load(yaml.safe_dump(TINY))
    cfg["experiments"]["tiny"]["train"] = {"epochs": 6, "log_every": 3, "checkpoint_every": 6}
    (tmp_path / "tiny.yaml").write_text(yaml.safe_dump(cfg))

    def snakemake(*args):
        cmd = [sys.executable, "-m", "snakemake", "-s", str(REPO / "Snakefile"), "-d", str(tmp_path), *args]
        # every Python process, the jobs included (their stderr goes to their logs), lists its imports
        env = {**os.environ, "PYTHONPROFILEIMPORTTIME": "1"}
        return subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env)

    res = snakemake("--cores", "2", "--configfile", str(tmp_path / "tiny.yaml"))
    assert res.returncode == 0, res.stderr[-3000:]
    imported = imported_modules(res.stderr)
    res = snakemake("--configfile", str(tmp_path / "tiny.yaml"), "--report", "report.zip")
    assert res.returncode == 0, res.stderr[-3000:]
    imported |= imported_modules(res.stderr)
    jobs = list((tmp_path / "logs").rglob("*.log"))
    for log in jobs:
        imported |= imported_modules(log.read_text())
    assert {"pygments", "snakemake", "torch", "icl"} <= imported and len(jobs) >= 6
    assert undeclared(imported) == {}
    with zipfile.ZipFile(tmp_path / "report.zip") as z:
        names = z.namelist()
        assert "report/report.html" in names
        html = [n for n in names if n.endswith("/tiny.html")]
        assert len(html) == 1 and z.read(html[0]) == (tmp_path / "reports/tiny.html").read_bytes()
        assert {Path(n).name for n in names if n.endswith(".parquet")} >= {"summary.parquet", "runs.parquet"}
        index = z.read("report/report.html").decode()
    categories = json.loads(re.search(r"var categories = (\{.*?\});\n", index).group(1))
    assert categories["tiny"]["report"] == ["reports/tiny.html"]          # category = the experiment
    assert "results/tiny/summary.parquet" in categories["tiny"]["tables"]
    assert "tiny test experiment" in index                                  # the caption, from the config

    exp = icl.load(str(tmp_path / "results/tiny"))
    assert len(exp.summary) == 8
    assert exp.curves("train_loss").groupby(["model", "L", "epoch"])["value"].median().size == 2 * 2 * 3
