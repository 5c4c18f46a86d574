"""Figures as inline PNG, each with the numbers it draws as CSV: the reports embed both, so a
report is one file and every figure's data can be taken away without rerunning Python."""
from __future__ import annotations

import base64
import functools
import io

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import seaborn as sns  # noqa: E402

from icl.parallel import Forked  # noqa: E402

QUALITATIVE = sns.color_palette("colorblind")   # for unordered things (models, features, baselines)


def palette(values) -> dict:
    """One colour per value, the same in every figure of a report when every figure is given the
    experiment's whole set of values (all L, or all N): viridis, ordered and colour-blind safe."""
    vals = sorted({float(v) for v in values if pd.notna(v)})
    return dict(zip(vals, sns.color_palette("viridis", len(vals))))


class Figure:
    """A report's figure: str() is its base64 PNG (what templates put in <img src>), `csv` base64
    of the tidy rows it draws (panel, series, x, y, value). Drawn when first asked for, or
    beforehand by draw_all, several at a time. A figure made `later` is built there too, by its
    figure function, which may find nothing to draw: then the Figure is false."""

    def __init__(self, fig=None, build=None):
        self.fig, self.build = fig, build
        self._png = self._csv = None

    def __str__(self) -> str:
        if self._png is None:
            self.done(*self.render())
        return self._png

    def __bool__(self) -> bool:
        return bool(str(self))

    @property
    def csv(self) -> str:
        str(self)
        return self._csv

    def render(self) -> tuple[str, str]:
        """(base64 PNG, base64 CSV), built first if made `later`; ("", "") if nothing to draw."""
        fig = self.fig
        if self.build is not None:
            made = self.build()
            if made is None:
                return "", ""
            fig = made.fig
        try:
            return _drawn(fig)
        finally:
            plt.close(fig)      # long reports do not pile up figures

    def done(self, png_b64: str, csv_b64: str) -> None:
        self._png, self._csv = png_b64, csv_b64
        if self.fig is not None:
            plt.close(self.fig)


def later(figure_function, *args, **kwargs) -> Figure:
    """figure_function(*args, **kwargs) (which returns png(fig) or None), called when drawn: by
    draw_all in a worker, so building the figure is shared out as well as drawing it."""
    return Figure(build=functools.partial(figure_function, *args, **kwargs))


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
    if not parts:
        return pd.DataFrame(columns=cols)
    rows = pd.concat(parts, ignore_index=True).reindex(columns=cols)
    return rows.loc[:, rows.notna().any() | rows.columns.isin(["panel", "series", "x", "y"])]   # no all-empty column


def _drawn(fig) -> tuple[str, str]:
    """(base64 PNG, base64 CSV of the drawn rows) of a figure."""
    buf = io.BytesIO()
    if fig.get_layout_engine() is None:     # laid out once as it is drawn; bbox_inches="tight" draws twice
        fig.set_layout_engine("tight")
    fig.savefig(buf, format="png", dpi=110)
    return (base64.b64encode(buf.getvalue()).decode(),
            base64.b64encode(drawn_rows(fig).to_csv(index=False, float_format="%.6g").encode()).decode())


def png(fig) -> Figure:
    """The figure as a report figure, drawn later (draw_all) or when first shown."""
    return Figure(fig)


def draw_all(figures: list, processes: int = 1) -> None:
    """Build and draw every figure not yet drawn, in `processes` forked workers where there are
    several (figures are most of a report's time, and each is independent of the others)."""
    pending = [f for f in figures if f is not None and f._png is None]
    with Forked(Figure.render, pending, processes if processes > 1 and len(pending) > 1 else 0) as work:
        for f, drawn in zip(pending, work.results()):
            f.done(*drawn)
