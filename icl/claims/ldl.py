"""The claims of Li, Duan & Liang, one function each, from one model's runs to verdict rows.

Every function takes `df`, one model's runs that did not diverge (runs ⋈ summary ⋈ theory: one
row per run), plus the tables it needs, and returns rows of icl.claims.verdict. Conventions that
hold throughout:
- the theorems' accuracy: loss ≤ O(ε²), so a run that reached the loss `a` has ε = sqrt(a); a
  relative threshold x (loss/loss₀ ≤ x) reads ε = sqrt(x · loss₀) for each run;
- time claims are about full-batch GD (Theorems 1-2): other optimisers read `not testable`;
- where softmax_q's scale identity decides a claim (report: `scale_identity`), it reads `not
  testable` with the identity as the reason;
- flat/sharp is split at `factor` · L* (L* = 1/(Δδ), unit constant); `lstar_robust` re-judges a
  claim at L*/2 and 2L* and says when the verdict depends on that unknown constant.
"""
from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd

from icl import fits
from icl.claims import FAILS, HOLDS, NOT_TESTABLE, UNSURE, fmt, verdict
from icl.data import feature_probs
from icl.phases import phases
from icl.stats import median_interval
from icl.tasks import scales_with_L
from icl.theory import ldl

SLOPE_TOL = 0.1        # slopes: the theory's exponent may lie this far outside the bootstrap interval
EPS_TOL = 0.25         # ε-exponent β = dlog T / dlog(1/ε): allowed distance from the theory's
MEAN_FIELD_TOL = 0.1   # mean field: median |log(loss / mean-field loss)| over the logged epochs


def runs_frame(tabs: dict, model: str) -> tuple[pd.DataFrame, int]:
    """One model's runs joined with their summary and theory rows; diverged runs left out (and counted)."""
    df = tabs["runs"].merge(tabs["summary"], on="run_id").merge(tabs["theory"], on="run_id")
    df = df[df["model"] == model]
    return df[~df["diverged"]].reset_index(drop=True), int(df["diverged"].sum())


def scale_identity(df: pd.DataFrame) -> str | None:
    """Why L cannot change the outcome for these runs, or None where it can.

    softmax_q predicts ŷ = Σ aᵢyᵢ, linear in the labels, and a task whose labels scale with L on
    the same draws (icl.tasks: the cosine at one frequency c, the polynomial, the linear task)
    gives Loss(Q; L) = L²·Loss(Q; 1) exactly: GD at (η, L) traces GD at (ηL², 1), and Adam, blind to
    the loss's scale, traces one relative curve for every L (tests/test_symmetry.py)."""
    if df.empty or not (df["model_kind"] == "softmax_q").all() or not scales_with_L(df):
        return None
    how = "GD at (η, L) is GD at (ηL², 1)" if (df["optimizer"] == "gd").all() else \
        "Adam traces the same relative curve for every L"
    return (f"softmax_q is linear in the labels and this task scales them by L, so the loss at L is L² times "
            f"the loss at L = 1: {how}; the identity decides this claim, not the data")


def regimes(df: pd.DataFrame, factor: float = 1.0) -> pd.Series:
    """flat where L ≤ factor · L*, else sharp (None where the runs have no L*)."""
    out = np.where(df["L"].astype(float) <= factor * df["L_star"].astype(float), "flat", "sharp")
    return pd.Series(np.where(df["L_star"].notna(), out, None), index=df.index)


def probs(df: pd.DataFrame) -> np.ndarray:
    """Feature frequencies p_k of the runs (uniform 1/K unless the config gives probs)."""
    p = df["probs"].dropna()
    return feature_probs({"K": int(df["K"].iloc[0]), "probs": json.loads(p.iloc[0]) if len(p) else None})


def domain(df: pd.DataFrame, eps: float | None = None) -> str:
    """Which of the theorems' assumptions these runs break: δ = sqrt(20K/N) below every p_k (else
    the concentration set E* is empty), N ≥ K³, and, for an accuracy ε, K ≥ 1/ε (unit constants)."""
    if df.empty or df["K"].isna().any():
        return "continuous tokens: the theorems assume discrete features"
    out = []
    for (K, N), g in df.groupby(["K", "N"]):
        K, N = int(K), int(N)
        dc, pmin = ldl.delta_conc(K, N), float(probs(g).min() / probs(g).sum())
        if dc >= pmin:
            out.append(f"δ = sqrt(20K/N) = {dc:.2f} ≥ min p_k = {pmin:.2f} (K={K}, N={N}): the concentration set is empty")
        if N < K ** 3:
            out.append(f"N = {N} < K³ = {K ** 3}")
        if eps is not None and K < 1 / eps:
            out.append(f"K = {K} < 1/ε = {1 / eps:.3g}")
    return "; ".join(out)


def _not_gd(claim_id, df, model):
    return verdict(claim_id, NOT_TESTABLE, model=model, prediction="—",
                   measurement=f"optimizer {', '.join(sorted(set(df['optimizer'])))}",
                   reason="the theorem is about full-batch GD; an adaptive optimiser rescales each step")


# --- attention ------------------------------------------------------------------------------

def attention_to_one(df: pd.DataFrame, model: str) -> list[dict]:
    """Attn_own → 1: holds if the 10th percentile over runs of the final own attention is ≥ 0.9,
    fails if its median is < 0.5."""
    cid, pred = "ldl.attention_to_one", "final Attn_own → 1 (10th percentile over runs ≥ 0.9)"
    if not df["token_kind"].eq("discrete").all():
        return [verdict(cid, NOT_TESTABLE, model=model, prediction=pred, measurement="continuous tokens",
                        reason="the claim is about discrete features; bilinear logits xᵢᵀQx_q favour large-norm "
                               "tokens, not near ones, so no nearest-token mass measures it")]
    own = df["attn_own_final"].astype(float).dropna().to_numpy()
    if not len(own):
        return [verdict(cid, NOT_TESTABLE, model=model, prediction=pred, measurement="no attention logged",
                        reason="this model logs no attention map")]
    p10, med = np.percentile(own, [10, 50])
    v = HOLDS if p10 >= 0.9 else FAILS if med < 0.5 else UNSURE
    why = {HOLDS: "", FAILS: f"the median run ends with own attention {med:.2f} < 0.5",
           UNSURE: f"the median run reaches {med:.2f} but a tenth of the runs end below {p10:.2f} < 0.9"}[v]
    return [verdict(cid, v, model=model, prediction=pred, value=p10, domain=domain(df), reason=why,
                    measurement=f"final Attn_own: median {med:.3f}, 10th percentile {p10:.3f} over {len(own)} runs")]


def offdiag_logits(df: pd.DataFrame, model: str) -> list[dict]:
    """q_{k,k'} falls while q_k rises, more slowly (LDL Props. 2-4: rate O(·/K²) against Θ(·/K)),
    and may oscillate; from the summary's per-run logit dynamics (icl.measures.logit_dynamics).
    Holds if 90% of the off-diagonal logits fell and the median rate ratio is in (0, 1), fails if
    fewer than half fell or the ratio is outside (0, 1)."""
    cid, pred = "ldl.offdiag_logits", "q_{k,k'} decreases, −Δq_{k,k'}/Δq_k in (0, 1)"
    if "qoff_fell" not in df or df["qoff_fell"].isna().all():
        return [verdict(cid, NOT_TESTABLE, model=model, prediction=pred, measurement="no feature logits logged",
                        reason="only softmax_q on discrete features logs the logits q_{k,k'} = v_k'ᵀ Q v_k")]
    r = df["qoff_rate"].astype(float).dropna().to_numpy()
    if not len(r):
        return [verdict(cid, UNSURE, model=model, prediction=pred, measurement="the own logits did not rise",
                        reason="no run's own logit q_k rose, so there is no rate to compare with")]
    med = float(np.median(r))
    lo, hi = median_interval(r)
    frac, osc = float(df["qoff_fell"].mean()), float(df["qoff_oscillates"].mean())
    v = HOLDS if frac >= 0.9 and 0 < med < 1 else FAILS if frac < 0.5 or med >= 1 or med <= 0 else UNSURE
    why = {HOLDS: "", FAILS: f"{frac:.0%} of the off-diagonal logits fell and the median rate ratio is {med:.2f}",
           UNSURE: f"only {frac:.0%} of the off-diagonal logits fell (the claim needs most of them to)"}[v]
    return [verdict(cid, v, model=model, prediction=pred, value=med, ci_lo=lo, ci_hi=hi, reason=why,
                    domain=domain(df),
                    measurement=f"−Δq_(k,k')/Δq_k over training: median over runs {med:.3f} [{fmt(lo)}, {fmt(hi)}]; "
                                f"{frac:.0%} of the off-diagonal logits fell; the increments of {osc:.0%} "
                                f"change sign at least once (oscillation), over {len(df)} runs")]


# --- time scales (GD) -----------------------------------------------------------------------

def time_vs_L(df: pd.DataFrame, model: str, factor: float = 1.0,
              tcols=("t_rel_1e-2", "t_abs_1e-3")) -> list[dict]:
    """log-log slope of the crossing time against L, per regime and threshold, with a bootstrap
    interval over seeds, against the slope of the theorems' T at each run's own ε: between its
    power law (1/L², or 1/(εL²) when sharp) and the slope with the log factor at unit constant;
    holds if the interval comes within SLOPE_TOL of that range."""
    cid, rows = "ldl.time_vs_L", []
    if not (df["optimizer"] == "gd").all():
        return [_not_gd(cid, df, model)]
    if (why := scale_identity(df)):
        return [verdict(cid, NOT_TESTABLE, model=model, prediction="slope of log T on log L", measurement="—",
                        reason=why)]
    reg = regimes(df, factor)
    for tcol in tcols:
        for rg in ("flat", "sharp"):
            g = df[(reg == rg) & df[tcol].notna()]
            if tcol.startswith("t_abs"):
                g = g[g["loss0"] > float(tcol.split("_")[-1])]        # runs that started below ε² prove nothing
            what = f"{rg}, {'relative' if tcol.startswith('t_rel') else 'absolute'} {tcol.split('_')[-1]}"
            pred = f"slope of the theorems' T over the same runs ({tcol}, ε² = the loss reached)"
            if g["L"].nunique() < 2:
                rows.append(verdict(cid, UNSURE, model=model, group=what, prediction=pred,
                                    measurement=f"{g['L'].nunique()} value(s) of L reached the threshold",
                                    reason="fewer than two values of L reached this loss in this regime"))
                continue
            s, lo, hi, n, _ = fits.slope_with_bootstrap(g.astype({"L": float, tcol: float}), tcol)
            eps, logL = fits.eps_of(g, tcol), np.log(g["L"].to_numpy(float))
            th = fits._ols_slope(logL, np.log(fits.theory_time(g, reg[g.index], eps)))
            # the constant inside the theorems' log is unknown: without the log, T ∝ 1/L² (flat) or
            # 1/(εL²) (sharp); the prediction is the range between that and the unit-constant slope
            power = fits._ols_slope(logL, -2 * logL - (np.log(eps) if rg == "sharp" else 0.0))
            a, b = sorted((th, power))
            if not np.isfinite(lo):
                v, why = UNSURE, "fewer than three seeds: no interval"
            elif lo - SLOPE_TOL <= b and hi + SLOPE_TOL >= a:
                v, why = HOLDS, ""
            else:
                v, why = FAILS, (f"the interval [{lo:.2f}, {hi:.2f}] misses the theory's range [{a:.2f}, {b:.2f}] "
                                 f"by more than {SLOPE_TOL}")
            rows.append(verdict(cid, v, model=model, group=what, prediction=f"slope {a:.2f} to {b:.2f} ({pred})", value=s,
                                ci_lo=lo, ci_hi=hi, reason=why, domain=domain(df, float(np.median(fits.eps_of(g, tcol)))),
                                measurement=f"slope {s:.2f} [{lo:.2f}, {hi:.2f}] over {n} runs, "
                                            f"{g['L'].nunique()} values of L"))
    return rows


def late_exponent(df: pd.DataFrame, curves: pd.DataFrame) -> pd.Series:
    """a of loss ∝ t^−a over the later half (in log t) of each run's logged epochs, aligned with
    df's rows. Read from the column `late_exponent` where `verdicts` computed it once for every
    L* factor."""
    if "late_exponent" in df:
        return df["late_exponent"]
    curves = curves[curves["run_id"].isin(df["run_id"])]
    out = {}
    for rid, g in curves.groupby("run_id"):
        g = g[(g["epoch"] > 0) & (g["value"] > 0)]
        if len(g) < 4:
            continue
        t = g["epoch"].to_numpy(float)
        keep = np.log(t) >= 0.5 * (np.log(t[0]) + np.log(t[-1]))
        if keep.sum() >= 3:
            out[rid] = -fits._ols_slope(np.log(t[keep]), np.log(g["value"].to_numpy(float)[keep]))
    return pd.Series(out, dtype=float).reindex(df["run_id"]).set_axis(df.index)


def time_vs_eps(df: pd.DataFrame, curves: pd.DataFrame, model: str, factor: float = 1.0,
                t_hi="t_rel_1e-1", t_lo="t_rel_1e-3") -> list[dict]:
    """β = d log T / d log(1/ε) between two thresholds, per regime, against the theorems' (flat:
    T ∝ log(K/ε), β ≈ 1/log(K/ε); sharp: T ∝ log(KLΔ/ε)/ε, β ≈ 1); holds if the theory's β is
    within EPS_TOL of the bootstrap interval of the median. The late-time decay exponent a of the
    loss is reported beside it: a power law t^−a gives β = 2/a."""
    cid, rows = "ldl.time_vs_eps", []
    if not (df["optimizer"] == "gd").all():
        return [_not_gd(cid, df, model)]
    if (why := scale_identity(df)):
        return [verdict(cid, NOT_TESTABLE, model=model, prediction="flat: log(1/ε), sharp: 1/ε", measurement="—",
                        reason=why + " (every L traces one relative curve, so flat and sharp cannot differ)")]
    reg = regimes(df, factor)
    a = late_exponent(df, curves)
    for rg in ("flat", "sharp"):
        g = df[(reg == rg) & df[t_hi].notna() & df[t_lo].notna() & (df[t_hi] > 0)]
        pred = "β ≈ 1/log(K/ε) (T ∝ log 1/ε)" if rg == "flat" else "β ≈ 1 (T ∝ 1/ε)"
        if len(g) < 2:
            rows.append(verdict(cid, UNSURE, model=model, group=rg, prediction=pred,
                                measurement=f"{len(g)} run(s) reached {t_lo.split('_')[-1]} of their initial loss",
                                reason=f"fewer than two {rg} runs reached both thresholds"))
            continue
        e_hi, e_lo = fits.eps_of(g, t_hi), fits.eps_of(g, t_lo)
        d = np.log(e_hi / e_lo)
        beta = np.log(g[t_lo].to_numpy(float) / g[t_hi].to_numpy(float)) / d
        r = regimes(g, factor)
        b_th = np.log(fits.theory_time(g, r, e_lo) / fits.theory_time(g, r, e_hi)) / d
        med, th = float(np.median(beta)), float(np.median(b_th))
        lo, hi = median_interval(beta)
        ok = np.isfinite(lo) and lo - EPS_TOL <= th <= hi + EPS_TOL
        v = HOLDS if ok else FAILS
        ag = a[g.index].dropna()
        rows.append(verdict(cid, v, model=model, group=rg, prediction=f"{pred}: β = {th:.2f} here", value=med,
                            ci_lo=lo, ci_hi=hi, domain=domain(df, float(np.median(e_lo))),
                            reason="" if ok else f"the theory's β = {th:.2f} lies outside [{fmt(lo)}, {fmt(hi)}] ± {EPS_TOL}",
                            measurement=f"β from {t_hi} to {t_lo}: median {med:.2f} [{fmt(lo)}, {fmt(hi)}] over {len(g)} runs"
                                        + (f"; late-time loss ∝ t^−a with a = {ag.median():.2f} (so β = 2/a = "
                                           f"{2 / ag.median():.2f})" if len(ag) else "")))
    return rows


# --- phases and the transition ----------------------------------------------------------------

def phases_in_common_range(df: pd.DataFrame, curves: pd.DataFrame) -> pd.Series:
    """Number of phases of each run's train loss over the same range of relative loss: from
    loss₀ down to the lowest loss/loss₀ that every run of `df` reached. A count over a fixed
    epoch window depends on where that window falls on each run's curve (a fast run shows only
    its tail, a slow one only its start), so it measures the grid, not the dynamics; over a
    common range of loss every run shows the same stretch of its curve. (On the collapse clock
    τ = rate·t a phase is the same stretch: log τ and log t differ by a constant.) Read from the
    column `n_phases_common` where `verdicts` computed it once for every claim and L* factor."""
    if "n_phases_common" in df:
        return df["n_phases_common"]
    cur = curves[curves["run_id"].isin(df["run_id"])].merge(df[["run_id", "loss0"]], on="run_id")
    cur = cur.assign(rel=cur["value"] / cur["loss0"]).sort_values(["run_id", "epoch"])
    floor = cur.groupby("run_id")["rel"].min().max()
    out = {}
    for rid, g in cur.groupby("run_id"):
        rel = g["rel"].to_numpy()
        stop = int(np.argmax(rel <= floor)) if (rel <= floor).any() else len(rel) - 1
        out[rid] = phases(g["epoch"].to_numpy()[:stop + 1], g["value"].to_numpy()[:stop + 1])[0]
    return pd.Series(out, dtype=float).reindex(df["run_id"]).set_axis(df.index)


def phases_claim(df: pd.DataFrame, curves: pd.DataFrame, model: str, factor: float = 1.0) -> list[dict]:
    """Two phases in the flat regime, three in the sharp, counted over a common range of relative
    loss; holds if at least half of each regime's runs have the predicted count, fails if
    neither regime does."""
    cid, pred = "ldl.phases", "flat: 2, sharp: 3 (phases of log-loss, over the range of loss/loss₀ every run reached)"
    if (why := scale_identity(df)):
        return [verdict(cid, NOT_TESTABLE, model=model, prediction=pred, measurement="—",
                        reason=why + " (on the collapse clock every L is the same curve)")]
    if df["L_star"].isna().all():
        return [verdict(cid, NOT_TESTABLE, model=model, prediction=pred, measurement="no regime",
                        reason="the runs have no L* (continuous tokens)")]
    n = phases_in_common_range(df, curves)
    reg = regimes(df, factor)
    meas, ok = [], []
    for rg, want in (("flat", 2), ("sharp", 3)):
        g = n[reg == rg].dropna()
        if len(g):
            frac = float((g == want).mean())
            meas.append(f"{rg}: median {g.median():.0f} phases, {frac:.0%} of {len(g)} runs have {want}")
            ok.append(frac >= 0.5)
    if not ok:
        return [verdict(cid, UNSURE, model=model, prediction=pred, measurement="no phases counted",
                        reason="no run has a loss curve to count phases on")]
    v = HOLDS if all(ok) else FAILS if not any(ok) else UNSURE
    why = {HOLDS: "", FAILS: "in no regime do half the runs show the predicted number of phases",
           UNSURE: "one regime shows the predicted number of phases, the other does not"}[v]
    return [verdict(cid, v, model=model, prediction=pred, measurement="; ".join(meas), reason=why, domain=domain(df))]


def transition_at_Lstar(df: pd.DataFrame, curves: pd.DataFrame, model: str, factor: float = 1.0) -> list[dict]:
    """More phases above L* than below (counted over a common range of loss): holds if the mean count differs by
    ≥ 0.5, fails if it is not larger above; not testable if the sweep does not cross L*."""
    cid, pred = "ldl.transition_at_Lstar", "more phases above L* than below"
    if (why := scale_identity(df)):
        return [verdict(cid, NOT_TESTABLE, model=model, prediction=pred, measurement="—",
                        reason=why + " (no L can differ from another)")]
    reg = regimes(df, factor)
    if not ((reg == "flat").any() and (reg == "sharp").any()):
        return [verdict(cid, NOT_TESTABLE, model=model, prediction=pred, measurement="—",
                        reason="the sweep does not cross L*")]
    n = phases_in_common_range(df, curves)
    f, s = n[reg == "flat"].mean(), n[reg == "sharp"].mean()
    diff = s - f
    if not np.isfinite(diff):
        return [verdict(cid, UNSURE, model=model, prediction=pred, measurement="—",
                        reason="no phases were counted in one of the regimes")]
    v = HOLDS if diff >= 0.5 else FAILS if diff <= 0 else UNSURE
    why = {HOLDS: "", FAILS: "the sharp runs show no more phases than the flat ones",
           UNSURE: f"the sharp runs show only {diff:.2f} more phases on average (< 0.5)"}[v]
    return [verdict(cid, v, model=model, prediction=pred, value=diff, reason=why, domain=domain(df),
                    measurement=f"mean phases: {f:.2f} below L*, {s:.2f} above (difference {diff:+.2f})")]


def phase_boundary(df: pd.DataFrame, curves: pd.DataFrame, model: str) -> list[dict]:
    """Where Δ is swept: the L at which the mean phase count first reaches 2.5 (geometric mean
    of the L on either side), per Δ, and the slope of log boundary on log Δ against L* ∝ 1/Δ:
    holds within 0.5 of −1, fails at a slope ≥ 0."""
    cid, pred = "ldl.transition_at_Lstar", "phase boundary ∝ 1/Δ, as L* = 1/(Δδ): slope −1 on log Δ"
    if df["delta"].nunique() < 2:
        return []
    if (why := scale_identity(df)):
        return [verdict(cid, NOT_TESTABLE, model=model, group="boundary against Δ", prediction=pred,
                        measurement="—", reason=why)]
    n = phases_in_common_range(df, curves)
    bounds = {}
    for D, g in df.assign(n=n).groupby("delta"):
        m = g.groupby("L")["n"].mean().sort_index()
        up = np.flatnonzero(m.to_numpy() >= 2.5)
        if len(up) and up[0] > 0:
            bounds[float(D)] = math.sqrt(m.index[up[0] - 1] * m.index[up[0]])
    if len(bounds) < 2:
        return [verdict(cid, UNSURE, model=model, group="boundary against Δ", prediction=pred,
                        measurement=f"a boundary inside the L grid at {len(bounds)} value(s) of Δ",
                        reason="the phase count crosses 2.5 inside the L grid at fewer than two Δ")]
    Ds = np.array(sorted(bounds))
    slope = fits._ols_slope(np.log(Ds), np.log([bounds[D] for D in Ds]))
    v = HOLDS if abs(slope + 1) <= 0.5 else FAILS if slope >= 0 else UNSURE
    why = {HOLDS: "", FAILS: f"the boundary does not fall with Δ (slope {slope:.2f})",
           UNSURE: f"the boundary falls with Δ, but with slope {slope:.2f}, not −1 ± 0.5"}[v]
    return [verdict(cid, v, model=model, group="boundary against Δ", prediction=pred, value=slope, reason=why,
                    domain=domain(df), measurement="boundary L by Δ: " + ", ".join(f"Δ={D:g}: {bounds[D]:.3g}"
                                                                                   for D in Ds)
                    + f"; slope {slope:.2f}")]


def step_size(df: pd.DataFrame, stability: pd.DataFrame, model: str) -> list[dict]:
    """The largest stable GD learning rate falls with L (Spearman ρ < −0.5 in every group: holds;
    ρ > 0 in every group: fails)."""
    cid, pred = "ldl.step_size", "largest stable lr decreases with L"
    if not (df["optimizer"] == "gd").all():
        return [_not_gd(cid, df, model)]
    if (df["model_kind"] == "softmax_q").all():
        return [verdict(cid, NOT_TESTABLE, model=model, prediction=pred, measurement="—",
                        reason="softmax_q predicts a convex combination of the context labels, so its loss is "
                               "bounded and GD cannot diverge at any step size")]
    st = stability[stability["model"] == model].dropna(subset=["max_stable_lr"])
    groups = [(grp, g) for grp, g in st.groupby("group", sort=True) if len(g) >= 2 and g["lrs_tried"].max() >= 2]
    if not groups:
        return [verdict(cid, NOT_TESTABLE, model=model, prediction=pred, measurement="—",
                        reason="this experiment does not sweep the learning rate over two or more values of L")]
    rhos, parts = [], []
    for grp, g in groups:
        if g["max_stable_lr"].nunique() == 1:
            parts.append(f"the same largest stable lr ({g['max_stable_lr'].iloc[0]:g}) at every L{f' ({grp})' if grp else ''}")
            rhos.append(0.0)
            continue
        rho = g["L"].rank().corr(g["max_stable_lr"].rank())
        rhos.append(rho)
        parts.append(f"Spearman ρ(L, largest stable lr) = {rho:.2f} over {len(g)} L{f' ({grp})' if grp else ''}")
    v = HOLDS if all(r < -0.5 for r in rhos) else FAILS if all(r >= 0 for r in rhos) else UNSURE
    why = {HOLDS: "", FAILS: "the largest stable step does not fall with L", UNSURE: "the correlation is weak or mixed"}[v]
    return [verdict(cid, v, model=model, prediction=pred, value=float(np.mean(rhos)), reason=why,
                    measurement="; ".join(parts), domain=domain(df))]


def unseen_functions(df: pd.DataFrame, model: str) -> list[dict]:
    """Test loss on task functions never seen in training → 0 (Prop. 1): holds if every run ends
    at ≤ 5% of its initial test loss, fails if the median run stays above 50%."""
    cid, pred = "ldl.unseen_functions", "final / initial test loss on new functions → 0 (worst run ≤ 0.05)"
    rel = (df["final_test_loss"] / df["test_loss0"]).astype(float).dropna()
    if not len(rel):
        return [verdict(cid, NOT_TESTABLE, model=model, prediction=pred, measurement="—", reason="no test loss logged")]
    v = HOLDS if rel.max() <= 0.05 else FAILS if rel.median() > 0.5 else UNSURE
    why = {HOLDS: "", FAILS: f"the median run keeps {rel.median():.2f} of its initial test loss",
           UNSURE: f"the worst run keeps {rel.max():.2f} of its initial test loss (> 0.05)"}[v]
    return [verdict(cid, v, model=model, prediction=pred, value=float(rel.max()), reason=why, domain=domain(df),
                    measurement=f"final / initial test loss: median {rel.median():.3g}, worst {rel.max():.3g} "
                                f"over {len(rel)} runs")]


def mean_field(df: pd.DataFrame, curves: pd.DataFrame, theory_curves: pd.DataFrame, model: str) -> list[dict]:
    """Each run's train loss against the mean-field curve of Lemma 2 (no free constant): one row a
    run; holds if the median |log(loss / mean field)| over the logged epochs is ≤ MEAN_FIELD_TOL,
    fails above 3 × MEAN_FIELD_TOL."""
    cid = "ldl.mean_field"
    pred = f"median |log(loss / mean-field loss)| ≤ {MEAN_FIELD_TOL}"
    mf = theory_curves[(theory_curves["metric"] == "mean_field_loss") & theory_curves["run_id"].isin(df["run_id"])]
    if not len(mf):
        return [verdict(cid, NOT_TESTABLE, model=model, prediction=pred, measurement="—",
                        reason="the mean-field curve is derived for softmax_q under GD on discrete features with a "
                               "task whose label covariance is known (the cosine)")]
    j = mf.merge(curves[curves["metric"] == "train_loss"], on=["run_id", "epoch"], suffixes=("_mf", "_run"))
    j = j[(j["value_mf"] > 0) & (j["value_run"] > 0)]
    err = np.log(j["value_run"] / j["value_mf"]).abs().groupby(j["run_id"]).median()
    above = (np.log(j["value_run"] / j["value_mf"]) > 0).groupby(j["run_id"]).mean()
    rows = []
    for r in df[df["run_id"].isin(err.index)].sort_values(["L", "seed"]).itertuples():
        e = float(err[r.run_id])
        v = HOLDS if e <= MEAN_FIELD_TOL else FAILS if e > 3 * MEAN_FIELD_TOL else UNSURE
        why = "" if v == HOLDS else f"the run is {e:.2f} (in log) from the curve, beyond the tolerance {MEAN_FIELD_TOL}"
        rows.append(verdict(cid, v, model=model, group=f"L={r.L:g}, seed={r.seed}", prediction=pred, value=e,
                            reason=why, measurement=f"median |log ratio| {e:.3f}; the run lies above the curve at "
                                                    f"{above[r.run_id]:.0%} of the logged epochs"))
    return rows


# --- L* robustness and the whole set ----------------------------------------------------------

def lstar_robust(fn, *args, **kw) -> list[dict]:
    """Rows of a regime claim at L*, each with a note when the verdict of the same row differs
    with L* halved or doubled: the constant inside L* = Θ(1/(Δδ)) is unknown."""
    rows = fn(*args, factor=1.0, **kw)
    others = {f: {(r["group"], i): r["verdict"] for i, r in enumerate(fn(*args, factor=f, **kw))} for f in (0.5, 2.0)}
    for i, r in enumerate(rows):
        alt = {f: o.get((r["group"], i)) for f, o in others.items()}
        if any(a is not None and a != r["verdict"] for a in alt.values()):
            note = (f"the verdict depends on the unknown constant in L*: with L* halved it reads "
                    f"'{alt[0.5]}', doubled '{alt[2.0]}'")
            r["reason"] = f"{r['reason']}; {note}" if r["reason"] else note
    return rows


def verdicts(tabs: dict, model: str, flat_max_L: float | None = None) -> list[dict]:
    """Every LDL claim for one model of an experiment, in the order of CLAIMS. `flat_max_L` (the
    config's report.flat_max_L) replaces L* as the flat/sharp split, in the figures too."""
    df, n_div = runs_frame(tabs, model)
    if df.empty:
        return [verdict("ldl.attention_to_one", UNSURE, model=model, prediction="—",
                        measurement=f"all {n_div} runs diverged", reason="every run of this model diverged")]
    if flat_max_L is not None:
        df = df.assign(L_star=float(flat_max_L))
    curves = tabs["curves"][tabs["curves"]["metric"] == "train_loss"]
    if not scale_identity(df):     # measured once here, read by the claims at every L* factor
        df = df.assign(n_phases_common=phases_in_common_range(df, curves))
        if (df["optimizer"] == "gd").all():
            df = df.assign(late_exponent=late_exponent(df, curves))
    return [*attention_to_one(df, model), *offdiag_logits(df, model),
            *lstar_robust(phases_claim, df, curves, model), *lstar_robust(time_vs_L, df, model),
            *lstar_robust(time_vs_eps, df, curves, model), *lstar_robust(transition_at_Lstar, df, curves, model),
            *phase_boundary(df, curves, model),
            *step_size(df, tabs["stability"], model), *unseen_functions(df, model),
            *mean_field(df, curves, tabs["theory_curves"], model)]
