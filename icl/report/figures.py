"""Figures as inline PNG, each with the numbers it draws as CSV: the reports embed both, so a
report is one file and every figure's data can be taken away without rerunning Python."""
from __future__ import annotations

import base64
import functools
import gzip
import io
import sys
import textwrap

import matplotlib

matplotlib.use("Agg")
import matplotlib.colors as mcolors  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402
import matplotlib.ticker as mticker  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import seaborn as sns  # noqa: E402

from icl.jobs.parallel import Forked  # noqa: E402

QUALITATIVE = sns.color_palette("colorblind")   # for unordered things (models, features, baselines)
REFERENCE = dict(color="0.45", ls=(0, (4, 2, 1, 2)), lw=1.0)   # a reference level: what "nothing learned" reads
THUMB_WIDTH = 480     # px of the index's copy of a key figure, shown at that size
THUMB_COLOURS = 64    # its palette: ten thumbnails stay well under the index's 300 KB


SEQUENTIAL_MAX = 9    # viridis keeps neighbours ≥ 18 ΔE apart up to this many values (12 ΔE at 12: two near blues)


def palette(values) -> dict:
    """One colour per value, the same in every figure of a report when every figure is given the
    experiment's whole set of values (all L, or all N), ordered: viridis (colour-blind safe) up to
    SEQUENTIAL_MAX values, turbo (its wider sweep of hues: neighbours ≥ 16 ΔE apart at 12 values,
    where viridis's are 12) past that."""
    vals = sorted({float(v) for v in values if pd.notna(v)})
    if len(vals) <= SEQUENTIAL_MAX:
        return dict(zip(vals, sns.color_palette("viridis", len(vals))))
    cmap = matplotlib.colormaps["turbo"]
    return dict(zip(vals, [tuple(cmap(x)[:3]) for x in np.linspace(0.05, 0.95, len(vals))]))


def delta_e(a, b) -> float:
    """CIE76 colour difference of two sRGB colours (components in [0, 1]): the distance in CIELAB,
    about 2.3 for a just-noticeable difference; lines of one panel are told apart at ≥ 15."""
    def lab(rgb):
        c = np.asarray(mcolors.to_rgb(rgb), float)
        c = np.where(c <= 0.04045, c / 12.92, ((c + 0.055) / 1.055) ** 2.4)
        xyz = np.array([[0.4124, 0.3576, 0.1805], [0.2126, 0.7152, 0.0722], [0.0193, 0.1192, 0.9505]]) @ c
        xyz /= np.array([0.95047, 1.0, 1.08883])                     # D65 white
        f = np.where(xyz > (6 / 29) ** 3, np.cbrt(xyz), xyz / (3 * (6 / 29) ** 2) + 4 / 29)
        return np.array([116 * f[1] - 16, 500 * (f[0] - f[1]), 200 * (f[1] - f[2])])
    return float(np.linalg.norm(lab(a) - lab(b)))


class Figure:
    """A report's figure: str() is its base64 PNG (what templates put in <img src>), `csv` base64
    of the tidy rows it draws (panel, series, x, y, value). Drawn when first asked for, or
    beforehand by draw_all, several at a time. A figure made `later` is built there too, by its
    figure function, which may find nothing to draw: then the Figure is false."""

    def __init__(self, fig=None, build=None):
        self.fig, self.build = fig, build
        self._png = self._csv = None
        self.problems: list[str] = []       # layout_problems of the drawn figure
        self.title = ""                     # its title(s), the image's alt text
        self.key_boxes: list = []           # its first panel's box in the PNG and its legends redrawn (thumbnail)

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

    @property
    def csv_gz(self) -> str:
        """Base64 of the CSV gzipped, what the page embeds: the whole table at a fifth or less of its
        bytes (a page of 20,000-row figures stays under 3 MB), unpacked by the reader's browser
        (DecompressionStream, the page's inline script) when its link is clicked."""
        return base64.b64encode(gzip.compress(base64.b64decode(self.csv), compresslevel=9, mtime=0)).decode()

    def render(self) -> tuple:
        """(base64 PNG, base64 CSV, layout problems, title, key boxes), built first if made `later`;
        ("", "", [], "", []) if nothing to draw."""
        fig = self.fig
        if self.build is not None:
            made = self.build()
            if made is None:
                return "", "", [], "", []
            fig = made.fig
        try:
            return _drawn(fig)
        finally:
            plt.close(fig)      # long reports do not pile up figures

    def done(self, png_b64: str, csv_b64: str, problems: list[str] = (), title: str = "", key_boxes=()) -> None:
        self._png, self._csv, self.problems, self.title = png_b64, csv_b64, list(problems), title
        self.key_boxes = [tuple(b) if isinstance(b, (list, tuple)) else b for b in key_boxes]
        if self.fig is not None:
            plt.close(self.fig)


def page_csvs(html: str) -> dict[str, str]:
    """The CSV behind every figure of a rendered report page, by its download name: what the page's
    script unpacks when a reader clicks "data (CSV)" (for a notebook, or a test)."""
    import re
    return {name: gzip.decompress(base64.b64decode(b)).decode()
            for name, b in re.findall(r'<a class="data" download="([^"]+)" href="#" data-gz="([^"]+)"', html)}


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


def title_of(fig) -> str:
    """What the figure shows, in its own words: its title, else its panels' titles (a reader without
    the image, or a report step naming a figure, reads this)."""
    sup = fig._suptitle.get_text() if fig._suptitle is not None else ""
    panels = list(dict.fromkeys(t for ax in fig.axes if ax.get_visible() and ax.axison
                                for t in [ax.get_title().strip()] if t))
    text = "; ".join([sup] * bool(sup) + panels[:4] + (["…"] if len(panels) > 4 else []))
    return " ".join(text.split()) or "an untitled figure"


def _drawn(fig) -> tuple:
    """(base64 PNG, base64 CSV of the drawn rows, layout problems, title, key boxes) of a figure,
    tidied first."""
    buf = io.BytesIO()
    if fig.get_layout_engine() is None:     # laid out once as it is drawn; bbox_inches="tight" draws twice
        fig.set_layout_engine("tight")
    tidy(fig)
    fig.set_dpi(110)                        # drawn at the dpi it is saved at: the boxes checked are the PNG's
    fig.savefig(buf, format="png", dpi=110)     # not "figure": that is the dpi the figure was made with
    return (base64.b64encode(buf.getvalue()).decode(),
            base64.b64encode(drawn_rows(fig).to_csv(index=False, float_format="%.6g").encode()).decode(),
            layout_problems(fig), title_of(fig), key_boxes(fig))


def key_boxes(fig) -> list:
    """What the index's thumbnail shows of a figure (thumbnail): the PNG's box (left, top, right,
    bottom in pixels) of the first panel with its title, ticks and labels, and, where the figure has
    legends beside its panels, their entries drawn again in as few columns as fit THUMB_WIDTH (a
    base64 PNG at the figure's dpi and font size): a legend as wide as eight panels, shrunk with them,
    is unreadable."""
    if not fig.axes:
        return []
    r = fig.canvas.get_renderer()
    H = fig.get_figheight() * fig.dpi
    b = fig.axes[0].get_tightbbox(r)
    out = [(max(0, int(b.x0) - 4), max(0, int(H - b.y1) - 4), int(np.ceil(b.x1)) + 4, int(np.ceil(H - b.y0)) + 4)]
    handles = [h for leg in fig.legends for h in leg.legend_handles]
    labels = [t.get_text() for leg in fig.legends for t in leg.get_texts()]
    if handles:
        out.append(_legend_png(handles, labels, fig.legends[0].get_texts()[0].get_fontsize(), fig.dpi))
    return out


def _legend_png(handles, labels, fontsize: float, dpi: float) -> str:
    """These legend entries alone, in the most columns (up to 3) whose width fits THUMB_WIDTH px."""
    for ncol in range(min(3, len(labels)), 0, -1):
        lf = plt.figure(figsize=(THUMB_WIDTH / dpi, 8), dpi=dpi)
        leg = lf.legend(handles, labels, loc="upper left", ncol=ncol, fontsize=fontsize, frameon=False)
        box = leg.get_window_extent(lf.canvas.get_renderer())
        if box.width <= THUMB_WIDTH or ncol == 1:
            buf = io.BytesIO()
            lf.savefig(buf, format="png", dpi=dpi, bbox_inches=box.expanded(1.02, 1.05).transformed(
                lf.dpi_scale_trans.inverted()))
            plt.close(lf)
            return base64.b64encode(buf.getvalue()).decode()
        plt.close(lf)


def tidy(fig) -> None:
    """What every figure needs before it is drawn: long titles wrapped to their panel's width, and
    log axes labelled at whole decades only (minor labels such as 3×10⁰ and 4×10⁰ collide), with
    short 1-2-5 labels where an axis spans under two decades and would otherwise show one label or
    none, and a few plain steps under half a decade (matplotlib's fallback there labels every 0.5)."""
    for ax in fig.axes:
        _wrap(ax.title, ax.get_position().width * fig.get_figwidth())
        for axis, lim in ((ax.xaxis, ax.get_xlim()), (ax.yaxis, ax.get_ylim())):
            if axis.get_scale() != "log":
                continue
            axis.set_minor_formatter(mticker.NullFormatter())
            lo, hi = sorted(lim)
            if lo <= 0 or np.log10(hi / lo) >= 2:
                continue
            short = mticker.FuncFormatter(lambda v, _: f"{v:.3g}")     # "5.5", not "5.5×10⁰"
            if np.log10(hi / lo) < 0.5:        # too narrow for 1-2-5: a few plain steps
                axis.set_major_locator(mticker.MaxNLocator(nbins=4, steps=[1, 2, 2.5, 5, 10]))
            else:
                axis.set_major_locator(mticker.LogLocator(subs=(1.0, 2.0, 5.0)))
            axis.set_major_formatter(short)
    if fig._suptitle is not None:
        _wrap(fig._suptitle, fig.get_figwidth())


def _wrap(text, inches: float) -> None:
    """Wrap a title to `inches` (an average glyph is about 0.55 of the font size wide)."""
    width = max(12, int(inches * 72 / (0.55 * text.get_fontsize())))
    if text.get_text() and "\n" not in text.get_text():
        text.set_text(textwrap.fill(text.get_text(), width))


def _text_boxes(fig, renderer) -> list[tuple[str, object]]:
    """(what, display box) of every text a reader must read: the figure's title and legends, and of
    each panel (colour bars included: they are axes) its titles, axis labels, drawn tick labels and legend."""
    out = [("figure title", fig._suptitle)] if fig._suptitle is not None else []
    out += [("figure legend", leg) for leg in fig.legends]
    for n, ax in enumerate(fig.axes):
        if not ax.get_visible() or not ax.axison:
            continue
        name = (ax.get_title() or f"panel {n + 1}").replace("\n", " ")[:40]
        out += [(f"{name}: title", t) for t in (ax.title, ax._left_title, ax._right_title)]
        for xy, axis in (("x", ax.xaxis), ("y", ax.yaxis)):
            out.append((f"{name}: {xy} label", axis.label))
            for tick in axis._update_ticks():      # the ticks drawn (inside the view), not every located one
                out += [(f"{name}: {xy} tick {lab.get_text()}", lab) for lab in (tick.label1, tick.label2)]
        if ax.get_legend() is not None:
            out.append((f"{name}: legend", ax.get_legend()))
    return [(what, a.get_window_extent(renderer)) for what, a in out
            if a.get_visible() and (not hasattr(a, "get_text") or a.get_text().strip())]


def _overlap(a, b) -> float:
    """Area (px²) two display boxes share."""
    return max(0.0, min(a.x1, b.x1) - max(a.x0, b.x0)) * max(0.0, min(a.y1, b.y1) - max(a.y0, b.y0))


def _covered_points(ax, box) -> int:
    """How many of a panel's drawn data points (line vertices, scatter points) lie inside `box`."""
    pts = [line.get_transform().transform(line.get_xydata()) for line in ax.get_lines()
           if line.get_visible() and (line.get_alpha() is None or line.get_alpha() > 0) and len(line.get_xydata())]
    pts += [c.get_offset_transform().transform(c.get_offsets()) for c in ax.collections
            if c.get_visible() and hasattr(c, "get_sizes") and len(c.get_sizes()) and len(c.get_offsets())]
    if not pts:
        return 0
    p = np.concatenate(pts)
    p = p[np.isfinite(p).all(1)]
    return int(((p[:, 0] > box.x0) & (p[:, 0] < box.x1) & (p[:, 1] > box.y0) & (p[:, 1] < box.y1)).sum())


def _style(line) -> tuple:
    """What tells a line apart in a legend: its dash pattern and marker (not its colour: a legend
    entry is often a grey stand-in for lines drawn in colour)."""
    _, dashes = getattr(line, "_unscaled_dash_pattern", (0, None))
    marker = line.get_marker() if line.get_marker() not in (None, "None", "", " ") else ""
    return marker, tuple(np.round(dashes, 2)) if dashes else ()


def undrawn_entries(fig) -> list[str]:
    """Legend entries (lines) whose style no line drawn in the figure has: a legend that lists a
    curve that is not there (a mean-field entry where no mean-field curve was drawn)."""
    drawn = {_style(line) for ax in fig.axes for line in ax.get_lines() if line.get_visible()
             and len(line.get_xdata()) and (line.get_alpha() is None or line.get_alpha() > 0)}
    legends = [*fig.legends, *(ax.get_legend() for ax in fig.axes if ax.get_legend() is not None)]
    return [f"legend lists {text.get_text()!r}, drawn nowhere" for leg in legends
            for handle, text in zip(leg.legend_handles, leg.get_texts())
            if isinstance(handle, matplotlib.lines.Line2D) and _style(handle) not in drawn]


def layout_problems(fig, tol: float = 1.0) -> list[str]:
    """What a reader could not read in the drawn figure, as sentences (empty when none): a text or
    legend that leaves the figure, two that overlap (titles, axis labels, tick labels, legends,
    colour bars), a legend over data points, a legend entry for a line drawn nowhere, legend text
    under 9 px, a label listed twice, a panel of more than MAX_PANEL_LINES lines, a figure wider than
    the page. Read from the boxes
    matplotlib drew (call after a draw), so it checks the PNG, not an estimate."""
    renderer = fig.canvas.get_renderer()
    boxes = _text_boxes(fig, renderer)
    name = (fig._suptitle.get_text() if fig._suptitle is not None else "") or \
        next((ax.get_title() for ax in fig.axes if ax.get_title()), "a figure")
    return [f"[{name[:50]}] {p}".replace("\n", " ") for p in _problems(fig, boxes, renderer, tol)]


def _problems(fig, boxes, renderer, tol) -> list[str]:
    """layout_problems' findings in one figure."""
    page = fig.bbox
    found = [f"{what} leaves the figure" for what, b in boxes
             if b.x0 < page.x0 - tol or b.y0 < page.y0 - tol or b.x1 > page.x1 + tol or b.y1 > page.y1 + tol]
    for i, (wa, a) in enumerate(boxes):
        found += [f"{wa} overlaps {wb}" for wb, b in boxes[i + 1:] if _overlap(a, b) > tol * tol]
    for ax in fig.axes:
        leg = ax.get_legend()
        if leg is not None and leg.get_visible():
            n = _covered_points(ax, leg.get_window_extent(renderer))
            if n:
                found.append(f"{(ax.get_title() or 'a panel')[:40]}: legend covers {n} data point(s)")
    return found + undrawn_entries(fig) + small_legends(fig) + repeated_entries(fig) + crowded_panels(fig) + \
        too_wide(fig)


PAGE_PX = 1150          # the report's column (style.css: body max-width): a wider image is shown shrunk


def too_wide(fig) -> list[str]:
    """A figure wider than the page: the browser shrinks it, and its text with it, under the size
    the 9 px rule measures (a 1,430 px figure's 10.7 px legend read 8.6 px)."""
    width = fig.bbox.width
    return [f"figure {width:.0f} px wide, over the page's {PAGE_PX} px: shown shrunk, its text under its natural size"] \
        if width > PAGE_PX + 1 else []


MAX_PANEL_LINES = 40    # lines one panel may draw (a median, its level and mean field count three): more, split it


def _drawn_lines(ax) -> list:
    """The panel's lines a reader sees: visible, with data, not transparent (a band's edges are)."""
    return [line for line in ax.get_lines() if line.get_visible() and len(line.get_xdata())
            and (line.get_alpha() is None or line.get_alpha() > 0)]


def crowded_panels(fig) -> list[str]:
    """Panels drawing more than MAX_PANEL_LINES lines: too many to tell apart (ldl_phase_diagram's
    loss figure drew 108 medians on one panel); a figure must give its settings panels of their own."""
    return [f"{(ax.get_title() or f'panel {n + 1}')[:40]}: {k} lines on one panel, over {MAX_PANEL_LINES}: "
            f"split it" for n, ax in enumerate(fig.axes) for k in [len(_drawn_lines(ax))] if k > MAX_PANEL_LINES]


def repeated_entries(fig) -> list[str]:
    """Labels a legend lists more than once (seven "the flat/sharp split" entries): a reader cannot
    tell which line each names; merge them (legend_below lists a label once)."""
    legends = [*fig.legends, *(ax.get_legend() for ax in fig.axes if ax.get_legend() is not None)]
    out = []
    for leg in legends:
        texts = [t.get_text() for t in leg.get_texts()]
        out += [f"legend lists {lab!r} {texts.count(lab)} times" for lab in dict.fromkeys(texts) if texts.count(lab) > 1]
    return out


MIN_LEGEND_PX = 9       # legend text at least this high (its font size) at the image's natural size


def small_legends(fig) -> list[str]:
    """Legends whose text is under MIN_LEGEND_PX at the dpi the figure is drawn at: a crowded figure
    must be split or its entries merged, not its legend shrunk."""
    legends = [*fig.legends, *(ax.get_legend() for ax in fig.axes if ax.get_legend() is not None)]
    sizes = [t.get_fontsize() * fig.dpi / 72 for leg in legends for t in leg.get_texts()]
    return [f"legend text {min(sizes):.1f} px high, under {MIN_LEGEND_PX} px"] if sizes and min(sizes) < MIN_LEGEND_PX \
        else []


LEGEND_SHARE = 0.3     # the most of a figure's height a legend below it takes before the figure grows
COINCIDE = 0.02        # two curves within this relative distance at every shared point are drawn on each other


def say_coinciding(ax, rtol: float = COINCIDE) -> list[tuple[str, str]]:
    """Curves of one panel that lie on each other (the same x, every y within `rtol`) cannot be told
    apart by colour: the later one's legend label says whose curve it is on. Returns the pairs."""
    lines = [ln for ln in ax.get_lines() if not ln.get_label().startswith("_") and len(ln.get_xdata()) >= 3]
    pairs = []
    for i, b in enumerate(lines):
        xb, yb = np.asarray(b.get_xdata(), float), np.asarray(b.get_ydata(), float)
        for a in lines[:i]:
            xa, ya = np.asarray(a.get_xdata(), float), np.asarray(a.get_ydata(), float)
            if xa.shape == xb.shape and np.array_equal(xa, xb) and (ya > 0).all() and (yb > 0).all() \
                    and np.max(np.abs(np.log(yb / ya))) < np.log1p(rtol):
                first = a.get_label().split(" (on ")[0]
                b.set_label(f"{b.get_label()} (on {first}'s curve)")
                pairs.append((first, b.get_label()))
                break
    return pairs


def legend_below(ax, ncol: int = 3, fontsize: float = 7, handles: list | None = None) -> None:
    """The legend of a panel (or of several, `ax` a list: one legend for them all) in a strip under
    the figure, kept out of the panels by the layout, from the artists drawn with a label: it never
    covers data, lists nothing that is not drawn, and costs
    height, not width (two figures still fit side by side on the page). Entries repeated with one
    label are listed once; the legend takes as few columns as it needs to fit the figure's width
    (long labels wrapped where even one column would not), so it is never clipped at the sides."""
    axes = list(np.ravel(ax)) if isinstance(ax, (list, tuple, np.ndarray)) else [ax]
    fig = axes[0].get_figure()
    entries = {}                                                      # label -> its first handle
    for one in axes:
        for handle, label in zip(*one.get_legend_handles_labels()):
            entries.setdefault(label, handle)
    for handle in handles or ():                                      # stand-ins: a kind of line named once
        entries.setdefault(handle.get_label(), handle)
    if not entries:
        return
    labels, handles = list(entries), list(entries.values())
    renderer = fig.canvas.get_renderer()
    room = 0.92 * fig.bbox.width      # text measured here grows a little at the page's dpi (a 3-column legend
                                      # measured within 0.98 of the width came out 2.5 px wider than the figure)
    for n in range(min(ncol, len(handles)), 0, -1):
        leg = fig.legend(handles, labels, loc="lower center", ncol=n, fontsize=fontsize, frameon=False, borderaxespad=0.3)
        width = leg.get_window_extent(renderer).width
        if width <= room or n == 1:
            break
        leg.remove()
    if width > room:                  # one column and still too wide: wrap the labels to the figure's width
        leg.remove()
        chars = max(20, int(fig.get_figwidth() * 72 / (0.55 * fontsize)) - 8)
        labels = ["\n".join(textwrap.fill(part, chars) for part in lab.split("\n")) for lab in labels]
        fig.legend(handles, labels, loc="lower center", ncol=1, fontsize=fontsize, frameon=False, borderaxespad=0.3)
    lines = sum(max(lab.count("\n") + 1 for lab in labels[i:i + n]) for i in range(0, len(labels), n))
    height = max(lines * fontsize * 1.4 * fig.dpi / 72, fig.legends[-1].get_window_extent(renderer).height)
    need = (height + 8 * fig.dpi / 72) / fig.dpi                # inches: the legend as drawn (its markers too), a gap
    h = fig.get_figheight()
    if need > LEGEND_SHARE * h:                                 # a long legend costs height, never the panels' room
        fig.set_figheight((1 - LEGEND_SHARE) * h + need)
    fig.set_layout_engine("tight", rect=(0, need / fig.get_figheight(), 1, 1))


def thumbnail(png_b64: str, parts=()) -> bytes:
    """The index's copy of a report figure: its first panel, and its legends drawn again to fit
    (`parts`, key_boxes), stacked, at most THUMB_WIDTH px wide and shown at its own size (a whole
    figure of eight panels shrunk to a thumbnail is unreadable; one panel at two thirds of its size
    or more is not); in a THUMB_COLOURS-colour palette, a few tens of KB (the index holds ten of
    them and must stay light)."""
    from PIL import Image
    im = Image.open(io.BytesIO(base64.b64decode(png_b64))).convert("RGB")
    pieces = [im.crop(p) if isinstance(p, tuple) else Image.open(io.BytesIO(base64.b64decode(p))).convert("RGB")
              for p in parts] or [im]
    pieces = [p if p.width <= THUMB_WIDTH else
              p.resize((THUMB_WIDTH, round(p.height * THUMB_WIDTH / p.width)), Image.LANCZOS) for p in pieces]
    sheet = Image.new("RGB", (max(p.width for p in pieces), sum(p.height for p in pieces)), "white")
    y = 0
    for p in pieces:
        sheet.paste(p, ((sheet.width - p.width) // 2, y))
        y += p.height
    buf = io.BytesIO()
    sheet.quantize(colors=THUMB_COLOURS, method=Image.Quantize.MEDIANCUT, dither=Image.Dither.NONE).save(
        buf, format="PNG", optimize=True)
    return buf.getvalue()


def report_layout(figures: list, out=sys.stderr) -> list[str]:
    """Every drawn figure's layout problems (a legend leaving the image, texts on each other), one
    line each, written to `out` (the report's log) and returned, so the page can name them beside
    the figures: a check of form changes how a thing is drawn or warns, and never costs the user the
    report (tests/test_figures.py renders a matrix of config shapes and fails on any)."""
    lines = [f"{getattr(f, 'title', '') or 'a figure'}: {p}" for f in figures for p in getattr(f, "problems", ())]
    for line in lines:
        print(f"layout: {line}", file=out)
    return lines


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
