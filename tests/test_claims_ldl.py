"""Each LDL claim function on small synthetic tables built to make it hold, fail, be
inconclusive and (where that applies) be not testable: a verdict no table can flip is a defect."""
import numpy as np
import pandas as pd
import pytest

from icl import claims
from icl.claims import FAILS, HOLDS, NOT_TESTABLE, UNSURE
from icl.claims import ldl as C
from icl.measures import logit_dynamics
from icl.theory import ldl

K, N, D = 4, 100, 3.0
LSTAR = ldl.L_star(K, N, D)                     # 0.373


def runs(Ls=(0.1, 0.2, 0.3, 0.6, 1.0, 2.0), seeds=(0, 1, 2), kind="softmax_q", opt="gd", c=None, lr=1.0, **cols):
    """One model's runs: c tied to L (shape-changing task) unless c is given."""
    rows = []
    for L in Ls:
        for s in seeds:
            rows.append({"run_id": f"r{L}-{s}", "model": "m", "model_kind": kind, "optimizer": opt, "lr": lr,
                         "token_kind": "discrete", "task_kind": "cosine", "c": L if c is None else c, "L": L,
                         "seed": s, "K": K, "N": N, "delta": D, "probs": None, "L_star": LSTAR, "loss0": 0.5 * L**2,
                         "clock_per_epoch": L**2, "diverged": False})
    df = pd.DataFrame(rows)
    for k, v in cols.items():
        df[k] = v
    return df


def one(rows):
    assert len(rows) == 1, rows
    return rows[0]


def test_a_verdict_needs_a_reason_and_a_known_claim():
    with pytest.raises(ValueError, match="needs a reason"):
        claims.verdict("ldl.phases", FAILS, prediction="p", measurement="m")
    with pytest.raises(ValueError, match="unknown claim id 'ldl.nope'"):
        claims.verdict("ldl.nope", HOLDS, prediction="p", measurement="m")
    t = claims.table("e", [claims.verdict("ldl.phases", HOLDS, prediction="p", measurement="m")])
    assert list(t.columns) == claims.COLUMNS and t["claim_id"].tolist() == ["ldl.phases"]


@pytest.mark.parametrize("own,expect", [(0.97, HOLDS), (0.3, FAILS), (None, UNSURE)])
def test_attention_to_one(own, expect):
    df = runs()
    df["attn_own_final"] = own if own is not None else np.where(df["L"] < 0.5, 0.6, 0.99)
    assert one(C.attention_to_one(df, "m"))["verdict"] == expect
    cont = df.assign(token_kind="gaussian")
    assert one(C.attention_to_one(cont, "m"))["verdict"] == NOT_TESTABLE


def logits(R, own_rise, off_change, wiggle=0.0, epochs=10):
    """q (R, E, K, K): own logits rise by own_rise, off-diagonal ones change by off_change,
    linearly (plus a ±wiggle zig-zag on the off-diagonal ones)."""
    e = np.arange(epochs)[None, :, None, None] / (epochs - 1)
    eye = np.eye(K)[None, None]
    zig = wiggle * (-1.0) ** np.arange(epochs)[None, :, None, None] * (1 - eye)
    return np.broadcast_to(e * (own_rise * eye + off_change * (1 - eye)) + zig, (R, epochs, K, K)).copy()


def with_logits(df, q):
    return df.assign(**logit_dynamics(q))


def test_logit_dynamics_per_run():
    q = logits(2, 3.0, -1.0)
    q[1, :, 0, 1] *= -1                                # run 1: one off-diagonal logit rises
    q[1, 3, 2, 3] += 0.5                               # ... and one zig-zags once
    d = logit_dynamics(q)
    np.testing.assert_allclose(d["qoff_rate"], [1 / 3, 1 / 3])
    np.testing.assert_allclose(d["qoff_fell"], [1.0, 11 / 12])
    np.testing.assert_allclose(d["qoff_oscillates"], [0.0, 1 / 12])


def test_offdiag_logits():
    df = runs()
    R = len(df)
    r = one(C.offdiag_logits(with_logits(df, logits(R, 3.0, -1.0)), "m"))
    assert r["verdict"] == HOLDS and r["value"] == pytest.approx(1 / 3)
    assert "the increments of 0% change sign" in r["measurement"]
    assert one(C.offdiag_logits(with_logits(df, logits(R, 3.0, +1.0)), "m"))["verdict"] == FAILS     # they rise
    assert one(C.offdiag_logits(with_logits(df, logits(R, 1.0, -2.0)), "m"))["verdict"] == FAILS     # faster than own
    assert one(C.offdiag_logits(with_logits(df, logits(R, 0.0, -1.0)), "m"))["verdict"] == UNSURE    # own did not move
    half = np.concatenate([logits(9, 3.0, -1.0), logits(R - 9, 3.0, 0.5)])
    assert one(C.offdiag_logits(with_logits(df, half), "m"))["verdict"] == UNSURE                     # only half fell
    osc = one(C.offdiag_logits(with_logits(df, logits(R, 3.0, -1.0, wiggle=0.5)), "m"))
    assert "the increments of 100% change sign" in osc["measurement"]
    assert one(C.offdiag_logits(df, "m"))["verdict"] == NOT_TESTABLE                                  # none logged


def with_times(df, factor=1.0, power=None, noise=0.02, seed=0):
    """Crossing times from the theorems' T at each run's ε (times a constant), or ∝ L^power."""
    g = np.random.default_rng(seed)
    reg = C.regimes(df)
    out = df.copy()
    for tcol in ("t_rel_1e-1", "t_rel_1e-2", "t_rel_1e-3", "t_abs_1e-3"):
        T = 7.0 * fits_T(df, reg, tcol) if power is None else 50 * df["L"].to_numpy() ** power
        out[tcol] = factor * T * np.exp(noise * g.standard_normal(len(df)))
    return out


def fits_eps(df, tcol):
    from icl import fits
    return fits.eps_of(df, tcol)


def fits_T(df, reg, tcol):
    from icl import fits
    return fits.theory_time(df, reg, fits.eps_of(df, tcol))


def test_time_vs_L():
    df = with_times(runs())
    rows = C.time_vs_L(df, "m")
    assert [r["group"] for r in rows] == ["flat, relative 1e-2", "sharp, relative 1e-2",
                                          "flat, absolute 1e-3", "sharp, absolute 1e-3"]
    assert all(r["verdict"] == HOLDS for r in rows), rows
    flat = with_times(runs(), power=0.0)                         # T independent of L: the claim fails
    assert all(r["verdict"] == FAILS for r in C.time_vs_L(flat, "m"))
    assert "misses the theory's range" in C.time_vs_L(flat, "m")[0]["reason"]
    for seeds in ((0,), (0, 1)):                                 # fewer than three seeds: no interval
        assert all(r["verdict"] == UNSURE for r in C.time_vs_L(with_times(runs(seeds=seeds)), "m"))
    # without the log factor (its constant unknown) the power law alone still lies in the range
    pure = with_times(runs(), power=None)
    reg = C.regimes(pure)
    for tcol in ("t_rel_1e-2", "t_abs_1e-3"):
        eps = fits_eps(pure, tcol)
        pure[tcol] = 30 * pure["L"] ** -2 / np.where(reg == "sharp", eps, 1.0)
    assert all(r["verdict"] == HOLDS for r in C.time_vs_L(pure, "m"))
    few = with_times(runs(Ls=(0.1, 1.0, 2.0)))                   # one flat L: no slope there
    assert [r["verdict"] for r in C.time_vs_L(few, "m")][:2] == [UNSURE, HOLDS]


def test_time_claims_are_gd_only_and_yield_to_the_identity():
    adam = with_times(runs(opt="adam"))
    assert one(C.time_vs_L(adam, "m"))["verdict"] == NOT_TESTABLE
    assert "full-batch GD" in one(C.time_vs_L(adam, "m"))["reason"]
    fixed_c = with_times(runs(c=0.5))                             # labels scale with L: decided by the identity
    r = one(C.time_vs_L(fixed_c, "m"))
    assert r["verdict"] == NOT_TESTABLE and "GD at (η, L) is GD at (ηL², 1)" in r["reason"]
    assert one(C.time_vs_eps(fixed_c, pd.DataFrame(columns=["run_id", "epoch", "value"]), "m"))["verdict"] == NOT_TESTABLE
    block = with_times(runs(kind="transformer_block", c=0.5))      # not linear in the labels: testable
    assert all(r["verdict"] == HOLDS for r in C.time_vs_L(block, "m"))


def power_curves(df, a=1.0, epochs=200):
    """Train-loss curves loss0 · t^−a (loss0 at t = 0)."""
    t = np.arange(epochs + 1)
    return pd.DataFrame([(r.run_id, e, r.loss0 * max(e, 1) ** -a) for r in df.itertuples() for e in t],
                        columns=["run_id", "epoch", "value"])


def test_time_vs_eps():
    df = with_times(runs())
    empty = pd.DataFrame(columns=["run_id", "epoch", "value"])
    rows = C.time_vs_eps(df, empty, "m")
    assert [r["group"] for r in rows] == ["flat", "sharp"] and all(r["verdict"] == HOLDS for r in rows), rows
    # every run reaching its thresholds as a power law t^-1: β = 2 everywhere, against ~0.2 (flat) and ~1 (sharp)
    pw = df.copy()
    for tcol in ("t_rel_1e-1", "t_rel_1e-3"):
        pw[tcol] = 30 / float(tcol.split("_")[-1])
    rows = C.time_vs_eps(pw, power_curves(pw), "m")
    assert all(r["verdict"] == FAILS for r in rows)
    assert "late-time loss ∝ t^−a with a = 1.00 (so β = 2/a = 2.00)" in rows[0]["measurement"]
    few = df.assign(**{"t_rel_1e-3": np.nan})
    assert all(r["verdict"] == UNSURE for r in C.time_vs_eps(few, empty, "m"))


def phase_curves(df, n_flat=2, n_sharp=3, epochs=120, split=LSTAR):
    """log-loss piecewise linear in log τ with n pieces of clearly different slopes; n_sharp
    pieces above L = split."""
    rows = []
    slopes = {2: (-0.1, -2.0), 3: (-0.1, -2.5, -0.3)}
    for r in df.itertuples():
        n = n_flat if r.L <= split else n_sharp
        bounds = np.linspace(np.log(1.0), np.log(epochs), n + 1)
        for e in range(1, epochs + 1):
            x, y = np.log(e), 0.0
            for k in range(n):
                y += slopes[n][k] * (min(x, bounds[k + 1]) - bounds[k]) if x > bounds[k] else 0.0
            rows.append((r.run_id, e, r.loss0 * np.exp(y)))
    return pd.DataFrame(rows, columns=["run_id", "epoch", "value"])


def test_phases_and_transition():
    df = runs().assign(clock_per_epoch=1.0)
    good = phase_curves(df)
    assert one(C.phases_claim(df, good, "m"))["verdict"] == HOLDS
    assert one(C.transition_at_Lstar(df, good, "m"))["verdict"] == HOLDS
    same = phase_curves(df, n_flat=2, n_sharp=2)
    assert one(C.phases_claim(df, same, "m"))["verdict"] == UNSURE
    assert one(C.transition_at_Lstar(df, same, "m"))["verdict"] == FAILS
    swapped = phase_curves(df, n_flat=3, n_sharp=2)
    assert one(C.phases_claim(df, swapped, "m"))["verdict"] == FAILS
    below = runs(Ls=(0.1, 0.2)).assign(clock_per_epoch=1.0)
    assert one(C.transition_at_Lstar(below, phase_curves(below), "m"))["verdict"] == NOT_TESTABLE
    fixed_c = runs(c=0.5).assign(clock_per_epoch=1.0)
    assert one(C.phases_claim(fixed_c, good, "m"))["verdict"] == NOT_TESTABLE


def test_phases_are_counted_over_a_common_range_of_loss():
    """The same curve run at two speeds (clock rates 1 and 8): over 400 epochs the fast run
    shows a long tail the slow one never reaches; over the common range of loss both show the
    same two phases, while over their whole epoch windows the counts differ."""
    df = runs(Ls=(0.1, 2.0), seeds=(0,)).assign(clock_per_epoch=[1.0, 8.0], loss0=1.0)
    t = np.arange(1, 401)
    tau = {"r0.1-0": t * 1.0, "r2.0-0": t * 8.0}
    lx = lambda x, at: np.clip(np.log(x) - np.log(at), 0, None)
    curve = lambda x: np.exp(-0.05 * np.log(x) - 2.0 * lx(x, 50) + 1.7 * lx(x, 1000))   # kinks at τ = 50, 1000
    cur = pd.DataFrame([(rid, e, curve(tau[rid][e - 1])) for rid in tau for e in t], columns=["run_id", "epoch", "value"])
    n = C.phases_in_common_range(df, cur)
    assert n.iloc[0] == n.iloc[1] == 2
    from icl.phases import phases
    whole = [phases(t, cur.loc[cur["run_id"] == rid, "value"].to_numpy())[0] for rid in tau]
    assert whole[0] != whole[1]


def stability_rows(rho_sign):
    Ls = [0.1, 0.4, 1.0, 2.0]
    lrs = [10.0, 3.0, 1.0, 0.3] if rho_sign < 0 else [0.3, 1.0, 3.0, 10.0] if rho_sign > 0 else [3.0, 1.0, 3.0, 1.0]
    return pd.DataFrame({"model": "m", "group": "", "L": Ls, "max_stable_lr": lrs, "max_converged_lr": lrs,
                         "lrs_tried": 4})


def test_step_size():
    blk = runs(kind="transformer_block")
    assert one(C.step_size(blk, stability_rows(-1), "m"))["verdict"] == HOLDS
    assert one(C.step_size(blk, stability_rows(+1), "m"))["verdict"] == FAILS
    assert one(C.step_size(blk, stability_rows(0), "m"))["verdict"] == UNSURE
    assert one(C.step_size(blk, stability_rows(-1).iloc[:0], "m"))["verdict"] == NOT_TESTABLE
    r = one(C.step_size(runs(), stability_rows(-1), "m"))          # softmax_q: cannot diverge
    assert r["verdict"] == NOT_TESTABLE and "convex combination" in r["reason"]
    assert one(C.step_size(runs(kind="transformer_block", opt="adam"), stability_rows(-1), "m"))["verdict"] == NOT_TESTABLE


@pytest.mark.parametrize("rel,expect", [(0.01, HOLDS), (0.9, FAILS), (0.2, UNSURE)])
def test_unseen_functions(rel, expect):
    df = runs().assign(test_loss0=2.0, final_test_loss=2.0 * rel)
    assert one(C.unseen_functions(df, "m"))["verdict"] == expect


@pytest.mark.parametrize("ratio,expect", [(1.05, HOLDS), (2.0, FAILS), (1.2, UNSURE)])
def test_mean_field_per_run(ratio, expect):
    df = runs(Ls=(0.1, 1.0), seeds=(0,))
    ep = np.arange(0, 50, 5)
    mf = pd.DataFrame([(r, e, "mean_field_loss", np.exp(-0.05 * e)) for r in df["run_id"] for e in ep],
                      columns=["run_id", "epoch", "metric", "value"])
    cur = mf.assign(metric="train_loss", value=mf["value"] * ratio)
    rows = C.mean_field(df, cur, mf, "m")
    assert [r["group"] for r in rows] == ["L=0.1, seed=0", "L=1, seed=0"]
    assert {r["verdict"] for r in rows} == {expect}
    assert rows[0]["value"] == pytest.approx(np.log(ratio))
    assert one(C.mean_field(df, cur, mf.iloc[:0], "m"))["verdict"] == NOT_TESTABLE


def test_domain_names_the_broken_assumption():
    assert "δ = sqrt(20K/N) = 0.89 ≥ min p_k = 0.25" in C.domain(runs())
    skewed = runs().assign(N=2000, probs="[0.4, 0.3, 0.2, 0.1]")     # δ = 0.2 ≥ min p_k = 0.1
    assert "δ = sqrt(20K/N) = 0.20 ≥ min p_k = 0.10 (K=4, N=2000)" in C.domain(skewed)
    big = runs().assign(N=2000)                  # δ = 0.2 < 0.25 and N ≥ K³
    assert C.domain(big) == "" and "K = 4 < 1/ε = 10" in C.domain(big, eps=0.1)


def test_a_verdict_that_depends_on_the_constant_in_Lstar_says_so():
    """Two phases up to L = 1.5, three above: at L* = 0.37 three of the four sharp L show two
    phases (inconclusive); at 2L* the sharp set is {1, 2}, half with three (holds). The verdict
    moves with the unknown constant, and the row says so."""
    df = runs(Ls=(0.1, 0.2, 0.4, 0.6, 1.0, 2.0)).assign(clock_per_epoch=1.0)
    rows = C.lstar_robust(C.phases_claim, df, phase_curves(df, split=1.5), "m")
    assert one(rows)["verdict"] == UNSURE
    assert "with L* halved it reads 'inconclusive', doubled 'holds'" in one(rows)["reason"]
    far = runs(Ls=(0.05, 0.1, 1.5, 2.0)).assign(clock_per_epoch=1.0)   # no L between L*/2 and 2L*
    row = one(C.lstar_robust(C.phases_claim, far, phase_curves(far), "m"))
    assert row["verdict"] == HOLDS and "depends" not in row["reason"]


@pytest.mark.parametrize("power,expect", [(-1.0, HOLDS), (0.0, FAILS), (-2.2, UNSURE)])
def test_phase_boundary_against_delta(power, expect):
    """Runs over L × Δ whose third phase appears above L_b(Δ) = 0.6 · (Δ/3)^power."""
    parts = []
    for D in (1.5, 3.0, 6.0):
        r = runs(Ls=(0.05, 0.1, 0.2, 0.4, 0.8, 1.6, 3.2), seeds=(0,)).assign(delta=D, clock_per_epoch=1.0)
        r["run_id"] = r["run_id"] + f"-{D}"
        parts.append((r, 0.6 * (D / 3.0) ** power))
    df = pd.concat([p for p, _ in parts], ignore_index=True)
    cur = pd.concat([phase_curves(p, split=b) for p, b in parts], ignore_index=True)
    row = one(C.phase_boundary(df, cur, "m"))
    assert row["group"] == "boundary against Δ" and row["verdict"] == expect, row
    assert C.phase_boundary(runs(), cur, "m") == []                     # Δ not swept: no row
