"""The LLC's figure and table (train.llc): λ̂ against log t beside the training loss, one panel per
setting's first seed, with both instruments' stage boundaries on the same axis (the LLC's critical
points, solid; the phase counter's ends, dashed, where it applies), and a table of where the two
agree run by run."""
from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402

from icl.report.figures import QUALITATIVE, Figure, png  # noqa: E402
from icl.report.settings import distinct_settings, setting_label  # noqa: E402

MAX_PANELS = 6


def llc_figure(llc: pd.DataFrame, curves: pd.DataFrame, runs: pd.DataFrame, summary: pd.DataFrame) -> Figure | None:
    """Per setting (the model's runs grouped by what their sweep sets, seeds apart), its lowest seed's
    λ̂ with its standard error (usable checkpoints only) on the left axis and its train loss on the
    right, against epochs on a log axis."""
    mine = llc[llc["run_id"].isin(runs["run_id"])]
    if mine.empty or mine["llc"].isna().all():
        return None
    keys = [k for k in distinct_settings(runs, "seed") if k != "seed"]
    groups = list(runs.groupby(keys, dropna=False)) if keys else [(None, runs)]
    groups = groups[:MAX_PANELS]
    cols = min(3, len(groups))
    rows = -(-len(groups) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(3.45 * cols, 3.2 * rows), squeeze=False)   # within the page's width
    summ = summary.set_index("run_id")
    drawn = set()
    for ax, (key, g) in zip(axes.flat, groups):
        rid = g.sort_values("seed")["run_id"].iloc[0]
        est = mine[mine["run_id"] == rid].sort_values("epoch")
        ax.errorbar(est["epoch"], est["llc"], yerr=est["llc_se"], color=QUALITATIVE[0], marker="o", ms=3,
                    lw=1.2, capsize=2, label="λ̂ (LLC)")
        loss = curves[(curves["run_id"] == rid) & (curves["metric"] == "train_loss") & (curves["epoch"] > 0)]
        twin = ax.twinx()
        twin.plot(loss["epoch"], loss["value"], color=QUALITATIVE[1], lw=1, label="train loss")
        twin.set_yscale("log")
        twin.tick_params(axis="x", which="both", bottom=False, top=False, labelbottom=False, labeltop=False)
        for b in summ.at[rid, "llc_boundaries"] if rid in summ.index else []:
            ax.axvline(b, color=QUALITATIVE[0], lw=1, ls="-", alpha=0.6)
            drawn.add("llc")
        ends = summ.at[rid, "phase_ends"] if rid in summ.index and "phase_ends" in summ else []
        for b in ends:
            ax.axvline(b, color=QUALITATIVE[2], lw=1, ls="--", alpha=0.8)
            drawn.add("phases")
        ax.set_xscale("log")
        ax.set_xlabel("epoch")
        ax.set_ylabel("λ̂")
        twin.set_ylabel("train loss", color=QUALITATIVE[1])
        label = (setting_label(keys, key) if keys else "all runs") + f", seed {int(g['seed'].min())}"
        ax.set_title(label.replace(", ", ",\n", 1) if len(label) > 36 else label, fontsize=7)
    for ax in list(axes.flat)[len(groups):]:
        ax.axis("off")
    handles = [plt.Line2D([], [], color=QUALITATIVE[0], marker="o", ms=3, label="λ̂ (LLC), ± its error over chains"),
               plt.Line2D([], [], color=QUALITATIVE[1], label="train loss (right axis)")]
    handles += [plt.Line2D([], [], color=QUALITATIVE[0], alpha=0.6, label="LLC stage boundary")] if "llc" in drawn else []
    handles += [plt.Line2D([], [], color=QUALITATIVE[2], ls="--", label="phase counter's boundary")] if "phases" in drawn else []
    fig.suptitle("local learning coefficient over training, with both instruments' boundaries", fontsize=10)
    height = 3.2 * rows
    fig.tight_layout(rect=(0, 0.3 / height, 1, 1 - 0.3 / height), h_pad=1.5)
    fig.legend(handles=handles, fontsize=7, loc="lower center", ncol=4, frameon=False)
    return png(fig)


def agreement_table(runs: pd.DataFrame, summary: pd.DataFrame) -> pd.DataFrame:
    """Per setting: the runs with an LLC stage count, the counts of each instrument (stages: runs),
    the swing a turn of λ̂ needed there (the median of the runs' own, past which a flat λ̂ shows a
    boundary in at most 5 % of draws), how far λ̂ moved when γ was cut tenfold at the last checkpoint
    (1 on its plateau; far above it, λ̂ reads the localisation) and in how many runs they agree (only where the phase counter
    counted too)."""
    df = runs[["run_id", "seed", *[c for c in distinct_settings(runs, "seed") if c != "seed"]]].merge(
        summary[["run_id", "llc_stages", "n_phases", *[c for c in ("llc_swing", "llc_plateau_ratio") if c in summary]]],
        on="run_id")
    df = df[df["llc_stages"].notna()]
    if df.empty:
        return pd.DataFrame()
    keys = [c for c in df.columns if c not in ("run_id", "seed", "llc_stages", "n_phases", "llc_swing", "llc_plateau_ratio")]
    out = []
    for key, g in (df.groupby(keys, dropna=False) if keys else [(None, df)]):
        count = lambda s: ", ".join(f"{int(k)}: {n}" for k, n in sorted(s.dropna().value_counts().items())) or "—"
        both = g["n_phases"].notna()
        out.append({"setting": setting_label(keys, key) if keys else "all runs", "runs": len(g),
                    "LLC stages (stages: runs)": count(g["llc_stages"]),
                    **({"turn needed (errors, median)": f"{g['llc_swing'].median():.2g}"} if "llc_swing" in g else {}),
                    **({"λ̂ at γ/10 over λ̂ at γ (median)": f"{g['llc_plateau_ratio'].median():.2g}"}
                       if "llc_plateau_ratio" in g and g["llc_plateau_ratio"].notna().any() else {}),
                    "phase counter (phases: runs)": count(g["n_phases"]),
                    "agree": f"{int((g.loc[both, 'llc_stages'] == g.loc[both, 'n_phases']).sum())} of {int(both.sum())}"
                    if both.any() else "— (no phase count)"})
    return pd.DataFrame(out)



HOOGLAND = ("Hoogland et al. (2024, \"The developmental landscape of in-context learning\") read five stages "
            "(LR1–LR5) off λ̂ of a 2-layer, 4-head, width-64 GPT on in-context linear regression, over about 300 "
            "checkpoints at 8 chains × 500 draws")


def hoogland_note(runs: pd.DataFrame, summary: pd.DataFrame, nonlinear: bool, linear_task: bool) -> str:
    """For a GPT-like model (a nonlinear kind) on a linear task: its LLC stage counts set beside
    Hoogland et al.'s five, with the checkpoints they were read at; '' otherwise."""
    if not (nonlinear and linear_task):
        return ""
    s = summary[summary["run_id"].isin(runs["run_id"]) & summary["llc_stages"].notna()]
    if s.empty:
        return ""
    counts = ", ".join(f"{int(k)} stages: {n} runs" for k, n in sorted(s["llc_stages"].value_counts().items()))
    usable = int(s["llc_usable"].max())
    out = (f"{HOOGLAND}. Here, with at most {usable} usable checkpoints a run: {counts}; fewer checkpoints than "
           f"theirs resolve fewer turns, so a smaller count here is what the grid allows, not a disagreement.")
    if "t_escape" in s:        # the order: their first stages come before in-context learning sets in
        both = [(float(b[0]), float(t)) for b, t in zip(s["llc_boundaries"], s["t_escape"]) if len(b) and pd.notna(t)]
        if both:
            before = sum(b < t for b, t in both)
            out += (f" Order: in their runs the first stages end before in-context learning sets in; here the first "
                    f"turn of λ̂ comes before the end of the plateau at ŷ ≈ 0 (t_escape) in {before} of the {len(both)} "
                    f"runs that have both.")
    return out
