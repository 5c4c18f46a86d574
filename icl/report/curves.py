"""The figures of one model's training, as the report draws them beside its verdicts: the loss
over epochs (LDL Fig. 1: the median over seeds with its min-max band, a panel per setting where a
sweep needs them), the attention scores of a v1 query, the K x K attention maps over training
(Fig. 2-3), and the attention summaries of continuous tokens. icl.report.page composes them."""
from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402

from icl.report import heads as report_heads  # noqa: E402
from icl.report.figures import (MAX_PANEL_LINES, QUALITATIVE, REFERENCE, Figure, legend_below, palette,  # noqa: E402
                                png, say_coinciding)
from icl.report.settings import distinct_settings, setting_label  # noqa: E402


def _band(ax, df: pd.DataFrame, x: str, y: str, label: str, color, log: bool) -> None:
    """Median over seeds with a min-max band."""
    g = df.groupby(x)[y]
    med, lo, hi = g.median(), g.min(), g.max()
    ax.plot(med.index, med.values, color=color, label=label, lw=1.6, gid=f"{label} median")
    ax.fill_between(med.index, lo.values, hi.values, color=color, alpha=0.2, lw=0)
    for edge, what in ((lo, "min"), (hi, "max")):        # invisible: they carry the band into the figure's CSV
        ax.plot(edge.index, edge.values, alpha=0, gid=f"{label} {what}")
    if log:
        ax.set_yscale("log")


SETTING_MARKERS = "os^Dvx+P*<>h"     # one per swept setting where the colour says the L (or the feature)


def _persetting_label(ax, df: pd.DataFrame, runs: pd.DataFrame, by: str, x: str, y: str, label: str, color,
                 log: bool, markers: dict | None = None) -> None:
    """The runs' `y` against `x`: a median and band over seeds where the runs differ in their seed
    only, else one median line per setting (no band), each with its setting's marker (`markers`,
    shared by the figure's calls so a setting keeps its marker; the figure's legend names them)
    and `label` on a colour swatch."""
    keys = distinct_settings(runs, by)
    if not keys:
        _band(ax, df, x, y, label, color, log)
        return
    markers = {} if markers is None else markers
    for key, g in runs.groupby(keys, dropna=False):
        med = df[df["run_id"].isin(g["run_id"])].groupby(x)[y].median()
        what = setting_label(keys, key)
        mark = markers.setdefault(what, SETTING_MARKERS[len(markers) % len(SETTING_MARKERS)])
        step = max(1, len(med) // 6)            # six marks a line, each setting's a little apart from the next
        ax.plot(med.index, med.values, color=color, lw=0.9, alpha=0.8, marker=mark, ms=3.5, mfc="none",
                markevery=(list(markers).index(what) * max(1, step // 4) % step, step), label="_",
                gid=f"{label}, {what} median")
    ax.fill_between([], [], color=color, label=label)          # the colour's legend entry, a swatch
    if log:
        ax.set_yscale("log")


def setting_legend(ax, markers: dict) -> None:
    """Grey legend entries for the settings' markers (_per_setting), one per setting."""
    for what, mark in markers.items():
        ax.plot([], [], color="0.35", ls="none", marker=mark, ms=4, mfc="none", label=what)


def wide_objective(runs: pd.DataFrame) -> bool:
    """Whether runs train on the error at every x position (a GPT's `loss: all`): their train loss
    is not the query's error that uniform attention's level and the learning gate are about."""
    return "loss" in runs and runs["loss"].astype(str).eq("all").any()


CROWDED = 24       # lines one panel may hold (values of `by` × settings): more, and a loss figure has a panel per setting


def loss_figure(curves, runs, Ls, title, theory_curves=None, by: str = "L", test: bool = False,
                colours: dict | None = None, reference: pd.Series | None = None) -> Figure | None:
    """Train loss per L (or per another run column, `by`), median and min-max band over seeds (one
    line per setting, no band, where the runs of a value differ in more than their seed); the
    mean-field curve dashed; with `test`, the test loss on fresh prompts dotted. `reference`
    (uniform attention's train loss per run_id): its median per value drawn as a level, so a curve
    that ends on it reads "nothing learned". `colours`: the report's colour of each value
    (figures.palette), so an L looks the same everywhere. Where the values times the settings
    would put more than CROWDED lines on one panel (12 L × 9 settings of Δ and N drew 108), each
    setting gets a panel of its own, three a row, named in its title, its L a band each."""
    if not Ls:
        return None
    colours = colours or palette(Ls)
    mine = runs[runs[by].isin(Ls)]
    keys = distinct_settings(mine, by)
    settings = list(mine.groupby(keys, dropna=False)) if keys else []
    if len(Ls) > 1 and len(Ls) * len(settings) > CROWDED:      # a panel per setting
        panels = [(setting_label(keys, key), g) for key, g in settings]
        per = f" (a panel per {', '.join(keys)}; band: min–max over seeds)"
    else:
        panels, per = [("", mine)], ""
    # each value draws its median and, where there are, its mean field, level and test curves: a
    # panel takes as many values as keep it within MAX_PANEL_LINES (the paper's 14 L drew 42)
    each = 1 + (theory_curves is not None and len(theory_curves) > 0) + (reference is not None) + bool(test) \
        + wide_objective(mine)
    n = -(-len(Ls) // max(1, MAX_PANEL_LINES // each))
    size = -(-len(Ls) // n)                                        # as even as the count allows: 14 L -> 7 + 7
    chunks = [Ls[i:i + size] for i in range(0, len(Ls), size)]
    panels = [("; ".join(p for p in (name, f"{by} {c[0]:.3g}–{c[-1]:.3g}" if len(chunks) > 1 else "") if p), rows, c)
              for name, rows in panels for c in chunks]
    ncol = min(3, len(panels))
    nrow = -(-len(panels) // ncol)
    one = len(panels) == 1
    fig, axes = plt.subplots(nrow, ncol, figsize=(5.2, 3.4 + 0.2 * -(-(len(Ls) + len(settings) + 3) // 3)) if one
                             else (3.4 * ncol, 2.5 * nrow + 0.9 + 0.2 * -(-(len(Ls) + 3) // 3)),
                             squeeze=False, sharex=True, sharey=True)
    drew, markers = set(), {}
    for ax, (name, rows, values) in zip(axes.ravel(), panels):
        sub = distinct_settings(rows, by)
        if len(Ls) == 1 and sub:       # one value of `by`: each setting a line of its own colour, with its band
            lines = [(setting_label(sub, key), QUALITATIVE[n % len(QUALITATIVE)], g)
                     for n, (key, g) in enumerate(rows[rows[by] == Ls[0]].groupby(sub, dropna=False))]
            per = f" (a line per {', '.join(sub)}, band: min–max over seeds)"
        else:
            lines = [(f"{by}={L:g}", colours[float(L)], rows[rows[by] == L]) for L in values if (rows[by] == L).any()]
            per = per or (f" (a line per {', '.join(sub)}: no band)" if sub else "")
        drew |= _loss_panel(ax, curves, lines, by, test, theory_curves, reference, markers)
        say_coinciding(ax)
        if not one:
            ax.set_title(name, fontsize=8)
        ax.set_yscale("log")
    for ax in axes.ravel()[len(panels):]:
        ax.axis("off")
    lead = axes[0][0]
    setting_legend(lead, markers)
    if "mean_field" in drew:
        lead.plot([], [], color="grey", ls="--", label="mean field (LDL Lemma 2)")
    if test:
        lead.plot([], [], color="grey", ls=":", label="test loss, fresh prompts (median)")
    if "at_query" in drew:
        lead.plot([], [], color="grey", ls=(0, (1, 1)), lw=1.3, label="test loss at the query (median)")
    if "level" in drew:
        lead.plot([], [], **REFERENCE, label="uniform attention's loss at the query\n(= nothing learned)")
    for ax in axes[-1]:
        ax.set_xlabel("epoch")
    for ax in axes[:, 0]:
        ax.set_ylabel(("train " if not test else "") + "loss ½E[(ŷ−y)²] (log)")
    text = title + per + (" — trained on every x position: uniform attention's level, the query's, not drawn"
                          if "not_comparable" in drew else "")
    if one:
        lead.set_title(text, fontsize=10)
    else:
        fig.suptitle(text, fontsize=10)
    legend_below(axes.ravel()[:len(panels)], ncol=3 if one else 4)
    return png(fig)


def _loss_panel(ax, curves, lines, by, test, theory_curves, reference, markers) -> set[str]:
    """loss_figure's curves of `lines` (name, colour, runs) on one panel; what it drew of the kinds
    its legend names (mean_field, level, at_query) and not_comparable."""
    drew = set()
    for name, color, mine in lines:
        ids = mine["run_id"]
        df = curves[curves["run_id"].isin(ids) & (curves["metric"] == "train_loss")]
        df = df[df["value"] > 0]
        _persetting_label(ax, df, mine, by, "epoch", "value", name, color, log=True, markers=markers)
        if test:
            med = curves[curves["run_id"].isin(ids) & (curves["metric"] == "test_loss")].groupby("epoch")["value"].median()
            ax.plot(med.index, med.values, color=color, ls=":", lw=1.1)
        if theory_curves is not None and len(theory_curves):
            mf = theory_curves[theory_curves["run_id"].isin(ids) & (theory_curves["metric"] == "mean_field_loss")]
            if len(mf):
                med = mf.groupby("epoch")["value"].median()
                ax.plot(med.index, med.values, color=color, ls="--", lw=1.1)
                drew.add("mean_field")
        ref = reference.reindex(ids).dropna() if reference is not None else pd.Series(dtype=float)
        if wide_objective(mine):          # the curve averages every x position; uniform attention's is the query's
            q = curves[curves["run_id"].isin(ids) & (curves["metric"] == "test_query_loss")].groupby("epoch")["value"]
            if len(q):
                med = q.median()
                ax.plot(med.index, med.values, color=color, ls=(0, (1, 1)), lw=1.3, gid=f"{name} query median")
                drew.add("at_query")
            else:
                ref = ref.iloc[:0]
                drew.add("not_comparable")
        if len(ref) and len(df):
            ax.plot([df["epoch"].min(), df["epoch"].max()], [ref.median()] * 2, **{**REFERENCE, "color": color},
                    gid=f"{name} uniform attention")
            drew.add("level")
    return drew


SCORES_EACH = 4    # features whose scores are drawn one by one; past it the others are drawn as their mean and largest


def _scores(df: pd.DataFrame, K: int) -> list[tuple[str, pd.DataFrame]]:
    """The score lines of a v₁ query: its own, and each other feature's where K ≤ SCORES_EACH; past
    that (K = 32 drew 32 lines in ten colours) the other K − 1 features' mean and largest score per run
    and epoch, which say the same where the others share one path (orthogonal, equidistant features
    are exchangeable) and show it where they do not."""
    own = [(r"$\mathrm{Attn}_{1}$ (own)", df[df["key_feature"] == 0])]
    if K <= SCORES_EACH:
        return own + [(rf"$\mathrm{{Attn}}_{{{k + 1},1}}$", df[df["key_feature"] == k]) for k in range(1, K)]
    others = df[df["key_feature"] != 0].groupby(["run_id", "epoch"])["attn"]
    return own + [(f"the other {K - 1} features' mean score", others.mean().reset_index()),
                  (f"the largest of the other {K - 1}", others.max().reset_index())]


def attention_scores_figure(attn, runs, L, K, tag: str = "") -> Figure:
    """Attn_1 (own score of v_1) and Attn_{k,1}: mass a query with feature 1 puts on feature k (past
    SCORES_EACH features, the others' mean and largest: _scores); 1/K, uniform attention's (what every
    score reads when nothing is learned), as a level. Where the lines times the settings of this L
    would be more than CROWDED on one panel, a panel per setting, three a row."""
    mine = runs[runs["L"] == L]
    df = attn[attn["run_id"].isin(mine["run_id"]) & (attn["query_feature"] == 0)]
    keys = distinct_settings(mine, "L")
    settings = list(mine.groupby(keys, dropna=False)) if keys else []
    lines = K if K <= SCORES_EACH else 3                # _scores' lines: one per feature, or own, mean, largest
    panels = [(setting_label(keys, key), g) for key, g in settings] if lines * len(settings) > CROWDED else [("", mine)]
    ncol = min(3, len(panels))
    nrow = -(-len(panels) // ncol)
    one = len(panels) == 1
    fig, axes = plt.subplots(nrow, ncol, figsize=(5.2, 4.0) if one else (3.4 * ncol, 2.4 * nrow + 1.2),
                             squeeze=False, sharex=True, sharey=True)
    pal, markers = QUALITATIVE, {}
    for ax, (name, rows) in zip(axes.ravel(), panels):
        for k, (lab, scores) in enumerate(_scores(df[df["run_id"].isin(rows["run_id"])], K)):
            _persetting_label(ax, scores, rows, "L", "epoch", "attn", lab, pal[k % len(pal)], log=False, markers=markers)
        ax.axhline(1 / K, **REFERENCE, label=f"1/K = {1 / K:.2g}: uniform attention\n(= nothing learned)")
        ax.set_ylim(-0.02, 1.02)
        if not one:
            ax.set_title(name, fontsize=8)
    for ax in axes.ravel()[len(panels):]:
        ax.axis("off")
    setting_legend(axes[0][0], markers)
    for ax in axes[-1]:
        ax.set_xlabel("epoch")
    for ax in axes[:, 0]:
        ax.set_ylabel("attention score")
    text = f"attention of a v₁ query, L={L:g}{tag}" + ("" if one else f" (a panel per {', '.join(keys)})")
    if one:
        axes[0][0].set_title(text)
    else:
        fig.suptitle(text, fontsize=10)
    legend_below(axes.ravel()[:len(panels)], ncol=3 if one else 4)
    return png(fig)


def attention_maps_figure(attn, runs, L, epochs_all, tag: str = "") -> Figure:
    """The K×K map Attn[i, j] at five epochs (mean over seeds), coloured about 1/K (white): uniform
    attention, the map of a model that learned nothing, reads white, not as a pattern."""
    ids = runs.loc[runs["L"] == L, "run_id"]
    df = attn[attn["run_id"].isin(ids)]
    picks = sorted({epochs_all[int(round(q * (len(epochs_all) - 1)))] for q in (0, 0.1, 0.25, 0.5, 1.0)})
    maps = [(f"epoch {e}", df[df["epoch"] == e].groupby(["key_feature", "query_feature"])["attn"].mean().unstack())
            for e in picks]
    return report_heads.map_figure(maps, f"attention maps Attn[i, j], L={L:g}{tag} (mean over seeds)", per_row=5)


def attention_summary_figure(curves, runs, colours: dict) -> Figure:
    """For continuous tokens: attention entropy and the mass on the nearest 10% of tokens."""
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8))
    Ls = sorted(runs["L"].dropna().unique()) or [None]
    markers = {}
    for ax, metric, lab in ((axes[0], "attn_entropy", "attention entropy (nats)"),
                            (axes[1], "attn_knn", "mass on the nearest 10% of tokens")):
        for color, L in ((QUALITATIVE[0] if L is None else colours[float(L)], L) for L in Ls):
            ids = runs["run_id"] if L is None else runs.loc[runs["L"] == L, "run_id"]
            df = curves[curves["run_id"].isin(ids) & (curves["metric"] == metric)]
            mine = runs if L is None else runs[runs["L"] == L]
            _persetting_label(ax, df, mine, "L", "epoch", "value", "all" if L is None else f"L={L:g}", color, log=False,
                         markers=markers)
        ax.set_xlabel("epoch")
        ax.set_ylabel(lab)
    setting_legend(axes[1], markers)
    legend_below(axes[1], ncol=4)
    fig.suptitle("attention summaries for continuous tokens", fontsize=10)
    return png(fig)
