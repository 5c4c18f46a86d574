"""A theorem is charged only inside its hypotheses (icl.analyse.claims.ldl.hypotheses), rows a rule of the
experiment makes equal are reported once (clock_once), and shares over runs that share a seed are
counted over seeds (icl.stats.clustered_share_interval): each against numbers computed here by hand
or by Monte Carlo, and each made to flip."""
import math

import numpy as np
import pandas as pd
import pytest

from icl import stats
from icl.analyse.claims import FAILS, HOLDS, NOT_TESTABLE, verdict
from icl.analyse.claims import ldl as C
from icl.analyse.claims.ldl.hypotheses import STATEMENTS, charge, hypotheses
from icl.theory import ldl

from test_claims_ldl import EIGHT, logit_cols, runs, tables_for


def _slacks(df, eps):
    return {h.name: h.slack for h in hypotheses(df, eps)}


def test_each_hypothesis_is_stated_with_its_slack_at_unit_constants():
    """K = 4, N = 100 at ε = 0.1: K·ε = 0.4, N/K³ = 100/64, min p_k/δ = 0.25/sqrt(0.8); Eq. 4 and
    the step from theory.parquet's columns; N = 2000 meets δ < ¼ (δ = 0.2)."""
    df = runs().assign(eq4_ratio=0.8, mf_step=0.3)
    got = _slacks(df, 0.1)
    want = {"K ≥ 1/ε": 0.4, "N ≥ K³": 100 / 64, "δ < min p_k": 0.25 / math.sqrt(0.8), "Eq. 4": 1.6, "step": 1 / 0.3}
    assert got == pytest.approx(want)
    assert _slacks(df.assign(N=2000), 0.1)["δ < min p_k"] == pytest.approx(0.25 / 0.2)
    assert "K ≥ 1/ε" not in _slacks(df, None)               # a statement without an accuracy (Prop. 2)
    skew = df.assign(probs="[0.4, 0.3, 0.2, 0.1]", N=2000)       # the smallest p_k is the one that counts
    assert _slacks(skew, 0.1)["δ < min p_k"] == pytest.approx(0.1 / 0.2)
    assert hypotheses(df.assign(token_kind="gaussian", K=np.nan), 0.1) == []


def _row(v, **kw):
    base = dict(prediction="p", measurement="m", model="m", group="flat", ci_lo=0.6, ci_hi=0.9, value=0.7)
    if v != HOLDS:
        base["reason"] = "the interval lies outside the band"
    r = verdict("ldl.attention_to_one", v, **{**base, **kw})
    return r


def test_a_row_outside_reads_not_testable_naming_the_hypothesis_and_by_how_far():
    inside = runs(Ls=(0.1,), seeds=EIGHT).assign(N=2000, K=12, probs=None)       # δ = 0.14 < 1/12? no: 0.0833
    out = charge([_row(FAILS)], runs(Ls=(0.1,), seeds=EIGHT))
    r = out[0]
    assert r["verdict"] == NOT_TESTABLE and r["against"] is None and r["value"] == 0.7 and r["ci_lo"] == 0.6
    assert "outside Prop. 1's hypotheses" in r["reason"] and "K ≥ 1/ε fails (K = 4, 1/ε = 10" in r["reason"]
    assert "short by 2.5×" in r["reason"] and "the runs read 'does not hold'" in r["reason"]
    assert "K ≥ 1/ε: K = 4, 1/ε = 10, fails (0.4×)" in r["hypotheses"]
    # K = 12 at N = 200 000: δ = 0.035 < 1/12, N ≥ 1728, K ≥ 10: inside, the verdict stands
    big = inside.assign(K=12, N=200_000)
    r = charge([_row(HOLDS)], big)[0]
    assert r["verdict"] == HOLDS and "fails" not in r["hypotheses"]
    # K·ε = 1.2: inside at unit constants, outside with the constants doubled: fragile, said
    assert "the hypotheses' constants ×2: not testable" in r["fragile"]
    # K = 8: K·ε = 0.8, outside at unit constants, inside at half: the row would read 'holds' there
    r = charge([_row(HOLDS)], big.assign(K=8))[0]
    assert r["verdict"] == NOT_TESTABLE and r["fragile"] == "the hypotheses' constants ×0.5: holds"
    # a claim that is no theorem's statement (the mean-field comparison) is never charged
    mf = verdict("ldl.mean_field", HOLDS, prediction="p", measurement="m", ci_lo=0, ci_hi=0.1)
    assert charge([mf], runs())[0]["verdict"] == HOLDS


def test_the_runs_against_the_flow_is_still_said_outside_the_hypotheses():
    r = _row(HOLDS)
    r.update(flow_value=0.72, flow_lo=0.71, flow_hi=0.73)
    out = charge([r], runs())[0]
    assert out["verdict"] == NOT_TESTABLE and "the runs follow Lemma 2's flow" in out["reason"]
    r = _row(HOLDS)
    r.update(flow_value=0.2, flow_lo=0.2, flow_hi=0.2)
    assert "depart from Lemma 2's flow" in charge([r], runs())[0]["reason"]


def test_every_ldl_theorem_row_of_a_setting_states_its_hypotheses_and_the_default_sizes_are_outside():
    """At the paper's §6 sizes (K = 4, N = 100: δ = 0.89 ≥ ¼, K < 1/ε) every theorem row the runs
    would decide reads not testable; at N = 2000 (δ = 0.2 < ¼) the phase rows (ε = 1/K) are charged."""
    df = logit_cols(runs(seeds=EIGHT)).assign(epochs=400, phase_noise=0.0, t_phase_one=40.0, eq4_ratio=0.9)
    rows = [r for r in C.verdicts(tables_for(df), "m") if r["scope"] == "setting"]
    theorem = [r for r in rows if r["claim_id"] in STATEMENTS]
    assert theorem and all(r["hypotheses"] for r in theorem)
    assert all(r["verdict"] == NOT_TESTABLE for r in theorem), [(r["claim_id"], r["verdict"], r["reason"]) for r in theorem]
    big = df.assign(N=2000)
    big["L_star"] = big["L_split"] = ldl.L_star(4, 2000, 3.0)
    rows = [r for r in C.verdicts(tables_for(big), "m") if r["claim_id"] == "ldl.phases" and r["scope"] == "setting"]
    assert rows and all("δ < min p_k: δ = sqrt(20K/N) = 0.2, min p_k = 0.25, met" in r["hypotheses"] for r in rows)
    assert any("outside" not in r["reason"] for r in rows)


def _clock_tables(deltas=(1.5, 3.0), same=True):
    """Two settings (Δ) of runs under lr_rule: clock with their balanced flows: one curve for every
    L and Δ (same) or a slower one at the second Δ."""
    parts = []
    for i, D in enumerate(deltas):
        d = runs(seeds=EIGHT, seed=i).assign(delta=D, lr_rule="clock")
        d["run_id"] = d["run_id"] + f"-D{D}"
        parts.append(d)
    df = pd.concat(parts, ignore_index=True)
    ep = np.arange(0, 400, 10)
    tc = []
    for r in df.itertuples():
        rate = 0.02 if (same or r.delta == deltas[0]) else 0.005
        loss = r.uniform_train_loss * np.exp(-rate * ep)
        tc.append(pd.DataFrame({"run_id": r.run_id, "epoch": ep, "metric": "mean_field_loss", "value": loss}))
    tabs = tables_for(df.drop(columns="lr_rule"))
    tabs["runs"] = df[list(tabs["runs"].columns) + ["lr_rule"]]
    tabs["theory_curves"] = pd.concat(tc, ignore_index=True)
    return tabs


def test_settings_the_clock_makes_one_dynamics_are_reported_once():
    """Under lr_rule: clock the balanced flows of Δ = 1.5 and 3 are one curve: the second setting's
    dynamics rows read not testable pointing at the first; where the flows differ, both are read."""
    rows = [r for r in C.verdicts(_clock_tables(), "m") if r["scope"] == "setting"]
    second = [r for r in rows if r["group"].startswith("delta=3") and r["claim_id"] == "ldl.attention_to_one"]
    assert second and all(r["verdict"] == NOT_TESTABLE and "the same dynamics as the row 'delta=1.5'" in r["reason"]
                          for r in second)
    rows = [r for r in C.verdicts(_clock_tables(same=False), "m") if r["scope"] == "setting"]
    assert not any("the same dynamics as the row" in r["reason"] for r in rows if r["group"].startswith("delta=3"))


# ----------------------------------------------------------------------------- the seed as the unit

def test_clustered_share_reduces_to_the_exact_interval_at_its_two_ends():
    """One run per seed: Clopper–Pearson over the runs. Clusters that agree within and differ between
    (ρ = 1): Clopper–Pearson over the clusters."""
    hits = np.r_[np.ones(7), np.zeros(3)]
    rho, lo, hi = stats.clustered_share_interval(hits, np.arange(10))
    assert rho == 0.0 and (lo, hi) == pytest.approx(stats.clopper_pearson(7, 10))
    by_seed = np.repeat(hits, 4)                                   # each seed's four runs alike
    rho, lo, hi = stats.clustered_share_interval(by_seed, np.repeat(np.arange(10), 4))
    assert rho == pytest.approx(1.0) and (lo, hi) == pytest.approx(stats.clopper_pearson(7, 10))


def test_the_intra_seed_correlation_is_the_anova_estimate():
    """ρ by hand for 3 seeds of 4 runs, hits 4/4, 2/4, 0/4: p = ½, MSB = 4·(¼ + 0 + ¼)/2 = 1,
    MSW = 4·(0 + ¼ + 0)/9 = 1/9, ρ = (1 − 1/9)/(1 + 3/9) = 2/3, moved toward 1 by (1 − ρ)/3: 7/9;
    n_eff = 12/(1 + 3·7/9) = 3.6, 3 runs: the share's 1.5 of them taken as 1 below and 2 above."""
    hits = np.r_[np.ones(4), [1, 1, 0, 0], np.zeros(4)]
    rho, lo, hi = stats.clustered_share_interval(hits, np.repeat([0, 1, 2], 4))
    assert rho == pytest.approx(7 / 9)
    assert (lo, hi) == pytest.approx((stats.clopper_pearson(1, 3)[0], stats.clopper_pearson(2, 3)[1]))


def test_the_clustered_interval_covers_a_share_whose_runs_share_their_seed():
    """Monte Carlo: 6 seeds of 6 runs each; a seed's runs hit with its own probability p_s ~ Beta
    (mean 0.7, ρ = 0.5). The interval over seeds covers the mean in ≥ 94% of 400 experiments (95%
    less the Monte Carlo error), where treating the 36 runs as independent covers it far less often."""
    g = np.random.default_rng(3)
    a, b = 0.7, 0.3                               # Beta(0.7, 0.3): mean 0.7, ρ = 1/(a + b + 1) = 0.5
    seeds = np.repeat(np.arange(6), 6)
    cov_c = cov_i = 0
    for _ in range(400):
        p = g.beta(a, b, 6)
        hits = g.random(36) < p[seeds]
        _, lo, hi = stats.clustered_share_interval(hits, seeds)
        cov_c += lo <= 0.7 <= hi
        lo, hi = stats.clopper_pearson(int(hits.sum()), 36)
        cov_i += lo <= 0.7 <= hi
    assert cov_c / 400 >= 0.94 and cov_i / 400 < 0.85, (cov_c, cov_i)


# ----------------------------------------------------------------------------- the flow inside the hypotheses

def _flow_runs(K, law, Ls=(2.0, 3.0, 4.0)):
    """Runs of one setting at K with their balanced flow in theory_curves: `law` 'log' makes the flow's
    relative loss cross x at τ·log(K/sqrt(x)) (Theorem 1's T ∝ log(K/ε) exactly: an exponential decay
    from K² of its start), 'power' a late power law (1 + t/τ)^−1.2 (what LDL's flow shows)."""
    df = runs(Ls=Ls, seeds=(0, 1)).assign(K=K, d=64)
    ep = np.arange(0, 3001)
    parts = []
    for r in df.itertuples():
        tau = 40.0 / r.L
        rel = np.minimum(1.0, K ** 2 * np.exp(-2 * ep / tau)) if law == "log" else (1 + ep / tau) ** -1.2
        own = 1 - (1 - 1 / K) * np.sqrt(rel)
        for metric, v in (("mean_field_loss", r.uniform_train_loss * rel), ("mean_field_attn_own", own),
                          ("mean_field_loss_sampled", r.uniform_train_loss * rel)):
            parts.append(pd.DataFrame({"run_id": r.run_id, "epoch": ep, "metric": metric, "value": v}))
    return df, pd.concat(parts, ignore_index=True)


@pytest.mark.parametrize("K,law,rate", [(64, "log", HOLDS), (64, "power", FAILS), (4, "log", None)])
def test_beta_on_the_balanced_flow_is_an_observation(K, law, rate):
    """The balanced flow's β between 10⁻¹ and the finest threshold with ε = sqrt(x) ≥ 1/K is measured
    (a flow whose T is log(K/ε) exactly reads Theorem 1's own β; a power-law flow reads β ≈ 1.7) but
    never judged against the bound: the balanced flow is the δ → 0 limit, where the bound is infinite,
    and a local exponent cannot contradict a bound (icl.analyse.claims.ldl.bound judges its constant).
    At K = 4 no finer accuracy is inside K ≥ 1/ε."""
    from icl.analyse.claims.ldl.flow_domain import flow_beta, theorem_beta
    df, tc = _flow_runs(K, law)
    r = one(flow_beta(C.Setting("m", "", df, theory_curves=tc)))
    assert r["verdict"] == NOT_TESTABLE and r["against"] is None, r
    assert r["domain"] == ""                 # a flow's row never carries the runs' domain (N = 100 < K³)
    if rate == HOLDS:
        assert r["ci_hi"] == pytest.approx(theorem_beta(K, 0.1, 1e-3), abs=0.01)
        assert "a bound is judged as a bound" in r["reason"] and "would be 'holds'" in r["reason"]
    if rate == FAILS:
        assert 1.5 < r["ci_lo"] < 1.9 and "would be 'does not hold'" in r["reason"]
    if rate is None:
        assert "K = 4 < 1/ε = 10" in r["reason"]
    assert charge([dict(r)], df)[0]["verdict"] == NOT_TESTABLE


def one(rows):
    assert len(rows) == 1, rows
    return rows[0]


def test_one_statement_per_setting_with_each_hypothesis_met_or_failing():
    """Issue 62.3: the setting's one statement, which the page shows once and every row refers to:
    K = 4 admits ε ≥ ¼ (a claim at ε = 0.1 is outside); N = 2000 meets N ≥ K³ (31.2×) and δ = 0.2 <
    ¼ (1.25×); Eq. 4 fails at L = 2, 3 (Δ = 6) where the ratio is 0.3, and those L are named."""
    from icl.analyse.claims.ldl.hypotheses import setting_statement
    df = runs(Ls=(0.5, 2.0, 3.0)).assign(N=2000, delta=6.0, mf_step=0.3)
    df["eq4_ratio"] = np.where(df["L"] >= 2, 0.3, 0.9)
    said = setting_statement(df)
    assert said.startswith("K ≥ 1/ε: met for accuracies ε ≥ 1/K = 0.25 (K = 4), so a claim read at ε = 0.1 is outside;")
    assert "N ≥ K³: N = 2000, K³ = 64, met (31.2×)" in said
    assert "δ < min p_k: δ = sqrt(20K/N) = 0.2, min p_k = 0.25, met (1.25×)" in said
    assert "Eq. 4 (label gap = Θ(L)Δ) fails at L = 2, 3 (Δ = 6): the gap per unit LΔ is 0.30" in said
    # K = 12, every L inside Eq. 4: inside at ε = 0.1, nothing fails
    ok = setting_statement(df.assign(K=12, N=200_000, eq4_ratio=0.9))
    assert "so a claim read at ε = 0.1 is inside" in ok and "fails" not in ok
    assert setting_statement(df.assign(K=np.nan)) == ""


def test_a_description_that_says_inside_is_held_to_the_statements():
    """A page whose description says 'inside the theorems' hypotheses' while a setting's statement
    says one fails is flagged (the report lists it with its prose problems); the same description
    qualified, or settings inside, are not."""
    from icl.report.prose import against_hypotheses
    said = [("delta=3, N=1600", "K ≥ 1/ε: met for accuracies ε ≥ 1/K = 0.25 (K = 4), so a claim read at ε = 0.1 is "
                                "outside; N ≥ K³: N = 1600, K³ = 64, met (25×)")]
    (p,) = against_hypotheses("Phase diagram inside the theorems' hypotheses (K = 4)", said)
    assert "at delta=3, N=1600 K ≥ 1/ε fails" in p
    assert against_hypotheses("Phase diagram inside the theorems' hypotheses on N (K = 4)", said) == []
    assert against_hypotheses("Phase diagram inside the theorems' hypotheses", [("x", "N ≥ K³: met (25×)")]) == []


def test_a_setting_over_several_K_is_stated_and_checked_without_breaking_the_page():
    """ldl_flow_K's settings hold K = 8 to 64: the statement names the smallest K and says larger K
    admit smaller ε, in one clause (the page splits the statement at '; '); the description check
    reads it (it broke paper.yaml's smoke report once, on a clause without a colon)."""
    from icl.analyse.claims.ldl.hypotheses import setting_statement
    from icl.report.prose import against_hypotheses
    df = pd.concat([runs().assign(K=k, N=256) for k in (8, 16, 32, 64)], ignore_index=True)
    said = setting_statement(df)
    assert said.startswith("K ≥ 1/ε: met for accuracies ε ≥ 1/K = 0.125 (K = 8, larger K admitting smaller ε), "
                           "so a claim read at ε = 0.1 is outside;")
    assert "N ≥ K³: N = 256, K³ = 262144, fails" in said
    (p,) = against_hypotheses("Theorem 1 inside its hypotheses", [("L=2", said)])
    assert p.endswith("K ≥ 1/ε, N ≥ K³, δ < min p_k fail"), p
    for bad in ("no colon here fails", "x is outside; y", ""):       # any text: a line or nothing, never an error
        assert isinstance(against_hypotheses("inside the theorems' hypotheses", [("s", bad)]), list)
