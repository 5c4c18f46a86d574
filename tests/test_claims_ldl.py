"""Each LDL claim on one setting's runs, built as real sweeps produce them (speeds over a 400x range
of L, initial losses from the task, 5% run-to-run noise in times, attention at the crossings as
Lemma 1 links it to the loss) and then changed to make the claim hold, fail, be inconclusive and
not testable: a verdict no data can flip is a defect."""
import math
import re

import numpy as np
import pandas as pd
import pytest

from icl.analyse import claims, fits
from icl.analyse.claims import FAILS, HOLDS, NOT_TESTABLE, UNSURE
from icl.analyse.claims import ldl as C
from icl.analyse.claims.judge import Choices, robust
from icl.theory import ldl

K, N, D = 4, 100, 3.0
REAL_POWER = C.phases.power              # the counter's power measured on the runs' sampled-count flows


@pytest.fixture(autouse=True)
def counter_with_power(monkeypatch):
    """The phase claims' own logic is tested on a counter with full power in both regimes; the power's
    own measurement, and the rows it makes not testable, are tested with the real one (REAL_POWER,
    test_a_count_decides_only_where_the_counter_has_the_power_to)."""
    full = lambda keep: C.phase_power.Power(1.0, 1.0, len(keep), f"2: {len(keep)}", 0.05, "")      # noqa: E731
    monkeypatch.setattr(C.phases, "power", full)
LSTAR = ldl.L_star(K, N, D)                     # 0.373
SHAPE_LS = (0.1, 0.2, 0.3, 0.5, 1.0, 2.0)
FIVE = (0, 1, 2, 3, 4)                          # a statistic over seeds is judged on at least five


def runs(Ls=SHAPE_LS, seeds=(0, 1, 2), kind="softmax_q", opt="gd", c=None, lr=8.0, seed=0, **cols):
    """One model's runs of one setting, with the summary and theory columns the tables step
    writes: c tied to L (the shape family) unless c is given; times from the theorems' T at each
    run's ε times an unknown constant, with 5% noise between runs."""
    g = np.random.default_rng(seed)
    rows = []
    for L in Ls:
        for s in seeds:
            uniform = 0.45 * (1 + 0.03 * g.standard_normal()) * (L ** 2 if c is not None else 1.0)
            rows.append({"run_id": f"r{L}-{s}", "model": "m", "model_kind": kind, "optimizer": opt, "lr": lr,
                         "token_kind": "discrete", "task_kind": "cosine", "c": L if c is None else c, "L": L,
                         "seed": s, "K": K, "N": N, "delta": D, "probs": None, "noise": 0.0, "features": "orthogonal",
                         "M": 300, "batch_size": pd.NA, "L_star": LSTAR, "L_split": LSTAR,
                         "loss0": uniform * (30.0 if kind != "softmax_q" else 1.0), "uniform_train_loss": uniform,
                         "final_train_loss": 1e-3 * uniform, "diverged": False, "memorises": False,
                         "attn_own_final": 0.97 + 0.01 * g.random(), "uniform_test_loss": uniform,
                         "oracle_test_loss": 0.02 * uniform, "final_test_loss": 0.03 * uniform,
                         "mf_step": 0.3, "clock_per_epoch": clock(L, L if c is None else c, lr)})
    df = pd.DataFrame(rows)
    # the test loss varies between runs as the training sets do (its own stream: the times' noise stays put)
    df["final_test_loss"] *= np.exp(0.1 * np.random.default_rng(seed + 100).standard_normal(len(df)))
    with_times(df, g)
    for k, v in cols.items():
        df[k] = v
    return df


def clock(L, c, lr, d=15):
    """The collapse clock's rate η‖v‖⁴·E[(f(v_n) − f(v_k))²] of the cosine at orthogonal features."""
    return lr * (D ** 2 / 2) ** 2 * (L / c) ** 2 * (1 - float(ldl.sphere_cos_mean(np.array(c * D), d)))


def with_times(df, g, const=7.0, power=None):
    """Crossing times (and own attention there) as the theorems say, times `const`, with noise;
    or ∝ L^power. 1 − Attn_own at a relative threshold x is (1 − 1/K)·sqrt(x) (Lemma 1)."""
    reg = C.regimes(df)
    for tcol in ("t_rel_1e-1", "t_rel_1e-2", "t_rel_1e-3", "t_abs_1e-3"):
        T = const * fits.theory_time(df, reg, fits.eps_of(df, tcol)) if power is None else 60 * df["L"] ** power
        df[tcol] = T * np.exp(0.05 * g.standard_normal(len(df)))
        x = float(tcol.split("_")[-1]) if tcol.startswith("t_rel") else float(tcol.split("_")[-1]) / df["loss0"]
        df[f"attn_at_{tcol}"] = 1 - (1 - 1 / K) * np.sqrt(x)
    # the end of Phase I ∝ 1/L² (Prop. 2), slow enough that every run resolves it
    df["t_phase_one"] = 300.0 * K * np.log(K) / (df["lr"] * df["L"] ** 2 * D ** 2) * np.exp(0.05 * g.standard_normal(len(df)))
    df["n_phases"] = np.where(reg == "flat", 2, 3)
    df["late_exponent"] = 1.0
    return df


def setting(df, label="", **kw):
    return C.Setting("m", label, df, **kw)


def one(rows, group=None):
    rows = [r for r in rows if group is None or r["group"] == group]
    assert len(rows) == 1, rows
    return rows[0]


# ----------------------------------------------------------------------------- attention and logits

def test_attention_to_one_is_judged_on_converged_runs_only():
    df = runs()
    assert one(C.attention_to_one(setting(df)))["verdict"] == HOLDS
    low = df.assign(attn_own_final=0.55 + 0.05 * np.random.default_rng(1).random(len(df)))
    assert one(C.attention_to_one(setting(low)))["verdict"] == FAILS
    mixed = df.assign(attn_own_final=np.where(df["seed"] == 0, 0.6, 0.97))
    assert one(C.attention_to_one(setting(mixed)))["verdict"] == UNSURE
    # runs that ran out of epochs (loss at 5% of uniform attention's) are not evidence: left out and counted
    slow = low.assign(final_train_loss=np.where(low["L"] < 0.5, 0.05 * low["uniform_train_loss"], low["final_train_loss"]),
                      attn_own_final=np.where(low["L"] < 0.5, 0.55, 0.975 + 0.01 * np.random.default_rng(6).random(len(low))))
    r = one(C.attention_to_one(setting(slow)))
    assert r["verdict"] == HOLDS and "9 of 18 runs met the precondition" in r["measurement"]
    none = df.assign(final_train_loss=0.5 * df["uniform_train_loss"])
    assert one(C.attention_to_one(setting(none)))["verdict"] == UNSURE
    assert one(C.attention_to_one(setting(df.assign(token_kind="gaussian"))))["verdict"] == NOT_TESTABLE


def logit_cols(df, rate=0.33, fell=1.0, excess=0.3, drop=0.0, phase_rates=(1 / 3, 1 / 3)):
    """The logits' columns as the tables step writes them; `phase_rates`: each run's off-diagonal
    mean path over the own rise per phase (real GD runs at K = 4 whose logits all fall: 1/3 in each
    of their two phases, to float rounding), the same for every run or one list per run."""
    g = np.random.default_rng(2)
    per = list(phase_rates) if len(phase_rates) == len(df) and isinstance(phase_rates[0], (list, tuple)) \
        else [list(phase_rates)] * len(df)
    return df.assign(qoff_rate=rate * np.exp(0.02 * g.standard_normal(len(df))), qoff_fell=fell,
                     qoff_path_excess=excess * np.exp(0.1 * g.standard_normal(len(df))), qown_drop=drop,
                     qoff_phase_rates=pd.Series([[x * (1 + 1e-15 * g.standard_normal()) for x in v] for v in per],
                                                index=df.index, dtype="object"))


EIGHT = tuple(range(8))        # a share over seeds holds in [½, 1] from six seeds up (exact interval [0.54, 1])


def test_offdiag_rate_is_judged_per_phase_against_props_bound():
    """What Prop. 3 bounds, per phase: (K − 1) × the off-diagonal logits' mean path over the own rise
    within [0, 4] in a share of runs in [½, 1], counted over seeds (the runs of one seed share its
    draws). Real GD runs on orthogonal noise-free features (ldl_cosine, K = 4: 1 in both phases) sit
    where softmax's shift invariance puts them: not testable, the identity named and the path beyond
    it reported. Random features break the identity and are judged."""
    rows = C.offdiag_logits(setting(logit_cols(runs(seeds=EIGHT))))
    p1, p2 = one(rows, "rate, phase 1"), one(rows, "rate, phase 2")
    assert p1["verdict"] == p2["verdict"] == NOT_TESTABLE and p1["value"] == 1.0
    assert "within [0, 4] in 40 of 40 runs" in p1["measurement"] and "the path beyond the identity's" in p1["measurement"]
    assert "shift invariance" in p2["reason"] and "observation" in p2["reason"] and "K = 4 < 1/ε = 10" in p2["domain"]
    # random features, logits that wander in phase 2: mean path 2 × the own rise, (K − 1)·rate = 6 > 4
    rnd = runs(features="random", seeds=EIGHT)
    rows = C.offdiag_logits(setting(logit_cols(rnd, phase_rates=(0.5, 2.0))))
    assert one(rows, "rate, phase 1")["verdict"] == HOLDS and one(rows, "rate, phase 2")["verdict"] == FAILS
    assert "shift invariance" not in one(rows, "rate, phase 2")["reason"]
    # one seed of eight above the bound in every run: 35 of 40 runs within, but 7 of 8 seeds: [0.47, 1] straddles ½
    mixed = [[0.5, 2.0] if s == 2 else [0.5, 0.5] for s in rnd["seed"]]
    r = one(C.offdiag_logits(setting(logit_cols(rnd, phase_rates=mixed))), "rate, phase 2")
    assert r["verdict"] == UNSURE and "in 35 of 40 runs" in r["measurement"] and r["ci_lo"] < 0.5
    # the same 35 of 40 as independent runs (one seed each) would hold: the seed, not the run, is the unit
    assert claims.judge.share(np.arange(40) != 3)[1] > 0.5
    # runs with one phase only are counted out of phase 2's row; a phase whose own logits never rose has no rate
    uneven = [[0.5] if s == 0 else [0.5, float("nan")] if s == 1 else [0.5, 0.5] for s in rnd["seed"]]
    r = one(C.offdiag_logits(setting(logit_cols(rnd, phase_rates=uneven))), "rate, phase 2")
    assert "in 30 of 30 runs" in r["measurement"] and "5 runs have no phase 2" in r["measurement"]
    # tables made before the per-phase rates: said so, nothing decided
    old = logit_cols(rnd).drop(columns="qoff_phase_rates")
    r = one(C.offdiag_logits(setting(old)), "rate")
    assert r["verdict"] == UNSURE and "remake the tables" in r["reason"]


def test_offdiag_rate_is_not_testable_where_shift_invariance_fixes_it():
    """softmax_q, GD, orthogonal noise-free features, K = 2: the one off-diagonal logit moves by
    minus the own logit's step at every step, so its rate is 1 by algebra."""
    r = one(C.offdiag_logits(setting(logit_cols(runs(K=2), phase_rates=(1.0, 1.0)))), "rate")
    assert r["verdict"] == NOT_TESTABLE and "shift invariance" in r["reason"] and "1/(K − 1) = 1 (K = 2)" in r["reason"]
    # Adam breaks the identity: judged, and a wide wander fails at K = 2 too
    adam = one(C.offdiag_logits(setting(logit_cols(runs(K=2, opt="adam", seeds=EIGHT), phase_rates=(1.0, 5.0)))),
               "rate, phase 2")
    assert adam["verdict"] == FAILS


def test_offdiag_fall_and_oscillation():
    """Proposition 3 bounds the rate and states an overall decrease: `fall` is judged where no identity
    fixes it (random features); on orthogonal noise-free features under GD the column sum (the
    off-diagonal logits fall together by what the own one rises) fixes it, and it reads not testable.
    Oscillation is an observation (the share of runs and its interval) that no row decides."""
    df = runs(features="random", seeds=EIGHT)
    rows = C.offdiag_logits(setting(logit_cols(df)))
    osc = one(rows, "oscillation")
    assert one(rows, "fall")["verdict"] == HOLDS and osc["verdict"] == NOT_TESTABLE
    n = int(re.search(r"of (\d+) runs oscillate", osc["measurement"]).group(1))   # L = 2 crosses within 5 steps: left out
    assert n == 40 and "8 runs crossed 10⁻¹ of their initial loss within 5 steps" in osc["measurement"]
    assert osc["value"] == 1.0 and osc["ci_lo"] == pytest.approx(0.025 ** (1 / 8)) and "informal wording" in osc["reason"]
    rows = C.offdiag_logits(setting(logit_cols(df, fell=0.2, excess=0.0)))
    assert one(rows, "fall")["verdict"] == FAILS
    mono = one(rows, "oscillation")                  # a monotone decay has no excess path: reported, not failed
    assert mono["verdict"] == NOT_TESTABLE and mono["value"] == 0.0 and "0 of 40 runs oscillate" in mono["measurement"]
    assert one(C.offdiag_logits(setting(df)))["verdict"] == NOT_TESTABLE      # no logits logged
    fixed = one(C.offdiag_logits(setting(logit_cols(runs(seeds=EIGHT), fell=0.2))), "fall")
    assert fixed["verdict"] == NOT_TESTABLE and "fixed by algebra" in fixed["reason"] and fixed["value"] == 0.0


def test_logit_claims_read_runs_whose_path_is_dynamics():
    """Issue 35 item 4: runs that crossed 10⁻¹ of their start within 5 steps (ldl_stability at lr
    100-10000: within 0.08 epoch) or did not train are left out of the logits' claims and counted;
    a setting with none reads not testable."""
    df = logit_cols(runs(features="random", seeds=EIGHT))
    fast = df.assign(**{"t_rel_1e-1": np.where(df["L"] >= 1.0, 0.08, df["t_rel_1e-1"])})
    r = one(C.offdiag_logits(setting(fast)), "fall")
    assert r["verdict"] == HOLDS and "16 runs crossed 10⁻¹ of their initial loss within 5 steps" in r["measurement"]
    assert "most fell in 32 of 32 runs" in r["measurement"]
    allfast = df.assign(**{"t_rel_1e-1": 0.08})
    rows = C.offdiag_logits(setting(allfast))
    assert one(rows)["verdict"] == NOT_TESTABLE and "trace dynamics" in one(rows)["reason"]
    stuck = df.assign(final_train_loss=0.9 * df["uniform_train_loss"])
    assert one(C.own_logit_monotone(setting(stuck)))["verdict"] == NOT_TESTABLE


def test_own_logit_monotone():
    """Where no identity fixes it (random features, where v_kᵀx_n x_qᵀv_k mixes features), a share over
    seeds with its exact binomial interval: 36 seeds all monotone give [0.903, 1], inside [0.9, 1]; 18
    give [0.815, 1], which cannot tell a 10% failure rate from none; the same 36 runs from 6 seeds
    count as 6. On orthogonal noise-free features under GD the gradient −r²A_k ≤ 0 fixes it: not
    testable, the identity named, the share kept as an observation."""
    one_L = dict(Ls=(0.5,), lr=0.5, features="random")          # every run's loss takes ≥ 5 steps to cross 10⁻¹
    df = logit_cols(runs(seeds=range(36), **one_L))
    r = one(C.own_logit_monotone(setting(df)))
    assert r["verdict"] == HOLDS and r["ci_lo"] == pytest.approx(0.025 ** (1 / 36)) and r["ci_hi"] == 1.0
    eighteen = one(C.own_logit_monotone(setting(logit_cols(runs(seeds=range(18), **one_L)))))
    assert eighteen["verdict"] == UNSURE and eighteen["ci_lo"] == pytest.approx(0.025 ** (1 / 18))
    six = one(C.own_logit_monotone(setting(logit_cols(runs(seeds=range(6), Ls=SHAPE_LS, lr=0.5, features="random")))))
    assert six["verdict"] == UNSURE and six["ci_lo"] == pytest.approx(0.025 ** (1 / 6))
    down = logit_cols(runs(features="random", seeds=EIGHT), drop=0.2)
    assert one(C.own_logit_monotone(setting(down)))["verdict"] == FAILS
    some = df.assign(qown_drop=np.where(df["run_id"] == "r0.5-0", 0.2, 0.0))      # one run of 36
    assert one(C.own_logit_monotone(setting(some)))["verdict"] == UNSURE
    assert one(C.own_logit_monotone(setting(logit_cols(runs(opt="adam")))))["verdict"] == NOT_TESTABLE
    ident = one(C.own_logit_monotone(setting(logit_cols(runs(seeds=range(36), Ls=(0.5,), lr=0.5)))))
    assert ident["verdict"] == NOT_TESTABLE and "−r²·A_k ≤ 0" in ident["reason"] and ident["value"] == 1.0


# ----------------------------------------------------------------------------- time scales

def test_time_vs_L_holds_fails_and_needs_five_seeds():
    rows = C.time_vs_L(setting(runs(seeds=FIVE)))
    assert [r["group"] for r in rows] == ["flat, relative 1e-2", "sharp, relative 1e-2",
                                          "flat, absolute 1e-3", "sharp, absolute 1e-3"]
    flat = runs(seeds=FIVE)
    with_times(flat, np.random.default_rng(3), power=0.0)          # T independent of L
    assert all(r["verdict"] == FAILS for r in C.time_vs_L(setting(flat)))
    # the same data on three seeds: the spread of three slopes is a range, not an interval
    three = flat[flat["seed"] < 3]
    for r in C.time_vs_L(setting(three)):
        assert r["verdict"] == UNSURE and r["reason"] == "3 seeds: an interval over seeds needs at least 5", r
        assert "range of 3 seeds' slopes" in r["measurement"] and np.isnan(r["ci_lo"])
    for seeds in ((0,), (0, 1)):
        assert all(r["verdict"] == UNSURE for r in C.time_vs_L(setting(runs(seeds=seeds))))


def test_the_seeds_that_disagree_make_an_interval_too_wide_to_hold():
    """Per-seed slopes 0, −4, −2, −1 and −3 (the issue's case, on five seeds): the bootstrap
    interval spans them and the verdict is inconclusive, whatever the median."""
    df = runs(Ls=(0.1, 0.2, 0.3), kind="transformer_block", seeds=FIVE)
    df["t_rel_1e-2"] = 500 * df["L"] ** df["seed"].map({0: 0.0, 1: -4.0, 2: -2.0, 3: -1.0, 4: -3.0})
    r = one(C.time_vs_L(setting(df), tcols=("t_rel_1e-2",)), "flat, relative 1e-2")
    assert r["verdict"] == UNSURE and r["ci_hi"] - r["ci_lo"] > 2


def test_a_crossing_within_a_few_steps_cannot_decide_a_slope():
    """The L = 2 runs of ldl_shape cross 1e-2 after about two GD steps: left out and counted; with
    them gone the sharp regime has one L too few, so it is inconclusive, not 'does not hold'."""
    df = runs(Ls=(0.1, 0.2, 0.3, 1.0, 2.0))
    df.loc[df["L"] == 2.0, "t_rel_1e-2"] = 2.24
    df.loc[df["L"] == 1.0, "t_rel_1e-2"] = 8000.0                  # would make the slope absurd with L = 2 in
    r = one(C.time_vs_L(setting(df), tcols=("t_rel_1e-2",)), "sharp, relative 1e-2")
    assert r["verdict"] == UNSURE and "3 runs crossed within 5 steps and are left out" in r["measurement"]


def test_both_readings_of_eps_and_where_they_disagree():
    """With the times of the loss reading the loss reading holds; attention that says ε is much
    smaller at the crossings changes the sharp theory slope, and the row is inconclusive naming
    both readings."""
    df = runs(seeds=FIVE)
    r = one(C.time_vs_L(setting(df), tcols=("t_rel_1e-2",)), "sharp, relative 1e-2")
    assert r["verdict"] in (HOLDS, UNSURE)
    odd = df.assign(**{"attn_at_t_rel_1e-2": 1 - 1e-4 * df["L"] ** 4})
    r2 = one(C.time_vs_L(setting(odd), tcols=("t_rel_1e-2",)), "sharp, relative 1e-2")
    if r["verdict"] == HOLDS:
        assert r2["verdict"] == UNSURE and "the two readings of ε disagree" in r2["reason"]
        assert "ε from the loss" in r2["prediction"] and "ε from attention" in r2["prediction"]


def test_time_claims_yield_to_the_scale_identity_and_to_gd():
    r = one(C.time_vs_L(setting(runs(c=0.5))))
    assert r["verdict"] == NOT_TESTABLE and "GD at (η, L) is GD at (ηL², 1)" in r["reason"]
    assert one(C.time_vs_L(setting(runs(opt="adam"))))["verdict"] == NOT_TESTABLE
    assert one(C.time_vs_eps(setting(runs(c=0.5))))["verdict"] == NOT_TESTABLE


def test_an_approximate_scale_identity_is_named():
    """ldl_shape's flat set: T·L² = 2.16, 2.15, 2.21 for L = 0.1, 0.2, 0.3 — constant within the
    seeds' spread, so L acts as a scale and the flat-regime slope is decided by that."""
    df = runs()
    flat = df["L"] <= LSTAR
    for tcol in ("t_rel_1e-1", "t_rel_1e-2"):
        base = {0.1: 2.16, 0.2: 2.15, 0.3: 2.21}
        df.loc[flat, tcol] = [base[L] / L ** 2 * (1 + 0.04 * (s - 1)) * (10 if tcol.endswith("2") else 1)
                              for L, s in zip(df.loc[flat, "L"], df.loc[flat, "seed"])]
    r = one(C.time_vs_L(setting(df), tcols=("t_rel_1e-2",)), "flat, relative 1e-2")
    assert r["verdict"] == NOT_TESTABLE and "approximate scale identity" in r["reason"]
    assert one(C.time_vs_L(setting(df), tcols=("t_rel_1e-2",)), "sharp, relative 1e-2")["verdict"] != NOT_TESTABLE


def test_time_vs_eps():
    rows = C.time_vs_eps(setting(runs(seeds=FIVE)))
    assert [r["group"] for r in rows] == ["flat", "sharp"]
    assert all(r["reason"] != "3 seeds: an interval over seeds needs at least 5" for r in rows)
    three = C.time_vs_eps(setting(runs()))          # 9 runs per regime, but 3 seeds: the rows
    assert all(r["verdict"] == UNSURE and r["reason"] == "3 seeds: an interval over seeds needs at least 5" for r in three)
    pw = runs(seeds=FIVE)
    for i, tcol in enumerate(("t_rel_1e-1", "t_rel_1e-3")):        # a power law t^-1: β = 2 everywhere
        pw[tcol] = 30 / float(tcol.split("_")[-1]) * np.exp(0.05 * np.random.default_rng(4 + i).standard_normal(len(pw)))
    rows = C.time_vs_eps(setting(pw))
    assert all(r["verdict"] == FAILS for r in rows), rows
    assert "late-time loss ∝ t^−a with a = 1.00 (so β = 2/a = 2.00)" in rows[0]["measurement"]
    few = runs().assign(**{"t_rel_1e-3": np.nan})
    assert all(r["verdict"] == UNSURE for r in C.time_vs_eps(setting(few)))


def test_phase_one():
    """The end of Phase I against T1 ∝ 1/L², over L where the task is not the scale family (at
    L = 0.1, 0.2 it is: there the slope is decided by that identity)."""
    slow = lambda df: df
    assert one(C.phase_one(setting(slow(runs(Ls=(0.5, 1.0, 2.0), seeds=FIVE)))))["verdict"] == HOLDS
    noise = np.exp(0.05 * np.random.default_rng(7).standard_normal(15))
    flat = runs(Ls=(0.5, 1.0, 2.0), seeds=FIVE).assign(t_phase_one=lambda d: 40 * d["L"] ** -1.0 * noise)
    assert one(C.phase_one(setting(flat)))["verdict"] == FAILS
    three = one(C.phase_one(setting(flat[flat["seed"] < 3])))
    assert three["verdict"] == UNSURE and "3 seeds: an interval over seeds needs at least 5" == three["reason"]
    small = one(C.phase_one(setting(slow(runs(Ls=(0.1, 0.2))))))
    assert small["verdict"] == NOT_TESTABLE and "approximate scale identity" in small["reason"]
    assert one(C.phase_one(setting(runs(c=0.5))))["verdict"] == NOT_TESTABLE
    never = one(C.phase_one(setting(runs(Ls=(0.5, 1.0, 2.0)).assign(t_phase_one=np.nan, attn_own_final=0.3))))
    assert never["verdict"] == UNSURE and "reached 1/(1+δ)" in never["reason"]


def on_clock(Ls=(0.5, 1.0, 2.0, 3.0), gap_power=2.0, power=None, seed=0, loss0_from_gap=True):
    """A shape-family sweep (c = L, Δ = 3, five seeds) whose GD step follows the measured collapse
    clock, as `lr_rule: clock` sets it (icl.theory.ldl.clock_lr at lr 0.8): η = 0.8·w(1)/w(L) with
    w = ‖v‖⁴E[(f(v_k) − f(v_k'))²], so clock_per_epoch is one number; eq4_ratio from the cosine's
    closed form (0.98 at L = 0.5 to 0.60 at L = 3: inside Eq. 4's domain); the initial loss ∝ the
    label gap² (uniform attention's), or one number. Crossing times ∝ 1/(η L²Δ² r^gap_power)
    (r = eq4_ratio; gap_power 2: the measured gap², i.e. the clock itself; 0: the theorems' L²Δ²),
    or ∝ L^power, at ldl_phase_diagram's scale (Phase I after ~9 epochs, 10⁻² after ~130) with the
    spread real runs show there: a factor per seed of 12% in log shared by its runs across L, and 2%
    per run."""
    df = runs(Ls=Ls, seeds=FIVE, seed=seed)
    r = np.array([ldl.cosine_eq4_ratio(L, D, 15) for L in df["L"]])
    lr = 0.8 * clock(1.0, 1.0, 1.0) / np.array([clock(L, L, 1.0) for L in df["L"]])
    g = np.random.default_rng(seed + 50)
    noise = np.exp(0.12 * g.standard_normal(len(FIVE)))[df["seed"].to_numpy()] * np.exp(0.02 * g.standard_normal(len(df)))
    rate = lr * df["L"].to_numpy() ** 2 * r ** gap_power            # ∝ the clock when gap_power = 2
    rate = rate / np.median(rate) if power is None else df["L"].to_numpy() ** -float(power)
    loss0 = 0.1 * (1 - ldl.sphere_cos_mean(df["L"].to_numpy() * D, 15)) if loss0_from_gap else np.full(len(df), 0.05)
    return df.assign(lr=lr, eq4_ratio=r, clock_per_epoch=[clock(L, L, e) for L, e in zip(df["L"], lr)],
                     loss0=loss0, uniform_train_loss=loss0, final_train_loss=1e-3 * loss0,
                     t_phase_one=9.0 / rate * noise, **{"t_rel_1e-1": 24.0 / rate * noise,
                                                         "t_rel_1e-2": 130.0 / rate * noise})


def test_runs_on_the_measured_clock_are_not_failed_for_the_constant_inside_theta(monkeypatch):
    """Eq. 4 says |f(v_k) − f(v_k')| = Θ(L)Δ with an unknown constant; inside its domain the
    measured gap per unit LΔ is ½ to 1 of its small-LΔ value. Runs that follow the measured clock
    (ldl_phase_diagram: T1 flat in L) read not 'does not hold' on phase_one and time_vs_L: the band
    spans L²Δ² and the measured gap². With the old band (L²Δ² alone) the same data read does not
    hold; a slope outside both readings (T ∝ L^{+1}) still does not hold."""
    clk = on_clock()
    assert np.allclose(clk["clock_per_epoch"], clk["clock_per_epoch"].iloc[0])      # the step follows the clock
    p1 = one(C.phase_one(setting(clk)))
    assert p1["verdict"] in (HOLDS, UNSURE), p1
    assert "measured label gap²" in p1["prediction"] and "with L²Δ²" in p1["prediction"]
    m = re.search(r"= (-?[\d.]+) with L²Δ² .* to (-?[\d.]+) with the measured label gap²", p1["prediction"])
    assert float(m.group(1)) < -0.4 and abs(float(m.group(2))) < 0.01      # 2·dlog r/dlog L and the clock's 0
    # uniform attention's loss ∝ the gap², so with ε² = the loss ε grows with L and the sharp 1/ε of Theorem 2
    # is not the clock's; with Lemma 1's prefactor inside the O (ε² = the loss / loss₀, issue 35 item 2) ε is
    # one number and the clock's slope is the theorem's: the band spans both, and the runs hold
    tv = one(C.time_vs_L(setting(clk), tcols=("t_rel_1e-2",)), "sharp, relative 1e-2")
    assert tv["verdict"] == HOLDS, tv
    assert "with the measured label gap²" in tv["prediction"] and "ε² = the loss / loss₀" in tv["prediction"]
    # one initial loss for every L (ε alike in both readings): the clock's slope lies in the band
    one_eps = on_clock(loss0_from_gap=False)
    assert one(C.time_vs_L(setting(one_eps), tcols=("t_rel_1e-2",)), "sharp, relative 1e-2")["verdict"] in (HOLDS, UNSURE)
    # the constant halfway between its two readings: holds, on both claims
    mid = on_clock(gap_power=1.0, loss0_from_gap=False)
    assert one(C.phase_one(setting(mid)))["verdict"] == HOLDS
    assert one(C.time_vs_L(setting(mid), tcols=("t_rel_1e-2",)), "sharp, relative 1e-2")["verdict"] == HOLDS
    # a slope outside both readings still fails
    up = on_clock(power=1.0)
    assert one(C.phase_one(setting(up)))["verdict"] == FAILS
    assert one(C.time_vs_L(setting(up), tcols=("t_rel_1e-2",)), "sharp, relative 1e-2")["verdict"] == FAILS
    assert one(C.time_vs_L(setting(on_clock(power=1.0, loss0_from_gap=False)), tcols=("t_rel_1e-2",)), "sharp, relative 1e-2")["verdict"] == FAILS
    # the old band, L²Δ² alone: the clock's runs read does not hold on both claims
    monkeypatch.setattr(C.identities, "gap_L", lambda g: g["L"].to_numpy(float))
    assert one(C.phase_one(setting(clk)))["verdict"] == FAILS
    assert one(C.time_vs_L(setting(clk), tcols=("t_rel_1e-2",)), "sharp, relative 1e-2")["verdict"] == FAILS
    assert one(C.time_vs_L(setting(one_eps), tcols=("t_rel_1e-2",)), "sharp, relative 1e-2")["verdict"] == FAILS


def test_without_a_measured_gap_the_band_is_the_theorems_alone():
    """Tables without eq4_ratio (older runs, tasks without a label covariance): the measured-gap
    reading is the L²Δ² one, and the band and text are as before."""
    df = runs(Ls=(0.5, 1.0, 2.0), seeds=FIVE)
    r = one(C.phase_one(setting(df)))
    assert r["verdict"] == HOLDS and "measured label gap" not in r["prediction"] and "= −2" in r["prediction"]
    assert np.array_equal(C.identities.gap_L(df.assign(eq4_ratio=np.nan)), df["L"].to_numpy(float))


# ----------------------------------------------------------------------------- phases

def test_phases_and_transition():
    """Shares over seeds: eight seeds (each with its runs at every L) decide; a seed whose sharp runs
    all count 2 leaves 7 of 8 seeds, an interval that straddles ½."""
    df = runs(seeds=EIGHT)
    rows = C.phases_claim(setting(df))
    assert [(r["group"], r["verdict"]) for r in rows] == [("flat", HOLDS), ("sharp", HOLDS)]
    assert one(C.transition_at_Lstar(setting(df)))["verdict"] == HOLDS
    same = df.assign(n_phases=2)
    assert one(C.phases_claim(setting(same)), "sharp")["verdict"] == FAILS
    assert one(C.transition_at_Lstar(setting(same)))["verdict"] == FAILS
    capped = df.assign(n_phases=4)                   # every run hits a cap: the old code read 4 vs 4 as a failure
    assert one(C.transition_at_Lstar(setting(capped)))["verdict"] == FAILS
    mixed = df.assign(n_phases=np.where(df["seed"] == 0, 2, df["n_phases"]))
    assert one(C.phases_claim(setting(mixed)), "sharp")["verdict"] == UNSURE
    below = runs(Ls=(0.1, 0.2))
    assert one(C.transition_at_Lstar(setting(below)))["verdict"] == NOT_TESTABLE
    assert one(C.phases_claim(setting(runs(c=0.5))))["verdict"] == NOT_TESTABLE


def test_runs_whose_window_cannot_show_phases_are_left_out_and_counted():
    df = runs(seeds=range(6))
    df["t_phase_one"] = 40.0
    df.loc[df["L"] >= 1.0, "t_phase_one"] = 1.0              # Phase I within one step
    df.loc[df["L"] >= 1.0, "n_phases"] = 1
    rows = C.phases_claim(setting(df))
    sharp = one(rows, "sharp")                                # 6 of 6 seeds at L = 0.5 show 3 phases: [0.54, 1]
    assert sharp["verdict"] == HOLDS and "12 ended Phase I within 5 steps" in sharp["measurement"]
    df["t_phase_one"] = 1.0
    assert all(r["verdict"] == UNSURE for r in C.phases_claim(setting(df)))


def test_a_verdict_that_depends_on_the_constant_in_Lstar_is_marked_fragile():
    """Two phases up to L = 0.5, three above: at L* = 0.37 the sharp set mixes 2 and 3; at 2L* it
    holds. The row lists the choice that flips it."""
    df = runs(seeds=EIGHT)
    df["n_phases"] = np.where(df["L"] <= 0.5, 2, 3)
    rows = robust(C.phases_claim, setting(df))
    sharp = one(rows, "sharp")
    assert sharp["verdict"] != HOLDS and "L* doubled: holds" in sharp["fragile"]


@pytest.mark.parametrize("power,expect", [(-1.0, HOLDS), (0.0, FAILS)])
def test_phase_boundary_against_delta(power, expect, monkeypatch):
    """Runs over L × Δ (five seeds, L a factor √2 apart) whose third phase appears above
    L_b(Δ) = 0.6 · (Δ/3)^power (two of the seeds one grid step later at Δ = 6 and one a step earlier
    at Δ = 1.5, as seeds differ); with three seeds the slope is not judged. Two seeds of five a
    factor 2 late is a spread the slope's interval over five seeds cannot tell from no slope at
    all: inconclusive (the unwidened percentiles, a third too narrow at five seeds, held)."""
    monkeypatch.setattr(C.phases, "counter_blind", lambda df: None, raising=False)     # the counter's own validation is another test's

    def sweep(Ls, step):
        parts = []
        for Dl in (1.5, 3.0, 6.0):
            r = runs(Ls=Ls, seeds=FIVE).assign(delta=Dl)
            r["run_id"] = r["run_id"] + f"-{Dl}"
            late = np.where((Dl == 6.0) & (r["seed"] >= 3), step, 1.0) * np.where((Dl == 1.5) & (r["seed"] == 1), 1 / step, 1.0)
            r["n_phases"] = np.where(r["L"] > 0.6 * (Dl / 3.0) ** power * late, 3, 2)
            parts.append(r)
        return pd.concat(parts, ignore_index=True)

    df = sweep(tuple(0.05 * math.sqrt(2) ** k for k in range(13)), math.sqrt(2))
    row = one(C.phase_boundary(setting(df), "delta"))
    assert row["group"] == "boundary against Δ" and row["verdict"] == expect, row
    coarse = one(C.phase_boundary(setting(sweep((0.05, 0.1, 0.2, 0.4, 0.8, 1.6, 3.2), 2.0)), "delta"))
    assert coarse["verdict"] == (UNSURE if expect == HOLDS else FAILS), coarse
    three = one(C.phase_boundary(setting(df[df["seed"] < 3]), "delta"))
    assert three["verdict"] == UNSURE and three["reason"] == "3 seeds: an interval over seeds needs at least 5"
    assert C.phase_boundary(setting(runs()), "delta") == []
    # a short run (as `smoke: true` trains): no run converged, so none has a phase count to place
    short = df.assign(final_train_loss=df["uniform_train_loss"], n_phases=np.nan)
    row = one(C.phase_boundary(setting(short), "delta"))
    assert row["verdict"] == UNSURE and "never reached" in row["measurement"], row


# ----------------------------------------------------------------------------- stability, unseen, mean field

def stability_runs(rho_sign, seeds=FIVE):
    """Block runs over L × lr × seeds; a run is unstable above the largest stable lr of its L (seed
    4 one learning rate lower at L = 0.4, as seeds differ)."""
    rows = []
    best = dict(zip((0.1, 0.4, 1.0, 2.0), (1.0, 0.1, 0.01, 1e-3) if rho_sign < 0 else (1e-3, 0.01, 0.1, 1.0)))
    for L, top in best.items():
        for lr in (1e-3, 0.01, 0.1, 1.0):
            for s in seeds:
                bad = lr > (top / 10 if (s == 4 and L == 0.4) else top)
                rows.append({"run_id": f"{L}-{lr}-{s}", "L": L, "lr": lr, "seed": s, "diverged": bad and s == 0,
                             "loss0": 10.0, "final_train_loss": 20.0 if bad else 0.1})
    return runs(kind="transformer_block", Ls=(0.1,), seeds=(0,)).iloc[[0] * len(rows)].reset_index(drop=True).assign(
        **pd.DataFrame(rows))


def test_step_size():
    assert one(C.step_size(setting(stability_runs(-1))))["verdict"] == HOLDS
    assert one(C.step_size(setting(stability_runs(+1))))["verdict"] == FAILS
    three = one(C.step_size(setting(stability_runs(-1, seeds=(0, 1, 2)))))
    assert three["verdict"] == UNSURE and three["reason"] == "3 seeds: an interval over seeds needs at least 5"
    r = one(C.step_size(setting(runs())))
    assert r["verdict"] == NOT_TESTABLE and "convex combination" in r["reason"]


def test_unseen_functions_is_measured_against_what_needs_no_training():
    """The issue's held-out block: its random head starts 30x above uniform attention, so final /
    initial test loss is tiny whatever it learns; against uniform attention it kept 86% of the
    uniform loss: it learned its training prompts but recovers little of the gain on new functions,
    and does not hold — the reason says how little, in the numbers."""
    df = runs(kind="transformer_block", c=0.5)
    assert one(C.unseen_functions(setting(df)))["verdict"] == HOLDS
    nothing = df.assign(final_test_loss=0.86 * df["uniform_test_loss"] * jitter(len(df)))
    r = one(C.unseen_functions(setting(nothing)))
    assert (nothing["final_test_loss"] / nothing["loss0"]).max() < 0.05      # the old criterion would hold
    got = re.search(r"recovers only ([0-9.]+) of the gain .*its test loss ([0-9.]+)× uniform", r["reason"])
    assert r["verdict"] == FAILS and got, r["reason"]
    assert 0.1 < float(got.group(1)) < 0.18 and 0.83 < float(got.group(2)) < 0.89
    # worse than uniform attention on new functions (a learned training loss): said as such
    worse = df.assign(final_test_loss=1.5 * df["uniform_test_loss"] * jitter(len(df)))
    r = one(C.unseen_functions(setting(worse)))
    assert r["verdict"] == FAILS and "worse than uniform attention" in r["reason"] and "little better" not in r["reason"]
    half = df.assign(final_test_loss=np.where(df["seed"] == 0, 0.5, 0.03) * df["uniform_test_loss"])
    assert one(C.unseen_functions(setting(half)))["verdict"] == UNSURE


def jitter(n, sd=0.02, seed=3):
    """Run-to-run scatter of a loss ratio (identical ratios would give a zero-width interval)."""
    return np.exp(sd * np.random.default_rng(seed).standard_normal(n))


def train_ratio(text):
    """The largest final train loss / uniform attention's a gate sentence states ('1.47–1.55×')."""
    got = re.search(r"train loss ([0-9.]+)(?:–([0-9.]+))?× uniform", text)
    return float(got.group(2) or got.group(1))


def test_a_run_that_learned_its_prompts_and_not_in_context_has_not_learned():
    """Issue 62.4: "learned" is read on held-out prompts too. ldl_flow_K's K = 64 runs drove their train
    loss to 10⁻² of uniform attention's while their test loss (0.094) stayed above uniform attention's
    on the test prompts (0.074) and far from the feature oracle's: the gate leaves them out and says
    it with the numbers, and the page's header calls the model not learned in those runs."""
    from icl.report import headline as hl
    df = runs(kind="softmax_q", seeds=EIGHT)
    bad = df["seed"] < 2
    memorised = df.assign(final_test_loss=np.where(bad, 1.27 * df["uniform_test_loss"], df["final_test_loss"]))
    r = one(C.attention_to_one(setting(memorised)))
    assert "12 of 48 runs left out as not learned" in r["measurement"], r
    assert "final test loss (held-out prompts) 1.27× uniform attention's" in r["measurement"]
    assert "final train loss" not in r["measurement"]                     # their train loss passed
    memorised = memorised.assign(epochs=400)
    tabs = {"runs": memorised[["run_id", "model", "model_kind", "optimizer", "epochs", "N"]],
            "summary": memorised.drop(columns=["model", "model_kind", "optimizer", "epochs", "N"])}
    out = hl.model_outcomes(tabs, ldl=True)[0]
    assert out["status"] == "learned in 36 of 48 runs", out
    assert "12 of 48 runs closed less than half the gap from uniform attention's test loss" in out["reached"]
    assert hl.model_outcomes({**tabs, "summary": tabs["summary"].assign(
        final_test_loss=df["final_test_loss"].to_numpy())}, ldl=True)[0]["status"] == "learned"


def test_runs_that_did_not_learn_are_counted_and_left_out():
    """Issue 28 item 4, the learning gate (icl.analyse.claims.learned) for attention_to_one and
    unseen_functions: a run whose final train loss is 1.5x uniform attention's (ldl_depth's GPTs)
    has not learned: left out and counted; a setting with none reads not testable, saying so with
    the numbers (worse than uniform attention, not "little better")."""
    df = runs(kind="transformer_block", c=0.5, seeds=EIGHT)     # the median's interval is over seeds: eight
    bad = df["seed"] == 0
    worse = 1.5 * jitter(len(df), 0.01)
    mixed = df.assign(final_train_loss=np.where(bad, worse * df["uniform_train_loss"], df["final_train_loss"]),
                      final_test_loss=np.where(bad, worse * df["uniform_test_loss"], df["final_test_loss"]),
                      attn_own_final=np.where(bad, 0.3, df["attn_own_final"]))
    for claim in (C.unseen_functions, C.attention_to_one):
        r = one(claim(setting(mixed)))
        assert r["verdict"] == HOLDS, r
        assert "6 of 48 runs left out as not learned" in r["measurement"], r
        assert 1.4 < train_ratio(r["measurement"]) < 1.6 and "worse than uniform attention" in r["measurement"]
    none = mixed.assign(final_train_loss=worse * df["uniform_train_loss"], final_test_loss=worse * df["uniform_test_loss"])
    for claim in (C.unseen_functions, C.attention_to_one):
        r = one(claim(setting(none)))
        assert r["verdict"] == NOT_TESTABLE and r["reason"].startswith("the model has not learned"), r
        assert 1.4 < train_ratio(r["reason"]) < 1.6 and "worse than uniform attention" in r["reason"]
        assert "little better" not in r["reason"]
    # closed only a fifth of the gap: not learned, and said as a share, not as "worse"
    r = one(C.unseen_functions(setting(df.assign(final_train_loss=0.8 * df["uniform_train_loss"]))))
    assert r["verdict"] == NOT_TESTABLE and "train loss 0.8× uniform" in r["reason"] and "closed 0.2 of the gap" in r["reason"]
    assert "worse" not in r["reason"]
    # a GPT trained on every x position: its objective is said beside the numbers
    gpt = none.assign(model_kind="gpt", loss="all")
    assert "every x position" in one(C.unseen_functions(setting(gpt)))["reason"]


def test_unseen_functions_on_continuous_tokens_has_no_oracle_to_reach():
    """ldl_polynomial: continuous tokens have no feature oracle (oracle_test_loss is NaN); judging
    against 0 asked for what a label-averaging model cannot reach. Not testable, saying why."""
    df = runs(kind="transformer_block", c=0.5).assign(token_kind="gaussian", K=pd.NA, oracle_test_loss=np.nan)
    r = one(C.unseen_functions(setting(df)))
    assert r["verdict"] == NOT_TESTABLE and "no feature oracle" in r["reason"] and "out of reach" in r["reason"]


def mf_tables(df, ratio, spread=0.02, epochs=np.arange(0, 200, 10), rate=0.02, bias=0.03):
    """train_loss curves `ratio` times the balanced mean-field curve (falling e^(−rate·t): 45x over
    the window at the default rate) with a seed-to-seed scatter `spread` in log, and the flow on
    each run's sampled feature counts `bias` above the balanced one in log (the 2-5% the issue
    measured), each run's own bias scattered by a tenth of it."""
    g = np.random.default_rng(5)
    mf = pd.DataFrame([(r, e, "mean_field_loss", np.exp(-rate * e)) for r in df["run_id"] for e in epochs],
                      columns=["run_id", "epoch", "metric", "value"])
    noise = {r: spread * g.standard_normal() for r in df["run_id"]}
    own = {r: bias * (1 + 0.1 * g.standard_normal()) for r in df["run_id"]}
    cur = mf.assign(metric="train_loss", value=[v * ratio * np.exp(noise[r]) for r, v in zip(mf["run_id"], mf["value"])])
    sampled = mf.assign(metric="mean_field_loss_sampled",
                        value=[v * np.exp(own[r]) for r, v in zip(mf["run_id"], mf["value"])])
    return cur, pd.concat([mf, sampled], ignore_index=True)


@pytest.mark.parametrize("ratio,seeds,expect", [(math.exp(0.03), 20, HOLDS), (math.exp(0.03), 5, UNSURE),
                                                (1.6, 5, FAILS)])
def test_mean_field_per_setting_with_a_measured_band(ratio, seeds, expect):
    """Runs 3 % above the balanced flow, where the flow on their own sampled counts lies (the runs
    the issue measured sat 0.5-6 % above it), hold on 20 seeds; 60 % above, they do not. The band's
    tolerance is the spread of the median it judges (2 standard errors: the seeds' spread ×
    sqrt(π/2)/sqrt(n)), so five seeds at a 2 % spread give an interval as wide as the band's
    tolerance: inconclusive, not the hold a band of the runs' own spread granted."""
    df = runs(Ls=(0.3,), seeds=tuple(range(seeds)))
    cur, mf = mf_tables(df, ratio)
    rows = C.mean_field(setting(df, "lr=8", curves=cur, theory_curves=mf))
    top = [r for r in rows if r["scope"] == "setting"]
    assert len(top) == 1 and top[0]["verdict"] == expect, top
    per_run = [r for r in rows if r["scope"] == "run"]
    assert top[0]["group"] == "lr=8; L=0.3"
    assert [r["group"] for r in per_run] == [f"lr=8; L=0.3; seed={s}" for s in range(seeds)]


@pytest.mark.parametrize("bias,expect", [(0.0, FAILS), (0.08, HOLDS)])
def test_mean_field_band_covers_the_sampled_count_bias(bias, expect):
    """Issue 28 item 3: the band is built from the approximation's measured bias. Runs 7% above the
    balanced curve (the +0.5% to +6% the issue found), seeds scattered by 1% in log: against a band
    of the seeds' spread alone they do not hold; where the flow on the runs' own sampled counts
    sits 8% above the balanced one, the band covers that difference and they hold."""
    df = runs(Ls=(0.3,), seeds=(0, 1, 2, 3, 4))
    cur, mf = mf_tables(df, np.exp(0.07), spread=0.01, bias=bias)
    top = [r for r in C.mean_field(setting(df, curves=cur, theory_curves=mf)) if r["scope"] == "setting"]
    assert len(top) == 1 and top[0]["verdict"] == expect, top
    assert "sampled-count flow's bias" in top[0]["prediction"]


def test_mean_field_needs_dynamics_in_its_window_and_the_sampled_flow():
    """A loss that fell by less than a decade in the window (nothing happened, as predicted: a
    vacuous agreement) reads not testable; so does a theory table without the sampled-count flow."""
    df = runs(Ls=(0.3,), seeds=(0, 1, 2, 3, 4))
    cur, mf = mf_tables(df, 1.0, rate=0.01)                  # e^(−1.9): 6.7x over the window
    r = one(C.mean_field(setting(df, curves=cur, theory_curves=mf)))
    assert r["verdict"] == NOT_TESTABLE and "less than a decade" in r["reason"] and "6.69×" in r["reason"], r
    cur, mf = mf_tables(df, 1.0)
    r = one(C.mean_field(setting(df, curves=cur, theory_curves=mf[mf["metric"] == "mean_field_loss"])))
    assert r["verdict"] == NOT_TESTABLE and "rerun the theory step" in r["reason"]


def test_mean_field_does_not_apply_at_steps_beyond_the_curvature():
    df = runs(Ls=(0.4,)).assign(mf_step=557.0)
    cur, mf = mf_tables(df, 1.0)
    r = one(C.mean_field(setting(df, curves=cur, theory_curves=mf)))
    assert r["verdict"] == NOT_TESTABLE and "overshoots" in r["reason"]
    one_seed = runs(Ls=(0.4,), seeds=(0,))
    cur, mf = mf_tables(one_seed, 1.0)
    assert one(C.mean_field(setting(one_seed, curves=cur, theory_curves=mf)))["verdict"] == UNSURE


# ----------------------------------------------------------------------------- counts, censoring, thresholds

def test_a_count_of_phases_is_judged_as_the_share_of_runs_that_show_it():
    """An integer count is no continuous measurement: runs that all count 2 bootstrap to [2, 2].
    Judged as the share of runs with the predicted count, its exact binomial interval taken over the
    seeds (the runs of one seed share its draws): 8 seeds × 3 flat L all showing it hold ([0.63, 1]
    inside [½, 1]), one seed's three runs cannot ([0.025, 1]), none does not hold, and one seed of
    eight is inconclusive."""
    df = runs(kind="transformer_block", seeds=EIGHT)
    flat = one(C.phases_claim(setting(df)), "flat")
    assert flat["verdict"] == HOLDS and flat["value"] == 1.0
    assert (flat["ci_lo"], flat["ci_hi"]) == pytest.approx((0.025 ** (1 / 8), 1.0))
    assert "24 of 24 runs (8 seeds) show 2 phases" in flat["measurement"]
    few = one(C.phases_claim(setting(df[df["seed"] == 0])), "flat")
    assert few["verdict"] == UNSURE and few["ci_lo"] == pytest.approx(0.025)
    two = df.assign(n_phases=2)
    assert one(C.phases_claim(setting(two)), "sharp")["verdict"] == FAILS
    some = df.assign(n_phases=np.where((df["seed"] > 0) & (df["L"] > LSTAR), 2, df["n_phases"]))      # seed 0 shows 3
    r = one(C.phases_claim(setting(some)), "sharp")
    assert r["verdict"] == UNSURE and r["value"] == pytest.approx(1 / 8)


def test_the_transition_is_the_share_of_run_pairs_one_phase_apart():
    """3 runs on each side of L* that all count the same, '+0.00 [0, 0]', once read does not hold; as
    pairs one phase apart, counted over their seeds, one seed's pairs are inconclusive ([0, 0.975])
    and eight seeds' are a 'does not hold' a referee can sign."""
    df = runs(kind="transformer_block", seeds=EIGHT)
    r = one(C.transition_at_Lstar(setting(df)))
    assert r["verdict"] == HOLDS and "24 of 24 flat/sharp run pairs one phase apart" in r["measurement"]
    same = df.assign(n_phases=3)
    three = same[(same["seed"] == 0) & same["L"].isin([0.2, 0.3, 0.5, 1.0, 2.0, 0.1])]
    r3 = one(C.transition_at_Lstar(setting(three)))
    assert r3["verdict"] == UNSURE and (r3["ci_lo"], r3["ci_hi"]) == pytest.approx((0.0, 0.975))
    assert one(C.transition_at_Lstar(setting(same)))["verdict"] == FAILS


def test_every_run_left_out_of_a_time_claim_is_counted():
    """ldl_shape at lr = 0.5: its L = 0.5 runs never reached 1e-2 and vanished from the row
    unannounced; and absolute-threshold slopes came from runs whose loss₀ was 1.03-1.23e-3
    against a 1e-3 threshold. Both are left out and counted in the measurement."""
    df = runs(seeds=FIVE, kind="transformer_block")
    df.loc[df["L"] == 0.5, "t_rel_1e-2"] = np.nan
    r = one(C.time_vs_L(setting(df), tcols=("t_rel_1e-2",)), "sharp, relative 1e-2")
    assert "5 runs never reached t_rel_1e-2 and are left out" in r["measurement"], r
    g = np.random.default_rng(8)
    near = df.assign(loss0=np.where(df["L"] >= 1.0, 1e-3 * (1.03 + 0.2 * g.random(len(df))), df["loss0"]))
    r = one(C.time_vs_L(setting(near), tcols=("t_abs_1e-3",)), "sharp, absolute 1e-3")
    assert "10 runs started less than 10× above the threshold 1e-3 and are left out" in r["measurement"], r
    assert r["verdict"] == UNSURE and "fewer than two values of L" in r["reason"]
    # 9× the threshold is still too close; 10× is enough
    nine = df.assign(loss0=np.where(df["L"] >= 1.0, 9e-3, df["loss0"]))
    assert "10 runs started" in one(C.time_vs_L(setting(nine), tcols=("t_abs_1e-3",)), "sharp, absolute 1e-3")["measurement"]
    ten = df.assign(loss0=np.where(df["L"] >= 1.0, 1e-2, df["loss0"]))
    assert "started" not in one(C.time_vs_L(setting(ten), tcols=("t_abs_1e-3",)), "sharp, absolute 1e-3")["measurement"]
    # every sharp run outside the domain: the regime cannot test the claim
    low = df.assign(loss0=np.where(df["L"] > LSTAR, 2e-3, df["loss0"]))
    r = one(C.time_vs_L(setting(low), tcols=("t_abs_1e-3",)), "sharp, absolute 1e-3")
    assert r["verdict"] == NOT_TESTABLE and "every sharp run was left out (15 runs started" in r["reason"]


def test_an_all_excluded_setting_reads_not_testable():
    """A setting whose runs all diverged got one 'inconclusive' row of its own; now each of its
    claims reads not testable, the runs counted."""
    a, b = runs(lr=5.0, seeds=FIVE), runs(lr=8.0, seed=1, seeds=FIVE)
    b["run_id"] = b["run_id"] + "-b"
    b["diverged"] = True
    b["final_train_loss"] = np.nan
    rows = C.verdicts(tables_for(pd.concat([a, b], ignore_index=True)), "m")
    dead = [r for r in rows if r["group"].startswith("lr=8")]
    assert dead and all(r["verdict"] == NOT_TESTABLE for r in dead), [(r["claim_id"], r["verdict"]) for r in dead]
    assert {r["claim_id"] for r in dead} >= {"ldl.attention_to_one", "ldl.time_vs_L", "ldl.phases", "ldl.mean_field"}
    assert all("every run of this setting was left out (30 of 30 runs left out (30 diverged))" in r["reason"]
               for r in dead)
    assert not any("every run of this setting was left out" in r["reason"] for r in rows if r["group"].startswith("lr=5"))


# ----------------------------------------------------------------------------- the whole set

def tables_for(df):
    """The tables verdicts() reads, from a joined frame of one model's runs."""
    run_cols = ["run_id", "model", "model_kind", "optimizer", "lr", "token_kind", "task_kind", "c", "L", "seed", "K",
                "N", "delta", "probs", "noise", "features", "M", "batch_size"]
    th_cols = ["run_id", "L_star", "L_split", "mf_step"]
    summ = df.drop(columns=[c for c in run_cols + th_cols if c != "run_id"])
    empty_curves = pd.DataFrame({"run_id": pd.Series(dtype=str), "epoch": pd.Series(dtype=int),
                                 "metric": pd.Series(dtype=str), "value": pd.Series(dtype=float)})
    return {"runs": df[run_cols], "summary": summ, "theory": df[th_cols], "curves": empty_curves,
            "theory_curves": empty_curves}


def test_one_verdict_per_setting_and_every_label_names_it():
    a, b = runs(lr=5.0), runs(lr=8.0, seed=1)
    b["run_id"] = b["run_id"] + "-b"
    rows = C.verdicts(tables_for(pd.concat([a, b], ignore_index=True)), "m")
    att = [r for r in rows if r["claim_id"] == "ldl.attention_to_one"]
    assert [r["group"] for r in att] == ["lr=5", "lr=8"]
    assert all(r["group"].startswith(("lr=5", "lr=8")) for r in rows if r["claim_id"] != "ldl.step_size")
    assert list(claims.table("e", rows).columns) == claims.COLUMNS


def test_diverged_and_unstable_runs_are_counted_in_the_measurement():
    df = runs()
    df.loc[0, "diverged"] = True
    df.loc[1, "final_train_loss"] = 2 * df.loc[1, "loss0"]
    rows = C.verdicts(tables_for(df), "m")
    att = one([r for r in rows if r["claim_id"] == "ldl.attention_to_one"])
    assert "2 of 18 runs left out (1 diverged, 1 ended above its initial loss)" in att["measurement"]


def test_domain_names_the_broken_assumption():
    assert "δ = 0.89 ≥ min p_k = 0.25" in C.domain(runs())
    skewed = runs().assign(N=2000, probs="[0.4, 0.3, 0.2, 0.1]")
    assert "δ = 0.20 ≥ min p_k = 0.10 (K = 4, N = 2000)" in C.domain(skewed)
    big = runs().assign(N=2000)
    assert C.domain(big) == "" and "K = 4 < 1/ε = 10" in C.domain(big, eps=0.1)


def _law_fits(rates, ends, jitter, seeds, T=400):
    """icl.tables.phases.fit of one trace per seed whose own logit grows at rates[i] until ends[i],
    each seed's clock exp(jitter·N(0, 1)) times faster (as seeds' prompts make it), and their spread."""
    from icl.tables.phases import fit, spread
    g = np.random.default_rng(3)
    t = np.arange(T + 1, dtype=float)
    zs = []
    for _ in seeds:
        k = float(np.exp(jitter * g.standard_normal()))
        r = np.array([rates[np.searchsorted([e / k for e in ends], x, side="right")] * k for x in t[:-1]])
        zs.append(np.concatenate([[0.0], np.cumsum(r)]))
    return [fit(t, z).rms for z in zs], spread(zs)


def test_a_count_decides_only_where_the_counter_has_the_power_to(monkeypatch):
    """No table decides a phase claim: the counter's power is the share of the runs' own sampled-count
    flows (theory.parquet's flow_phase_rms_sampled) that, counted as the runs are (within the seeds'
    spread), show the predicted phases. Where the sharp flows show two (as LDL's own flow does, test_phases),
    the sharp row reads not testable with that power, though the runs' counts are the predicted ones,
    and the flat row is judged; where the flows show three, both are judged; without a counted flow
    the rows say so."""
    monkeypatch.setattr(C.phases, "power", REAL_POWER)
    df = runs(seeds=FIVE, N=1600).assign(L_star=ldl.L_star(K, 1600, D), L_split=ldl.L_star(K, 1600, D))
    sharp = (C.regimes(df) == "sharp").to_numpy()
    df = df.assign(n_phases=np.where(sharp, 3, 2))
    two, w2 = _law_fits([0.1, 0.02], [100], 0.03, FIVE)
    three, w3 = _law_fits([0.2, 0.05, 0.01], [50, 200], 0.03, FIVE)
    seed_of = df["seed"].to_numpy()
    both_two = df.assign(flow_phase_rms_sampled=[two[s] for s in seed_of], phase_spread=w2)
    rows = C.phases_claim(setting(both_two))
    assert one(rows, "flat")["verdict"] != NOT_TESTABLE
    assert one(rows, "sharp")["verdict"] == NOT_TESTABLE and "shows 3 phases in 0%" in one(rows, "sharp")["reason"]
    assert one(rows, "sharp")["value"] == 1.0                          # what the runs show is kept beside it
    assert "the counter's power 100% on the theory's own flows" in one(rows, "flat")["measurement"]
    flows = [three[s] if sh else two[s] for s, sh in zip(seed_of, sharp)]
    spreads = np.where(sharp, w3, w2)
    rows = C.phases_claim(setting(df.assign(flow_phase_rms_sampled=flows, phase_spread=spreads)))
    assert all(r["verdict"] != NOT_TESTABLE for r in rows), rows
    # without a flow (or a spread to count it within) there is no power to measure: said, not guessed
    rows = C.phases_claim(setting(df.assign(phase_spread=w2)))
    assert all(r["verdict"] == NOT_TESTABLE and "run has a counted flow" in r["reason"]
               and "without a counted flow" in r["reason"] for r in rows)


def test_eq4_is_flagged_where_the_label_gap_saturates_and_the_L_claims_leave_those_runs_out():
    """Eq. 4 (|f(v_k) − f(v_k')| = Θ(L)Δ) measured per run (theory.parquet's eq4_ratio): the
    shape family at LΔ ≤ 6 keeps ≥ 0.78 of its small-LΔ gap per unit LΔ and is not flagged; a run
    whose gap has saturated (< ½) is named in `domain`, left out of the L-claims and counted, and
    a setting with no run inside reads not testable there, while the other claims still read it."""
    df = runs()
    df["eq4_ratio"] = [ldl.cosine_eq4_ratio(L, D, 15) for L in df["L"]]
    assert df["eq4_ratio"].min() > 0.75 and "Eq. 4" not in C.domain(df)
    sat = df.assign(eq4_ratio=np.where(df["L"] >= 2.0, 0.3, df["eq4_ratio"]))
    assert "Eq. 4 at L = 2 (Δ = 3)" in C.domain(sat)
    rows = C.verdicts(tables_for(sat), "m")
    lrows = [r for r in rows if r["claim_id"] in C.L_CLAIMS]
    assert lrows and all("Eq. 4 at L = 2" in r["domain"] for r in lrows)
    # the setting's one statement says it in full, once, for every row of the setting
    assert all("Eq. 4 (label gap = Θ(L)Δ) fails at L = 2 (Δ = 3): the gap per unit LΔ is 0.30" in r["setting_hypotheses"]
               for r in lrows)
    assert all("3 runs outside Eq. 4's domain left out" in r["measurement"] for r in lrows)
    rows = C.verdicts(tables_for(df.assign(eq4_ratio=0.3)), "m")
    lrows = [r for r in rows if r["claim_id"] in C.L_CLAIMS]
    assert {r["claim_id"] for r in lrows} == set(C.L_CLAIMS)
    assert all(r["verdict"] == NOT_TESTABLE and "outside Eq. 4's domain" in r["reason"] for r in lrows)
    att = [r for r in rows if r["claim_id"] == "ldl.attention_to_one"]      # still read: Eq. 4 is a hypothesis of it
    assert att and all("Eq. 4 fails" in r["reason"] and np.isfinite(r["value"]) for r in att)


def test_the_report_says_which_claims_their_band_decides():
    """Issue 28 item 3: per claim, the share of its decided rows that are fragile, and a claim decided
    mostly by its band says so in its header (icl.report.page.claim_robustness). Runs 6.5% above the
    balanced curve, a sampled-count bias of 3% and seeds 1% apart: two of three L read does not hold,
    and both read otherwise with the band half again as wide. attention_to_one on the same runs
    is decided by the data."""
    from icl.report.page import claim_robustness
    df = runs(Ls=(0.2, 0.3, 0.5), seeds=FIVE)
    cur, mf = mf_tables(df, np.exp(0.065), spread=0.01, bias=0.03)
    s = setting(df, curves=cur, theory_curves=mf)
    rows = robust(C.mean_field, s, uses=("band",)) + robust(C.attention_to_one, s, uses=("band",))
    tab = claims.table("e", rows)
    mf_rows = tab[(tab["claim_id"] == "ldl.mean_field") & (tab["scope"] == "setting")]
    decided = mf_rows[mf_rows["verdict"] == FAILS]         # the band is the median's spread: one L reads inconclusive
    assert len(decided) == 2 and decided["fragile"].str.contains("band half again as wide: inconclusive").all()
    got = claim_robustness(tab)
    assert got["ldl.mean_field"]["decided"] == 2 and got["ldl.mean_field"]["share"] == 1.0
    assert got["ldl.mean_field"]["header"].startswith("decided mostly by its band: 2 of 2")
    assert got["ldl.attention_to_one"]["header"] == "" and got["ldl.attention_to_one"]["text"].startswith("0 of 1")


# ----------------------------------------------------------------------------- the third column: LDL's own flow

FLOW_EPOCHS = np.unique(np.r_[0, np.round(np.geomspace(1, 4e5, 600))]).astype(int)   # a sparse logging grid


def power_time(L, x, a, tau=5.0):
    """When a loss loss₀(1 + tL²/τ)^−a falls to x·loss₀: the late power law t^−a that LDL's flow
    shows (the issue measured a ≈ 1.15-1.25), faster at larger L."""
    return tau / L ** 2 * (x ** (-1 / a) - 1)


def flow_tables(df, a=1.2, bias=0.02):
    """theory_curves for df's runs: the balanced flow's loss loss₀(1 + tL²/τ)^−a, its own attention
    as Lemma 1 links it (1 − Attn_own = (1 − 1/K)·sqrt(loss/loss₀)), the sampled-count flow `bias`
    above it in log, on FLOW_EPOCHS."""
    parts = []
    for r in df.itertuples():
        loss = r.uniform_train_loss * (1 + FLOW_EPOCHS * r.L ** 2 / 5.0) ** -a
        own = 1 - (1 - 1 / K) * np.sqrt(loss / loss[0])
        for metric, v in (("mean_field_loss", loss), ("mean_field_attn_own", own),
                          ("mean_field_loss_sampled", loss * np.exp(bias))):
            parts.append(pd.DataFrame({"run_id": r.run_id, "epoch": FLOW_EPOCHS, "metric": metric, "value": v}))
    return pd.concat(parts, ignore_index=True)


def runs_like_the_flow(a, seeds=FIVE, noise=0.05):
    """Runs whose crossing times follow a power law t^−a with 5% noise between runs (the flow's
    at a = 1.2; the attention at each crossing as Lemma 1 links it)."""
    df = runs(seeds=seeds)
    g = np.random.default_rng(11)
    for tcol in ("t_rel_1e-1", "t_rel_1e-2", "t_rel_1e-3"):
        x = float(tcol.split("_")[-1])
        df[tcol] = power_time(df["L"], x, a) * np.exp(noise * g.standard_normal(len(df)))
    return df


def test_the_flow_is_measured_as_the_tables_step_measures_a_run():
    df = runs(seeds=(0,))
    fr = C.flow.flow_runs(setting(df, theory_curves=flow_tables(df)))
    want = power_time(df["L"].to_numpy(), 1e-2, 1.2)
    assert np.allclose(fr["t_rel_1e-2"].to_numpy(float), want, rtol=0.02)      # interpolated on a sparse grid
    assert np.allclose(fr["loss0"], df["uniform_train_loss"]) and not fr["diverged"].any()
    assert np.allclose(fr["attn_at_t_rel_1e-2"], 1 - (1 - 1 / K) * 0.1, atol=1e-3)
    assert C.flow.flow_runs(setting(df)) is None                                # no flow: no reading


@pytest.mark.parametrize("a_runs,against", [(1.2, "theorem"), (0.8, "dynamics")])
def test_a_failing_beta_says_whether_the_runs_follow_the_flow(a_runs, against):
    """β of a power law t^−a is ≈ 2/a: 1.7 at the flow's a = 1.2, outside both regimes' bands. Runs
    that decay as the flow does fail against the theorem; runs that decay as t^−0.8 (β ≈ 2.5) fail
    against the flow too."""
    df = runs_like_the_flow(a_runs)
    s = setting(df, theory_curves=flow_tables(df))
    rows = C.flow.with_flow(robust(C.time_vs_eps, s), C.time_vs_eps, s)
    for r in rows:
        assert r["verdict"] == FAILS, r
        assert 1.6 < r["flow_value"] < 1.85 and r["flow_lo"] <= r["flow_value"] <= r["flow_hi"]
        assert r["against"] == against
        said = "disagrees with its own mean-field dynamics, which the runs follow" if against == "theorem" else \
            "the runs disagree with the theory's own mean-field dynamics too"
        assert said in r["reason"] and claims.fmt(r["flow_value"]) in r["reason"]
    assert list(claims.table("e", rows)["against"]) == [against, against]


def test_a_row_that_holds_keeps_the_flows_reading_and_no_against():
    df = runs(seeds=FIVE)                       # times from the theorems' own T: β in the bands
    s = setting(df, theory_curves=flow_tables(df))
    rows = C.flow.with_flow(robust(C.time_vs_eps, s), C.time_vs_eps, s)
    # the sharp runs' β sits at the band's edge (T with its log factor is one end of it): inconclusive
    assert [r["verdict"] for r in rows] == [HOLDS, UNSURE], rows
    assert all(np.isfinite(r["flow_value"]) and r["against"] is None for r in rows)
    plain = C.time_vs_eps(setting(df))          # no flow written: the columns stay empty
    assert all(np.isnan(r["flow_value"]) and r["against"] is None for r in plain)


def test_the_flow_slope_against_L_sits_beside_the_runs():
    """time_vs_L on the flow: the power law's crossing times ∝ 1/L², so the flow's slope is −2."""
    df = runs_like_the_flow(1.2)
    sL = setting(df, theory_curves=flow_tables(df))
    rows = C.flow.with_flow(C.time_vs_L(sL, tcols=("t_rel_1e-2",)), C.time_vs_L, sL)
    for r in rows:
        assert np.isclose(r["flow_value"], -2.0, atol=0.02), r


def test_a_slope_the_clock_rule_fixes_is_not_evidence():
    """Issue 35 item 3: under lr_rule: clock (ldl_phase_diagram) T1 and the relative crossing times are
    the same at every L by construction: phase_one and time_vs_L read not testable, saying so, with
    the slope in epochs kept as the row's value; the same runs with a step that does not follow a
    rule are judged (test_runs_on_the_measured_clock_are_not_failed_for_the_constant_inside_theta)."""
    clk = on_clock(gap_power=1.0, loss0_from_gap=False)
    assert one(C.phase_one(setting(clk)))["verdict"] == HOLDS                          # no rule: judged
    ruled = clk.assign(lr_rule="clock")
    p1 = one(C.phase_one(setting(ruled)))
    assert p1["verdict"] == NOT_TESTABLE and "lr_rule: clock" in p1["reason"] and "by construction" in p1["reason"]
    assert p1["measurement"].startswith(f"slope in epochs {p1['value']:.2f}")
    tv = one(C.time_vs_L(setting(ruled), tcols=("t_rel_1e-2",)), "sharp, relative 1e-2")
    assert tv["verdict"] == NOT_TESTABLE and "η·t" in tv["reason"]
    # β compares two crossings of one run: the clock's time scale cancels, and it is judged as before
    judged = lambda df: [(r["verdict"], r["reason"]) for r in C.time_vs_eps(setting(df))]
    assert judged(runs(seeds=FIVE).assign(lr_rule="clock")) == judged(runs(seeds=FIVE))
    assert judged(runs(seeds=FIVE))[0][0] == HOLDS


def test_prop1_is_judged_on_runs_at_its_precondition_and_another_model_is_an_extension():
    """Issue 35 item 4: block runs at lr 0.1 ended at 0.078-0.43× uniform attention's loss, far from
    the O(ε²) Proposition 1 assumes: not testable, counted; where some reached it, the others are left
    out and counted. A claim about LDL's model judged on the block carries `.ext` in its id."""
    blk = runs(kind="transformer_block", c=0.5)
    r = one(C.unseen_functions(setting(blk)))
    assert r["claim_id"] == "ldl.unseen_functions.ext" and r["claim"] == claims.CLAIMS["ldl.unseen_functions"]
    assert one(C.unseen_functions(setting(runs(c=0.5))))["claim_id"] == "ldl.unseen_functions"
    far = blk.assign(final_train_loss=blk["uniform_train_loss"] * np.linspace(0.078, 0.43, len(blk)))
    r = one(C.unseen_functions(setting(far)))
    assert r["verdict"] == NOT_TESTABLE and "precondition" in r["reason"] and "0.078–0.43×" in r["reason"]
    eight = runs(kind="transformer_block", c=0.5, seeds=EIGHT)      # the median's interval is over seeds: eight
    some = eight.assign(final_train_loss=np.where(eight["seed"] == 0, 0.2, 1e-3) * eight["uniform_train_loss"])
    r = one(C.unseen_functions(setting(some)))
    assert r["verdict"] == HOLDS and "6 of 48 runs did not reach Prop. 1's precondition" in r["measurement"]
    assert claims.base_id("ldl.time_vs_L.ext") == "ldl.time_vs_L"
    with pytest.raises(ValueError, match="unknown claim id"):
        claims.verdict("ldl.nothing.ext", HOLDS, prediction="p", measurement="m", ci_lo=0, ci_hi=1)


def test_every_row_names_the_hypotheses_its_setting_breaks():
    """Issue 35 items 5, 7: δ ≥ p_k makes Eq. 9's lower bound vacuous (not an empty set), and K < 1/ε
    at the claims' ε = 0.1 and N < K³ are named in the domain of every row of the setting."""
    from icl.analyse.claims.ldl.hypotheses import setting_statement
    r = one(C.attention_to_one(setting(runs())))
    assert "δ = 0.89 ≥ min p_k = 0.25" in r["domain"]           # in short; the setting's statement in full:
    said = setting_statement(runs())
    assert "fails (0.28×): Eq. 9's lower bound (p_k − δ)N ≤ 0 is vacuous" in said and "empty" not in said
    assert "K = 4 < 1/ε = 10" in r["domain"] and "N = 100 < K³ = 64" not in r["domain"]
    small = runs().assign(N=50)
    assert "N = 50 < K³ = 64" in one(C.attention_to_one(setting(small)))["domain"]


@pytest.mark.parametrize("power,expect", [(-1.2, HOLDS), (1.0, FAILS)])
def test_absolute_threshold_band_reads_lemma_1s_prefactor(power, expect):
    """Issue 35 item 2: loss₀ grows as L^1.3 (Lemma 1's L²Δ² prefactor, saturating), so at one absolute
    threshold 10⁻³ a larger L must reach a smaller share of its start: with ε² = the loss / loss₀ the
    sharp T ∝ log(·)/(ηεL²) has slopes −1.35 to −0.99, with ε² = the loss −2 to −1.84 (the old band);
    runs at −1.2 hold (and hold on attention's reading), a slope of +1 fails both."""
    df = runs(Ls=(0.5, 1.0, 2.0, 3.0), seeds=FIVE)
    loss0 = 0.05 * df["L"] ** 1.3
    g = np.random.default_rng(21)
    df = df.assign(loss0=loss0, uniform_train_loss=loss0, final_train_loss=1e-4 * loss0,
                   **{"t_abs_1e-3": 200 * df["L"] ** power * np.exp(0.03 * g.standard_normal(len(df))),
                      "attn_at_t_abs_1e-3": 1 - (1 - 1 / K) * np.sqrt(1e-3 / loss0)})
    r = one(C.time_vs_L(setting(df), tcols=("t_abs_1e-3",)), "sharp, absolute 1e-3")
    assert r["verdict"] == expect, r
    assert "ε² = the loss -2.00 to -1.84; ε² = the loss / loss₀ -1.35 to -0.99" in r["prediction"]


def test_mean_field_needs_five_seeds_and_a_row_the_scale_identity_repeats_is_reported_once():
    """Issue 35 item 6: ldl_stability's lr 1, L 1 and lr 100, L 0.1 are one dynamics under the scale
    identity (ηL² = 1 both; +0.043 [0.021, 0.081] twice): the second reads not testable and points at
    the first; a mean-field row over 3 seeds is inconclusive, saying why."""
    a = runs(Ls=(0.1, 1.0), seeds=FIVE, c=0.5, lr=1.0)
    b = runs(Ls=(0.1, 1.0), seeds=FIVE, c=0.5, lr=100.0, seed=1)
    b["run_id"] = b["run_id"] + "-b"
    df = pd.concat([a, b], ignore_index=True)
    cur, mf = mf_tables(df, 1.0)
    tabs = {**tables_for(df), "curves": cur, "theory_curves": mf}
    rows = [r for r in C.verdicts(tabs, "m") if r["claim_id"] == "ldl.mean_field"]
    top = {r["group"]: r for r in rows if r["scope"] == "setting"}
    assert top["lr=1; L=1"]["verdict"] != NOT_TESTABLE and np.isfinite(top["lr=1; L=1"]["ci_lo"])
    dup = top["lr=100; L=0.1"]
    assert dup["verdict"] == NOT_TESTABLE and "the same dynamics as the row 'lr=1; L=1'" in dup["reason"]
    assert "ηL² = 1 in both" in dup["reason"]
    assert NOT_TESTABLE not in (top["lr=1; L=0.1"]["verdict"], top["lr=100; L=1"]["verdict"])   # ηL² = 0.01, 100
    assert not [r for r in rows if r["scope"] == "run" and r["group"].startswith("lr=100; L=0.1")]
    assert len([r for r in rows if r["scope"] == "run"]) == 15
    three = a[(a["seed"] < 3) & (a["L"] == 1.0)]
    cur3, mf3 = mf_tables(three, 1.0)
    r = one([r for r in C.mean_field(setting(three, curves=cur3, theory_curves=mf3)) if r["scope"] == "setting"])
    assert r["verdict"] == UNSURE and r["reason"] == "3 seeds: an interval over seeds needs at least 5"


def test_the_llc_reads_the_phase_claim_as_a_second_instrument():
    """train.llc's stages (summary llc_stages) give each regime a second row, judged like the
    counter's, that says where the two instruments agree. Stages equal to the counter's phases: both
    hold and agree on every run; a monotone λ̂ (one stage, as the default's short chains show) is
    inconclusive in either regime (no theorem makes λ̂'s stages LDL's phases, so it cannot refute
    them) and says how far the instruments part, on the counter's row too; runs without three
    usable λ̂ are counted, not read; no LLC, no row."""
    df = runs(seeds=EIGHT)
    rows = C.phases_claim(setting(df.assign(llc_stages=df["n_phases"])))
    assert [(r["group"], r["verdict"]) for r in rows] == [("flat", HOLDS), ("flat, by the LLC", HOLDS),
                                                         ("sharp", HOLDS), ("sharp, by the LLC", HOLDS)]
    n = int((df["L"] >= 0).sum())
    flat = one(rows, "flat, by the LLC")
    assert "agree on" in flat["reason"] and "stages" in flat["prediction"]
    mono = C.phases_claim(setting(df.assign(llc_stages=1)))
    for rg in ("flat", "sharp"):
        row = one(mono, f"{rg}, by the LLC")
        assert row["verdict"] == UNSURE and "agree on 0 of" in row["reason"], row
        assert one(mono, rg)["verdict"] == HOLDS and "by the LLC: the two instruments agree on 0 of" in one(mono, rg)["reason"]
    gaps = df.assign(llc_stages=pd.array(np.where(df["seed"] == 0, None, df["n_phases"]), dtype="Int64"))
    assert "runs without three usable λ̂" in one(C.phases_claim(setting(gaps)), "sharp, by the LLC")["measurement"]
    assert n and len(C.phases_claim(setting(df.assign(llc_stages=pd.array([None] * len(df), dtype="Int64"))))) == 2


def test_the_flow_reads_no_llc():
    """Lemma 2's flow has no weights to sample: beside the phase rows it gives its own count, beside
    the LLC's rows nothing (it once read the runs' own LLC columns back as the flow's)."""
    df = runs(seeds=EIGHT)
    df = df.assign(llc_stages=pd.array(np.where(df["L"] <= 0.5, 1, 2), dtype="Int64"))
    fits, w = _law_fits([0.1, 0.02], [100], 0.03, range(len(df)))       # the flow's own fits (theory.parquet)
    df = df.assign(flow_phase_rms=fits, phase_spread=w)
    s = setting(df, theory_curves=flow_tables(df))
    assert "llc_stages" not in C.flow.flow_runs(s)
    rows = C.flow.with_flow(C.phases_claim(s), C.phases_claim, s)
    llc_rows = [r for r in rows if r["group"].endswith("by the LLC")]
    assert llc_rows and all(np.isnan(r.get("flow_value", np.nan)) for r in llc_rows)
    assert any(np.isfinite(r.get("flow_value", np.nan)) for r in rows if not r["group"].endswith("by the LLC"))
