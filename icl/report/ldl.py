"""The LDL figures of a report: the collapse on the theory's clock, slopes, stability and the
phase diagram. The verdicts are icl.analyse.claims.ldl's."""
from __future__ import annotations

import matplotlib.colors as mcolors
import matplotlib.patches as mpatches
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import seaborn as sns

from icl.analyse import fits
from icl.report.figures import QUALITATIVE, Figure, later, legend_below, palette, png
from icl.report.settings import distinct_settings, label_order, setting_label
from icl.analyse.claims.ldl.identities import regime_of
from icl.theory import ldl


def _2f(x: float) -> str:
    """Two decimals, never '-0.00' (a slope of -0.004 prints as 0.00)."""
    return f"{round(float(x), 2) + 0.0:.2f}"


def _runs(tabs):
    """Runs joined with summary and theory, diverged runs excluded (they are listed elsewhere)."""
    df = tabs["runs"].merge(tabs["summary"], on="run_id").merge(tabs["theory"], on="run_id")
    return df[~df["diverged"]]


def collapse_figure(tabs, model) -> Figure | None:
    """loss / loss₀ of every L against the collapse clock τ (theory.parquet's clock_per_epoch:
    η‖v‖⁴ times the label-difference variance, icl.theory.ldl.collapse_rate), on which the
    mean-field curves of all L, c and Δ coincide; the mean-field curve dashed. One panel per
    setting the sweep varies besides L and the seed (Δ, N ...), each L its own colour: a line is
    one L's median over seeds of one setting, never a median over settings."""
    df = _runs(tabs)
    df = df[(df["model"] == model) & df["clock_per_epoch"].notna()]
    if df.empty or df["L"].nunique() < 2:
        return None
    cur = tabs["curves"][tabs["curves"]["metric"] == "train_loss"].merge(
        df[["run_id", "L", "clock_per_epoch", "loss0"]], on="run_id")
    cur = cur[cur["epoch"] > 0]
    cur["tau"] = cur["epoch"] * cur["clock_per_epoch"]
    cur["rel"] = cur["value"] / cur["loss0"]
    colours = palette(tabs["runs"]["L"])
    runs = tabs["runs"][tabs["runs"]["run_id"].isin(df["run_id"])]
    keys = distinct_settings(runs, "L")
    groups = [(key, set(g["run_id"])) for key, g in runs.groupby(keys, sort=True)] if keys else [((), set(runs["run_id"]))]
    one = len(groups) == 1
    ncol = min(3, len(groups))
    nrow = -(-len(groups) // ncol)
    legend_rows = 0.15 * (cur["L"].nunique() // 4 + 1)
    fig, axes = plt.subplots(nrow, ncol, squeeze=False, sharex=True, sharey=True,
                             figsize=(5.2, 4.4 + legend_rows) if one else (3.4 * ncol, 2.9 * nrow + 1.0 + legend_rows))
    mf = tabs["theory_curves"]
    mf = mf[(mf["metric"] == "mean_field_loss") & mf["run_id"].isin(df["run_id"])]
    for ax, (key, ids) in zip(axes.ravel(), groups):
        mine = cur[cur["run_id"].isin(ids)]
        for L in sorted(mine["L"].unique()):
            med = mine[mine["L"] == L].groupby("tau")["rel"].median()
            ax.plot(med.index, med.values, color=colours[float(L)], label=f"L={L:g}",
                    gid=f"L={L:g}{', ' + setting_label(keys, key) if keys else ''}")
        theirs = mf[mf["run_id"].isin(ids)]
        if len(theirs):
            rid = theirs["run_id"].iloc[0]
            curve = theirs[theirs["run_id"] == rid].sort_values("epoch")
            start = float(curve["value"].iloc[0])              # at epoch 0, as the runs' loss₀ (the log axis drops it)
            curve = curve[curve["epoch"] > 0]
            clock = float(df.loc[df["run_id"] == rid, "clock_per_epoch"].iloc[0])
            ax.plot(curve["epoch"] * clock, curve["value"] / start, "k--", lw=1, label="mean field")
        ax.set_xscale("log")
        ax.set_yscale("log")
        if not one:
            ax.set_title(setting_label(keys, key), fontsize=8)
    for ax in axes.ravel()[len(groups):]:
        ax.axis("off")
    for ax in axes[-1]:
        ax.set_xlabel("collapse clock τ" if not one else "collapse clock τ = η‖v‖⁴·E[(f(v_n) − f(v_k))²]·t")
    for ax in axes[:, 0]:
        ax.set_ylabel("train loss / loss₀" if not one else "train loss / loss₀ (median over seeds)")
    title = "every L on one clock: one curve if L only rescales time"
    if one:
        axes[0, 0].set_title(title)
    else:
        fig.suptitle(f"{title} (each line an L's median over seeds; τ = η‖v‖⁴·E[(f(v_n) − f(v_k))²]·t)", fontsize=9)
    legend_below(list(axes.ravel()[:len(groups)]), ncol=6 if not one else 4)
    return png(fig)


def slope_figure(tabs, model, tcol="t_rel_1e-2") -> Figure | None:
    """Convergence time against L with the fitted and the theory's line of each row of slopes.parquet
    (regime × group): a panel per group (a Δ, N ... of the sweep) where there are several, each with
    its own flat/sharp split, so no panel holds more than two fits, two theory lines and one split;
    the slopes in the panel's title, the legend naming each kind of line once."""
    sl = tabs["slopes"]
    sl = sl[(sl["model"] == model) & (sl["threshold"] == tcol) & sl["slope"].notna()]
    df = _runs(tabs)
    df = df[(df["model"] == model) & df[tcol].notna() & (df[tcol] > 0)]
    if df["L"].nunique() < 2:
        return None
    df = df.assign(lr=fits.step_key(df))               # slopes.parquet's lr (lr_ref where the step follows the clock)
    keys = [k for k in sl.columns if k in df.columns and k not in ("model", "model_kind")]
    df = fits.groupable(df, keys)
    groups = list(dict.fromkeys(sl["group"])) or [""]                 # the sweep's order (N=50 before N=100)
    ncol = min(3, len(groups))
    nrow = -(-len(groups) // ncol)
    one = len(groups) == 1
    fig, axes = plt.subplots(nrow, ncol, figsize=(5.2, 5.0) if one else (3.4 * ncol, 2.9 * nrow + 1.0),
                             squeeze=False, sharex=True, sharey=True)
    drawn = {}                                              # (regime, fitted or theory) -> slopes drawn
    untestable = untestable_regimes(tabs.get("verdicts"), model, "ldl.time_vs_L")
    for ax, group in zip(axes.ravel(), groups):
        said, members = [], pd.Series(False, index=df.index)
        for reg, color, mark in REGIMES:
            for r in sl[(sl["regime"] == reg) & (sl["group"] == group)].to_dict("records"):
                g = df[fits.matching(df, r, keys)]
                members |= fits.matching(df, r, [k for k in keys if k != "regime"])
                if len(g) < 2:
                    continue
                ax.scatter(g["L"], g[tcol], color=color, s=12, marker=mark, alpha=0.7, lw=0)
                x = np.log(g["L"].to_numpy(float))
                xs = np.linspace(x.min(), x.max(), 20)
                for slope, ls, what in ((r["slope"], "-", "fitted"), (r["theory_slope"], "--", "theory")):
                    if np.isfinite(slope):
                        b = np.mean(np.log(g[tcol].to_numpy(float))) - slope * x.mean()
                        pale = what == "theory" and reg in untestable
                        ax.plot(np.exp(xs), np.exp(b + slope * xs), color=color, ls=ls, lw=1.4 if ls == "-" else 1,
                                alpha=0.35 if pale else 1,
                                gid=f"{reg}{', ' + group if group else ''}: {what} slope {slope:.3g}")
                        drawn.setdefault((reg, what), []).append((slope, r))
                said.append(f"{reg} {_2f(r['slope'])}, theory {_2f(r['theory_slope'])}")
        split = df.loc[members | one, "L_split" if "L_split" in df else "L_star"].dropna().unique()
        for Lst in split:
            ax.axvline(Lst, color="grey", ls=":", lw=1, gid=f"{group or 'the'} flat/sharp split L={Lst:.3g}")
        ax.set_xscale("log")
        ax.set_yscale("log")
        if not one:
            ax.set_title("\n".join([group, *said]), fontsize=8)
    for ax in axes.ravel()[len(groups):]:
        ax.axis("off")
    for ax in axes[-1]:
        ax.set_xlabel("L")
    for ax in axes[:, 0]:
        ax.set_ylabel(f"{tcol} (epochs)")
    lead = axes[0][0]
    for reg, color, _ in REGIMES:
        fitted, theory = drawn.get((reg, "fitted"), []), drawn.get((reg, "theory"), [])
        if len(fitted) == 1:
            (slope, r), = fitted
            kind = "range" if str(r.get("interval", "")).startswith("range") else "95%"
            lead.plot([], [], color=color, label=f"{reg}: fitted slope {_2f(slope)} ({kind} [{_2f(r['ci_lo'])}, {_2f(r['ci_hi'])}])")
        elif fitted:
            lead.plot([], [], color=color, label=f"{reg}: fitted slope, each panel's in its title "
                                              f"({_span([f for f, _ in fitted])}; the verdicts give their intervals)")
        if theory:
            why = untestable.get(reg)
            lead.plot([], [], color=color, ls="--", lw=1, alpha=0.35 if why else 1,
                      label=f"{reg}: {theory_label(reg, tcol, _span([t for t, _ in theory]))}"
                            + (f"\nnot testable here (pale): {why}" if why else ""))
    lead.plot([], [], color="grey", ls=":", lw=1, label="the flat/sharp split" + ("" if one else " of each panel's runs"))
    fig.suptitle("convergence time against L" + ("" if one else f", a panel per {' and '.join(_swept(groups))}"),
                 fontsize=10 if not one else 12)
    legend_below(axes.ravel()[:len(groups)], ncol=1, fontsize=7)
    return png(fig)


REGIMES = (("flat", "C0", "o"), ("sharp", "C3", "s"))      # colour and marker of each regime's points and lines


def untestable_regimes(verdicts, model: str, claim: str) -> dict[str, str]:
    """Regime -> where to read why, for each regime whose every row of `claim` (or its .ext) reads not testable:
    a figure that draws that claim's theory line says so on itself (issue 50: the sharp theory
    line fell tenfold over L beside runs the verdicts call L-independent by construction)."""
    if verdicts is None or not len(verdicts):
        return {}
    v = verdicts[(verdicts["model"] == model) & (verdicts["scope"] == "setting")
                 & verdicts["claim_id"].isin([claim, claim + ".ext"])]
    regime = v["group"].astype(str).map(regime_of)
    out = {}
    for reg, _, _ in REGIMES:
        mine = v[regime == reg]
        mine = mine if len(mine) else v               # a row without a regime speaks for both
        if len(mine) and (mine["verdict"] == "not testable").all():
            out[reg] = f"the verdict table's {claim} rows say why"
    return out


def _swept(groups: list[str]) -> list[str]:
    """The settings named in slopes.parquet's group strings ("delta=1.5, N=50" -> delta, N)."""
    return list(dict.fromkeys(part.split("=")[0].strip() for g in groups for part in g.split(",") if "=" in part))


def _span(values: list[float]) -> str:
    """A slope, or the range of several."""
    lo, hi = min(values), max(values)
    return _2f(lo) if np.isclose(lo, hi, atol=5e-3) else f"{_2f(lo)} to {_2f(hi)}"


def theory_label(regime: str, tcol: str, slope: str) -> str:
    """What a theory slope is: the theorem's T at each run's own ε and η (unit constants). −2 is
    T ∝ 1/(ηL²) at one ε; at a relative threshold ε = √(x·loss₀) grows with L (loss₀ ∝ L²), which
    the sharp regime's 1/ε turns into about −3 and the flat regime's log(K/ε) bends a little."""
    if regime == "sharp":
        why = "Thm 2, T ∝ 1/(ηεL²)" + (", ε ∝ L at a relative threshold" if tcol.startswith("t_rel") else "")
    else:
        why = "Thm 1, T ∝ log(K/ε)/(ηL²)"
    return f"theory slope {slope}\n({why}; each run's ε, η)"


def stability_figure(tabs, model) -> Figure | None:
    st = tabs["stability"][tabs["stability"]["model"] == model]
    if st.empty or st["lrs_tried"].max() < 2:
        return None
    groups = sorted(st.groupby("group", sort=False), key=lambda g: label_order(g[0]))    # Δ=2 before Δ=10
    fig, ax = plt.subplots(figsize=(5.2, 4.0 + 0.1 * (2 + len(groups))))
    # every group drawn, each its own colour (past the qualitative palette's ten, evenly spaced hues);
    # the two kinds of line named once, in black, and each group once, by its colour
    colours = QUALITATIVE if len(groups) <= len(QUALITATIVE) else sns.color_palette("husl", len(groups))
    for (group, g), color in zip(groups, colours):
        ax.plot(g["L"], g["max_stable_lr"], "o-", color=color, label=group or None)
        ax.plot(g["L"], g["max_converged_lr"], "s--", color=color)
    ax.plot([], [], "o-", color="k", label="largest lr with no seed diverged or above loss₀")
    ax.plot([], [], "s--", color="k", label="largest lr at which all seeds converged")
    runs = _runs(tabs)
    for Lst in runs.get("L_split", runs["L_star"]).dropna().unique():
        ax.axvline(Lst, color="grey", ls=":", lw=1)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("L (dotted: the flat/sharp split)")
    ax.set_ylabel("learning rate")
    ax.set_title("step-size stability")
    legend_below(ax, ncol=2, fontsize=7)
    return png(fig)


def phase_diagram_figures(tabs, model, tcol="t_rel_1e-2") -> list[Figure]:
    """One Δ × L phase diagram per (K, N) of the sweep (L* depends on both)."""
    df = _runs(tabs)
    df = df[(df["model"] == model) & df["K"].notna()]
    groups = list(df.groupby(["K", "N"]))
    return [later(phase_diagram_figure, g, int(K), int(N), tcol, f" (K={K}, N={N})" if len(groups) > 1 else "")
            for (K, N), g in groups]


def phase_diagram_figure(df, K, N, tcol, tag="") -> Figure | None:
    """Δ × L maps of the median crossing time (log colour scale) and of the median number of
    phases (one colour per count: a count is an integer); L* = 1/(Δδ) drawn across both. A cell
    no run filled (none crossed, or no count) is hatched, as the title says."""
    if df["delta"].nunique() < 2 or df["L"].nunique() < 3:
        return None
    fig, axes = plt.subplots(1, 2, figsize=(10.4, 4.0))     # within the page's 1,150 px
    Ls, Ds = sorted(df["L"].unique()), sorted(df["delta"].unique())
    narrow = ""
    for ax, col in ((axes[0], tcol), (axes[1], "n_phases")):
        m = df.assign(v=df[col].astype(float)).groupby(["delta", "L"])["v"].median().unstack()
        data = np.ma.masked_invalid(m.reindex(index=Ds, columns=Ls).to_numpy(float))
        ax.add_patch(mpatches.Rectangle((0, 0), len(Ls), len(Ds), hatch="//", fill=False, edgecolor="0.6", lw=0,
                                        zorder=0))            # shows through the masked (empty) cells
        if col == tcol:
            im = ax.pcolormesh(np.arange(len(Ls) + 1), np.arange(len(Ds) + 1), data, cmap="magma_r", shading="flat",
                               norm=mcolors.LogNorm())
            narrow = narrow_scale(data, f"{tcol}: the colours span", "epochs", clocked=_clocked(df))
            fig.colorbar(im, ax=ax, label="epochs (log scale" + ("; a narrow range" if narrow else "") + ")")
            title = f"{tcol}, median over seeds"
        else:
            counts = np.arange(np.floor(data.min()) if data.count() else 1, (np.ceil(data.max()) if data.count() else 3) + 1)
            bounds = np.append(counts - 0.5, counts[-1] + 0.5)
            norm = mcolors.BoundaryNorm(bounds, plt.get_cmap("viridis").N)
            im = ax.pcolormesh(np.arange(len(Ls) + 1), np.arange(len(Ds) + 1), data, cmap="viridis", norm=norm,
                               shading="flat")
            bar = fig.colorbar(im, ax=ax, label="phases (median over seeds)", boundaries=bounds, ticks=counts)
            bar.ax.set_yticklabels([f"{c:g}" for c in counts])
            title = "number of phases, median over seeds"
            if data.count() and data.min() == data.max():
                title += f": {data.min():g} in every cell"
        # L* = 1/(Δδ) on the index grid: interpolate in log L
        lstar = [ldl.L_star(K, N, D) for D in Ds]
        xi = np.interp(np.log(lstar), np.log(Ls), np.arange(len(Ls))) + 0.5
        ax.plot(xi, np.arange(len(Ds)) + 0.5, "c-o", lw=2)
        ax.set_xticks(np.arange(len(Ls)) + 0.5, [f"{L:.2g}" for L in Ls], rotation=60, fontsize=7)
        ax.set_yticks(np.arange(len(Ds)) + 0.5, [f"{D:g}" for D in Ds])
        ax.set_xlabel("L")
        ax.set_ylabel("Δ")
        ax.set_title(title + tag, fontsize=10)
    fig.suptitle("cyan: L* = 1/(Δδ), the flat/sharp threshold; hatched: no run crossed or no count"
                 + (f"\n{narrow}" if narrow else ""), fontsize=9)
    return png(fig)


NARROW = 0.2       # a colour scale whose top is within 20% of its bottom is said to be narrow


def _clocked(df: pd.DataFrame) -> bool:
    """Whether every run's step follows the collapse clock (lr_rule: clock, icl.plan.shards.with_step): the
    design then sets the crossing times alike, so they are not a finding."""
    return "lr_rule" in df and df["lr_rule"].astype(str).eq("clock").all()


def narrow_scale(data, what: str, unit: str, clocked: bool = False) -> str:
    """The sentence a figure adds where its colour scale spans a few per cent: the range in numbers
    (the colours alone read as large differences), and, where the step follows the clock, that the
    design holds the quantity about constant. "" for a wide scale."""
    if not np.ma.count(data):
        return ""
    lo, hi = float(np.ma.min(data)), float(np.ma.max(data))
    if lo <= 0 or hi / lo - 1 > NARROW:
        return ""
    out = f"{what} only {lo:.3g}–{hi:.3g} {unit} ({hi / lo - 1:.0%})"
    return out + ("; about constant by design: each run's step follows the collapse clock (lr_rule: clock)"
                  if clocked else "")


def regimes_by_model_table(tabs) -> str:
    """Flat against sharp for every model of the experiment side by side (HTML): per model (and its
    layers and heads, where it has them) and regime, the median time to a tenth of the initial
    loss, the median number of phases, the final own attention and how many runs reached
    uniform attention's 10⁻² — so a reader sees whether the flat/sharp difference persists from
    softmax_q to a block to deeper and multi-head models (LDL's reviewers' question). The
    regimes are theory.parquet's split; diverged runs left out."""
    df = _runs(tabs)
    if "regime" not in df or df["regime"].isna().all() or df["model"].nunique() < 2:
        return ""
    conv = df["final_train_loss"] <= 1e-2 * df.get("uniform_train_loss", df["loss0"]).fillna(df["loss0"])
    df = df.assign(converged=conv)
    keys = ["model", "model_kind"] + [c for c in ("layers", "heads") if c in df and df[c].notna().any()]
    g = df.groupby(keys + ["regime"], dropna=False, sort=False)
    t = pd.DataFrame({"runs": g.size(), "t_rel_1e-1 (median)": g["t_rel_1e-1"].median(),
                      "phases (median)": g["n_phases"].median(), "final Attn_own (median)": g["attn_own_final"].median(),
                      "converged": g["converged"].sum()}).unstack("regime")
    t.columns = [f"{what}, {reg}" for what, reg in t.columns]
    t = t.reset_index()
    for c in t.columns:
        if isinstance(t[c].dtype, (pd.Int64Dtype, pd.Float64Dtype)):
            t[c] = t[c].astype("float64")
    return t.to_html(index=False, float_format=lambda v: f"{v:.3g}", na_rep="—", classes="tbl")


def phase_note(tabs, verdicts: pd.DataFrame | None = None) -> str:
    """What a count of phases can show here, read from the phase rows themselves: how many were
    decided, and how many read not testable because the counter's power on the theory's own flows
    (icl.analyse.claims.ldl.phase_power, measured per setting) is below what a count needs; '' for runs
    without an own-feature logit or without phase rows."""
    df = tabs["runs"].merge(tabs["summary"], on="run_id")
    if "n_phases" not in df or df["n_phases"].isna().all() or verdicts is None or verdicts.empty:
        return ""
    v = verdicts[verdicts["claim_id"].astype(str).str.replace(".ext", "", regex=False).eq("ldl.phases")]
    if v.empty:
        return ""
    weak = v["reason"].astype(str).str.contains("a count of phases cannot test this here", regex=False)
    decided = v["verdict"].isin(["holds", "does not hold"])
    out = [f"Each run's phases are the fewest laws of growth of its own logit that fit it as closely as its seeds "
           f"agree; the phase claims are read from those counts where the same count on the theory's own flow (Lemma 2 "
           f"on each run's sampled feature counts) shows the predicted phases in at least 80% of the runs: "
           f"{int(decided.sum())} of {len(v)} phase row{'s' if len(v) != 1 else ''} decided"]
    if weak.any():
        out.append(f"{int(weak.sum())} not testable for want of that power (each row gives it)")
    return "; ".join(out) + "."
