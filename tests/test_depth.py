"""ldl.depth: a deeper model against the shallowest of its kind, seed by seed (icl.analyse.claims.ldl.depth)."""
import math

import numpy as np
import pandas as pd
import pytest

from icl.analyse.claims import FAILS, HOLDS, NOT_TESTABLE, UNSURE
from icl.analyse.claims.ldl.depth import depth


def tables(shallow, deep, L=(1.5,), uniform=2.0, seed=0):
    """runs/summary as ldl_depth writes them: GPTs of 1 and 4 layers, per seed their error at the
    query as a multiple of uniform attention's (`shallow`, `deep`: one value per seed), uniform
    attention's error differing from prompt set to prompt set as the test prompts do."""
    rng = np.random.default_rng(seed)
    runs, summ = [], []
    for Lv in L:
        for s, (a, b) in enumerate(zip(shallow, deep)):
            u = uniform * (1 + 0.05 * rng.standard_normal())
            for name, layers, rel in (("gpt_1x4", 1, a), ("gpt_4x4", 4, b)):
                rid = f"{name}-{Lv}-{s}"
                runs.append({"run_id": rid, "model": name, "model_kind": "gpt", "layers": layers, "seed": s, "L": Lv})
                summ.append({"run_id": rid, "final_query_test_loss": rel * u, "final_test_loss": rel * u * 0.9,
                             "uniform_test_loss": u})
    return pd.DataFrame(runs), pd.DataFrame(summ)


# the spread ldl_depth's runs show (README: 4 layers end at 0.11-0.42x uniform attention, one layer 0.94-1.05x)
SHALLOW = [1.02, 0.97, 1.05, 0.94, 1.01]
DEEP = [0.12, 0.42, 0.11, 0.25, 0.31]


def test_deep_that_learns_holds_and_the_interval_is_students_t_on_log_ratio():
    (row,) = depth(*tables(SHALLOW, DEEP))
    assert row["verdict"] == HOLDS and row["model"] == "gpt_4x4 vs gpt_1x4"
    logr = np.log(np.array(DEEP) / np.array(SHALLOW))
    t975 = 2.7764451051977987           # Student's t, 4 degrees of freedom, 97.5th percentile (tables)
    h = t975 * logr.std(ddof=1) / math.sqrt(len(logr))
    lo, hi = logr.mean() - h, logr.mean() + h
    assert row["value"] == pytest.approx(math.exp(logr.mean()), rel=1e-9)
    assert (row["ci_lo"], row["ci_hi"]) == pytest.approx((math.exp(lo), math.exp(hi)), rel=1e-6)


def test_deep_that_does_not_learn_either_is_inconclusive():
    (row,) = depth(*tables(SHALLOW, [0.99, 1.04, 0.96, 1.03, 0.98]))
    assert row["verdict"] == UNSURE and "overlaps the band" in row["reason"]


def test_deep_worse_than_shallow_does_not_hold():
    (row,) = depth(*tables(SHALLOW, [1.31, 1.18, 1.42, 1.25, 1.22]))
    assert row["verdict"] == FAILS and "4 layers do no better than 1" in row["reason"]


def test_four_seeds_give_no_interval():
    (row,) = depth(*tables(SHALLOW[:4], DEEP[:4]))
    assert row["verdict"] == UNSURE and "4 seeds: an interval over seeds needs at least 5" in row["reason"]
    assert math.isnan(row["ci_lo"])


def test_one_row_per_L_and_none_without_two_depths():
    runs, summ = tables(SHALLOW, DEEP, L=(0.2, 1.5))
    rows = depth(runs, summ)
    assert [r["group"] for r in rows] == ["L=0.2", "L=1.5"]
    assert depth(runs[runs["layers"] == 4], summ) == []
    assert depth(runs.drop(columns="layers"), summ) == []


def test_no_shared_seed_is_not_testable():
    runs, summ = tables(SHALLOW, DEEP)
    runs.loc[runs["model"] == "gpt_4x4", "seed"] += 10
    (row,) = depth(runs, summ)
    assert row["verdict"] == NOT_TESTABLE and "no seed trained both" in row["reason"]
