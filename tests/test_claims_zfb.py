"""Every ZFB claim on tables built the way evaluation builds them: test prompts drawn by the
project's own sampler (icl.evaluate.cells.eval_prompts, 1000 per cell), predictions of matrices off the
optimum by realistic amounts (runs scatter by ~5% of ‖Γ⁻¹‖), errors and slopes with their
standard errors from icl.evaluate.cells._stats, theory columns from icl.evaluate.cells.theory_cell. Each claim
is made to hold, to fail and to be inconclusive (or not testable); two claims also run on a real
LSA trained for a few seconds, one of them tampered into a converged but wrong matrix."""
import json
import math
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from icl.analyse.claims import FAILS, HOLDS, NOT_TESTABLE, UNSURE, zfb
from icl.analyse.claims.judge import DEFAULT
from icl.analyse.claims.zfb.setting import with_seed_values
from quoted import misquoted
from icl.evaluate.baselines import predict_all
from icl.evaluate.cells import _stats, eval_id, eval_prompts
from icl.evaluate.shifts import theory_cell
from icl.theory import lsa
from icl.theory.table import lsa_optimum, lsa_target_limit
from numerics import PINNED

REPO = Path(__file__).resolve().parent.parent
ROT = {"kind": "gaussian", "d": 3, "covariance": {"eigenvalues": [2.0, 1.0, 0.4], "rotation_seed": 1}}
RAND = {"kind": "random_covariance", "d": 3, "scale": 1.0}
EPOCHS = np.arange(0, 101, 5)


def rows_of(rows, cid, group=None, model=None):
    return [r for r in rows if r["claim_id"] == cid and (group is None or r["group"] == group)
            and (model is None or r["model"] == model)]


def one(rows, cid, group=None, model=None):
    """The verdict of the only row of this claim (and group)."""
    got = rows_of(rows, cid, group, model)
    assert len(got) == 1, [(r["group"], r["verdict"]) for r in rows if r["claim_id"] == cid]
    return got[0]["verdict"]


def groups(rows, cid, model=None):
    return {r["group"]: r["verdict"] for r in rows_of(rows, cid, model=model)}


class Exp:
    """runs / summary / theory / matrices / shift tables of a small ZFB experiment: LSA runs with a
    chosen learned matrix, other models with a chosen predictor, OLS beside them."""

    def __init__(self, tok=ROT, Ns=(8,), seeds=(0, 1, 2, 3, 4), lengths=(3, 6, 12, 24), shifts=(("none", None),), P=1000):
        self.tok, self.Ns, self.seeds, self.lengths, self.shifts, self.P = tok, Ns, seeds, lengths, shifts, P
        self.runs, self.summary, self.theory, self.mats, self.cells = [], [], [], [], []
        self.rng = np.random.default_rng(7)

    def spec(self, N, seed):
        return {"tokens": self.tok, "task": {"kind": "linear"}, "prompts": {"N": N},
                "evaluate": {"prompts": self.P, "lengths": list(self.lengths), "shifts": []}, "seed": seed}

    def prompts(self, N, seed):
        """(shift, c, M, x, y) of every test cell: the same prompts for every model of a seed."""
        for ci, (kind, c) in enumerate(self.shifts):
            for li, M in enumerate(self.lengths):
                x, y, _ = eval_prompts(self.spec(N, seed), None, kind, c, M, 1000 * ci + li)
                yield kind, c, M, x, y

    def _run(self, name, kind, N, seed, **extra):
        rid = f"{name}-{N}-{seed}"
        self.runs.append({"run_id": rid, "model": name, "model_kind": kind, "optimizer": "adam", "lr": 0.01, "seed": seed,
                          "token_kind": self.tok["kind"], "d": self.tok["d"],
                          "covariance": json.dumps(self.tok["covariance"]) if "covariance" in self.tok else None,
                          "scale": self.tok.get("scale"), "task_kind": "linear", "N": N, "M": 500,
                          "data_id": f"data-{N}-{seed}", **extra})
        self.summary.append({"run_id": rid, "diverged": False, "loss0": 1.0, "final_train_loss": 0.1})
        return rid

    def _row(self, name, kind, rid, N, seed, shift, c, M, pred, y, th=(np.nan, np.nan), thl=(np.nan, np.nan)):
        mse, se, sl, sl_se = (float(v[0]) for v in _stats(pred[None], y[None, :, -1]))
        self.cells.append({"predictor": name, "model_kind": kind, "run_id": rid, "eval_id": eval_id(self.spec(N, seed)),
                           "N": N, "shift": shift, "c": np.nan if c is None else c, "M": M, "mse": mse, "mse_se": se,
                           "slope": sl, "slope_se": sl_se, "theory_mse": th[0], "theory_slope": th[1],
                           "theory_mse_learned": thl[0], "theory_slope_learned": thl[1]})

    def lsa(self, learned=lambda opt, lim, rng: opt + 0.05 * np.linalg.norm(opt) * unit(rng, opt.shape), tau=10.0,
            name="lsa", noise=0.0, to=None):
        """One LSA run per (N, seed) whose effective matrix moves from the initialisation towards
        `to` (default: its final matrix) with time constant `tau` epochs, jittering by 1% of ‖B*‖;
        `learned` gives the final matrix from the optimum and its N → ∞ limit. Evaluated at its
        matrix at the last epoch; `noise` adds prediction noise (weights the theory leaves out)."""
        for N in self.Ns:
            for seed in self.seeds:
                spec = self.spec(N, seed)
                opt, lim = lsa_optimum(spec)[0], lsa_target_limit(spec)
                end = learned(opt, lim, self.rng)
                B0 = 0.1 * np.eye(opt.shape[0])
                goal = end if to is None else to
                Bt = np.array([goal + (B0 - goal) * math.exp(-t / tau) + 0.01 * np.linalg.norm(opt) * unit(self.rng, opt.shape)
                               for t in EPOCHS])
                rid = self._run(name, "lsa", N, seed)
                self.theory.append({"run_id": rid, "target": opt.ravel().tolist(), "target_limit": lim.ravel().tolist()})
                d = opt.shape[0]
                i, j = np.meshgrid(range(d), range(d), indexing="ij")
                self.mats += [pd.DataFrame({"run_id": rid, "epoch": ep, "name": "effective", "i": i.ravel(), "j": j.ravel(),
                                            "value": B.ravel()}) for ep, B in zip(EPOCHS, Bt)]
                B = Bt[-1]
                for shift, c, M, x, y in self.prompts(N, seed):
                    pred = lsa.lsa_predict(B, x[:, :-1], y[:, :-1], x[:, -1])
                    pred = pred + noise * np.std(y[:, -1]) * self.rng.standard_normal(pred.shape)
                    c1 = 1.0 if c is None else c
                    self._row(name, "lsa", rid, N, seed, shift, c, M, pred, y, theory_cell(spec, shift, c1, M),
                              theory_cell(spec, shift, c1, M, B=B))
        return self

    def model(self, name, kind, predict, **extra):
        """A trained model whose prediction is predict(x, y, M, N, c, rng) on each test cell."""
        for N in self.Ns:
            for seed in self.seeds:
                rid = self._run(name, kind, N, seed, **extra)
                for shift, c, M, x, y in self.prompts(N, seed):
                    self._row(name, kind, rid, N, seed, shift, c, M, predict(x, y, M, N, c, self.rng), y)
        return self

    def ols(self, names=("ols", "uniform_attention")):
        """The baselines as evaluate writes them (OLS; uniform attention, the mean of the context labels)."""
        for N in self.Ns[:1]:
            for seed in self.seeds:
                for shift, c, M, x, y in self.prompts(N, seed):
                    preds = predict_all(x, y, 0.1)
                    for name in names:
                        self._row(name, "baseline", None, N, seed, shift, c, M, preds[name], y)
                        self.cells[-1]["N"] = np.nan
        return self

    def tabs(self):
        runs = pd.DataFrame(self.runs)
        return {"runs": runs, "summary": pd.DataFrame(self.summary),
                "theory": pd.DataFrame(self.theory, columns=["run_id", "target", "target_limit"]),
                "matrices": pd.concat(self.mats, ignore_index=True) if self.mats else
                pd.DataFrame(columns=["run_id", "epoch", "name", "i", "j", "value"]),
                "shift": pd.DataFrame(self.cells)}

    def verdicts(self):
        return zfb.verdicts(self.tabs())


def unit(rng, shape):
    """A random direction of Frobenius norm 1."""
    v = rng.standard_normal(shape)
    return v / np.linalg.norm(v)


# predictors of models beyond the LSA

def label_scale(y):
    """Each prompt's own label scale: the RMS of its context labels."""
    return np.sqrt(np.mean(y[:, :-1] ** 2, axis=1))


def least_squares(ridge=1e-3, noise=0.05):
    """Ridge regression on the prompt plus noise of `noise` times the prompt's label scale: a model
    that learns in context and adapts to each prompt's covariance (what GPT-2 does in ZFB §5)."""
    def f(x, y, M, N, c, rng):
        X, t, xq = x[:, :-1], y[:, :-1], x[:, -1]
        w = np.linalg.solve(np.einsum("pmi,pmj->pij", X, X) + ridge * np.eye(x.shape[-1]), np.einsum("pmi,pm->pi", X, t)[..., None])[..., 0]
        p = np.einsum("pi,pi->p", xq, w)
        return p + noise * label_scale(y) * rng.standard_normal(p.shape)
    return f


def spiky(base, spike, scale_with_c=0.0):
    """`base` plus, at M > N, noise of `spike` × sqrt((M − N)/N) in absolute units times c^scale_with_c
    (learned positions past N are random: their damage does not grow with the inputs' variance)."""
    def f(x, y, M, N, c, rng):
        p = base(x, y, M, N, c, rng)
        if M > N:
            p = p + spike * math.sqrt((M - N) / N) * (1.0 if c is None else c) ** scale_with_c \
                * rng.standard_normal(p.shape)
        return p
    return f


def plateau(noise=0.3):
    """A GPT still on its plateau, as the laptop-size one of zfb_gpt: close to the mean of the
    context labels (what uniform attention predicts), learned nothing in context."""
    return lambda x, y, M, N, c, rng: y[:, :-1].mean(1) + noise * label_scale(y) * rng.standard_normal(len(x))


def lsa_like(noise=0.0, tok=ROT):
    """ŷ = x_qᵀ B m̂ with the LSA optimum of `tok` at N = 8 plus noise: a model no better than the LSA."""
    B = lsa_optimum({"tokens": tok, "prompts": {"N": 8}})[0]
    return lambda x, y, M, N, c, rng: lsa.lsa_predict(B, x[:, :-1], y[:, :-1], x[:, -1]) \
        + noise * label_scale(y) * rng.standard_normal(len(x))


# ----------------------------------------------------------------------------- zfb.optimum

def test_optimum_holds_at_the_noise_floor():
    rows = Exp().lsa().verdicts()
    assert one(rows, "zfb.optimum", "at the optimum") == HOLDS
    assert one(rows, "zfb.optimum", "nearer Γ⁻¹ than Λ⁻¹") == HOLDS
    r = rows_of(rows, "zfb.optimum", "at the optimum")[0]
    assert "bootstrap" in r["measurement"] and "Adam" in r["domain"] and r["ci_hi"] <= 0.5
    assert "exact population risk" in r["measurement"]


def excess(B, spec):
    """The exact excess risk ratio of B at M = N, from icl.theory.lsa.risk one matrix at a time."""
    opt, _, Lam = lsa_optimum(spec)
    lim = lsa_target_limit(spec)
    N = spec["prompts"]["N"]
    return (lsa.risk(B, Lam, N) - lsa.risk(opt, Lam, N)) / (lsa.risk(lim, Lam, N) - lsa.risk(opt, Lam, N))


def test_optimum_is_judged_on_the_exact_excess_risk_with_thm42s_band():
    """Issue 28 item 3: the band is [0, ½] of the risk gap from Γ⁻¹ to Λ⁻¹, not the seeds' spread.
    Along Γ⁻¹ + t(Λ⁻¹ − Γ⁻¹) the excess risk is t²: t = 0.5 (¼ of the gap) holds, t = 0.9 (0.81)
    does not. Before, a matrix 1.3·Γ⁻¹ (a third of the gap) read does not hold against two
    seeds' spread; it now holds, as thm42 on the same runs would."""
    spec = {"tokens": ROT, "task": {"kind": "linear"}, "prompts": {"N": 8}}
    for t, expect in ((0.5, HOLDS), (0.9, FAILS)):
        rows = Exp().lsa(lambda opt, lim, rng, t=t: opt + t * (lim - opt)).verdicts()
        r = rows_of(rows, "zfb.optimum", "at the optimum")[0]
        assert r["verdict"] == expect, r
        assert r["value"] == pytest.approx(t * t, abs=0.03)              # 1% jitter of the logged matrices
        if expect == FAILS:
            assert "levelled off" in r["reason"] and "of the risk gap" in r["reason"]
    B13 = 1.3 * lsa_optimum(spec)[0]
    assert 0.25 < excess(B13, spec) < 0.45
    rows = Exp().lsa(lambda opt, lim, rng: 1.3 * opt).verdicts()
    r = rows_of(rows, "zfb.optimum", "at the optimum")[0]
    assert r["verdict"] == HOLDS and r["value"] == pytest.approx(excess(B13, spec), abs=0.03)


def test_optimum_fails_for_a_converged_wrong_matrix():
    # every seed levelled off at 1.6·Γ⁻¹ (excess risk 1.3 of the gap to Λ⁻¹), scattering by 1%
    rows = Exp().lsa(lambda opt, lim, rng: 1.6 * opt + 0.01 * np.linalg.norm(opt) * unit(rng, opt.shape)).verdicts()
    r = rows_of(rows, "zfb.optimum", "at the optimum")[0]
    assert r["verdict"] == FAILS and "levelled off" in r["reason"] and r["value"] > 1.0
    # converged to the N → ∞ answer Λ⁻¹: both rows fail
    rows = Exp().lsa(lambda opt, lim, rng: lim + 0.02 * np.linalg.norm(opt) * unit(rng, opt.shape)).verdicts()
    assert groups(rows, "zfb.optimum") == {"at the optimum": FAILS, "nearer Γ⁻¹ than Λ⁻¹": FAILS}


def test_optimum_is_inconclusive_while_still_approaching_and_judges_one_run_alone():
    # heading for Γ⁻¹ but slowly: at the last epoch still 60% of the way from the initialisation
    # (excess risk 0.84 of the gap): under-trained, not wrong
    rows = Exp().lsa(tau=200.0, learned=lambda opt, lim, rng: opt).verdicts()
    r = rows_of(rows, "zfb.optimum", "at the optimum")[0]
    assert r["verdict"] == UNSURE and "not converged" in r["reason"]
    # one run at the noise floor: its bootstrap over epochs is that run's noise, not how another
    # seed trains, so nothing is decided on fewer than five seeds (issue 35 item 6)
    for seeds in ((0,), (0, 1, 2, 3)):
        r = rows_of(Exp(seeds=seeds).lsa().verdicts(), "zfb.optimum", "at the optimum")[0]
        assert r["verdict"] == UNSURE and math.isnan(r["ci_lo"]) and math.isfinite(r["value"]), r
        assert f"{len(seeds)} seed{'s' if len(seeds) > 1 else ''}: an interval over seeds needs at least 5" in r["reason"]
        assert r["measurement"].count(": ") >= len(seeds) and "per seed: 0: " in r["measurement"]


def test_optimum_without_a_closed_form_or_an_old_theory_table():
    tabs = Exp().lsa().tabs()
    rows = zfb.verdicts({**tabs, "theory": tabs["theory"].drop(columns=["target_limit"])})
    r = rows_of(rows, "zfb.optimum", "nearer Γ⁻¹ than Λ⁻¹")[0]
    assert r["verdict"] == UNSURE and "older version" in r["reason"]
    n = len(tabs["theory"])
    no_theory = tabs["theory"].assign(target=[None] * n, target_limit=[None] * n)        # e.g. a non-linear task
    assert one(zfb.verdicts({**tabs, "theory": no_theory}), "zfb.optimum") == NOT_TESTABLE


# ----------------------------------------------------------------------------- a real LSA

def train_lsa(tmp, epochs, lr, log_every=None, evaluate=None, seeds=(0, 1, 2, 3, 4)):
    """runs / matrices / theory / summary tables of a real LSA (d=3, rotated anisotropic Λ, N=8)
    trained through the project's own code, the plan records and the shard's path."""
    from icl.config import validate
    from icl.data import ensure_datasets
    from icl.plan.shards import plan
    from icl.store.io import read_shard
    from icl.tables.build import long_tables, runs_table
    from icl.theory.table import lsa_rows
    from icl.train.loop import train_shard
    exp = {"tokens": ROT, "task": {"kind": "linear"}, "prompts": {"N": 8, "train": 200, "test": 100},
           "models": [{"name": "lsa", "kind": "lsa", "optimizer": "adam", "lr": lr}],
           "train": {"epochs": epochs, "log_every": log_every or max(1, epochs // 20), "fresh": True, **PINNED},
           "sweep": {"seed": list(seeds)}}
    if evaluate:
        exp["evaluate"] = evaluate
    recs = [{"run_id": r.run_id, "data_id": r.data_id, "shard": r.shard, "spec": r.spec}
            for r in plan(validate({"experiments": {"z": exp}}), "z")]
    paths = ensure_datasets(recs, str(tmp))
    train_shard(recs, paths, str(tmp / "s.npz"))
    sh = read_shard(str(tmp / "s.npz"))
    tabs = {"runs": runs_table(recs, "z", "h"), "matrices": long_tables(sh)["matrices"].to_pandas(),
            "theory": lsa_rows(recs),
            "summary": pd.DataFrame({"run_id": sh["run_id"], "diverged": False, "loss0": sh["train_loss"][:, 0],
                                     "final_train_loss": sh["train_loss"][:, -1]})}
    return tabs, recs, paths


def lsa_only(tabs):
    """The LSA claims of a table with an empty shift table (zfb.optimum reads no shift rows),
    judged over seeds as zfb.verdicts judges them."""
    sets = [s for s in zfb.model_settings({**tabs, "shift": pd.DataFrame(columns=["run_id", "shift", "model_kind"])})]
    return [r for s in sets for r in zfb.optimum(with_seed_values(zfb.optimum, s, DEFAULT))]


@pytest.fixture(scope="module")
def briefly_trained(tmp_path_factory):
    """Only 12 epochs: far from Γ⁻¹ and still moving."""
    return train_lsa(tmp_path_factory.mktemp("brief"), 12, 0.01)[0]


def test_trained_lsa_reads_holds(tmp_path):
    """The same LSA trained long enough reaches Γ⁻¹ of the full rotated Λ: nearer it than Λ⁻¹ by
    far (holds), and about as far from it as the runs are from each other (at lr 0.05 the worst run
    sits at 0.8-1.1 of the spread: holds or inconclusive, never "does not hold"; at lr 0.1 Adam's
    offset reaches twice the spread and it does not hold)."""
    rows = lsa_only(train_lsa(tmp_path, 100, 0.05, log_every=2, seeds=(0, 1, 3, 4, 5))[0])   # seed 2 converges slowly
    g = groups(rows, "zfb.optimum")
    assert g["nearer Γ⁻¹ than Λ⁻¹"] == HOLDS and g["at the optimum"] in (HOLDS, UNSURE), rows


def test_briefly_trained_lsa_does_not_read_holds(briefly_trained):
    rows = lsa_only(briefly_trained)
    r = rows_of(rows, "zfb.optimum", "at the optimum")[0]
    assert r["verdict"] == UNSURE and "not converged" in r["reason"]
    # the same run's matrix at an early epoch, read as if training had stopped there
    early = {**briefly_trained, "matrices": briefly_trained["matrices"].query("epoch <= 4")}
    assert HOLDS not in {r["verdict"] for r in lsa_only(early)}


def test_real_lsa_levelled_off_at_a_wrong_matrix_fails_the_optimisation_rows(tmp_path):
    """Item 9: a trained LSA whose matrix has levelled off but is a clearly different one (its
    W11 set so that w22·W11ᵀ = Λ⁻¹, the N → ∞ answer, keeping the run's own fluctuations and its
    other weights): the real forward pass, evaluated by the project's own step, matches the theory
    at its learned matrix (formula rows hold) but not the optimum's, and the runs are not still
    falling: the optimisation rows do not hold. The untouched runs hold."""
    from icl.evaluate.cells import evaluate_trained
    from icl.store.io import read_shard
    from icl.tables.build import long_tables
    ev = {"lengths": [3, 6, 12, 24], "prompts": 1000, "shifts": [{"kind": "none"}, {"kind": "scale", "c": [2.0]}]}
    tabs, recs, paths = train_lsa(tmp_path, 150, 0.05, evaluate=ev)   # at 100 epochs of this stream: 0.43 [0.28, 0.54] of the gap, inconclusive
    good = {**tabs, "shift": evaluate_trained(recs, paths, str(tmp_path / "s.npz"), str(tmp_path / "shift.parquet"))}
    rows = zfb.verdicts(good)
    assert groups(rows, "zfb.thm42") == {"error; formula": HOLDS, "error; optimisation": HOLDS}, rows
    assert groups(rows, "zfb.scaling")["slope; optimisation"] == HOLDS
    # tamper: the same runs, levelled off at Λ⁻¹
    sh = dict(np.load(tmp_path / "s.npz", allow_pickle=True))
    Lam_inv = lsa_target_limit(recs[0]["spec"])
    for k in range(len(sh["run_id"])):
        w22 = sh["param_W_pv"][k, -1, -1]
        sh["param_W_kq"][k, :3, :3] = (Lam_inv / w22).T
        sh["effective"][k] = sh["effective"][k] - sh["effective"][k, -1] + Lam_inv
    np.savez(tmp_path / "bad.npz", **sh)
    bad = {**tabs, "matrices": long_tables(read_shard(str(tmp_path / "bad.npz")))["matrices"].to_pandas(),
           "shift": evaluate_trained(recs, paths, str(tmp_path / "bad.npz"), str(tmp_path / "bad.parquet"))}
    rows = zfb.verdicts(bad)
    assert groups(rows, "zfb.thm42") == {"error; formula": HOLDS, "error; optimisation": FAILS}, rows
    sc = groups(rows, "zfb.scaling")
    assert sc["slope; formula"] == HOLDS and sc["slope; optimisation"] == FAILS
    assert all("levelled off" in r["reason"] for r in rows if r["group"].endswith("optimisation") and r["verdict"] == FAILS)
    assert groups(rows, "zfb.optimum") == {"at the optimum": FAILS, "nearer Γ⁻¹ than Λ⁻¹": FAILS}


# ----------------------------------------------------------------------------- error and slope claims

def test_thm42_formula_and_optimisation_rows():
    assert groups(Exp().lsa().verdicts(), "zfb.thm42") == {"error; formula": HOLDS,
                                                          "error; optimisation": HOLDS}
    # converged to Λ⁻¹: the error is the theory's at that matrix, not the optimum's
    rows = Exp().lsa(lambda opt, lim, rng: lim + 0.02 * np.linalg.norm(opt) * unit(rng, opt.shape)).verdicts()
    assert groups(rows, "zfb.thm42") == {"error; formula": HOLDS, "error; optimisation": FAILS}
    # far from Γ⁻¹ but still on its way there: under-trained, not wrong
    rows = Exp().lsa(lambda opt, lim, rng: opt, tau=200.0).verdicts()
    r = rows_of(rows, "zfb.thm42", "error; optimisation")[0]
    assert r["verdict"] == UNSURE and "still approaching" in r["reason"]
    # predictions noisier than ŷ = x_qᵀBm̂ (weights the closed form leaves out): the formula row fails
    rows = Exp().lsa(noise=0.6).verdicts()
    assert groups(rows, "zfb.thm42")["error; formula"] == FAILS
    # at N = 200 the finite-N error and its N → ∞ value differ by less than 200 test prompts resolve
    rows = Exp(Ns=(200,), P=200, lengths=(3, 6, 12)).lsa().verdicts()
    assert set(groups(rows, "zfb.thm42").values()) == {UNSURE}
    # an older shift.parquet without the theory at the learned matrix
    tabs = Exp().lsa().tabs()
    rows = zfb.verdicts({**tabs, "shift": tabs["shift"].drop(columns=["theory_mse_learned", "theory_slope_learned"])})
    assert groups(rows, "zfb.thm42") == {"error; formula": NOT_TESTABLE, "error; optimisation": HOLDS}


def test_thm42_is_about_fixed_covariances_and_lengths_from_d():
    rows = Exp(lengths=(1, 2)).lsa().verdicts()
    assert one(rows, "zfb.thm42") == NOT_TESTABLE
    rows = Exp(tok=RAND).lsa().verdicts()
    assert one(rows, "zfb.thm42") == NOT_TESTABLE


SCALE = (("scale", 2.0), ("scale", 3.0))


def test_scaling_slope_and_error():
    rows = Exp(shifts=SCALE).lsa().verdicts()
    assert set(groups(rows, "zfb.scaling").values()) == {HOLDS}
    assert len(rows_of(rows, "zfb.scaling")) == 4
    rows = Exp(shifts=SCALE).lsa(lambda opt, lim, rng: lim + 0.02 * np.linalg.norm(opt) * unit(rng, opt.shape)).verdicts()
    g = groups(rows, "zfb.scaling")
    assert g["slope; formula"] == HOLDS and g["slope; optimisation"] == FAILS
    assert g["error; formula"] == HOLDS and g["error; optimisation"] == FAILS
    assert one(Exp(shifts=(("scale", 1.0),)).lsa().verdicts(), "zfb.scaling") == NOT_TESTABLE


def test_scaling_error_limit_is_c2_c2_minus_1_squared_trace():
    """The error under x → c·x tends to c²(c²−1)²·trΛ (icl.theory.lsa.scaled_risk); the claim reads
    the exact finite-M form, checked here against Monte Carlo on the evaluation's own prompts."""
    Lam = lsa_optimum({"tokens": ROT, "prompts": {"N": 8}})[2]
    c = 2.0
    assert lsa.scaled_risk(Lam, 1e9, 1e9, c) == pytest.approx(c * c * (c * c - 1) ** 2 * np.trace(Lam), rel=1e-6)
    spec = {"tokens": ROT, "task": {"kind": "linear"}, "prompts": {"N": 8}, "evaluate": {"prompts": 20000}, "seed": 3}
    x, y, _ = eval_prompts(spec, None, "scale", c, 12, 0)
    err = (lsa.lsa_predict(lsa.optimal_B(Lam, 8), x[:, :-1], y[:, :-1], x[:, -1]) - y[:, -1]) ** 2
    assert abs(err.mean() - theory_cell(spec, "scale", c, 12)[0]) < 4 * err.std() / math.sqrt(len(err))


QUERY = (("query_only", 2.0),)


def test_query_shift():
    rows = Exp(shifts=QUERY).lsa().verdicts()
    assert set(groups(rows, "zfb.query_shift").values()) == {HOLDS}
    rows = Exp(shifts=QUERY).lsa(lambda opt, lim, rng: lim + 0.02 * np.linalg.norm(opt) * unit(rng, opt.shape)).verdicts()
    g = groups(rows, "zfb.query_shift")
    assert g["slope; optimisation"] == FAILS and g["slope; formula"] == HOLDS
    rows = Exp(shifts=QUERY, Ns=(200,), P=200, lengths=(3, 6, 12)).lsa().verdicts()
    assert set(groups(rows, "zfb.query_shift").values()) == {UNSURE}
    assert one(Exp().lsa().verdicts(), "zfb.query_shift") == NOT_TESTABLE


RC = (("random_covariance", 1.0), ("random_covariance_indep_query", 1.0))
OWN, INDEP = "query from the prompt's covariance", "query independent of it"


def test_random_covariance_slope_and_relative_error():
    exp = Exp(tok=RAND, Ns=(8,), shifts=RC, lengths=(3, 12, 48))
    rows = exp.lsa().verdicts()
    g = groups(rows, "zfb.random_covariance")
    assert len(g) == 8 and set(g.values()) == {HOLDS}, g
    assert {f"{q}; {w}; {c}" for q in (OWN, INDEP) for w in ("slope", "relative error")
            for c in ("formula", "optimisation")} == set(g)
    r = rows_of(rows, "zfb.random_covariance", f"{OWN}; relative error; optimisation")[0]
    assert "relative error E[(ŷ−y)²]/E[y²] at M=48" in r["measurement"]
    # no shrinkage: a matrix with slope near 1 (the N → ∞ value of a fixed-covariance LSA), levelled off
    rows = Exp(tok=RAND, shifts=RC, lengths=(3, 12, 48)).lsa(lambda opt, lim, rng: 3.0 * lim).verdicts()
    g = groups(rows, "zfb.random_covariance")
    assert g[f"{OWN}; slope; optimisation"] == FAILS and g[f"{OWN}; slope; formula"] == HOLDS
    # a model that has learned nothing (B ≈ 0): relative error ≈ 1, not the theory's ⅓-ish
    rows = Exp(tok=RAND, shifts=RC, lengths=(3, 12, 48)).lsa(lambda opt, lim, rng: 0.02 * opt).verdicts()
    assert groups(rows, "zfb.random_covariance")[f"{OWN}; relative error; optimisation"] == FAILS
    rows = Exp(tok=RAND, shifts=RC, lengths=(3, 12, 48), P=30).lsa().verdicts()
    assert UNSURE in groups(rows, "zfb.random_covariance").values()
    assert one(Exp(shifts=RC).lsa().verdicts(), "zfb.random_covariance") == NOT_TESTABLE       # fixed-Λ training
    rows = Exp(tok=RAND, shifts=RC[:1], lengths=(3, 12)).lsa().verdicts()
    assert groups(rows, "zfb.random_covariance")[f"{INDEP}"] == NOT_TESTABLE


def test_relative_error_limits_of_random_covariance_training():
    """What Thm 4.5 implies for the error: at B = I/3, M → ∞, the relative error E[(ŷ−y)²]/E[y²]
    is ⅓ with the prompt's own covariance and 5/9 with an independent query; at finite N, M the
    closed forms give more (the claim's prediction), checked against Monte Carlo."""
    d = 5
    B = np.eye(d) / 3
    assert lsa.random_cov_risk(B, d, 1e9) / d == pytest.approx(1 / 3, rel=1e-6)
    assert lsa.random_cov_risk(B, d, 1e9, Lam_query=np.ones(d)) / d == pytest.approx(5 / 9, rel=1e-6)
    tok = {"kind": "random_covariance", "d": d, "scale": 1.0}
    spec = {"tokens": tok, "task": {"kind": "linear"}, "prompts": {"N": 20}, "evaluate": {"prompts": 20000}, "seed": 0}
    Bn = lsa.random_cov_optimal_B(d, 20)
    for kind in ("random_covariance", "random_covariance_indep_query"):
        x, y, _ = eval_prompts(spec, None, kind, 1.0, 40, 1)
        err = (lsa.lsa_predict(Bn, x[:, :-1], y[:, :-1], x[:, -1]) - y[:, -1]) ** 2
        assert abs(err.mean() - theory_cell(spec, kind, 1.0, 40)[0]) < 4 * err.std() / math.sqrt(len(err))


def test_longer_prompts():
    exp = Exp(lengths=(3, 8, 16, 32))
    assert one(exp.lsa().verdicts(), "zfb.longer_prompts") == HOLDS
    # predictions that degrade past N (noise growing with M − N): the error rises
    bad = Exp(lengths=(3, 8, 16, 32)).model("lsa2", "lsa", spiky(lsa_like(), 2.0))
    tabs = bad.tabs()
    rows = zfb.verdicts(tabs)
    assert one(rows, "zfb.longer_prompts") == FAILS
    rows = Exp(lengths=(3, 8, 9)).lsa().verdicts()             # one step past N: the fall is within the noise
    assert one(rows, "zfb.longer_prompts") == UNSURE
    assert one(Exp(lengths=(3, 8)).lsa().verdicts(), "zfb.longer_prompts") == NOT_TESTABLE
    assert one(Exp(lengths=(3, 16)).lsa().verdicts(), "zfb.longer_prompts") == NOT_TESTABLE   # no M = N


# ----------------------------------------------------------------------------- beyond the LSA

RC1 = (("random_covariance", 1.0),)


def beyond(kind, predict, tok=RAND, shifts=RC1, P=1000):
    return Exp(tok=tok, shifts=shifts, lengths=(3, 5, 8), P=P).lsa().model("other", kind, predict).verdicts()


@pytest.mark.parametrize("kind", ["transformer_block", "gpt"])
def test_beyond_lsa_asks_the_kind(kind):
    rows = beyond(kind, least_squares())
    assert one(rows, "zfb.beyond_lsa", model="other") == HOLDS
    assert one(beyond(kind, lsa_like(0.5)), "zfb.beyond_lsa", model="other") == FAILS
    assert one(beyond(kind, lsa_like(0.05, RAND), P=200), "zfb.beyond_lsa", model="other") == UNSURE
    assert one(beyond(kind, least_squares(), tok=ROT, shifts=(("none", None),)), "zfb.beyond_lsa") == NOT_TESTABLE
    assert one(beyond(kind, least_squares(), shifts=(("random_covariance", 4.0),)), "zfb.beyond_lsa") == NOT_TESTABLE


def test_beyond_lsa_leaves_out_models_linear_in_the_labels():
    rows = beyond("softmax_q", least_squares())
    r = rows_of(rows, "zfb.beyond_lsa")
    assert len(r) == 1 and r[0]["verdict"] == NOT_TESTABLE and "nonlinear" in r[0]["reason"]


def gpt(predict, positional="learned", name="gpt"):
    return dict(name=name, kind="gpt", predict=predict, positional=positional, layers=2, heads=2)


def with_gpt(*gpts, tok=ROT, shifts=(("none", None),), lengths=(3, 5, 8, 16), P=1000, Ns=(8,), lsa=True):
    exp = Exp(tok=tok, shifts=shifts, lengths=lengths, P=P, Ns=Ns)
    if lsa:
        exp.lsa().ols()
    for g in gpts:
        exp.model(**g)
    return exp.verdicts()


def test_gpt_in_distribution():
    rows = with_gpt(gpt(least_squares(noise=0.05)))
    assert groups(rows, "zfb.gpt_in_distribution") == {"below the LSA": HOLDS, "OLS-level": HOLDS}
    rows = with_gpt(gpt(lsa_like(0.3)))
    assert groups(rows, "zfb.gpt_in_distribution") == {"below the LSA": FAILS, "OLS-level": FAILS}
    why = rows_of(rows, "zfb.gpt_in_distribution", "OLS-level")[0]["reason"]      # the model judged, beside Garg's
    assert "this GPT: 2 layers, 2 heads" in why and "Garg et al.'s GPT-2 has 12 layers" in why, why
    # halfway between OLS and the LSA, measured on 100 prompts a cell
    rows = with_gpt(gpt(least_squares(noise=0.5)), P=100)
    assert groups(rows, "zfb.gpt_in_distribution") == {"below the LSA": HOLDS, "OLS-level": UNSURE}
    rows = with_gpt(gpt(least_squares()), tok=RAND)
    assert one(rows, "zfb.gpt_in_distribution") == NOT_TESTABLE
    assert one(Exp().lsa().verdicts(), "zfb.gpt_in_distribution") == NOT_TESTABLE


def test_gpt_in_distribution_is_a_claim_about_a_gpt_with_positions():
    """ZFB §5's GPT-2 has learned positions. zfb_gpt trains one without (the spike's contrast), whose
    error was 1.08x the LSA's on every seed that learned in the default run (2026-11-27): that is
    not the claim's model, and its rows read not testable, where the same predictor with learned
    positions does not hold."""
    rows = with_gpt(gpt(lsa_like(0.3)), gpt(lsa_like(0.3), "none", "gpt_nopos"))
    assert groups(rows, "zfb.gpt_in_distribution", model="gpt") == {"below the LSA": FAILS, "OLS-level": FAILS}
    nopos = rows_of(rows, "zfb.gpt_in_distribution", model="gpt_nopos")
    assert len(nopos) == 1 and nopos[0]["verdict"] == NOT_TESTABLE and "learned positions" in nopos[0]["reason"]


def test_a_gpt_that_has_not_learned_in_context_decides_nothing():
    """zfb_gpt at laptop size: the GPT's error at M = N is about uniform attention's. Every claim on it
    reads not testable (the learning gate, icl.analyse.claims.learned) and says why with the numbers,
    instead of 'does not hold' against ZFB §5 (before issue 28: inconclusive, per claim)."""
    rows = with_gpt(gpt(plateau()), gpt(plateau(), "none", "gpt_nopos"), shifts=(("none", None), ("scale", 4.0)),
                    lengths=(3, 5, 8, 12, 16))
    for cid in ("zfb.beyond_lsa", "zfb.gpt_in_distribution", "zfb.length_spike", "zfb.spike_vs_variance"):
        got = [r for r in rows if r["claim_id"] == cid and r["model"] == "gpt"]
        assert got and all(r["verdict"] == NOT_TESTABLE and r["reason"].startswith("the model has not learned")
                           and "uniform attention" in r["reason"] and "5 of 5 runs left out" in r["measurement"]
                           for r in got), got
    learned = with_gpt(gpt(least_squares(noise=0.05)))
    assert groups(learned, "zfb.gpt_in_distribution") == {"below the LSA": HOLDS, "OLS-level": HOLDS}


def worse_than_uniform(factor=1.5):
    """A model whose error is `factor` times uniform attention's: uniform attention's prediction plus
    noise that adds (factor − 1) of its error."""
    def f(x, y, M, N, c, rng):
        base = y[:, :-1].mean(1)
        err = np.sqrt(np.mean((base - y[:, -1]) ** 2))
        return base + math.sqrt(factor - 1) * err * rng.standard_normal(len(x))
    return f


def test_runs_that_did_not_learn_are_counted_and_left_out():
    """One learning gate for every claim about a trained model: per run, in distribution at M = N, the
    share of the gap from uniform attention's error to the best reachable (0 for a GPT) it closed.
    A seed at 1.5× uniform attention's error is left out and counted; the others decide."""
    exp = Exp(lengths=(3, 5, 8, 16), seeds=range(6)).lsa().ols()      # five seeds left after one is gated out
    good, bad = least_squares(noise=0.05), worse_than_uniform(1.5)
    exp.model("gpt", "gpt", good, positional="learned")
    tabs = exp.tabs()
    # seed 2's GPT predicts worse than uniform attention: rewrite its cells from that predictor
    sh = tabs["shift"]
    for seed in (2,):
        rid = f"gpt-8-{seed}"
        for (shift, c, M, x, y) in exp.prompts(8, seed):
            p = bad(x, y, M, 8, c, np.random.default_rng(M))
            mse, se, sl, sl_se = (float(v[0]) for v in _stats(p[None], y[None, :, -1]))
            k = (sh["run_id"] == rid) & (sh["M"] == M)
            sh.loc[k, ["mse", "mse_se", "slope", "slope_se"]] = [mse, se, sl, sl_se]
    rows = zfb.verdicts(tabs)
    r = rows_of(rows, "zfb.gpt_in_distribution", "below the LSA", model="gpt")[0]
    assert r["verdict"] == HOLDS, r
    assert "1 of 6 runs left out as not learned" in r["measurement"] and "judged over 5 seeds" in r["measurement"]
    ratio = float(re.search(r"M = N ([0-9.]+)× uniform attention's", r["measurement"]).group(1))
    assert 1.35 < ratio < 1.65 and "worse than uniform attention" in r["measurement"]
    # every seed at 1.5x: nothing to judge, and the reason says worse, not "little better"
    bad_all = Exp(lengths=(3, 5, 8, 16)).lsa().ols().model("gpt", "gpt", bad, positional="learned").verdicts()
    r = rows_of(bad_all, "zfb.gpt_in_distribution", model="gpt")[0]
    assert r["verdict"] == NOT_TESTABLE and "worse than uniform attention, not better" in r["reason"]
    assert "little better" not in r["reason"]
    # the LSA beside it learned (its error at M = N is a fraction of uniform attention's): judged as before
    assert one(bad_all, "zfb.thm42", "error; optimisation") != NOT_TESTABLE


def test_an_lsa_is_gated_against_the_optimum_it_can_reach():
    """The gate's best reachable reference for an LSA is its own closed-form optimum on the same
    prompts (the lsa_limit baseline): on random covariances at d = 5, N = 5 the optimum itself makes
    0.51-0.55 of uniform attention's error, so against 0 the LSA at its optimum would read "not
    learned"; against the optimum it closed the whole gap and is judged."""
    from icl.evaluate.baselines import REGISTRY
    tok = {"kind": "random_covariance", "d": 5, "scale": 1.0}
    exp = Exp(tok=tok, Ns=(5,), lengths=(5, 10)).lsa(lambda opt, lim, rng: opt).ols()
    bare = zfb.verdicts(exp.tabs())
    r = rows_of(bare, "zfb.optimum")[0]
    # (0.51-0.55 of uniform attention's error: at most a seed passes the gate by its test noise)
    assert r["verdict"] in (NOT_TESTABLE, UNSURE) and re.search(r"[45] of 5 runs left out as not learned",
                                                                 r["measurement"] + r["reason"]), r
    for seed in exp.seeds:                         # the lsa_limit baseline, as evaluate writes it (with N)
        for shift, c, M, x, y in exp.prompts(5, seed):
            p = REGISTRY["lsa_limit"].predict(x, y, None, 0.1, exp.spec(5, seed))
            exp._row("lsa_limit", "baseline", None, 5, seed, shift, c, M, p, y)
    rows = zfb.verdicts(exp.tabs())
    assert one(rows, "zfb.optimum", "at the optimum") == HOLDS
    assert "not learned" not in rows_of(rows, "zfb.optimum", "at the optimum")[0]["measurement"]


def test_gpt_groups_name_every_swept_setting():
    rows = with_gpt(gpt(least_squares()), Ns=(8, 16))
    assert set(groups(rows, "zfb.gpt_in_distribution")) == {"N=8; below the LSA", "N=8; OLS-level",
                                                            "N=16; below the LSA", "N=16; OLS-level"}


LEARNED = gpt(spiky(least_squares(), 1.5), "learned", "gpt_pos")
NONE = gpt(spiky(least_squares(), 0.3), "none", "gpt_nopos")


def test_length_spike():
    rows = with_gpt(LEARNED, NONE, lsa=False)
    g = groups(rows, "zfb.length_spike", model="gpt_pos")
    assert g == {"learned positions": HOLDS, "learned vs no positions": HOLDS}, g
    assert one(rows, "zfb.length_spike", model="gpt_nopos") == NOT_TESTABLE
    # the same damage with and without positions: the ratio's interval straddles 1, and two one-sided tests
    # against half the learned-position spike (×266, so a margin of ×16.3) show the two spikes equal
    rows = with_gpt(LEARNED, gpt(spiky(least_squares(), 1.5), "none", "gpt_nopos"), P=300, lsa=False)
    r = next(r for r in rows if r["claim_id"] == "zfb.length_spike" and r["group"] == "learned vs no positions")
    assert r["verdict"] == FAILS and r["ci_lo"] < 1 < r["ci_hi"], r
    assert "equal within the margin ×16.3" in r["reason"] and "two one-sided tests" in r["reason"]
    # no spike at all (the error keeps falling in M, as shrinkage fades), worse without positions
    rows = with_gpt(gpt(least_squares(ridge=2.0, noise=0.0), "learned", "gpt_pos"),
                    gpt(spiky(least_squares(), 1.5), "none", "gpt_nopos"), lsa=False)
    assert groups(rows, "zfb.length_spike", model="gpt_pos") == {"learned positions": FAILS,
                                                                 "learned vs no positions": FAILS}
    rows = with_gpt(LEARNED, lsa=False)
    assert groups(rows, "zfb.length_spike", model="gpt_pos")["learned vs no positions"] == NOT_TESTABLE
    rows = with_gpt(LEARNED, lengths=(3, 5, 8), lsa=False)
    assert one(rows, "zfb.length_spike", model="gpt_pos") == NOT_TESTABLE


def _spike_cells(spikes: dict, N: int = 10, M: int = 20, rng=None) -> pd.DataFrame:
    """shift.parquet's rows of one model: per seed the error at M = N and at M, their ratio the seed's spike."""
    rng = rng or np.random.default_rng(0)
    rows = []
    for seed, sp in spikes.items():
        base = float(rng.uniform(0.6, 0.9))            # the GPT's in-distribution errors of the default run
        rows += [{"seed": seed, "M": N, "mse": base, "mse_se": 0.05 * base},
                 {"seed": seed, "M": M, "mse": base * sp, "mse_se": 0.05 * base * sp}]
    return pd.DataFrame(rows)


def test_the_spike_comparison_takes_each_models_own_seeds_where_too_few_are_shared():
    """zfb.length_spike, learned vs no positions, where the learning gate leaves fewer than five seeds
    with both GPTs (the default run: 6 seeds learned with positions, 5 without, 4 in common): each
    model's seeds apart, the ratio of their geometric means with Welch's interval on the logs. The
    default run's spikes read [0.698, 1.73]: inconclusive; spikes twice as large with positions on
    every seed hold; an arm of four seeds gives no interval."""
    from icl.analyse.claims.judge import Band, judge
    from icl.analyse.claims.zfb.positions import unpaired
    from icl.stats import welch_interval
    band = Band(1.0, math.inf, source="the order the claim states")
    learned = {0: 1.27, 1: 1.15, 2: 1.23, 3: 1.48, 4: 2.33, 5: 0.722}
    none = {1: 1.22, 2: 1.03, 3: 1.34, 5: 0.781, 6: 1.66}
    st = unpaired(_spike_cells(learned), _spike_cells(none, rng=np.random.default_rng(1)), 10, 20)
    assert (st.value, st.lo, st.hi) == pytest.approx((1.099, 0.698, 1.731), rel=3e-3)   # the run's, from rounded spikes
    d = np.log(list(learned.values())).mean() - np.log(list(none.values())).mean()
    assert st.value == pytest.approx(math.exp(d)) and "6 seeds" in st.text and "5 seeds" in st.text
    assert (math.log(st.lo), math.log(st.hi)) == pytest.approx(welch_interval(np.log(list(learned.values())),
                                                                            np.log(list(none.values())))[1:])
    assert judge(st.lo, st.hi, band, DEFAULT, "ratio")[0] == UNSURE
    twice = {k: 2 * v for k, v in none.items() if k != 6} | {0: 2.4, 4: 2.2}
    st = unpaired(_spike_cells(twice), _spike_cells(none), 10, 20)
    assert st.lo > 1 and judge(st.lo, st.hi, band, DEFAULT, "ratio")[0] == HOLDS
    four = {k: v for k, v in none.items() if k != 6}
    assert unpaired(_spike_cells(learned), _spike_cells(four), 10, 20) is None
    assert unpaired(_spike_cells(learned), _spike_cells(none), 10, 15) is None     # no test at M = 15


def test_the_unpaired_spike_reads_only_the_no_positions_runs_of_the_same_law():
    """same_law: of the GPTs without positions, those trained on the learned model's law (token kind,
    d, covariance, scale, task, N) in distribution; another N, another covariance or a shifted test
    is left out, and two such models give none (their seeds would mix in one seed's spike)."""
    from icl.analyse.claims.zfb.positions import same_law
    law = {"token_kind": "gaussian", "d": 3, "covariance": "identity", "scale": np.nan, "task_kind": "linear", "N": 10}
    c = pd.DataFrame([{**law, "shift": "none", "model": "gpt", "seed": 0}])
    rows = [{**law, "shift": "none", "model": "gpt_nopos", "seed": k} for k in range(3)]
    rows += [{**law, "N": 20, "shift": "none", "model": "gpt_nopos", "seed": 0},
             {**law, "covariance": "random", "shift": "none", "model": "gpt_nopos", "seed": 1},
             {**law, "shift": "random_covariance", "model": "gpt_nopos", "seed": 2}]
    pool = pd.DataFrame(rows)
    got = same_law(pool, c)
    assert len(got) == 3 and set(got["seed"]) == {0, 1, 2} and (got["N"] == 10).all()
    two = pd.concat([pool, pd.DataFrame([{**law, "shift": "none", "model": "gpt_nopos_wide", "seed": 0}])])
    assert same_law(two, c).empty


VAR = (("random_covariance", 1.0), ("random_covariance", 4.0), ("random_covariance", 9.0))


def test_spike_vs_variance():
    rows = with_gpt(LEARNED, tok=RAND, shifts=VAR, lsa=False)
    assert groups(rows, "zfb.spike_vs_variance", model="gpt_pos") == {"random_covariance, c=4 vs 1": HOLDS,
                                                                      "random_covariance, c=9 vs 1": HOLDS}
    # damage that grows faster than the errors with the variance: a larger spike at higher c
    rows = with_gpt(gpt(spiky(least_squares(), 0.5, scale_with_c=1.5), "learned", "gpt_pos"), tok=RAND, shifts=VAR, lsa=False)
    assert set(groups(rows, "zfb.spike_vs_variance", model="gpt_pos").values()) == {FAILS}
    # damage in proportion to the inputs' scale: the same relative spike, within the noise
    rows = with_gpt(gpt(spiky(least_squares(), 1.0, scale_with_c=0.5), "learned", "gpt_pos"), tok=RAND, shifts=VAR, P=300, lsa=False)
    assert UNSURE in set(groups(rows, "zfb.spike_vs_variance", model="gpt_pos").values())
    rows = with_gpt(LEARNED, tok=RAND, shifts=VAR[:1], lsa=False)
    assert one(rows, "zfb.spike_vs_variance", model="gpt_pos") == NOT_TESTABLE


# ----------------------------------------------------------------------------- the whole table

def test_verdicts_group_exclude_and_record_robustness():
    exp = Exp(Ns=(8, 16), shifts=(("none", None), ("scale", 2.0))).lsa()
    tabs = exp.tabs()
    rows = zfb.verdicts(tabs)
    assert {r["claim_id"] for r in rows} == {"zfb.optimum", "zfb.thm42", "zfb.scaling", "zfb.query_shift",
                                             "zfb.random_covariance", "zfb.longer_prompts", "zfb.beyond_lsa",
                                             "zfb.gpt_in_distribution", "zfb.length_spike", "zfb.spike_vs_variance"}
    assert all(r["reason"] for r in rows if r["verdict"] != HOLDS)
    assert all(np.isfinite(r["ci_lo"]) and np.isfinite(r["ci_hi"]) for r in rows if r["verdict"] == HOLDS)
    assert all(isinstance(r["fragile"], str) for r in rows)
    assert {r["group"].split(";")[0] for r in rows_of(rows, "zfb.thm42")} == {"N=8", "N=16"}
    # a run that ended above its initial loss and one that diverged are left out and counted
    tabs["summary"].loc[0, "final_train_loss"] = 2.0
    tabs["summary"].loc[1, "diverged"] = True
    rows = zfb.verdicts(tabs)
    r = rows_of(rows, "zfb.thm42", "N=8; error; formula")[0]
    assert "2 of 5 runs left out" in r["measurement"] and "means over 3 runs" in r["measurement"]
    assert r["verdict"] == UNSURE and "3 seeds: an interval over seeds needs at least 5" in r["reason"]
    assert zfb.verdicts({**tabs, "shift": tabs["shift"].iloc[:0]}) == []


def seed_by_seed(ts):
    """A learned matrix per seed, in turn: Γ⁻¹ + t(Λ⁻¹ − Γ⁻¹) for each t of `ts` (one per seed, in
    the order Exp.lsa trains them), with the usual 1% jitter."""
    it = iter(ts)
    return lambda opt, lim, rng: opt + next(it) * (lim - opt) + 0.01 * np.linalg.norm(opt) * unit(rng, opt.shape)


def test_rows_are_judged_over_seeds_with_a_student_t_interval():
    """Issue 35 item 6: a row's value is the mean of its seeds' values, each measured on that seed
    alone (here: zfb.verdicts on that seed's runs only, where the row keeps its own value), and its
    interval mean ± t(0.975, 4)·s/√5, t = 2.776445 (the tabulated quantile); a ratio's on the logs
    of the seeds' values (its geometric mean)."""
    ts = (0.1, -0.15, 0.2, 0.0, 0.05)
    exp = Exp(shifts=SCALE).lsa(seed_by_seed(ts))
    tabs = exp.tabs()
    rows = zfb.verdicts(tabs)
    for cid, group in (("zfb.scaling", "slope; optimisation"), ("zfb.scaling", "slope; formula"),
                       ("zfb.optimum", "nearer Γ⁻¹ than Λ⁻¹")):
        r = rows_of(rows, cid, group)[0]
        per = []
        for seed in exp.seeds:
            ids = set(tabs["runs"].loc[tabs["runs"]["seed"] == seed, "run_id"])
            one_seed = {k: (v[v["run_id"].isin(ids) | v["run_id"].isna()] if "run_id" in v else v) for k, v in tabs.items()}
            alone = rows_of(zfb.verdicts(one_seed), cid, group)[0]
            assert alone["verdict"] == UNSURE and "1 seed: an interval over seeds needs at least 5" in alone["reason"]
            per.append(alone["value"])
        if cid == "zfb.scaling":         # measured/predicted, a ratio: its geometric mean, the interval on the logs
            g, h = np.mean(np.log(per)), 2.776445 * np.std(np.log(per), ddof=1) / math.sqrt(5)
            want = (math.exp(g), math.exp(g - h), math.exp(g + h))
        else:
            m, h = np.mean(per), 2.776445 * np.std(per, ddof=1) / math.sqrt(5)
            want = (m, m - h, m + h)
        assert (r["value"], r["ci_lo"], r["ci_hi"]) == pytest.approx(want, rel=1e-6, abs=1e-6), (cid, group)
        assert "judged over 5 seeds" in r["measurement"] and f"[{r['ci_lo']:.3g}, {r['ci_hi']:.3g}]" in r["measurement"]
        # the row keeps each seed's own value: what its evidence figure draws beside the interval
        assert json.loads(r["seed_values"]) == pytest.approx({str(s): v for s, v in zip(exp.seeds, per)}, rel=1e-9)


def test_seeds_that_disagree_leave_a_row_undecided_that_the_test_prompts_would_decide():
    """Each seed's slope is measured tightly on its 1000 test prompts, but the seeds ended at
    different matrices (t = ±0.45 of the way from Γ⁻¹ to Λ⁻¹): pooled over the test prompts the
    slope's interval sits inside the band (the old reading: holds); over seeds it straddles the
    band's edge, and the row is inconclusive. Seeds that agree at the same mean hold."""
    spread = rows_of(Exp(shifts=SCALE).lsa(seed_by_seed((-0.45, 0.45, -0.45, 0.45, 0.0))).verdicts(),
                     "zfb.scaling", "slope; optimisation")[0]
    pooled = re.search(r"measured/predicted slope ([0-9.]+) \[([0-9.]+), ([0-9.]+)\]", spread["measurement"])
    lo, hi = float(pooled.group(2)), float(pooled.group(3))
    band = re.search(r"in \[([0-9.]+), ([0-9.]+)\]", spread["prediction"])
    assert float(band.group(1)) < lo < hi < float(band.group(2)), (spread["measurement"], spread["prediction"])
    assert spread["verdict"] == UNSURE and "overlaps the band" in spread["reason"], spread
    assert spread["ci_hi"] - spread["ci_lo"] > 5 * (hi - lo)
    agree = rows_of(Exp(shifts=SCALE).lsa(seed_by_seed((0.0,) * 5)).verdicts(), "zfb.scaling", "slope; optimisation")[0]
    assert agree["verdict"] == HOLDS, agree


def test_a_root_mean_square_is_averaged_over_seeds_as_its_mean_square():
    """thm42's RMS deviation is ≥ 0 and each seed's estimate of it is clipped at 0 where the test
    noise exceeds the deviation. Over seeds the unbiased mean squares are averaged and rooted after:
    at Γ⁻¹ (deviation 0) every seed's mean square lies near 0, some below, and the row holds with
    an upper bound well inside [0, ½]; at t = 0.9 of the way to Λ⁻¹ it does not hold."""
    at_opt = rows_of(Exp().lsa(seed_by_seed((0.0,) * 5)).verdicts(), "zfb.thm42", "error; optimisation")[0]
    assert at_opt["verdict"] == HOLDS and at_opt["ci_lo"] == 0.0 and at_opt["ci_hi"] < 0.25, at_opt
    assert "(mean squares" in at_opt["measurement"]
    squares = [float(x) for x in re.findall(r"\d: (-?[0-9.e-]+)", at_opt["measurement"].split("judged over")[1])[:5]]
    assert len(squares) == 5 and min(squares) < 0.05 ** 2
    far = rows_of(Exp().lsa(seed_by_seed((0.9,) * 5)).verdicts(), "zfb.thm42", "error; optimisation")[0]
    assert far["verdict"] == FAILS and far["ci_lo"] > 0.5, far


def test_reasons_and_measurements_quote_their_rows_numbers():
    """Issue 35 item 7: a row's reason and its over-seeds sentence quote the row's own value and
    interval, on rows that hold, do not hold and are inconclusive; a row whose interval is changed
    after judging is caught."""
    rows = (Exp(shifts=SCALE).lsa(seed_by_seed((-0.45, 0.45, -0.45, 0.45, 0.0))).verdicts()
            + Exp().lsa(seed_by_seed((0.9,) * 5)).verdicts())
    bad, quoted = misquoted(rows)
    assert not bad and quoted >= 10, bad
    assert {r["verdict"] for r in rows} >= {HOLDS, FAILS, UNSURE}
    r = next(r for r in rows if r["verdict"] == UNSURE and "'s interval [" in r["reason"])
    assert misquoted([{**r, "ci_hi": r["ci_hi"] * 1.1}])[0]


def test_fragile_lists_the_band_choices_that_flip_a_row():
    # a slope a little off the optimum's: inside the band, outside it when the band is half as wide
    exp = Exp(shifts=SCALE).lsa(lambda opt, lim, rng: opt + 0.3 * (lim - opt))
    r = rows_of(exp.verdicts(), "zfb.scaling", "slope; optimisation")[0]
    assert r["verdict"] == HOLDS and "band half as wide" in r["fragile"]


def test_limits_from_the_runs_table():
    """with_limits computes the theory at Λ⁻¹ (fixed) and I/3 (Exp covariances) for every LSA cell."""
    tabs = Exp(shifts=(("none", None), ("scale", 2.0))).lsa().tabs()
    cells = tabs["shift"].merge(tabs["runs"][["run_id", "d", "token_kind"]], on="run_id")
    out = zfb.with_limits(cells, tabs["runs"])
    Lam = lsa_optimum({"tokens": ROT, "prompts": {"N": 8}})[2]
    r = out[(out["shift"] == "scale") & (out["M"] == 6)].iloc[0]
    assert r["limit_slope"] == pytest.approx(4.0)                       # c² exactly at Λ⁻¹
    assert r["limit_mse"] == pytest.approx(lsa.risk(np.linalg.inv(Lam), 4 * Lam, 6))


def test_every_claim_docstring_states_its_rule():
    """docs/claims.md's verdict table is generated from these first paragraphs."""
    readme = (REPO / "docs" / "claims.md").read_text()
    for fn, _, _ in zfb.CLAIM_KINDS:
        first = " ".join(fn.__doc__.split("\n\n")[0].split())
        assert f"`zfb.{fn.__name__}` | {first} |" in readme, fn.__name__


def test_report_zfb_keeps_figures_only():
    src = (REPO / "icl" / "report" / "zfb.py").read_text()
    assert "report.ldl" not in src and "import ldl" not in src and "def verdicts" not in src


def test_a_ratio_is_judged_over_seeds_on_its_logs():
    """zfb.length_spike in the default run (2026-11-27): MSE(20)/MSE(10) of the GPT with learned
    positions per seed 1.27, 1.15, 1.23, 1.48, 2.33, above 1 on every seed. The arithmetic mean's
    t-interval, [0.891, 2.1], reached below 1 for the one large seed; a ratio's interval is taken on
    its log (as the delta method gives it inside a seed, and ldl.depth over seeds), and over seeds
    the row holds: exp(mean ± t·s/√5 of the logs). The LSA's error past its training length, whose
    ratios lie below 1 on every seed, does not hold on the same statistic."""
    from icl.analyse.claims.judge import Band, judge
    from icl.analyse.claims.zfb.setting import Setting
    from icl.stats import mean_interval
    cid, group = "zfb.length_spike", "learned positions"
    spikes = {0: 1.27, 1: 1.15, 2: 1.23, 3: 1.48, 4: 2.33}
    s = Setting(model="gpt", kind="gpt", label="", runs=pd.DataFrame(), seed_values={(cid, group): spikes})
    band = Band(1.0, math.inf, source="the order the claim states")
    arith = s.over_seeds(cid, group, 1.5, 1.3, 1.73)
    assert arith.lo < 1 < arith.hi and judge(arith.lo, arith.hi, band, DEFAULT, "spike")[0] == UNSURE
    st = s.over_seeds(cid, group, 1.5, 1.3, 1.73, ratio=True)
    logs = np.log(list(spikes.values()))
    h = 2.776445 * logs.std(ddof=1) / math.sqrt(5)
    assert (st.value, st.lo, st.hi) == pytest.approx((math.exp(logs.mean()), math.exp(logs.mean() - h),
                                                     math.exp(logs.mean() + h)), rel=1e-6)
    assert 1 < st.lo and judge(st.lo, st.hi, band, DEFAULT, "spike")[0] == HOLDS
    assert f"geometric mean {st.value:.3g} [{st.lo:.3g}, {st.hi:.3g}]" in st.text and "logs" in st.text
    assert mean_interval(logs)[0] == pytest.approx(math.log(st.value))
    falls = Setting(model="lsa", kind="lsa", label="", runs=pd.DataFrame(),
                    seed_values={(cid, group): {0: 0.93, 1: 0.88, 2: 0.97, 3: 0.91, 4: 0.95}})
    st = falls.over_seeds(cid, group, 0.93, 0.9, 0.96, ratio=True)
    assert st.hi < 1 and judge(st.lo, st.hi, band, DEFAULT, "spike")[0] == FAILS
