"""Figures as inline PNG, each with the numbers it draws as CSV: the reports embed both, so a
report is one file and every figure's data can be taken away without rerunning Python."""
from __future__ import annotations

import base64
import io

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import seaborn as sns  # noqa: E402

QUALITATIVE = sns.color_palette("colorblind")   # for unordered things (models, features, baselines)


def palette(values) -> dict:
    """One colour per value, the same in every figure of a report when every figure is given the
    experiment's whole set of values (all L, or all N): viridis, ordered and colour-blind safe."""
    vals = sorted({float(v) for v in values if pd.notna(v)})
    return dict(zip(vals, sns.color_palette("viridis", len(vals))))


class Figure(str):
    """A figure's base64 PNG (what templates put in <img src>), carrying `csv`: base64 of the
    tidy rows it draws (panel, series, x, y, value)."""
    csv: str = ""


def drawn_rows(fig) -> pd.DataFrame:
    """Every line, image and scatter of every panel as rows, read from the figure itself, so the
    CSV holds exactly what is drawn (a line's colour too). A line's series is its legend label, or its gid (set by the
    drawing code for unlabelled lines such as a band's edges)."""
    parts = []
    for n, ax in enumerate(fig.axes):
        panel = ax.get_title() or f"panel {n + 1}"
        meta = {"panel": panel, "x_label": ax.get_xlabel(), "y_label": ax.get_ylabel()}
        for k, line in enumerate(ax.get_lines()):
            x, y = np.asarray(line.get_xdata()), np.asarray(line.get_ydata())
            if not len(x):
                continue                                   # a legend entry only
            label = line.get_gid() or line.get_label()
            series = f"line {k + 1}" if label.startswith("_") else label
            parts.append(pd.DataFrame({**meta, "series": series, "x": x, "y": y,
                                       "colour": matplotlib.colors.to_hex(line.get_color())}))
        for im in ax.get_images():
            a = np.asarray(im.get_array(), dtype=float)
            i, j = np.indices(a.shape)
            parts.append(pd.DataFrame({**meta, "series": "image", "x": j.ravel(), "y": i.ravel(), "value": a.ravel()}))
        for coll in ax.collections:
            offsets = np.asarray(coll.get_offsets())
            if not hasattr(coll, "get_sizes") or offsets.ndim != 2 or not len(offsets) or not len(coll.get_sizes()):
                continue                                   # bands (fill_between): their edges are lines with a gid
            values = coll.get_array()
            parts.append(pd.DataFrame({**meta, "series": coll.get_label() if not coll.get_label().startswith("_")
                                       else "points", "x": offsets[:, 0], "y": offsets[:, 1],
                                       **({"value": np.asarray(values, float)} if values is not None
                                          and len(values) == len(offsets) else {})}))
    cols = ["panel", "series", "x", "y", "value", "colour", "x_label", "y_label"]
    return pd.concat(parts, ignore_index=True).reindex(columns=cols) if parts else pd.DataFrame(columns=cols)


def png(fig) -> Figure:
    """The figure as base64 PNG with its drawn rows as base64 CSV (and closed, so long reports do
    not pile up figures)."""
    buf = io.BytesIO()
    if fig.get_layout_engine() is None:     # laid out once as it is drawn; bbox_inches="tight" draws twice
        fig.set_layout_engine("tight")
    fig.savefig(buf, format="png", dpi=110)
    out = Figure(base64.b64encode(buf.getvalue()).decode())
    out.csv = base64.b64encode(drawn_rows(fig).to_csv(index=False, float_format="%.6g").encode()).decode()
    plt.close(fig)
    return out
