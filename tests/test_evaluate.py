"""Evaluation under shift as a step of its own: the baselines against brute force, the trained
shard read back from its .npz, chunking under the memory budget, and the workflow rerunning the
evaluation (never the training) when the evaluate section changes."""
import copy
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
import yaml

from icl.config import ConfigError, validate
from icl.data import write_dataset
from icl.evaluate import baselines, evaluate_trained
from icl.models import SoftmaxQ
from icl.plan import plan
from icl.train import train_shard

REPO = Path(__file__).resolve().parent.parent

ZFB = {"experiments": {"z": {
    "description": "tiny ZFB",
    "tokens": {"kind": "gaussian", "d": 3, "covariance": "identity"},
    "task": {"kind": "linear"},
    "prompts": {"N": 8, "train": 32, "test": 32},
    "models": [{"name": "lsa", "kind": "lsa", "optimizer": "adam", "lr": 1e-2, "init_scale": 0.3},
               {"name": "sq", "kind": "softmax_q", "optimizer": "gd", "lr": 0.5}],
    "train": {"epochs": 20, "log_every": 5},
    "evaluate": {"lengths": [4, 8], "prompts": 200, "shifts": [{"kind": "none"}, {"kind": "scale", "c": [2]}]},
    "sweep": {"seed": [0, 1, 2]},
}}}


def test_nearest_neighbor_and_feature_oracle_against_loops():
    g = np.random.default_rng(5)
    P, M, d, K = 30, 7, 4, 3
    feats = g.standard_normal((K, d))
    f = g.integers(0, K, (P, M + 1))
    f[0, :-1] = (f[0, -1] + 1) % K                     # prompt 0: no context token shares the query's feature
    x = feats[f] + 0.1 * g.standard_normal((P, M + 1, d))
    y = g.standard_normal((P, M + 1))
    b = baselines(x, y, ridge=0.1, feat=f)
    for p in range(P):
        dist = [np.sum((x[p, n] - x[p, -1]) ** 2) for n in range(M)]
        assert b["nearest_neighbor"][p] == y[p, int(np.argmin(dist))]
        same = [y[p, n] for n in range(M) if f[p, n] == f[p, -1]]
        expect = np.mean(same) if same else np.mean(y[p, :-1])
        assert b["feature_oracle"][p] == pytest.approx(expect, rel=1e-12)
    assert "feature_oracle" not in baselines(x, y, ridge=0.1)   # continuous tokens: no oracle


def test_feature_oracle_is_what_saturated_attention_computes():
    """softmax_q with Q = s·I on orthogonal features of equal norm puts all mass on the tokens of
    the query's feature as s grows: its prediction tends to the oracle's."""
    g = np.random.default_rng(6)
    P, M, d, K = 50, 12, 5, 4
    feats = 2.0 / np.sqrt(2) * np.eye(d)[:K]
    f = g.integers(0, K, (P, M + 1))
    x, y = feats[f], g.standard_normal((P, M + 1))
    oracle = baselines(x, y, ridge=0.1, feat=f)["feature_oracle"]
    model = SoftmaxQ({}, d)
    gaps = []
    for s in (1.0, 5.0, 30.0):
        Q = torch.as_tensor(s * np.eye(d)[None])
        pred, _ = model.forward({"Q": Q}, torch.as_tensor(x[None]), torch.as_tensor(y[None]))
        has_same = (f[:, :-1] == f[:, -1:]).any(1)
        gaps.append(np.abs(pred[0].numpy() - oracle)[has_same].max())
    assert gaps[0] > gaps[1] > gaps[2] and gaps[2] < 1e-12


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("ev")
    cfg = validate(copy.deepcopy(ZFB))
    runs = [r for r in plan(cfg, "z") if r.spec["model"]["kind"] == "lsa"]
    paths = {}
    for r in runs:
        paths.setdefault(r.data_id, str(tmp / f"{r.data_id}.npz"))
        write_dataset(r.data_spec, paths[r.data_id])
    recs = [{"run_id": r.run_id, "data_id": r.data_id, "shard": r.shard, "spec": r.spec} for r in runs]
    train_shard(recs, paths, str(tmp / "lsa.npz"))
    return recs, paths, tmp


def test_evaluation_rows_and_chunking(trained):
    recs, paths, tmp = trained
    whole = evaluate_trained(recs, paths, str(tmp / "lsa.npz"), str(tmp / "whole.parquet"))
    # 3 runs + 6 baselines (ols, ridge, 1-NN, NW, lsa_limit: one set per seed) per cell and length
    assert len(whole) == 2 * 2 * (3 + 3 * 5)
    assert set(whole["predictor"]) == {"lsa", "ols", "ridge", "nearest_neighbor", "nadaraya_watson", "lsa_limit"}
    assert whole.loc[whole["predictor"] == "lsa", "theory_mse"].notna().all()
    chunked = evaluate_trained(recs, paths, str(tmp / "lsa.npz"), str(tmp / "chunked.parquet"), budget_mb=0)
    key = ["predictor", "run_id", "eval_id", "shift", "c", "M"]
    pd.testing.assert_frame_equal(whole.sort_values(key, ignore_index=True),
                                  chunked.sort_values(key, ignore_index=True))
    assert pd.read_parquet(tmp / "chunked.parquet").shape == chunked.shape


def test_evaluation_skips_diverged_runs_and_names_a_foreign_file(trained):
    recs, paths, tmp = trained
    with np.load(tmp / "lsa.npz") as z:
        shard = {k: z[k] for k in z.files}
    shard["diverged_at"] = np.array([-1, 7, -1])
    np.savez(tmp / "div.npz", **shard)
    df = evaluate_trained(recs, paths, str(tmp / "div.npz"), str(tmp / "div.parquet"))
    lsa = df[df["predictor"] == "lsa"]
    assert lsa.loc[lsa["run_id"] == recs[1]["run_id"], "mse"].isna().all()
    assert lsa.loc[lsa["run_id"] != recs[1]["run_id"], "mse"].notna().all()
    other = [{**recs[0], "run_id": "0123456789ab"}]
    with pytest.raises(RuntimeError, match="holds no run 0123456789ab"):
        evaluate_trained(other, paths, str(tmp / "lsa.npz"), str(tmp / "x.parquet"))


def test_run_ids_do_not_depend_on_the_evaluate_section():
    a = validate(copy.deepcopy(ZFB))
    raw = copy.deepcopy(ZFB)
    raw["experiments"]["z"]["evaluate"]["shifts"].append({"kind": "query_only", "c": [3]})
    b = validate(raw)
    assert [(r.run_id, r.shard) for r in plan(a, "z")] == [(r.run_id, r.shard) for r in plan(b, "z")]
    raw["experiments"]["z"]["sweep"]["evaluate.prompts"] = [100, 200]
    with pytest.raises(ConfigError, match=r"sweep\.evaluate\.prompts: the evaluate section cannot be swept"):
        validate(raw)


def snakemake(workdir, *args):
    cmd = [sys.executable, "-m", "snakemake", "-s", str(REPO / "Snakefile"), "-d", str(workdir), *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=600)


def planned_jobs(res) -> dict:
    """The dry run's 'Job stats' table as {rule: count}."""
    out = res.stdout + res.stderr
    block = out.split("Job stats:")[1].split("total")[0]
    return {ln.split()[0]: int(ln.split()[1]) for ln in block.splitlines()[3:] if ln.strip()}


def test_new_shifts_rerun_evaluation_not_training(tmp_path):
    cfg = tmp_path / "z.yaml"
    cfg.write_text(yaml.safe_dump(ZFB))
    res = snakemake(tmp_path, "--cores", "2", "--configfile", str(cfg))
    assert res.returncode == 0, res.stderr[-3000:]
    shards = sorted((tmp_path / "results/z/shards").glob("*.npz"))
    before = {p: p.stat().st_mtime_ns for p in shards}
    # switching rerun_on_code_change on changes the code stamp: everything behind plan.json reruns
    dry = snakemake(tmp_path, "-n", "--cores", "2", "--configfile", str(cfg), "--config", "rerun_on_code_change=true")
    assert {"train", "evaluate"} <= set(planned_jobs(dry)), dry.stdout[-2000:]
    raw = copy.deepcopy(ZFB)
    raw["experiments"]["z"]["evaluate"]["shifts"].append({"kind": "query_only", "c": [3]})
    cfg.write_text(yaml.safe_dump(raw))
    dry = snakemake(tmp_path, "-n", "--cores", "2", "--configfile", str(cfg))
    jobs = planned_jobs(dry)
    assert jobs.get("evaluate") == len(shards) and "train" not in jobs, jobs
    res = snakemake(tmp_path, "--cores", "2", "--configfile", str(cfg))
    assert res.returncode == 0, res.stderr[-3000:]
    assert {p: p.stat().st_mtime_ns for p in shards} == before
    shift = pd.read_parquet(tmp_path / "results/z/shift.parquet")
    assert set(shift["shift"]) == {"none", "scale", "query_only"}
    # the baselines of each prompt set are evaluated by one shard only, and every set is covered
    per_shard = [pd.read_parquet(p) for p in sorted((tmp_path / "results/z/shards").glob("*.shift.parquet"))]
    n_base = [int((df["model_kind"] == "baseline").sum()) for df in per_shard]
    assert sorted(n_base) == [0, 3 * 5 * 3 * 2]          # seeds x baselines x cells x lengths, in one shard
    base = shift[shift["model_kind"] == "baseline"]
    assert len(base) == 3 * 5 * 3 * 2 and base["eval_id"].nunique() == 3
    assert "Nothing to be done" in (r := snakemake(tmp_path, "-n", "--cores", "1", "--configfile", str(cfg))).stdout + r.stderr
