"""The ZFB part of a report: test error against prompt length under shift, the learned effective
matrix against Γ⁻¹, slopes against c². The verdicts are icl.analyse.claims.zfb's."""
from __future__ import annotations

import numpy as np
import pandas as pd
import matplotlib.pyplot as plt
import seaborn as sns

from icl import models
from icl.analyse.claims import count
from icl.report.figures import QUALITATIVE, REFERENCE, Figure, legend_below, palette, png
from icl.analyse.claims.zfb import BEYOND_LINEAR, TRAINED_LSA, healthy_shift

MARKERS = "oxs^Dv"      # one per model drawn beside the LSA, so coinciding curves stay apart

SOURCE_NOTES = [
    "Thm 4.2 as transcribed omits a 1/M on the variance term; without it the error would not vanish as M, N → ∞. "
    "The exact error used here is (1/M) tr[(Λ² + tr(Λ)Λ)Γ⁻²Λ] + (1/N²) tr[(Λ + tr(Λ)I)²Γ⁻²Λ] (averaged over w).",
    "The effective matrix acting as ŷ = x_qᵀ B m̂ is w22·(W11)ᵀ, not w22·W11; the two agree at the optimum "
    "(Γ⁻¹ is symmetric) but not during training with anisotropic Λ. matrices.parquet's 'effective' is w22·W11ᵀ.",
    "The random-covariance limit ŷ → ⅓⟨w, x_q⟩ holds for a query independent of the prompt's covariance; with the "
    "query drawn from the prompt's own covariance the slope tends to ⅔ (both are measured below).",
    "Eq. (5) (covariate scaling) drops w in its middle expression; the slope is exactly c²·tr(Γ⁻¹Λ²)/tr(Λ) at every M.",
]


def _cells(shift: pd.DataFrame) -> list[tuple]:
    return list(shift[["shift", "c"]].drop_duplicates().itertuples(index=False, name=None))


def _cell(df, kind, c):
    return df[(df["shift"] == kind) & ((df["c"] == c) | (df["c"].isna() & pd.isna(c)))]


def training_laws(tabs, shift: pd.DataFrame) -> list[tuple[str, pd.DataFrame]]:
    """shift rows by the training prompts' token law, where an experiment trains on several (e.g. a
    fixed and a random covariance): a trained run's rows by its run, a baseline's by its evaluation
    prompts (eval_id), which the trained runs of that law share. One group, unlabelled, otherwise."""
    runs = tabs["runs"]
    law = runs["token_kind"].astype(str) + runs["covariance"].map(lambda c: f" ({c})" if isinstance(c, str) else "")
    if law.nunique() <= 1:
        return [("", shift)]
    of_run = dict(zip(runs["run_id"], law))
    trained = shift[shift["run_id"].notna()]
    of_eval = dict(zip(trained["eval_id"], trained["run_id"].map(of_run)))
    where = shift["run_id"].map(of_run).fillna(shift["eval_id"].map(of_eval))
    return [(f"trained on {name}", shift[where == name]) for name in sorted(where.dropna().unique())]


def limit_curve(ax, d: pd.DataFrame, color, suffix: str, style: dict, floor: float = 0.0) -> None:
    """The LSA's limit against M, drawn as what it is: its closed form (theory_mse) where one exists
    at every M, a line labelled theory; else its Monte-Carlo error on the test prompts (the mean over
    prompt sets) with a ± 2 standard-error band, labelled an estimate, so that its noise reads as
    noise and not as a prediction."""
    if d.empty:
        return
    g = d.groupby("M").agg(th=("theory_mse", "median"), m=("mse", "mean"),
                           se=("mse_se", lambda x: float(np.sqrt((x.astype(float) ** 2).sum())) / max(len(x), 1)))
    if g["th"].notna().all():
        ax.plot(g.index, g["th"].clip(floor), color=color, label=f"LSA limit (theory){suffix}", **style)
        return
    lo, hi = np.maximum(g["m"] - 2 * g["se"], np.maximum(floor, g["m"] / 10)), g["m"] + 2 * g["se"]
    ax.plot(g.index, g["m"].clip(floor), color=color, label=f"LSA limit (estimate on the test prompts ± 2 SE){suffix}",
            **{**style, "lw": min(style.get("lw", 1.0), 1.4)})
    ax.fill_between(g.index, lo, hi, color=color, alpha=0.18, lw=0)


def error_vs_length_figure(shift: pd.DataFrame, title: str = "") -> Figure:
    """MSE against test length M, one panel per shift; LSA per training N (points), its limit wide,
    pale and dashed beneath; the
    other trained models (zfb.beyond_lsa's: every kind whose prediction is not linear in the labels,
    one colour per model) at the largest N."""
    cells = _cells(shift)
    ncol = min(2, len(cells))      # two panels a row: legible at the page's width, without zooming
    nrow = -(-len(cells) // ncol)
    fig, axes = plt.subplots(nrow, ncol, figsize=(5.2 * ncol, 3.4 * nrow), squeeze=False)
    Ns = sorted(shift["N"].dropna().unique())
    pal = palette(Ns)
    beyond = shift["model_kind"].isin(BEYOND_LINEAR)
    others_names = sorted(shift.loc[beyond, "predictor"].unique())
    for ax, (kind, c) in zip(axes.ravel(), cells):
        d = _cell(shift, kind, c)
        others = d[~d["predictor"].isin(["ols", "ridge"])]["mse"]
        floor = others[others > 0].min() / 3 if (others > 0).any() else 1e-12
        for N in Ns:
            # the theory wide and pale, dashed, under the trained LSA's thin line with its points:
            # where the two coincide (they should) both still show
            g = d[(d["predictor"] == TRAINED_LSA) & (d["N"] == N)].groupby("M")["mse"].median()
            if len(g):
                ax.plot(g.index, g.values, color=pal[N], label=f"LSA trained, N={N}", ls="-", lw=1.1, marker="o", ms=3,
                        zorder=3)
            limit_curve(ax, d[(d["predictor"] == "lsa_limit") & (d["N"] == N)], pal[N], f", N={N}",
                        dict(ls=(0, (3, 1.5)), lw=3.2, alpha=0.45, zorder=2), floor=floor)
        named = with_N(d)           # a baseline on the test prompts of the largest N's runs, as the other models
        for pred, color in (("ols", "k"), ("nadaraya_watson", QUALITATIVE[1])):
            g = named[(named["predictor"] == pred) & (named["N"] == (Ns[-1] if Ns else None))].groupby("M")["mse"].median()
            if len(g):
                ax.plot(g.index, g.values.clip(floor), ":", color=color,
                        label=f"{pred}, N={Ns[-1]}" + (" (exact for M ≥ d: drawn at the axis floor)" if pred == "ols" else ""))
        for pred, color, mark in zip(others_names, QUALITATIVE[3:] + QUALITATIVE[:3], MARKERS):
            g = d[(d["predictor"] == pred) & (d["N"] == (Ns[-1] if Ns else None))].groupby("M")["mse"].median()
            if len(g):      # a marker each: two models on the same curve both show
                ax.plot(g.index, g.values, "-.", color=color, marker=mark, ms=4, mfc="none", label=f"{pred}, N={Ns[-1]}")
        g = named[(named["predictor"] == "uniform_attention") & (named["N"] == (Ns[-1] if Ns else None))]
        g = g.groupby("M")["mse"].median()
        if len(g):
            ax.plot(g.index, g.values, **REFERENCE, label="uniform attention (the labels' mean: nothing learned)")
        for N in Ns:
            ax.axvline(N, color=pal[N], lw=0.6, alpha=0.5)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_ylim(bottom=floor)
        ax.set_xlabel("test length M (vertical lines: training N)", fontsize=10)
        ax.set_ylabel("MSE", fontsize=10)
        ax.set_title(f"{kind}" + ("" if pd.isna(c) else f", c={c:g}"), fontsize=11)
    for ax in axes.ravel()[len(cells):]:
        ax.axis("off")
    if title:
        fig.suptitle(title, fontsize=11)
    legend_below(list(axes.ravel()[:len(cells)]), ncol=3, fontsize=9)   # one legend for the grid, every series once
    return png(fig)


def escape_figure(summary: pd.DataFrame, runs: pd.DataFrame) -> Figure | None:
    """t_escape of one model's runs (summary.parquet: the first epoch its error at the query falls
    below half of predicting 0's), against the training prompts' N, one colour per training law;
    a run that never left its plateau is drawn at the top as ×, counted in the legend."""
    if "t_escape" not in summary:
        return None
    s = summary.merge(runs[["run_id", "N", "token_kind"]], on="run_id")
    if s.empty:
        return None
    epochs = int(runs["epochs"].max())
    fig, ax = plt.subplots(figsize=(5.2, 3.8))
    laws = sorted(s["token_kind"].astype(str).unique())
    colours = dict(zip(laws, QUALITATIVE))
    for i, law in enumerate(laws):
        g = s[s["token_kind"].astype(str) == law]
        x = g["N"].to_numpy(float) * (1 + 0.04 * (i - (len(laws) - 1) / 2))      # side by side, not on top
        t = g["t_escape"].astype("Float64").to_numpy(float, na_value=np.nan)
        ax.scatter(x[np.isfinite(t)], t[np.isfinite(t)], color=colours[law], s=22, label=f"trained on {law}")
        never = ~np.isfinite(t)
        if never.any():
            ax.scatter(x[never], np.full(never.sum(), epochs), color=colours[law], marker="x", s=40,
                       label=f"{law}: {count(never.sum(), 'run')} never left the plateau")
    ax.axhline(epochs, color="grey", lw=0.8, ls=":")
    ax.set_ylim(0, epochs * 1.08)
    ax.set_xlabel("training prompt length N")
    ax.set_ylabel("t_escape (epoch)")
    ax.set_title("when each run left its plateau (error at M = N < ½ of predicting 0)", fontsize=9)
    legend_below(ax, ncol=1)
    return png(fig)


def with_N(shift: pd.DataFrame) -> pd.DataFrame:
    """shift rows with every baseline's rows named by the training N of the runs tested on the same
    prompts (eval_id): a baseline sees only the test prompt, so its rows carry no N of their own;
    prompts shared by runs of several N are listed under each. A baseline that has a training length
    of its own (lsa_limit: the LSA's closed-form optimum at N) keeps it."""
    trained = shift[shift["run_id"].notna()]
    of_eval = trained[["eval_id", "N"]].dropna().drop_duplicates()
    base = shift[shift["run_id"].isna()]
    own = base[base["N"].notna()]          # a baseline of a training length of its own (the LSA's limit at N): kept there
    named = base[base["N"].isna()].drop(columns="N").merge(of_eval, on="eval_id")
    return pd.concat([trained, own, named[shift.columns]], ignore_index=True)


def predictor_table(shift: pd.DataFrame, tabs: dict | None = None) -> str:
    """Median MSE of every model and baseline by test length M, without shift (HTML): one block of
    rows per training N (and per training law where there are several, `tabs` given), each sorted by
    the best error reached, so no row pools runs of different N."""
    d = shift[shift["shift"] == "none"]
    if d.empty:
        return ""
    d = with_N(d)
    laws = training_laws(tabs, d) if tabs is not None else [("", d)]
    parts = []
    for law, rows in laws:
        t = rows.groupby(["N", "predictor", "M"])["mse"].median().unstack("M")
        t.columns = [f"M={m}" for m in t.columns]
        t = t.reset_index()
        t["N"] = t["N"].astype(int)
        t = t.assign(_best=t.filter(like="M=").min(axis=1)).sort_values(["N", "_best"]).drop(columns="_best")
        if len(laws) > 1:
            t.insert(0, "trained on", law.removeprefix("trained on "))
        parts.append(t)
    t = pd.concat(parts, ignore_index=True)
    return t.to_html(index=False, float_format=lambda v: f"{v:.3g}", na_rep="—", classes="tbl predictors")


def matrix_figure(tabs) -> Figure | None:
    gone = set(tabs["summary"].loc[tabs["summary"]["diverged"], "run_id"])
    runs = tabs["runs"][tabs["runs"]["model_kind"].isin(models.kinds("linear_attention")) & ~tabs["runs"]["run_id"].isin(gone)]
    if runs.empty:
        return None
    th = tabs["theory"].set_index("run_id")
    rid = runs.sort_values(["N", "seed"]).iloc[-1]["run_id"]
    target = th.loc[rid, "target"]
    if target is None:
        return None
    d = int(round(np.sqrt(len(target))))
    mats = tabs["matrices"]
    eff = mats[(mats["run_id"] == rid) & (mats["name"] == "effective")]
    last = eff[eff["epoch"] == eff["epoch"].max()].pivot(index="i", columns="j", values="value").to_numpy()
    fig, axes = plt.subplots(1, 3, figsize=(10.4, 3.6))     # within the page's 1,150 px
    T = np.asarray(target).reshape(d, d)
    vmax = max(np.abs(T).max(), np.abs(last).max())
    for ax, m, title in ((axes[0], last, "learned w22·W11ᵀ"), (axes[1], T, "theory target")):
        every = -(-d // 8)                    # at most 8 labelled rows and columns: d = 20 labelled every 3rd
        sns.heatmap(m, ax=ax, cmap="RdBu_r", vmin=-vmax, vmax=vmax, annot=d <= 6, fmt=".2f", square=True, cbar=False,
                    xticklabels=every, yticklabels=every)
        ax.set_title(title, fontsize=9)
    cur = tabs["curves"][(tabs["curves"]["metric"] == "dist_target")].merge(runs[["run_id", "N"]], on="run_id")
    colours = palette(runs["N"])
    for N, color in ((N, colours[float(N)]) for N in sorted(cur["N"].unique())):
        g = cur[cur["N"] == N].groupby("epoch")["value"]
        axes[2].plot(g.median().index, g.median().values, color=color, label=f"N={N}")
    axes[2].set_yscale("log")
    axes[2].set_xlabel("epoch")
    axes[2].set_ylabel("‖B − target‖_F / ‖target‖_F")
    axes[2].set_title("distance to the theory's optimum", fontsize=9)
    axes[2].legend(fontsize=7)
    N = int(runs.loc[runs["run_id"] == rid, "N"].iloc[0])
    fig.suptitle(f"effective matrix of one LSA run (N={N}) at the last epoch", fontsize=10)
    fig.set_layout_engine("tight")
    return png(fig)


def slope_figure(shift: pd.DataFrame) -> Figure | None:
    d = shift[(shift["shift"] == "scale") & shift["predictor"].isin([TRAINED_LSA, "lsa_limit"])]
    if d.empty:
        return None
    Mmax = d["M"].max()
    d = d[d["M"] == Mmax]
    fig, ax = plt.subplots(figsize=(5.2, 3.6))
    Ns = sorted(d["N"].dropna().unique())
    colours = palette(Ns)
    for N, color in ((N, colours[float(N)]) for N in Ns):
        g = d[(d["predictor"] == TRAINED_LSA) & (d["N"] == N)]
        ax.scatter(g["c"] ** 2, g["slope"], color=color, s=16, label=f"trained LSA, N={N}")
        t = d[(d["predictor"] == "lsa_limit") & (d["N"] == N)].groupby("c")["theory_slope"].first()
        ax.plot(t.index ** 2, t.values, "--", color=color, lw=1)
    cs = np.linspace(0, d["c"].max() ** 2, 10)
    ax.plot(cs, cs, "k:", lw=1, label="c² (M, N → ∞)")
    ax.plot([], [], "--", color="grey", lw=1, label="finite-N theory (ZFB eq. 5), a colour per N")
    ax.set_xlabel("c²")
    ax.set_ylabel(f"slope of ŷ on y at M={Mmax}")
    ax.set_title("covariate scaling: slope against c² (dashed: finite-N theory)", fontsize=9)
    ax.legend(fontsize=7)
    return png(fig)


MODEL_SETTINGS = ("positional", "layers", "heads", "width")     # what makes one model name several models


def _lsa_rows(tabs) -> pd.DataFrame:
    """shift rows of healthy runs, trained LSA rows labelled 'lsa' (icl.analyse.claims.zfb.healthy_shift);
    a model name trained under several model settings (zfb_gpt's gpt, with learned positions and
    with none) a predictor per setting, 'gpt (positional: none)', so that no line, table row or
    median pools two models."""
    sh = healthy_shift(tabs)
    for name, g in tabs["runs"].groupby("model", sort=False):
        varying = [c for c in MODEL_SETTINGS if c in g and g[c].astype(str).nunique() > 1]
        if not varying:
            continue
        label = {rid: f"{name} ({', '.join(f'{c}: {v}' for c, v in zip(varying, vals))})"
                 for rid, *vals in g[["run_id", *varying]].astype(str).itertuples(index=False)}
        mine = sh["run_id"].isin(label) & (sh["predictor"] == name)
        sh.loc[mine, "predictor"] = sh.loc[mine, "run_id"].map(label)
    return sh


def seed_figure(shift: pd.DataFrame, laws: list[tuple[str, pd.DataFrame]]) -> Figure | None:
    """ZFB §5's figure: a row per training law (fixed, random covariances), a column per training
    N; in each panel the error against the test length M of every nonlinear model (solid: the
    first, dash-dot: the next) on each test law but the training one (a colour each: the identity,
    random covariances at c = 1, 4, 9), the LSA limit on the same prompts dashed, OLS dotted."""
    nonlinear = BEYOND_LINEAR
    if not shift["model_kind"].isin(nonlinear).any():
        return None
    Ns = sorted(shift.loc[shift["model_kind"].isin(nonlinear), "N"].dropna().unique())
    tests = [cell for cell in _cells(shift) if cell[0] != "none"]
    if not Ns or not tests:
        return None
    names = sorted(shift.loc[shift["model_kind"].isin(nonlinear), "predictor"].unique())
    legend_in = 0.25 * -(-(len(tests) + len(names) + 2) // 3) + 0.2       # three entries a row
    fig, axes = plt.subplots(len(laws), len(Ns), figsize=(max(7.5, min(10.4, 3.4 * len(Ns))), 3.0 * len(laws) + legend_in),
                             squeeze=False, sharey=True)
    colours = dict(zip(tests, QUALITATIVE))
    styles = dict(zip(names, ["-", "-.", (0, (5, 1, 1, 1, 1, 1))]))
    marks = dict(zip(names, MARKERS))          # coinciding models (gpt, gpt_nopos) both show
    drawn = shift[shift["predictor"].isin([*names, "lsa_limit"]) & (shift["mse"] > 0)]["mse"]
    floor = drawn.min() / 3 if len(drawn) else 1e-3      # OLS is exact for M ≥ d: drawn at this floor
    for row, (law, rows) in zip(axes, laws):
        named = with_N(rows)
        for ax, N in zip(row, Ns):
            for cell in tests:
                d = _cell(named, *cell)
                d = d[d["N"] == N]
                limit_curve(ax, d[d["predictor"] == "lsa_limit"], colours[cell], "", dict(ls="--", lw=0.9), floor=floor)
                for pred, ls in [*((n, styles.get(n, "-")) for n in names), ("ols", ":")]:
                    g = d[d["predictor"] == pred].groupby("M")["mse"].median()
                    if len(g):
                        ax.plot(g.index, g.values.clip(floor), ls=ls, color=colours[cell],
                                lw=1.2 if pred in names else 0.9, marker=marks.get(pred, ""), ms=3.5, mfc="none")
            ax.set_ylim(bottom=floor)
            ax.axvline(N, color="grey", lw=0.6)
            ax.set_yscale("log")
            ax.set_title(f"{law or 'trained'}, N={N:g}", fontsize=9)
            ax.set_xlabel("test length M", fontsize=9)
        row[0].set_ylabel("MSE", fontsize=9)
    handles = [plt.Line2D([], [], color=colours[c], label=c[0] + ("" if pd.isna(c[1]) else f", c={c[1]:g}")) for c in tests]
    handles += [plt.Line2D([], [], color="k", ls=styles.get(n, "-"), marker=marks[n], ms=3.5, mfc="none", label=n)
                for n in names]
    handles += [plt.Line2D([], [], color="k", ls="--", label="LSA limit (theory; shaded: an estimate on the test prompts ± 2 SE)"),
                plt.Line2D([], [], color="k", ls=":", label="OLS (exact for M ≥ d: drawn at the axis floor)")]
    legend_below(list(axes.ravel()), ncol=3, fontsize=8, handles=handles)
    return png(fig)
