"""What a verdict reads must not depend on how often the runs were logged: the same runs trained
with log_every 1, 2, 4 and 8 give the same phase counts, crossing times, end of Phase I, logit
paths and verdicts (the measurements read every epoch's trace, icl.train.logs.Trace). The runs span
a 400x range of speeds (L from 0.1 to 2 on the shape family), as real sweeps do."""
import copy

import numpy as np
import pandas as pd
import pytest

from icl.analyse import claims
from icl.analyse.claims import ldl as claims_ldl
from icl.config import validate
from icl.data import ensure_datasets
from icl.tables.measures import phases_over_seeds, summary_table
from icl.plan.shards import plan
from icl.tables.build import runs_table
from icl.models import kinds
from icl.theory.table import ldl_rows
from icl.train.loop import train_shard

SHAPE = {
    "tokens": {"kind": "discrete", "d": 8, "K": 4, "delta": 3.0},
    "task": {"kind": "cosine", "L": 1.0, "c": 1.0},
    "prompts": {"N": 60, "train": 60, "test": 60},
    "models": [{"name": "sq", "kind": "softmax_q", "optimizer": "gd", "lr": 2.5}],
    "train": {"epochs": 400, "log_every": 1, "checkpoint_every": 400},
    "sweep": {"zip": {"task.L": [0.1, 0.3, 0.6, 1.0, 2.0], "task.c": [0.1, 0.3, 0.6, 1.0, 2.0]}, "seed": [0, 1, 2]},
}
MEASURED = ["loss0", "t_rel_1e-1", "t_rel_1e-2", "t_phase_one", "n_phases", "late_exponent", "qoff_rate",
            "qoff_path_excess", "qown_drop", "attn_at_t_rel_1e-2"]


def train_at(every: int, tmp_path):
    exp = copy.deepcopy(SHAPE)
    exp["train"]["log_every"] = every
    cfg = validate({"experiments": {"g": exp}})
    runs = plan(cfg, "g")
    recs = [{"run_id": r.run_id, "data_id": r.data_id, "shard": r.shard, "spec": r.spec} for r in runs]
    paths = ensure_datasets(recs, str(tmp_path / "prompts"))
    sh = train_shard(recs, paths, str(tmp_path / f"every{every}.npz"))
    table = runs_table(recs, "g", "h")
    summ = phases_over_seeds(summary_table(sh), table)
    key = table[["run_id", "L", "seed"]]
    summ = key.merge(summ, on="run_id").sort_values(["L", "seed"]).reset_index(drop=True)
    empty = pd.DataFrame({"run_id": pd.Series(dtype=str), "epoch": pd.Series(dtype=int),
                          "metric": pd.Series(dtype=str), "value": pd.Series(dtype=float)})
    tabs = {"runs": table, "summary": summ.drop(columns=["L", "seed"]), "theory": ldl_rows(recs, mean_field=kinds("mean_field")), "curves": empty,
            "theory_curves": empty}
    verdicts = claims.table("g", claims_ldl.verdicts(tabs, "sq"))
    return summ, verdicts


@pytest.fixture(scope="module")
def four_grids(tmp_path_factory):
    return {e: train_at(e, tmp_path_factory.mktemp(f"every{e}")) for e in (1, 2, 4, 8)}


def test_runs_span_a_wide_range_of_speeds(four_grids):
    summ, _ = four_grids[1]
    t = summ.groupby("L")["t_rel_1e-1"].median().astype(float)
    assert t.notna().all() and t.max() / t.min() > 100


@pytest.mark.parametrize("every", [2, 4, 8])
def test_measurements_do_not_depend_on_the_logging_grid(four_grids, every):
    ref, other = four_grids[1][0], four_grids[every][0]
    pd.testing.assert_frame_equal(ref[MEASURED], other[MEASURED])
    assert ref["phase_ends"].tolist() == other["phase_ends"].tolist()


@pytest.mark.parametrize("every", [2, 4, 8])
def test_verdicts_do_not_depend_on_the_logging_grid(four_grids, every):
    cols = ["claim_id", "group", "verdict", "value", "ci_lo", "ci_hi", "fragile"]
    pd.testing.assert_frame_equal(four_grids[1][1][cols], four_grids[every][1][cols])


def test_a_runs_count_does_not_change_when_slower_runs_join_it(four_grids, tmp_path):
    """The count is the run's and its seeds': train the fastest runs alone and compare."""
    summ, _ = four_grids[4]
    exp = copy.deepcopy(SHAPE)
    exp["train"]["log_every"] = 4
    exp["sweep"] = {"zip": {"task.L": [2.0], "task.c": [2.0]}, "seed": [0, 1, 2]}
    cfg = validate({"experiments": {"g": exp}})
    recs = [{"run_id": r.run_id, "data_id": r.data_id, "shard": r.shard, "spec": r.spec} for r in plan(cfg, "g")]
    sh = train_shard(recs, ensure_datasets(recs, str(tmp_path / "p")), str(tmp_path / "fast.npz"))
    alone = phases_over_seeds(summary_table(sh), runs_table(recs, "g", "h"))["n_phases"].tolist()
    assert alone == summ.loc[summ["L"] == 2.0, "n_phases"].tolist()


def test_the_trace_agrees_with_the_logged_epochs(tmp_path):
    """At the logged epochs the trace holds exactly what the logs hold."""
    exp = copy.deepcopy(SHAPE)
    exp["train"]["log_every"] = 8
    exp["sweep"] = {"zip": {"task.L": [0.3, 1.0], "task.c": [0.3, 1.0]}, "seed": [0]}
    cfg = validate({"experiments": {"g": exp}})
    recs = [{"run_id": r.run_id, "data_id": r.data_id, "shard": r.shard, "spec": r.spec} for r in plan(cfg, "g")]
    sh = train_shard(recs, ensure_datasets(recs, str(tmp_path / "p")), str(tmp_path / "t.npz"))
    ep = sh["epoch"]
    np.testing.assert_allclose(sh["trace_train_loss"][:, ep], sh["train_loss"], rtol=1e-6)
    np.testing.assert_allclose(sh["trace_attn_own"][:, ep], sh["attn_own"], rtol=1e-6)
    np.testing.assert_allclose(sh["trace_q_features"][:, ep], sh["q_features"], rtol=1e-6, atol=1e-7)
