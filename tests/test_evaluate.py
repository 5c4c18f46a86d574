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
from icl.data import ensure_datasets
from icl.evaluate.baselines import predict_all
from icl.evaluate.cells import evaluate_trained
from icl.models import SoftmaxQ
from icl.plan.shards import plan
from icl.train.loop import train_shard
from numerics import PINNED

REPO = Path(__file__).resolve().parent.parent

ZFB = {"experiments": {"z": {
    "description": "tiny ZFB",
    "tokens": {"kind": "gaussian", "d": 3, "covariance": "identity"},
    "task": {"kind": "linear"},
    "prompts": {"N": 8, "train": 32, "test": 32},
    "models": [{"name": "lsa", "kind": "lsa", "optimizer": "adam", "lr": 1e-2, "init_scale": 0.3},
               {"name": "sq", "kind": "softmax_q", "optimizer": "gd", "lr": 0.5}],
    "train": {"epochs": 20, "log_every": 5, **PINNED},
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
    b = predict_all(x, y, ridge=0.1, feat=f)
    for p in range(P):
        dist = [np.sum((x[p, n] - x[p, -1]) ** 2) for n in range(M)]
        assert b["nearest_neighbor"][p] == y[p, int(np.argmin(dist))]
        same = [y[p, n] for n in range(M) if f[p, n] == f[p, -1]]
        expect = np.mean(same) if same else np.mean(y[p, :-1])
        assert b["feature_oracle"][p] == pytest.approx(expect, rel=1e-12)
    assert "feature_oracle" not in predict_all(x, y, ridge=0.1)   # continuous tokens: no oracle


def test_feature_oracle_is_what_saturated_attention_computes():
    """softmax_q with Q = s·I on orthogonal features of equal norm puts all mass on the tokens of
    the query's feature as s grows: its prediction tends to the oracle's."""
    g = np.random.default_rng(6)
    P, M, d, K = 50, 12, 5, 4
    feats = 2.0 / np.sqrt(2) * np.eye(d)[:K]
    f = g.integers(0, K, (P, M + 1))
    x, y = feats[f], g.standard_normal((P, M + 1))
    oracle = predict_all(x, y, ridge=0.1, feat=f)["feature_oracle"]
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
    recs = [{"run_id": r.run_id, "data_id": r.data_id, "shard": r.shard, "spec": r.spec}
            for r in plan(cfg, "z") if r.spec["model"]["kind"] == "lsa"]
    paths = ensure_datasets(recs, str(tmp))
    train_shard(recs, paths, str(tmp / "lsa.npz"))
    return recs, paths, tmp


def test_evaluation_rows_and_chunking(trained):
    recs, paths, tmp = trained
    whole = evaluate_trained(recs, paths, str(tmp / "lsa.npz"), str(tmp / "whole.parquet"))
    # 3 runs + 6 baselines (ols, ridge, uniform attention, 1-NN, NW, lsa_limit: one set per seed) per cell and length
    assert len(whole) == 2 * 2 * (3 + 3 * 6)
    assert set(whole["predictor"]) == {"lsa", "ols", "ridge", "uniform_attention", "nearest_neighbor",
                                       "nadaraya_watson", "lsa_limit"}
    assert whole.loc[whole["predictor"] == "lsa", "theory_mse"].notna().all()
    chunked = evaluate_trained(recs, paths, str(tmp / "lsa.npz"), str(tmp / "chunked.parquet"), budget_mb=0)
    key = ["predictor", "run_id", "eval_id", "shift", "c", "M"]
    pd.testing.assert_frame_equal(whole.sort_values(key, ignore_index=True),
                                  chunked.sort_values(key, ignore_index=True))
    assert pd.read_parquet(tmp / "chunked.parquet").shape == chunked.shape


def test_a_baseline_joins_in_one_place(trained, monkeypatch):
    """The built-in baselines in their order of rows, and a new one: one class, registered, and
    its rows appear in shift.parquet under its name, with its theory."""
    from icl.evaluate import baselines
    assert list(baselines.REGISTRY) == ["ols", "ridge", "uniform_attention", "nearest_neighbor", "nadaraya_watson",
                                        "feature_oracle", "lsa_limit"]
    monkeypatch.setattr(baselines, "REGISTRY", dict(baselines.REGISTRY))

    @baselines.register
    class ContextMean(baselines.Baseline):
        name = "context_mean"

        def predict(self, x, y, feat, ridge, spec):
            return 0.5 * y[:, :-1].mean(1)

        def theory(self, spec, kind, c, M):
            return 1.0, 0.0

    recs, paths, tmp = trained
    df = evaluate_trained(recs, paths, str(tmp / "lsa.npz"), str(tmp / "mean.parquet"))
    mine = df[df["predictor"] == "context_mean"]
    assert len(mine) == 3 * 2 * 2 and (mine["model_kind"] == "baseline").all()     # seeds x cells x lengths
    assert (mine["theory_mse"] == 1.0).all() and mine["N"].isna().all()


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
    target = "results/z/shift.parquet"        # the tables step: analysis and report add nothing here
    res = snakemake(tmp_path, target, "--cores", "2", "--configfile", str(cfg))
    assert res.returncode == 0, res.stderr[-3000:]
    shards = sorted((tmp_path / "results/z/shards").glob("*.npz"))
    before = {p: p.stat().st_mtime_ns for p in shards}
    # switching rerun_on_code_change on changes the code stamp: everything behind plan.json reruns
    dry = snakemake(tmp_path, target, "-n", "--cores", "2", "--configfile", str(cfg), "--config", "rerun_on_code_change=true")
    assert {"train", "evaluate"} <= set(planned_jobs(dry)), dry.stdout[-2000:]
    raw = copy.deepcopy(ZFB)
    raw["experiments"]["z"]["evaluate"]["shifts"].append({"kind": "query_only", "c": [3]})
    cfg.write_text(yaml.safe_dump(raw))
    dry = snakemake(tmp_path, target, "-n", "--cores", "2", "--configfile", str(cfg))
    jobs = planned_jobs(dry)
    assert jobs.get("evaluate") == len(shards) and "train" not in jobs, jobs
    res = snakemake(tmp_path, target, "--cores", "2", "--configfile", str(cfg))
    assert res.returncode == 0, res.stderr[-3000:]
    assert {p: p.stat().st_mtime_ns for p in shards} == before
    shift = pd.read_parquet(tmp_path / "results/z/shift.parquet")
    assert set(shift["shift"]) == {"none", "scale", "query_only"}
    # the baselines of each prompt set are evaluated by one shard only, and every set is covered
    per_shard = [pd.read_parquet(p) for p in sorted((tmp_path / "results/z/shards").glob("*.shift.parquet"))]
    n_base = [int((df["model_kind"] == "baseline").sum()) for df in per_shard]
    assert sorted(n_base) == [0, 3 * 6 * 3 * 2]          # seeds x baselines x cells x lengths, in one shard
    base = shift[shift["model_kind"] == "baseline"]
    assert len(base) == 3 * 6 * 3 * 2 and base["eval_id"].nunique() == 3
    assert "Nothing to be done" in (r := snakemake(tmp_path, target, "-n", "--cores", "1", "--configfile", str(cfg))).stdout + r.stderr


def test_trained_lsa_rows_carry_the_theory_at_their_learned_matrix(trained):
    from icl.evaluate.shifts import theory_cell
    from icl.store.io import read_shard
    recs, paths, tmp = trained
    df = evaluate_trained(recs, paths, str(tmp / "lsa.npz"), str(tmp / "learned.parquet"))
    lsa_rows = df[df["model_kind"] == "lsa"]
    assert lsa_rows[["theory_mse_learned", "theory_slope_learned"]].notna().all().all()
    assert df.loc[df["model_kind"] == "baseline", "theory_mse_learned"].isna().all()
    sh = read_shard(str(tmp / "lsa.npz"))
    B = sh["param_W_pv"][0, -1, -1] * sh["param_W_kq"][0, :-1, :-1].T.astype(float)     # w22·W11ᵀ
    row = lsa_rows[(lsa_rows["run_id"] == recs[0]["run_id"]) & (lsa_rows["shift"] == "scale") & (lsa_rows["M"] == 8)]
    mse, slope = theory_cell(recs[0]["spec"], "scale", 2.0, 8, B=B)
    assert row["theory_mse_learned"].iloc[0] == pytest.approx(mse, rel=1e-5)
    assert row["theory_slope_learned"].iloc[0] == pytest.approx(slope, rel=1e-5)


def test_learned_theory_reads_w22_times_W11_transposed():
    """On a rotated anisotropic Λ, an LSA with a non-symmetric W11: the measured MSE and slope match
    the theory at B = w22·W11ᵀ within 5 s.e., and the MSE rejects the theory at w22·W11."""
    from icl.evaluate.cells import evaluate_shard
    from icl.evaluate.shifts import theory_cell
    from icl.models import LSA
    d = 3
    spec = {"tokens": {"kind": "gaussian", "d": d, "covariance": {"eigenvalues": [2.5, 1.0, 0.3], "rotation_seed": 2}},
            "task": {"kind": "linear"}, "prompts": {"N": 8}, "seed": 0, "model": {"name": "lsa", "kind": "lsa"},
            "evaluate": {"lengths": [6], "prompts": 100_000, "shifts": [{"kind": "none"}]}}
    W11 = np.array([[0.6, 0.8, 0.0], [-0.6, 0.8, 0.4], [0.1, -0.6, 1.2]])
    W_kq, W_pv = np.zeros((d + 1, d + 1)), np.zeros((d + 1, d + 1))
    W_kq[:d, :d], W_pv[d, d] = W11, 0.9
    params = {"W_pv": torch.tensor(W_pv[None], dtype=torch.float32), "W_kq": torch.tensor(W_kq[None], dtype=torch.float32)}
    runs = [{"run_id": "r0", "data_id": "p0", "spec": spec}]
    df = evaluate_shard(runs, {"p0": {"features": np.zeros((0, d))}}, LSA({}, d), params, torch.tensor([True]),
                        torch.device("cpu"), baseline_keys=set())
    r = df.iloc[0]
    assert abs(r["mse"] - r["theory_mse_learned"]) < 5 * r["mse_se"]
    assert abs(r["slope"] - r["theory_slope_learned"]) < 5 * r["slope_se"]
    wrong_mse, _ = theory_cell(spec, "none", 1.0, 6, B=0.9 * W11)     # (the slope, tr(BΛ²)/trΛ, cannot tell)
    assert abs(r["mse"] - wrong_mse) > 10 * r["mse_se"]


def test_unknown_shift_is_an_error_not_the_in_distribution_formula():
    from icl.evaluate.cells import eval_prompts
    from icl.evaluate.shifts import theory_cell
    spec = {"tokens": {"kind": "gaussian", "d": 2, "covariance": "identity"}, "task": {"kind": "linear"},
            "prompts": {"N": 8}, "seed": 0, "evaluate": {"prompts": 10}}
    with pytest.raises(ValueError, match="unknown shift 'label_noise'"):
        theory_cell(spec, "label_noise", 1.0, 5)
    with pytest.raises(ValueError, match="unknown shift 'label_noise'"):
        eval_prompts(spec, None, "label_noise", 1.0, 5, 0)
    # every kind the schema allows has an entry in icl.evaluate.shifts, and no other
    from icl.config import SCHEMA
    from icl.evaluate.shifts import SHIFTS
    ev = SCHEMA["$defs"]["experiment"]["properties"]["evaluate"]["properties"]
    assert set(ev["shifts"]["items"]["properties"]["kind"]["enum"]) == set(SHIFTS)


def test_rotated_covariance_config_errors_name_the_setting():
    raw = copy.deepcopy(ZFB)
    tok = raw["experiments"]["z"]["tokens"]
    tok["covariance"] = {"eigenvalues": [2.0, 1.0, 0.5], "rotation_seed": 0}
    validate(raw)
    for bad, msg in (({"eigenvalues": [2.0, 1.0]}, r"tokens\.covariance\.eigenvalues: has 2 eigenvalues; must have d=3"),
                     ({"eigenvalues": [2.0, 1.0, -1.0]}, r"tokens\.covariance\.eigenvalues\.2: -1\.0 is out of range"),
                     ({"eigenvalues": [2.0, 1.0, 0.5], "seed": 1}, r"tokens\.covariance: unknown key 'seed'"),
                     ({"eigenvalues": [2.0, 1.0, 0.5], "rotation_seed": 1.5}, r"tokens\.covariance\.rotation_seed")):
        tok["covariance"] = bad
        with pytest.raises(ConfigError, match=msg):
            validate(raw)
