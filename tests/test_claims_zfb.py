"""Every ZFB claim function on small tables built to make it hold, fail and be inconclusive (or
not testable), plus the optimum claim on a real LSA trained too briefly (it must not hold)."""
import copy
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from icl.claims import FAILS, HOLDS, NOT_TESTABLE, UNSURE, zfb
from icl.theory import lsa

REPO = Path(__file__).resolve().parent.parent


def one(rows, group=None):
    """The verdict of the only row (of the given group)."""
    rows = [r for r in rows if group is None or r["group"] == group]
    assert len(rows) == 1, rows
    return rows[0]["verdict"]


def by_group(rows):
    return {r["group"]: r["verdict"] for r in rows}


# ----------------------------------------------------------------------------- zfb.optimum

def dist(dG, dL, sep, dG80=None, N=10, runs=2, token_kind="gaussian", optimizer="adam"):
    """Distances of `runs` runs at epochs 80 and 100 (final)."""
    rows = []
    for k in range(runs):
        for ep, d in ((80, dG if dG80 is None else dG80), (100, dG)):
            rows.append({"run_id": f"r{k}", "model": "lsa", "N": N, "token_kind": token_kind, "optimizer": optimizer,
                         "epoch": ep, "dist_opt": d, "dist_limit": dL, "sep": sep})
    return pd.DataFrame(rows)


def test_optimum_holds_fails_inconclusive_not_testable():
    assert one(zfb.optimum(dist(0.05, 1.0, 1.0))) == HOLDS
    # levelled off far from Γ⁻¹ and nearer Λ⁻¹
    rows = zfb.optimum(dist(0.8, 0.5, 1.0))
    assert one(rows) == FAILS and "levelled off" in rows[0]["reason"]
    # still falling: under-trained, not a failure of the theorem
    rows = zfb.optimum(dist(0.6, 0.9, 1.0, dG80=0.9))
    assert one(rows) == UNSURE and "not converged" in rows[0]["reason"]
    # near Γ⁻¹ but Γ⁻¹ and Λ⁻¹ are too close to be told apart
    rows = zfb.optimum(dist(0.05, 0.07, 0.1))
    assert one(rows) == UNSURE and "cannot tell" in rows[0]["reason"]
    assert one(zfb.optimum(dist(0.0, 0.0, 0.0).iloc[:0])) == NOT_TESTABLE
    r = zfb.optimum(dist(0.05, 1.0, 1.0))[0]
    assert r["group"] == "N=10" and r["value"] == pytest.approx(0.05) and "Adam" in r["domain"]
    assert zfb.optimum(dist(0.05, 1.0, 1.0, optimizer="gd"))[0]["domain"] == ""


def _tables_with_matrix(Bs, Lam, N, epochs=(80, 100)):
    """runs / matrices / theory frames of one LSA run whose effective matrix is Bs[k] at epochs[k]."""
    d = Lam.shape[0]
    runs = pd.DataFrame([{"run_id": "r0", "model": "lsa", "model_kind": "lsa", "N": N, "token_kind": "gaussian",
                          "optimizer": "adam"}])
    i, j = np.meshgrid(range(d), range(d), indexing="ij")
    mats = pd.concat([pd.DataFrame({"run_id": "r0", "epoch": ep, "name": "effective", "i": i.ravel(), "j": j.ravel(),
                                    "value": B.ravel()}) for ep, B in zip(epochs, Bs)], ignore_index=True)
    theory = pd.DataFrame([{"run_id": "r0", "target": lsa.optimal_B(Lam, N).ravel().tolist(),
                            "target_limit": np.linalg.inv(Lam).ravel().tolist()}])
    return runs, mats, theory


def rotated_cov(d=4, seed=0):
    from icl.data import covariance
    return covariance({"kind": "gaussian", "d": d,
                       "covariance": {"eigenvalues": list(np.geomspace(3.0, 0.3, d)), "rotation_seed": seed}})


def test_optimum_tells_gamma_inverse_from_lambda_inverse():
    """With a rotated anisotropic Λ: B = Γ⁻¹ holds; B = Λ⁻¹ (the N → ∞ answer) does not; a
    diagonal-only reading of Γ⁻¹ is far from both."""
    Lam, N = rotated_cov(), 10
    G = lsa.optimal_B(Lam, N)
    assert one(zfb.optimum(zfb.optimum_distances(*_tables_with_matrix([G, G], Lam, N)))) == HOLDS
    Li = np.linalg.inv(Lam)
    assert one(zfb.optimum(zfb.optimum_distances(*_tables_with_matrix([Li, Li], Lam, N)))) == FAILS
    D = np.diag(np.diag(G))
    assert one(zfb.optimum(zfb.optimum_distances(*_tables_with_matrix([D, D], Lam, N)))) != HOLDS
    d = zfb.optimum_distances(*_tables_with_matrix([G, G], Lam, N))
    assert d["dist_opt"].max() < 1e-12 and d["sep"].iloc[0] > 0.5


def test_optimum_without_a_closed_form_or_an_old_theory_table():
    Lam, N = rotated_cov(), 10
    G = lsa.optimal_B(Lam, N)
    runs, mats, theory = _tables_with_matrix([G, G], Lam, N)
    rows = zfb.optimum(zfb.optimum_distances(runs, mats, theory.drop(columns=["target_limit"])))
    assert one(rows) == UNSURE and "older version" in rows[0]["reason"]
    no_theory = theory.assign(target=[None], target_limit=[None])         # e.g. a non-linear task
    assert one(zfb.optimum(zfb.optimum_distances(runs, mats, no_theory))) == NOT_TESTABLE


def train_lsa(tmp, epochs, lr):
    """runs / matrices / theory tables of a real LSA (d=3, rotated anisotropic Λ, N=8, two seeds)
    trained through the project's own code, as the report reads them."""
    from icl.config import validate
    from icl.data import ensure_datasets
    from icl.plan import plan
    from icl.io import read_shard
    from icl.tables import long_tables, runs_table
    from icl.theory.table import lsa_rows
    from icl.train import train_shard
    cfg = validate({"experiments": {"z": {
        "tokens": {"kind": "gaussian", "d": 3, "covariance": {"eigenvalues": [2.0, 1.0, 0.4], "rotation_seed": 1}},
        "task": {"kind": "linear"}, "prompts": {"N": 8, "train": 200, "test": 100},
        "models": [{"name": "lsa", "kind": "lsa", "optimizer": "adam", "lr": lr}],
        "train": {"epochs": epochs, "log_every": max(1, epochs // 20), "fresh": True}, "sweep": {"seed": [0, 1]}}}})
    recs = [{"run_id": r.run_id, "data_id": r.data_id, "shard": r.shard, "spec": r.spec} for r in plan(cfg, "z")]
    paths = ensure_datasets(recs, str(tmp))
    train_shard(recs, paths, str(tmp / "s.npz"))
    mats = long_tables(read_shard(str(tmp / "s.npz")))["matrices"].to_pandas()
    return runs_table(recs, "z", "h"), mats, lsa_rows(recs)


@pytest.fixture(scope="module")
def briefly_trained(tmp_path_factory):
    """Only 12 epochs: far from Γ⁻¹ and still moving."""
    return train_lsa(tmp_path_factory.mktemp("brief"), 12, 0.01)


def test_trained_lsa_reads_holds(tmp_path):
    """The same LSA trained long enough reaches Γ⁻¹ of the full rotated Λ: the claim can hold."""
    rows = zfb.optimum(zfb.optimum_distances(*train_lsa(tmp_path, 100, 0.05)))
    assert one(rows) == HOLDS, rows


def test_briefly_trained_lsa_does_not_read_holds(briefly_trained):
    runs, mats, theory = briefly_trained
    d = zfb.optimum_distances(runs, mats, theory)
    rows = zfb.optimum(d)
    assert one(rows) == UNSURE and "not converged" in rows[0]["reason"]
    # the same run's matrix at an early epoch, read as if training had stopped there
    early = mats[mats["epoch"] <= 4]
    assert one(zfb.optimum(zfb.optimum_distances(runs, early, theory))) != HOLDS
    # its theory row tells Γ⁻¹ and Λ⁻¹ apart at this N
    assert d["sep"].iloc[0] > 0.3


# ----------------------------------------------------------------------------- error and slope claims

def cells(measured, theory, learned=None, *, shift="none", c=np.nan, Ms=(5, 10, 20, 40), N=10, d=3, runs=2, se=0.01,
          what="mse", token_kind="gaussian", model_kind="lsa", model="lsa"):
    """Trained-run rows of shift.parquet: `measured`, `theory` (at the optimum) and `learned` (theory
    at the learned matrix) are scalars or functions of M."""
    f = lambda v, M: v(M) if callable(v) else v                     # noqa: E731
    rows = []
    for k in range(runs):
        for M in Ms:
            m, t = f(measured, M), f(theory, M)
            tl = np.nan if learned is None else f(learned, M)
            row = {"predictor": model, "model_kind": model_kind, "run_id": f"{model}{N}-{k}", "eval_id": f"e{k}",
                   "N": N, "shift": shift, "c": c, "M": M, "model": model, "d": d, "seed": k, "token_kind": token_kind,
                   "mse": 1.0, "mse_se": se, "slope": 1.0, "slope_se": se, "theory_mse": 1.0, "theory_slope": 1.0,
                   "theory_mse_learned": np.nan, "theory_slope_learned": np.nan}
            row.update({what: m, f"{what}_se": se * abs(m), f"theory_{what}": t, f"theory_{what}_learned": tl})
            rows.append(row)
    return pd.DataFrame(rows)


@pytest.mark.parametrize("claim,what,shift", [(zfb.thm42, "mse", "none"), (zfb.scaling, "slope", "scale")])
def test_formula_and_optimisation_rows(claim, what, shift):
    kw = dict(what=what, shift=shift, c=2.0 if shift == "scale" else np.nan)
    # exact: both hold
    assert by_group(claim(cells(1.0, 1.0, 1.0, **kw))) == {"formula": HOLDS, "optimisation": HOLDS}
    # the closed form is wrong: measured far from the theory at the learned matrix and at the optimum
    rows = claim(cells(1.5, 1.0, 1.0, **kw))
    assert by_group(rows) == {"formula": FAILS, "optimisation": FAILS}
    # under-trained: the measurement matches the theory at the learned matrix, 30% off the optimum's
    rows = claim(cells(1.3, 1.0, 1.3, **kw))
    assert by_group(rows) == {"formula": HOLDS, "optimisation": UNSURE}
    assert "not reached the optimum" in [r for r in rows if r["group"] == "optimisation"][0]["reason"]
    assert "+30.0%" in rows[1]["measurement"]
    # mixed: agreement in 3 of 4 test lengths
    mixed = cells(lambda M: 1.5 if M == 5 else 1.0, 1.0, 1.0, **kw)
    assert by_group(claim(mixed)) == {"formula": UNSURE, "optimisation": UNSURE}
    # an older shift.parquet without the theory at the learned matrix
    rows = claim(cells(1.0, 1.0, None, **kw).drop(columns=[f"theory_{what}_learned"]))
    assert by_group(rows) == {"formula": NOT_TESTABLE, "optimisation": HOLDS}
    assert one(claim(cells(1.0, 1.0, 1.0, **kw).iloc[:0])) == NOT_TESTABLE


def test_thm42_leaves_out_lengths_below_d():
    # M = 1, 2 < d = 3: heavy-tailed errors, their standard errors are not trusted
    c = cells(lambda M: 3.0 if M < 3 else 1.0, 1.0, 1.0, Ms=(1, 2, 5, 10))
    assert by_group(zfb.thm42(c)) == {"formula": HOLDS, "optimisation": HOLDS}
    assert one(zfb.thm42(cells(1.0, 1.0, 1.0, Ms=(1, 2)))) == NOT_TESTABLE


def test_random_covariance():
    def rc(measured=None, learned=None, kinds=("random_covariance", "random_covariance_indep_query"),
           token_kind="random_covariance"):
        """measured None: exactly the optimum's slope; learned None: the learned matrix is the optimum."""
        return pd.concat([cells(th if measured is None else measured, th, th if learned is None else learned,
                                shift=k, c=1.0, what="slope", token_kind=token_kind)
                          for k, th in zip(kinds, (0.6, 0.3))], ignore_index=True)
    own, indep = "query from the prompt's covariance", "query independent of it"
    assert by_group(zfb.random_covariance(rc())) == {own: HOLDS, indep: HOLDS}
    assert by_group(zfb.random_covariance(rc(1.0))) == {own: FAILS, indep: FAILS}       # no shrinkage at all
    # matches the theory at its own learned matrix, far from the optimum: under-trained
    assert by_group(zfb.random_covariance(rc(1.0, 1.0))) == {own: UNSURE, indep: UNSURE}
    assert one(zfb.random_covariance(rc(token_kind="gaussian"))) == NOT_TESTABLE
    assert by_group(zfb.random_covariance(rc(kinds=("random_covariance",)))) == {own: HOLDS, indep: NOT_TESTABLE}


def test_longer_prompts():
    th = lambda M: 1.0 / M + 0.01                             # noqa: E731
    Ms = (5, 10, 20, 40)
    assert one(zfb.longer_prompts(cells(th, th, th, Ms=Ms))) == HOLDS
    assert one(zfb.longer_prompts(cells(0.11, th, th, Ms=Ms))) == FAILS          # the error stops falling
    mixed = cells(lambda M: 0.11 if M == 40 else th(M), th, th, Ms=Ms)       # 1 of 2 lengths beyond N agrees
    assert one(zfb.longer_prompts(mixed)) == UNSURE
    assert one(zfb.longer_prompts(cells(th, th, th, Ms=(5, 10)))) == NOT_TESTABLE
    assert one(zfb.longer_prompts(cells(th, th, th, Ms=(5, 20)))) == NOT_TESTABLE   # no M = N


def test_beyond_lsa_compares_like_with_like():
    def both(block_mse, lsa_mse=1.0, token_kind="random_covariance", shift="random_covariance", c=1.0, Ms=(2, 5, 10)):
        kw = dict(shift=shift, c=c, Ms=Ms, token_kind=token_kind, se=0.02)
        out = []
        for N in (10, 20):
            out += [cells(block_mse, 1.0, N=N, model_kind="transformer_block", model="block", **kw),
                    cells(lsa_mse, 1.0, N=N, **kw)]
        return pd.concat(out, ignore_index=True)
    rows = zfb.beyond_lsa(both(0.5))
    assert by_group(rows) == {"M=5": HOLDS, "M=10": HOLDS}            # M = 2 < d = 3 is left out
    assert rows[0]["model"] == "block" and rows[0]["value"] == pytest.approx(0.5)
    assert set(by_group(zfb.beyond_lsa(both(1.2))).values()) == {FAILS}
    assert set(by_group(zfb.beyond_lsa(both(1.0))).values()) == {UNSURE}
    split = both(lambda M: 0.5 if M == 5 else 1.0)
    assert by_group(zfb.beyond_lsa(split)) == {"M=5": HOLDS, "M=10": UNSURE}
    for not_here in (both(0.5, token_kind="gaussian"), both(0.5, c=4.0), both(0.5, Ms=(1, 2)), both(0.5, shift="none")):
        rows = zfb.beyond_lsa(not_here)
        assert one(rows) == NOT_TESTABLE and rows[0]["reason"]
    only_lsa = both(0.5)
    assert one(zfb.beyond_lsa(only_lsa[only_lsa["model_kind"] == "lsa"])) == NOT_TESTABLE


# ----------------------------------------------------------------------------- the whole table

def test_verdicts_from_report_tables(briefly_trained):
    runs, mats, theory = briefly_trained
    shift = cells(1.0, 1.0, 1.0).drop(columns=["model", "d", "seed", "token_kind"])
    tabs = {"runs": runs, "matrices": mats, "theory": theory,
            "summary": pd.DataFrame({"run_id": runs["run_id"], "diverged": False}),
            "shift": shift.assign(run_id=np.repeat(runs["run_id"].to_numpy(), 4))}
    rows = zfb.verdicts(tabs)
    assert {r["claim_id"] for r in rows} == {"zfb.optimum", "zfb.thm42", "zfb.scaling", "zfb.random_covariance",
                                             "zfb.longer_prompts", "zfb.beyond_lsa"}
    assert all(r["reason"] for r in rows if r["verdict"] != HOLDS)
    assert by_group([r for r in rows if r["claim_id"] == "zfb.thm42"]) == {"formula": HOLDS, "optimisation": HOLDS}
    # a diverged run is left out of every claim
    tabs["summary"] = tabs["summary"].assign(diverged=[True, False])
    rows = zfb.verdicts(tabs)
    assert "over 1 runs" in [r for r in rows if r["claim_id"] == "zfb.optimum"][0]["measurement"]
    assert "of 4 (run, M) cells" in [r for r in rows if r["claim_id"] == "zfb.thm42"][0]["measurement"]
    assert zfb.verdicts({**tabs, "shift": tabs["shift"].iloc[:0]}) == []


def test_report_zfb_keeps_figures_only():
    src = (REPO / "icl" / "report_zfb.py").read_text()
    assert "report_ldl" not in src and "def verdicts" not in src
