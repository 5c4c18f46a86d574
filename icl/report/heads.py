"""Attention of models with several layers and heads (attention.parquet's `layer` and `head`): the
maps of the last layer's heads, and every head's attention to the query's own feature over
training. The LDL figures of the report read the last layer averaged over its heads (what
attn_own is), so they mean the same for a one-head model and a deep one."""
from __future__ import annotations

import textwrap

import matplotlib.colors as mcolors
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from icl.report.figures import QUALITATIVE, REFERENCE, Figure, legend_below, png

KEYS = ["run_id", "epoch", "query_feature", "key_feature"]


def has_heads(attn: pd.DataFrame) -> bool:
    """Rows of more than one (layer, head): a model whose heads are drawn one by one."""
    return "layer" in attn and len(attn[["layer", "head"]].drop_duplicates()) > 1


def last_layer(attn: pd.DataFrame) -> pd.DataFrame:
    """The last layer's map averaged over its heads, in the single-map columns (tables written
    before attention.parquet had layer and head read as they are)."""
    if "layer" not in attn or attn.empty:
        return attn
    top = attn[attn["layer"] == attn["layer"].max()]
    if top["head"].nunique() == 1:
        return top.drop(columns=["layer", "head"])
    return top.groupby(KEYS, as_index=False, sort=False)["attn"].mean()


NUMBERED_K = 8       # a map's cells carry their numbers up to this many features


def draw_map(ax, m: pd.DataFrame):
    """One K×K map (rows: key feature, columns: query feature) coloured about 1/K: white is uniform
    attention (nothing learned), blue above it, red below; with its numbers in the cells up to
    NUMBERED_K features (past that a cell is too small to read one, and 64×64 numbers took most of
    ldl_flow_K's report time), ticks thinned to about ten."""
    K = max(m.shape)
    norm = mcolors.TwoSlopeNorm(vmin=0.0, vcenter=1.0 / K, vmax=1.0)
    im = ax.imshow(m.to_numpy(), norm=norm, cmap="RdBu")      # plain imshow: a third of seaborn's time
    if K <= NUMBERED_K:
        for (i, j), v in np.ndenumerate(m.to_numpy()):
            ax.text(j, i, f"{v:.2f}", ha="center", va="center", fontsize=7, color="white" if v > 0.75 else "black")
    ax.set_xlabel("query feature j")
    every = max(1, -(-K // 10))
    ax.set_xticks(range(0, m.shape[1], every), [str(int(c) + 1) for c in m.columns[::every]])
    ax.set_yticks(range(0, m.shape[0], every), [str(int(r) + 1) for r in m.index[::every]])
    return im


def map_colourbar(fig, axes, im) -> None:
    """The maps' shared colour bar, its middle tick 1/K named as uniform attention."""
    K = round(1 / im.norm.vcenter)
    bar = fig.colorbar(im, ax=list(axes), fraction=0.04, pad=0.02)
    bar.set_ticks([0, 1 / K, 1], labels=["0", f"1/K = {1 / K:.2g}\n(uniform)", "1"])
    bar.ax.tick_params(labelsize=7)


MAPS_A_ROW = 4      # a row of four maps and the colour bar is 10 in, 1,100 px: the page shows it at its natural size


def head_maps_figure(attn, runs, L, tag: str = "") -> Figure | None:
    """The K×K map Attn[i, j] of every head of the last layer at the last logged epoch (mean over seeds)."""
    ids = runs.loc[runs["L"] == L, "run_id"]
    df = attn[attn["run_id"].isin(ids) & (attn["layer"] == attn["layer"].max())]
    df = df[df["epoch"] == df["epoch"].max()]
    heads = sorted(df["head"].unique())
    if not heads:
        return None
    maps = [(f"head {h + 1}", df[df["head"] == h].groupby(["key_feature", "query_feature"])["attn"].mean().unstack())
            for h in heads]
    layer = int(attn["layer"].max()) + 1
    return map_figure(maps, f"last layer ({layer}): each head's map at epoch {int(df['epoch'].max())}, L={L:g}{tag}")


def map_figure(maps: list[tuple[str, pd.DataFrame]], title: str, per_row: int = MAPS_A_ROW) -> Figure:
    """K×K maps (their titles and tables), `per_row` a row with one colour bar, under `title`; the
    figure tall enough for the title as tidy wraps it to the figure's width (a fixed height let a
    two-line title push the maps' axis labels out of the image)."""
    nrow = -(-len(maps) // per_row)
    ncol = -(-len(maps) // nrow)
    width = 1.9 * ncol + 0.8                    # five maps a row: 10.3 in, within the page
    lines = len(textwrap.wrap(title, max(12, int(width * 72 / (0.55 * 10)))))
    fig, axes = plt.subplots(nrow, ncol, figsize=(width, 2.6 * nrow + 0.1 + 0.2 * lines), squeeze=False,
                             layout="constrained")         # constrained: room for the shared colour bar
    for n, (ax, (name, m)) in enumerate(zip(axes.ravel(), maps)):
        im = draw_map(ax, m)
        ax.set_title(name, fontsize=9)
        ax.set_ylabel("key feature i" if n % ncol == 0 else "")
    for ax in axes.ravel()[len(maps):]:
        ax.axis("off")
    map_colourbar(fig, axes.ravel()[:len(maps)], im)
    fig.suptitle(title, fontsize=10)
    return png(fig)


HEAD_MARKERS = "osD^v<>ph*"     # a head's marker beside its colour: heads stay apart in grey or where colours are close
PANELS_A_ROW = 3                # at most three layers a row: the figure stays within the page's 1,150 px


def own_by_head_figure(attn, runs, L, tag: str = "") -> Figure | None:
    """Attention to the query's own feature (the map's diagonal, averaged over query features) of
    every head of every layer over training, median over seeds; one panel per layer, three a row.
    A head is a colour and a marker of its own (heads are unordered: no sequential palette, whose
    neighbours read alike), named once in a legend under the panels, beside uniform attention's 1/K."""
    ids = runs.loc[runs["L"] == L, "run_id"]
    df = attn[attn["run_id"].isin(ids) & (attn["query_feature"] == attn["key_feature"])]
    if df.empty:
        return None
    own = df.groupby(["run_id", "epoch", "layer", "head"], as_index=False)["attn"].mean()
    layers = sorted(own["layer"].unique())
    heads = sorted(own["head"].unique())
    K = df["key_feature"].nunique()
    nrow = -(-len(layers) // PANELS_A_ROW)
    ncol = -(-len(layers) // nrow)                  # rows filled evenly: four layers two by two
    fig, axes = plt.subplots(nrow, ncol, figsize=(3.3 * ncol + 0.4, 2.5 * nrow + 0.9), squeeze=False, sharey=True)
    for ax, layer in zip(axes.ravel(), layers):
        for n, h in enumerate(heads):
            g = own[(own["layer"] == layer) & (own["head"] == h)].groupby("epoch")["attn"].median()
            ax.plot(g.index, g.values, color=QUALITATIVE[n % len(QUALITATIVE)], lw=1.3,
                    marker=HEAD_MARKERS[n % len(HEAD_MARKERS)], ms=3.5, mfc="none",
                    markevery=(n % 4 * max(1, len(g) // 32), max(1, len(g) // 8)), label=f"head {h + 1}")
        ax.axhline(1 / K, **REFERENCE, label=f"1/K = {1 / K:.2g}: uniform")
        ax.set_ylim(-0.02, 1.02)
        ax.set_title(f"layer {layer + 1}", fontsize=9)
        ax.set_xlabel("epoch")
    for ax in axes.ravel()[len(layers):]:
        ax.axis("off")
    for ax in axes[:, 0]:
        ax.set_ylabel("attention to own feature")
    fig.suptitle(f"own-feature attention of every head (median over seeds), L={L:g}{tag}", fontsize=10)
    legend_below(axes.ravel()[:len(layers)], ncol=len(heads) + 1, fontsize=7)
    return png(fig)
