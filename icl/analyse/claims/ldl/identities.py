"""Identities that decide a claim (not testable), the theorems' domain, and the readings of L."""
from __future__ import annotations

import math

import numpy as np
import pandas as pd

from icl.analyse import fits
from icl.analyse.fits import probs_of
from icl.models import kinds
from icl.tasks import scales_with_L
from icl.theory import ldl


def _of(df: pd.DataFrame, trait: str) -> bool:
    """Every run of `df` is of a model kind with `trait` (icl.models.kinds)."""
    return bool(df["model_kind"].isin(kinds(trait)).all())


def _kind(df: pd.DataFrame) -> str:
    """The model kinds of these runs, for a reason's text."""
    return ", ".join(sorted(set(df["model_kind"].astype(str))))


def scale_identity(df: pd.DataFrame) -> str | None:
    """Why L cannot change the outcome for these runs, or None where it can.

    A kind with the trait label_average (softmax_q) predicts ŷ = Σ aᵢyᵢ, linear in the labels, and
    a task whose labels scale with L on the same draws (icl.tasks: the cosine at one frequency c,
    the polynomial, the linear task) gives Loss(Q; L) = L²·Loss(Q; 1) exactly: GD at (η, L) traces
    GD at (ηL², 1), and Adam, blind to the loss's scale, traces one relative curve for every L
    (tests/test_symmetry.py)."""
    if df.empty or not _of(df, "label_average") or not scales_with_L(df):
        return None
    how = "GD at (η, L) is GD at (ηL², 1)" if (df["optimizer"] == "gd").all() else \
        "Adam traces the same relative curve for every L"
    return (f"{_kind(df)} is linear in the labels and this task scales them by L, so the loss at L is L² times "
            f"the loss at L = 1: {how}; the identity decides this claim, not the data")


def on_clock(df: pd.DataFrame) -> bool:
    """Every run's step follows the collapse clock (lr_rule: clock, icl.plan.shards.with_step)."""
    return not df.empty and "lr_rule" in df and bool(df["lr_rule"].astype(str).eq("clock").all())


def regime_of(group: str) -> str:
    """The regime a verdict row's group names ('lr=5; flat, relative 1e-2' → 'flat'), or ''."""
    heads = {p.split(",")[0].strip() for p in group.split("; ")}
    return next((rg for rg in ("flat", "sharp") if rg in heads), "")


def design_fixed(df: pd.DataFrame, what: str) -> str | None:
    """Why the experiment's own rule fixes a time-against-L statistic (`what`: its name in the
    reason), or None. With `lr_rule: clock` every run's GD step is set so that its collapse clock
    η‖v‖⁴·E[(f(v_k) − f(v_k'))²] runs at one speed (icl.plan.shards.with_step), and on that clock the
    mean-field curves of every L coincide (icl.theory.ldl.collapse_rate): a time in epochs is then
    the same at every L by construction, and in η·t it is ∝ η, the rule's own 1/gap². Nothing the
    design fixes is evidence (DESIGN.md, "How a claim becomes a verdict")."""
    if not on_clock(df):
        return None
    return (f"the experiment's own rule fixes {what}: lr_rule: clock sets each run's step so that its collapse clock "
            f"η‖v‖⁴E[(f(v_k) − f(v_k'))²] runs at one speed, and on that clock the mean-field dynamics of every L "
            f"coincide, so a time in epochs is L-independent by construction and in η·t it follows the rule's own "
            f"η ∝ 1/label gap²; in neither unit can the data test the theorem's L-dependence (sweep L at one step "
            f"size to test it)")


def shift_identity(df: pd.DataFrame) -> str | None:
    """Why the off-diagonal logits' rate is fixed by algebra, or None. GD on softmax_q moves Q by
    Σ c_n x_n x_qᵀ with Σ_n c_n = 0 in every prompt (softmax is invariant to a shift of all
    logits), so with orthogonal features of one norm and noise-free tokens Σ_k' Δq_{k,k'} = 0:
    the off-diagonal logits fall, together, by exactly what the own logit rises, and their mean
    rate −Δq_{k,k'}/Δq_k is 1/(K − 1) whatever the data."""
    if not _gd_on_clean_features(df):
        return None
    K = int(df["K"].iloc[0])
    return (f"softmax's shift invariance: GD moves the logits of every query by increments that sum to zero over "
            f"the key features, so with orthogonal features of one norm Σ_k' Δq_(k,k') = −Δq_k exactly and the "
            f"mean rate is 1/(K − 1) = {1 / (K - 1):.3g} (K = {K}) by algebra")


def _gd_on_clean_features(df: pd.DataFrame) -> bool:
    """LDL's model under full-batch GD on noise-free tokens at orthogonal features of one norm:
    where the algebra of softmax fixes the logits' increments (shift_identity, monotone_identity)."""
    if df.empty or not _of(df, "mean_field") or not (df["optimizer"] == "gd").all():
        return False
    if not (df["token_kind"] == "discrete").all() or df["noise"].fillna(0).astype(float).gt(0).any():
        return False
    return not ("features" in df and df["features"].fillna("orthogonal").ne("orthogonal").any())


def monotone_identity(df: pd.DataFrame) -> str | None:
    """Why the own logit's monotone rise is fixed by algebra, or None. On noise-free tokens every
    token of the query's feature k carries the query's label, so a prompt's loss ½r² (r = ŷ − f(v_k))
    has ∂ℓ/∂q_k = r·Σ_(n∈V_k) attn_n(y_n − ŷ) = −r²·A_k ≤ 0 (A_k the own attention mass); at
    orthogonal features of one norm a GD step moves q_k = v_kᵀQv_k by −η‖v‖⁴ times the sum of these
    over the prompts whose query is v_k: it never falls, whatever the data (Lemma 2's g_k ≥ 0 is
    this identity). The data can show only float rounding against it."""
    if not _gd_on_clean_features(df):
        return None
    return ("GD on noise-free tokens at orthogonal features: each prompt's gradient on the own logit is −r²·A_k ≤ 0 "
            "(r the query's residual, A_k its own attention mass), so no step lowers q_k, by algebra "
            "(Lemma 2's g_k ≥ 0 is this identity), whatever the data")


def domain(df: pd.DataFrame, eps: float | None = None) -> str:
    """Which of the theorems' assumptions these runs break, in short (the setting's statement,
    hypotheses.setting_statement, says each in full once): δ = sqrt(20K/N) below every p_k, N ≥ K³,
    for an accuracy ε, K ≥ 1/ε (unit constants), and Eq. 4's label gap |f(v_k) − f(v_k')| = Θ(L)Δ,
    measured (eq4_outside)."""
    if df.empty:
        return ""
    if df["K"].isna().any():
        return "continuous tokens: the theorems assume discrete features"
    out = [f"Eq. 4 at {eq4_where(df[eq4_outside(df)])}"] if eq4_outside(df).any() else []
    for (K, N), g in df.groupby(["K", "N"]):
        K, N = int(K), int(N)
        p = probs_of(g)
        dc, pmin = ldl.delta_conc(K, N), float(p.min() / p.sum())
        if dc >= pmin:
            out.append(f"δ = {dc:.2f} ≥ min p_k = {pmin:.2f} (K = {K}, N = {N})")
        if N < K ** 3:
            out.append(f"N = {N} < K³ = {K ** 3}")
        if eps is not None and K < 1 / eps:
            out.append(f"K = {K} < 1/ε = {1 / eps:.3g}")
    return "; ".join(out)


def eq4_outside(df: pd.DataFrame) -> pd.Series:
    """Runs outside Eq. 4 (|f(v_k) − f(v_k')| = Θ(L)Δ, the label gap the theorems' time scales are
    built on): theory.parquet's eq4_ratio, the label gap per unit LΔ against its small-LΔ value
    (icl.theory.ldl.eq4_ratio), below EQ4_MIN = ½. The cosine's gap saturates once its phase
    differences wrap around (at d = 15 near cΔ ≈ 11), and beyond that L no longer sets it."""
    if "eq4_ratio" not in df:
        return pd.Series(False, index=df.index)
    return (df["eq4_ratio"].astype(float) < ldl.EQ4_MIN).fillna(False)


def eq4_where(out: pd.DataFrame) -> str:
    """'L = 2, 3 (Δ = 6)': the runs outside Eq. 4 (out: those runs), L grouped by Δ."""
    by = {}
    for L, D in sorted({(float(a), float(b)) for a, b in zip(out["L"], out["delta"])}, key=lambda x: (x[1], x[0])):
        by.setdefault(D, []).append(f"{L:g}")
    return "; ".join(f"L = {', '.join(Ls)} (Δ = {D:g})" for D, Ls in by.items())


def eq4_text(out: pd.DataFrame) -> str:
    """The sentence naming the runs outside Eq. 4 (out: those runs)."""
    r = out["eq4_ratio"].astype(float)
    return (f"Eq. 4 fails at {eq4_where(out)}: the label gap per unit LΔ is {r.min():.2f} to {r.max():.2f} of its "
            f"small-LΔ value, below {ldl.EQ4_MIN:g} (the task's label gap saturates, so L and Δ no longer set it)")


def gap_L(g: pd.DataFrame) -> np.ndarray:
    """Each run's L as Eq. 4 reads its measured label gap: L·eq4_ratio. Eq. 4 says
    |f(v_k) − f(v_k')| = Θ(L)Δ, and the constant inside Θ is unknown: at its small-LΔ value the
    gap is κLΔ (the theorems' L²Δ²), as the task actually has it κ·eq4_ratio·LΔ
    (theory.parquet's eq4_ratio, icl.theory.ldl.label_gap per unit LΔ against its small-LΔ value;
    κ, one number per task, cancels in a slope). Inside Eq. 4's domain the ratio lies in [½, 1].
    L itself where a run has no ratio (a task without a label covariance, tables before it)."""
    L = g["L"].to_numpy(float)
    if "eq4_ratio" not in g:
        return L
    r = g["eq4_ratio"].to_numpy(float)
    return np.where(np.isfinite(r) & (r > 0), L * r, L)


def gap_readings(g: pd.DataFrame) -> dict[str, pd.DataFrame]:
    """The two readings of Eq. 4's unknown constant a time claim's band spans, as the runs to put
    into the theorems' T (icl.analyse.fits.theory_time reads L): "LΔ" (the constant at its small-LΔ
    value: the theorems' L²Δ²) and "gap" (the constant as the task has it: L²Δ² → the measured
    label gap², via gap_L). A run set whose step follows the measured clock η‖v‖⁴E[(f(v_k) −
    f(v_k'))²] follows the second."""
    return {"LΔ": g, "gap": g.assign(L=gap_L(g))}


def regimes(df: pd.DataFrame, factor: float = 1.0) -> pd.Series:
    """flat where L ≤ factor · L_split (theory.parquet's one split), else sharp; None without one."""
    split = df["L_split"] if "L_split" in df else df["L_star"]
    out = np.where(df["L"].astype(float) <= factor * split.astype(float), "flat", "sharp")
    return pd.Series(np.where(split.notna(), out, None), index=df.index)


# optimisation steps per epoch, and the runs whose crossing of a threshold took ≥ RESOLUTION of
# them: written once in icl.analyse.fits, which slopes.parquet reads the same way
steps, resolved = fits.steps, fits.resolved


def approx_identity(g: pd.DataFrame, tcol: str = "t_rel_1e-1") -> str | None:
    """Within one regime of softmax_q runs: the scale identity, approximately. Where the task's
    label differences grow as L² over these L (the collapse clock's rate, theory.parquet's
    clock_per_epoch = η‖v‖⁴·E[(f(v_n) − f(v_k))²], over ηL² is constant, as for a cosine whose
    frequency is small: cos(L⟨w,x⟩ + φ) ≈ cos φ − L⟨w,x⟩ sin φ) and the data agree (T·ηL² is the
    same at every L within the spread between seeds; T·L² at one step size, η as each run's lr
    where the step follows the clock), L acts as a scale there, and the data cannot tell the
    theory's L-dependence from that identity. Returns the reason, or None."""
    g = g[g[tcol].notna()]
    if g.empty or not _of(g, "mean_field") or "clock_per_epoch" not in g:
        return None
    if g["L"].nunique() < 2 or g["seed"].nunique() < 2:
        return None
    y = np.log(g[tcol].astype(float) * g["lr"].astype(float) * g["L"].astype(float) ** 2)
    per_L = y.groupby(g["L"])
    across = float(per_L.median().max() - per_L.median().min())
    within = float(per_L.agg(lambda v: v.max() - v.min()).median())
    task = np.log(g["clock_per_epoch"].astype(float) / (g["lr"].astype(float) * g["L"].astype(float) ** 2))
    task_across = float(task.groupby(g["L"]).median().agg(lambda v: v.max() - v.min()))
    if across > within or task_across > within:
        return None
    vals = ", ".join(f"{math.exp(v):.3g}" for v in per_L.median())
    Ls = ", ".join(f"{L:g}" for L in per_L.median().index)
    return (f"approximate scale identity: T·ηL² ({tcol}) = {vals} for L = {Ls}, constant within the seeds' spread "
            f"(across L {across:.3f}, between seeds {within:.3f} in log), and the task's label differences grow as "
            f"L² over these L (to {task_across:.3f} in log): L acts as a scale here, as in softmax_q's exact identity, "
            f"so this regime's L-dependence is decided by that identity, not by the theory's dynamics")
