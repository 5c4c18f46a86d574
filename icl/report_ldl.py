"""The LDL part of a report: theory overlays, collapse, slopes, stability, phase diagram, and the
verdict table. Every verdict is computed here from the tables; none is typed in."""
from __future__ import annotations

import numpy as np
import pandas as pd
import matplotlib.pyplot as plt

from icl import fits
from icl.figures import QUALITATIVE, palette, png
from icl.theory import ldl

HOLDS, FAILS, UNSURE, NOT_HERE = "holds", "does not hold", "inconclusive", "not testable"


def scale_identity(df: pd.DataFrame) -> str | None:
    """Why L cannot change the outcome for these runs, or None where it can.

    softmax_q predicts ŷ = Σ aᵢyᵢ, linear in the labels, and a task whose labels scale with L on
    the same draws (the cosine at one frequency c, the polynomial, the linear task) gives
    Loss(Q; L) = L²·Loss(Q; 1) exactly: GD at (η, L) traces GD at (ηL², 1), and Adam, blind to
    the loss's scale, traces one relative curve for every L (tests/test_symmetry.py). Then the
    L-dependence of times, phases and step sizes is decided by this identity, not by the data."""
    if df.empty or not (df["model_kind"] == "softmax_q").all():
        return None
    kinds = set(df["task_kind"])
    if not (kinds <= {"polynomial", "linear"} or (kinds == {"cosine"} and df["c"].nunique() == 1)):
        return None
    how = "GD at (η, L) is GD at (ηL², 1)" if (df["optimizer"] == "gd").all() else \
        "Adam traces the same relative curve for every L"
    return (f"softmax_q is linear in the labels and this task scales them by L, so the loss at L is L² times "
            f"the loss at L = 1: {how}; the identity decides this claim, not the data")


def _runs(tabs):
    """Runs joined with summary and theory, diverged runs excluded (they are listed elsewhere)."""
    df = tabs["runs"].merge(tabs["summary"], on="run_id").merge(tabs["theory"], on="run_id")
    return df[~df["diverged"]]


def collapse_figure(tabs, model) -> str | None:
    """Loss / loss0 against the theory clock τ = η L² Δ² t / K, one panel per regime."""
    df = _runs(tabs)
    df = df[(df["model"] == model) & df["regime"].notna()]
    if df.empty or df["L"].nunique() < 2:
        return None
    cur = tabs["curves"][tabs["curves"]["metric"] == "train_loss"].merge(
        df[["run_id", "L", "regime", "clock_per_epoch", "loss0"]], on="run_id")
    cur = cur[cur["epoch"] > 0]
    cur["tau"] = cur["epoch"] * cur["clock_per_epoch"]
    cur["rel"] = cur["value"] / cur["loss0"]
    regimes = [r for r in ("flat", "sharp") if (cur["regime"] == r).any()]
    colours = palette(tabs["runs"]["L"])
    fig, axes = plt.subplots(1, len(regimes), figsize=(5.2 * len(regimes), 3.6), squeeze=False)
    for ax, reg in zip(axes[0], regimes):
        sub = cur[cur["regime"] == reg]
        Ls = sorted(sub["L"].unique())
        for color, L in ((colours[float(L)], L) for L in Ls):
            med = sub[sub["L"] == L].groupby("tau")["rel"].median()
            ax.plot(med.index, med.values, color=color, label=f"L={L:g}")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("theory clock τ = η L² Δ² t / K")
        ax.set_ylabel("train loss / loss₀")
        ax.set_title(f"{reg} regime: do the curves collapse?")
        ax.legend(fontsize=7)
    return png(fig)


def slope_figure(tabs, model, tcol="t_rel_1e-2") -> str | None:
    """Convergence time against L, one fitted line per row of slopes.parquet (regime × group)."""
    sl = tabs["slopes"]
    sl = sl[(sl["model"] == model) & (sl["threshold"] == tcol) & sl["slope"].notna()]
    df = _runs(tabs)
    df = df[(df["model"] == model) & df[tcol].notna() & (df[tcol] > 0)]
    if df["L"].nunique() < 2:
        return None
    keys = [k for k in sl.columns if k in df.columns and k not in ("model", "model_kind")]
    df = fits.groupable(df, keys)
    fig, ax = plt.subplots(figsize=(5.2, 3.6))
    marks = dict(zip(sorted(sl["group"].unique()), "osD^v<>p*h"))
    for reg, color in (("flat", "C0"), ("sharp", "C3")):
        for r in sl[sl["regime"] == reg].to_dict("records"):
            g = df[fits.matching(df, r, keys)]
            if len(g) < 2:
                continue
            where = f"{reg}" + (f", {r['group']}" if r["group"] else "")
            ax.scatter(g["L"], g[tcol], color=color, s=14, marker=marks.get(r["group"], "o"))
            x = np.log(g["L"].to_numpy(float))
            b = np.mean(np.log(g[tcol].to_numpy(float))) - r["slope"] * x.mean()
            xs = np.linspace(x.min(), x.max(), 20)
            ax.plot(np.exp(xs), np.exp(b + r["slope"] * xs), color=color,
                    label=f"{where}: slope {r['slope']:.2f} [{r['ci_lo']:.2f}, {r['ci_hi']:.2f}], "
                          f"theory {r['theory_slope']:.2f}")
    for Lst in df["L_star"].dropna().unique():
        ax.axvline(Lst, color="grey", ls=":", lw=1)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("L (dotted: L*)")
    ax.set_ylabel(f"{tcol} (epochs)")
    ax.set_title("convergence time against L")
    ax.legend(fontsize=6)
    return png(fig)


def stability_figure(tabs, model) -> str | None:
    st = tabs["stability"][tabs["stability"]["model"] == model]
    if st.empty or st["lrs_tried"].max() < 2:
        return None
    fig, ax = plt.subplots(figsize=(5.2, 3.6))
    for (group, g), color in zip(st.groupby("group", sort=True), QUALITATIVE):
        tag = f" ({group})" if group else ""
        ax.plot(g["L"], g["max_stable_lr"], "o-", color=color,
                label=f"largest lr with no seed diverged or above loss₀{tag}")
        ax.plot(g["L"], g["max_converged_lr"], "s--", color=color, label=f"largest lr at which all seeds converged{tag}")
    for Lst in _runs(tabs)["L_star"].dropna().unique():
        ax.axvline(Lst, color="grey", ls=":", lw=1)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("L (dotted: L*)")
    ax.set_ylabel("learning rate")
    ax.set_title("step-size stability")
    ax.legend(fontsize=6)
    return png(fig)


def phase_diagram_figures(tabs, model, tcol="t_rel_1e-2") -> list[str]:
    """One Δ × L phase diagram per (K, N) of the sweep (L* depends on both)."""
    df = _runs(tabs)
    df = df[(df["model"] == model) & df["K"].notna()]
    groups = list(df.groupby(["K", "N"]))
    return [f for (K, N), g in groups
            if (f := phase_diagram_figure(g, int(K), int(N), tcol, f" (K={K}, N={N})" if len(groups) > 1 else ""))]


def phase_diagram_figure(df, K, N, tcol, tag="") -> str | None:
    if df["delta"].nunique() < 2 or df["L"].nunique() < 3:
        return None
    fig, axes = plt.subplots(1, 2, figsize=(11, 3.8))
    Ls, Ds = sorted(df["L"].unique()), sorted(df["delta"].unique())
    for ax, col, title in ((axes[0], tcol, f"{tcol} (median over seeds)"), (axes[1], "n_phases", "n_phases (median)")):
        m = df.assign(v=df[col].astype(float)).groupby(["delta", "L"])["v"].median().unstack()
        m = m.reindex(index=Ds, columns=Ls)
        data = np.log10(m.to_numpy(float)) if col == tcol else m.to_numpy(float)
        im = ax.pcolormesh(np.arange(len(Ls) + 1), np.arange(len(Ds) + 1), data, cmap="magma_r", shading="flat")
        fig.colorbar(im, ax=ax, label=("log10 epochs" if col == tcol else "phases"))
        # L* = 1/(Δδ) on the index grid: interpolate in log L
        lstar = [ldl.L_star(K, N, D) for D in Ds]
        xi = np.interp(np.log(lstar), np.log(Ls), np.arange(len(Ls))) + 0.5
        ax.plot(xi, np.arange(len(Ds)) + 0.5, "c-o", lw=2, label="L* = 1/(Δδ)")
        ax.set_xticks(np.arange(len(Ls)) + 0.5, [f"{L:.2g}" for L in Ls], rotation=60, fontsize=7)
        ax.set_yticks(np.arange(len(Ds)) + 0.5, [f"{D:g}" for D in Ds])
        ax.set_xlabel("L")
        ax.set_ylabel("Δ")
        ax.set_title(title + tag)
        ax.legend(fontsize=7, loc="upper right")
    return png(fig)


def _fmt(x, nd=3):
    return "—" if x is None or (isinstance(x, float) and not np.isfinite(x)) else f"{x:.{nd}g}"


def verdicts(tabs, model) -> list[dict]:
    """One row per claim of LDL for one model: prediction, measurement (with interval), verdict."""
    all_runs = tabs["runs"].merge(tabs["summary"], on="run_id")
    n_div = int(all_runs.loc[all_runs["model"] == model, "diverged"].sum())
    df = _runs(tabs)
    df = df[df["model"] == model]
    rows = []

    def add(claim, pred, meas, verdict):
        rows.append({"claim": claim, "prediction": pred, "measurement": meas, "verdict": verdict})

    if df.empty:
        add("any claim", "—", f"all {n_div} runs diverged", UNSURE)
        return rows
    discrete = df["token_kind"].eq("discrete").all()
    # 1. attention on the query's own feature -> 1
    if discrete:
        own = df["attn_own_final"].astype(float)
        q = np.nanpercentile(own, [10, 50])
        add("attention on the query's feature → 1", "Attn_own → 1",
            f"final attn_own: median {q[1]:.3f}, 10th percentile {q[0]:.3f} over {len(own)} runs",
            HOLDS if q[0] >= 0.9 else (FAILS if q[1] < 0.5 else UNSURE))
        off = df["attn_off_final"].astype(float)
        rel = off * df["K"].astype(float)            # in units of its start, 1/K (K may be swept)
        Ks = sorted(df["K"].unique())
        osc = df["attn_off_oscillates"].mean()
        start = f"1/K = {1 / Ks[0]:.2f}" if len(Ks) == 1 else "1/K, K ∈ {" + ", ".join(map(str, Ks)) + "}"
        add("off-diagonal attention decays (and may oscillate)", f"Attn_k,j → 0 (from {start})",
            f"final mean off-diagonal attention: median {np.nanmedian(off):.3f} ({np.nanmedian(rel):.2f} of its "
            f"start 1/K); non-monotone in {osc:.0%} of runs",
            HOLDS if np.nanmedian(rel) < 0.5 else (FAILS if np.nanmedian(rel) >= 1 else UNSURE))
    else:
        knn = df["attn_knn_final"].astype(float)
        add("attention concentrates on tokens near the query", "mass on the nearest 10% of tokens → 1",
            f"final attn_knn: median {np.nanmedian(knn):.3f} over {len(knn)} runs",
            HOLDS if np.nanmedian(knn) >= 0.9 else (FAILS if np.nanmedian(knn) < 0.3 else UNSURE))
    identity = scale_identity(df)

    def decided(claim, pred):
        """The claim's row when the scale identity decides it; True if it did."""
        if identity:
            add(claim, pred, identity, NOT_HERE)
        return bool(identity)

    # 2. number of phases by regime
    meas, ok = [], []
    for reg, pred in (("flat", 2), ("sharp", 3)):
        g = df[df["regime"] == reg]
        if len(g):
            frac = (g["n_phases"] == pred).mean()
            meas.append(f"{reg}: median {g['n_phases'].median():.0f} phases, {frac:.0%} of {len(g)} runs have {pred}")
            ok.append(frac >= 0.5)
    if not decided("two phases in the flat regime, three in the sharp", "flat: 2, sharp: 3"):
        add("two phases in the flat regime, three in the sharp", "flat: 2, sharp: 3",
            "; ".join(meas) or "no regime assigned (continuous tokens)",
            NOT_HERE if not ok else (HOLDS if all(ok) else (FAILS if not any(ok) else UNSURE)))
    # 3. T ∝ 1/L² at fixed η
    sl = tabs["slopes"]
    sl = sl[(sl["model"] == model) & (sl["threshold"] == "t_rel_1e-2") & sl["slope"].notna()]
    if decided("T ∝ 1/L² at fixed η", "slope −2"):
        pass
    elif len(sl):
        parts, hits = [], []
        for r in sl.itertuples():
            # the theory's exponent: -2 (flat); in the sharp regime the log(KLΔ/ε) factor moves it
            # towards theory_slope by an amount whose constant is unknown, so accept [-2, theory_slope]
            lo_t, hi_t = sorted([-2.0, r.theory_slope if np.isfinite(r.theory_slope) else -2.0])
            inside = (r.ci_lo <= hi_t and r.ci_hi >= lo_t) if np.isfinite(r.ci_lo) else None
            reg = r.regime if isinstance(r.regime, str) else "all runs"
            where = r.group or f"lr {r.lr:g}, Δ {_fmt(r.delta)}"
            parts.append(f"{reg} ({where}): {r.slope:.2f} [{_fmt(r.ci_lo)}, {_fmt(r.ci_hi)}] "
                         f"vs theory {_fmt(lo_t)}…{_fmt(hi_t)}")
            hits.append(inside)
        verdict = UNSURE if any(h is None for h in hits) else (HOLDS if all(hits) else (FAILS if not any(hits) else UNSURE))
        add("T ∝ 1/L² at fixed η", "log-log slope of t_rel_1e-2 against L between −2 and the slope of T* (log factor); "
            "95% bootstrap interval over seeds", "; ".join(parts), verdict)
    else:
        add("T ∝ 1/L² at fixed η", "slope −2", "fewer than two values of L reached loss/loss₀ ≤ 1e-2", UNSURE)
    # 4. flat converges faster at high accuracy: t_rel_1e-3 / t_rel_1e-1 smaller in the flat regime
    ratio = (df["t_rel_1e-3"].astype(float) / df["t_rel_1e-1"].astype(float)).replace([np.inf], np.nan)
    rf, rs = ratio[df["regime"] == "flat"].dropna(), ratio[df["regime"] == "sharp"].dropna()
    if decided("flat converges faster at high accuracy", "t(1e-3)/t(1e-1) smaller in the flat regime"):
        pass
    elif len(rf) and len(rs):
        add("flat converges faster at high accuracy", "t(1e-3)/t(1e-1) smaller in the flat regime (log(1/ε) vs 1/ε)",
            f"median t(1e-3)/t(1e-1): flat {rf.median():.2f} ({len(rf)} runs), sharp {rs.median():.2f} ({len(rs)} runs)",
            HOLDS if rf.median() < rs.median() else FAILS)
    else:
        add("flat converges faster at high accuracy", "t(1e-3)/t(1e-1) smaller when flat",
            "not enough runs of both regimes reached 1e-3 of their initial loss", UNSURE)
    # 5. a transition at L*
    f, s = df[df["regime"] == "flat"]["n_phases"], df[df["regime"] == "sharp"]["n_phases"]
    if decided("a transition at L* = 1/(Δδ)", "more phases above L* than below"):
        pass
    elif len(f) and len(s):
        diff = s.mean() - f.mean()
        add("a transition at L* = 1/(Δδ)", "more phases above L* than below",
            f"mean n_phases: {f.mean():.2f} below L*, {s.mean():.2f} above (difference {diff:+.2f})",
            HOLDS if diff >= 0.5 else (FAILS if diff <= 0 else UNSURE))
    else:
        add("a transition at L* = 1/(Δδ)", "behaviour changes at L*", "the sweep does not cross L*", NOT_HERE)
    # 6. the flat regime tolerates larger steps
    st = tabs["stability"][tabs["stability"]["model"] == model].dropna(subset=["max_stable_lr"])
    groups = [(grp, g) for grp, g in st.groupby("group", sort=True) if len(g) >= 2 and g["lrs_tried"].max() >= 2]
    rhos, parts = [], []
    for grp, g in groups:
        tag = f" ({grp})" if grp else ""
        if (g["max_stable_lr"] == g["max_stable_lr"].max()).all():
            parts.append(f"no run diverged at any L up to the largest lr tried ({g['max_stable_lr'].max():g}){tag}")
            continue
        rho = g["L"].rank().corr(g["max_stable_lr"].rank())     # Spearman
        rhos.append(rho)
        parts.append(f"Spearman correlation of largest stable lr with L: {_fmt(rho, 2)} over {len(g)} values of L{tag}")
    if decided("the flat regime tolerates larger steps", "largest stable lr decreases with L"):
        pass
    elif not groups:
        add("the flat regime tolerates larger steps", "largest stable lr decreases with L",
            "this experiment does not sweep the learning rate (see ldl_stability)", NOT_HERE)
    else:
        verdict = UNSURE if not rhos or len(rhos) < len(groups) else (
            HOLDS if all(r < -0.5 for r in rhos) else (FAILS if all(r > 0 for r in rhos) else UNSURE))
        add("the flat regime tolerates larger steps", "largest stable lr decreases with L", "; ".join(parts), verdict)
    # 7. accurate prediction for unseen functions
    rel = df["final_test_loss"] / df["test_loss0"]
    add("accurate prediction for unseen functions (Prop. 1)", "test loss on new task functions → 0",
        f"final test loss / initial test loss: median {rel.median():.3g}, worst {rel.max():.3g} over {len(rel)} runs",
        HOLDS if rel.max() <= 0.05 else (FAILS if rel.median() > 0.5 else UNSURE))
    if n_div:
        rows.append({"claim": "(runs excluded)", "prediction": "", "measurement": f"{n_div} diverged run(s) excluded",
                     "verdict": ""})
    return rows


def mean_field_check(tabs, model) -> str | None:
    """How far the measured loss is from the mean-field curve (no free constant): a sentence."""
    th = tabs["theory_curves"]
    if th.empty:
        return None
    ids = set(tabs["runs"].loc[tabs["runs"]["model"] == model, "run_id"])
    mf = th[(th["metric"] == "mean_field_loss") & th["run_id"].isin(ids)]
    if mf.empty:
        return None
    cur = tabs["curves"][tabs["curves"]["metric"] == "train_loss"]
    j = mf.merge(cur, on=["run_id", "epoch"], suffixes=("_mf", "_gd"))
    err = np.abs(np.log(j["value_gd"] / j["value_mf"]))
    return (f"Measured train loss against the mean-field curve (dashed, LDL Lemma 2 integrated with balanced counts, "
            f"no fitted constant): median |log ratio| {np.nanmedian(err):.3f}, 90th percentile {np.nanpercentile(err, 90):.3f}. "
            "The finite-N loss sits above the curve by O(1/N): counts fluctuate around p_k N.")
