"""Task families (icl/tasks.py): one place says how a family draws labels and what the theory and
the report may say about it; the schema lists the same families."""
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from icl import tasks
from icl.config import SCHEMA, load
from icl.data import rng
from icl.plan.shards import plan
from icl.analyse.claims.ldl import scale_identity
from icl.tables.build import run_row
from icl.theory import ldl

REPO = Path(__file__).resolve().parent.parent

# labels of rng(3, 4) tokens as drawn before the families moved here, and the stream's next draw:
# the move changed no draw (results and prompt files stay valid)
DRAWS = {
    "cosine": ({"kind": "cosine", "L": 1.5, "c": 0.5},
               [[1.273033718127, 0.721400985079], [-2.999974469124, -2.949055830506]], -1.0344313235205764),
    "polynomial": ({"kind": "polynomial", "L": 0.7},
                   [[-2.158540127966, 0.067468629178], [-2.901676661883, -1.328447804563]], -0.17609143530701193),
    "linear": ({"kind": "linear"},
               [[0.926554211047, 0.476034377998], [-0.545169517709, 0.184379557872]], 0.09841343391452502),
}


@pytest.mark.parametrize("kind", DRAWS)
def test_draws_unchanged(kind):
    task, y_ref, next_ref = DRAWS[kind]
    g = rng(3, 4)
    x = g.standard_normal((5, 3, 4))
    y = tasks.sample_labels(task, x, g)
    np.testing.assert_allclose(y[:2, :2], y_ref, rtol=1e-10)
    assert g.standard_normal() == pytest.approx(next_ref, rel=1e-12)


def test_families_match_the_schema():
    """A family is a class in icl/tasks.py plus its settings in the schema: the two list the same."""
    task = SCHEMA["$defs"]["task"]
    assert set(task["properties"]["kind"]["enum"]) == set(tasks.TASKS)
    branches = {b["if"]["properties"]["kind"]["const"] for b in task["allOf"]}
    assert branches == set(tasks.TASKS)


def test_what_each_family_says():
    assert {k for k, t in tasks.TASKS.items() if t.ldl} == {"cosine", "polynomial"}
    V = 3.0 / np.sqrt(2) * np.eye(4, 15)
    C = tasks.family("cosine").label_cov({"kind": "cosine", "L": 1.2, "c": 0.7}, V)
    np.testing.assert_array_equal(C, ldl.cosine_label_cov(V, 1.2, 0.7))
    assert tasks.family("polynomial").label_cov({"kind": "polynomial", "L": 1.0}, V) is None
    with pytest.raises(ValueError, match="task.kind: unknown 'sine'; known: cosine, polynomial, linear"):
        tasks.family("sine")


def test_cosine_with_frequency_tied_to_L_changes_shape_not_scale():
    """At one c the labels at L are L times those at 1 on the same draws; with c = L (amplitude 1)
    they are not proportional, and their amplitude stays 1."""
    x = rng(0, 1).standard_normal((200, 6, 5))
    y = {(L, c): tasks.sample_labels({"kind": "cosine", "L": L, "c": c}, x, rng(0, 2)) for L, c in
         [(0.3, 0.5), (1.0, 0.5), (0.3, 0.3), (2.0, 2.0)]}
    np.testing.assert_allclose(y[0.3, 0.5], 0.3 * y[1.0, 0.5], rtol=1e-12)
    ratio = y[2.0, 2.0] / y[0.3, 0.3]
    assert ratio.std() > 1.0
    assert np.abs(y[2.0, 2.0]).max() <= 1.0 and np.abs(y[2.0, 2.0]).max() > 0.99


def _runs(kinds, cs):
    return pd.DataFrame({"task_kind": kinds, "c": cs, "L": [0.2, 2.0][:len(kinds)]})


@pytest.mark.parametrize("kinds,cs,scales", [
    (["cosine", "cosine"], [0.5, 0.5], True),
    (["cosine", "cosine"], [0.2, 2.0], False),              # c tied to L: the shape changes
    (["polynomial", "polynomial"], [None, None], True),
    (["polynomial", "linear"], [None, None], True),
])
def test_scales_with_L(kinds, cs, scales):
    assert tasks.scales_with_L(_runs(kinds, cs)) is scales


def _softmax_q_runs(name: str) -> pd.DataFrame:
    cfg = load(str(REPO / "config.yaml"))
    rows = [run_row({"run_id": r.run_id, "shard": r.shard, "data_id": r.data_id, "spec": r.spec})
            for r in plan(cfg, name)]
    df = pd.DataFrame(rows)
    return df[df["model_kind"] == "softmax_q"]


def test_ldl_shape_claims_are_for_the_data_to_decide():
    """The default config's ldl_shape ties c to L, so the scale identity does not decide its
    L-claims (it does for ldl_cosine, one c)."""
    shape = _softmax_q_runs("ldl_shape")
    assert shape["L"].nunique() >= 4 and (shape["c"] == shape["L"]).all()
    assert shape["L"].min() < 1 / (3.0 * np.sqrt(20 * 4 / 100)) < shape["L"].max()   # both sides of L*
    assert scale_identity(shape) is None
    assert scale_identity(_softmax_q_runs("ldl_cosine")) is not None


def test_a_setting_zipped_to_L_is_part_of_the_L_axis():
    """Slopes against L are fitted within each combination of the other swept settings; c tied to
    L (ldl_shape) moves with L and is not one of them, else every group would hold one L."""
    from icl.analyse.fits import swept_columns
    runs = pd.DataFrame({"model": "q", "L": [0.1, 0.1, 1.0, 1.0, 2.0, 2.0], "seed": [0, 1] * 3,
                         "c": [0.1, 0.1, 1.0, 1.0, 2.0, 2.0], "noise": [0.0, 0.5] * 3})
    assert swept_columns(runs, []) == ["noise"]
    runs["c"] = [0.5, 0.5, 0.5, 0.5, 1.0, 1.0]     # c a function of L here too
    assert swept_columns(runs, []) == ["noise"]
    runs["c"] = [0.5, 1.0] * 3                     # c crossed with L: a group of its own
    assert swept_columns(runs, []) == ["c", "noise"]
