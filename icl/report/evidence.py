"""The evidence of every decided row (issue 62): per claim one figure with a strip per decided row,
its statistic and 95 % interval against the band its prediction allows, coloured by its verdict, and
each seed's own value above it where the row was judged over seeds (verdicts' `seed_values`), and,
where a row's statistic is read off a curve per seed (verdicts' `curve`: a bound's needed constant
against K), that curve per seed beside it, so that a row's "holds" or "does not hold" can be seen,
not only read. The verdict table links each
decided row to its claim's figure (`anchor`).

The band is read back from the prediction, where icl.analyse.claims.judge.Band.text wrote it
("[a, b]", "≤ b", "≥ a"); a row whose prediction states none is drawn without one."""
from __future__ import annotations

import json
import re
import textwrap

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from icl.analyse import claims
from icl.report.figures import Figure, later, png
from icl.report.findings import claim_words, setting_words

NUM = r"[-+−]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?"
COLOURS = {claims.HOLDS: "#1a7f37", claims.FAILS: "#b3261e", claims.UNSURE: "#9a6700"}
PER_FIGURE = 14          # strips on one figure: a claim with more is split over several


def _num(s: str) -> float:
    return float(s.replace("−", "-"))


def band_of(prediction: str) -> tuple[float, float] | None:
    """The band a prediction states, (lo, hi) with ±inf for a one-sided one; None where it states none."""
    text = str(prediction or "")
    m = re.search(rf"\[({NUM}), ({NUM})\]", text)
    if m:
        return _num(m.group(1)), _num(m.group(2))
    m = re.search(rf"([≤≥]) ({NUM})", text)
    if m:
        x = _num(m.group(2))
        return (-np.inf, x) if m.group(1) == "≤" else (x, np.inf)
    return None


def seed_values(text) -> dict[str, float]:
    """A row's `seed_values` ({"seed": value} as JSON), {} where it has none."""
    if not isinstance(text, str) or not text:
        return {}
    return {k: float(v) for k, v in json.loads(text).items()}


def curve_of(text) -> dict | None:
    """A row's `curve` (icl.analyse.claims.curve_json), None where it has none."""
    return json.loads(text) if isinstance(text, str) and text else None


def curve_figure(row: dict, title: str) -> Figure | None:
    """A decided row's claim-specific curve: the values its statistic was read from, one line per seed
    (or draw), against their x (a bound's needed constant against K, log-log)."""
    c = curve_of(row.get("curve"))
    if not c:
        return None
    fig, ax = plt.subplots(figsize=(5.6, 3.4), layout="constrained")
    colours = plt.get_cmap("tab10")
    log = bool(c.get("log"))
    at = np.log2(c["xs"]) if log else np.asarray(c["xs"], float)    # a log x drawn at log₂ x, labelled by x:
    for i, (name, ys) in enumerate(c["lines"].items()):              # figures.tidy relabels log axes in 1-2-5
        ax.plot(at, ys, "o-", color=colours(i % 10), lw=1.2, ms=4, label=name)
    if log:
        ax.set_yscale("log")
    ax.set_xticks(at, [f"{x:g}" for x in c["xs"]])
    ax.set_xlabel(c["x"] + (" (log scale)" if log else ""), fontsize=8)
    ax.set_ylabel(textwrap.fill(c["y"], 40), fontsize=8)
    ax.set_title(textwrap.fill(f"{setting_words(row['group'])}: {row['verdict']}", 70), fontsize=8)
    fig.legend(fontsize=7, loc="outside lower center", ncol=5, frameon=False)
    fig.suptitle(title, fontsize=8, wrap=True)
    return png(fig)


def anchor(cid: str, part: int = 0) -> str:
    """The id of a claim's evidence figure on the page (its first part)."""
    return "evidence-" + re.sub(r"[^\w.-]", "-", cid) + (f"-{part}" if part else "")


def decided(verdicts: pd.DataFrame) -> pd.DataFrame:
    """The per-setting rows with a verdict and a number: what an evidence figure draws."""
    rows = verdicts[verdicts["scope"] != "run"] if "scope" in verdicts else verdicts
    keep = rows["verdict"].isin([claims.HOLDS, claims.FAILS, claims.UNSURE]) & rows["value"].notna()
    return rows[keep]


def evidence_figure(rows: pd.DataFrame, title: str) -> Figure | None:
    """One claim's decided rows as strips: the band shaded, the interval as a bar, the value a dot in
    its verdict's colour, the row's setting and model on the left."""
    if rows.empty:
        return None
    n = len(rows)
    fig, ax = plt.subplots(figsize=(7.2, 2.3 + 0.45 * n), layout="constrained")
    lo_all, hi_all = [], []
    drew_seeds = False
    for i, r in enumerate(rows.itertuples(index=False)):
        y = n - 1 - i
        v, lo, hi = float(r.value), float(r.ci_lo), float(r.ci_hi)
        c = COLOURS.get(r.verdict, "grey")
        band = band_of(r.prediction)
        if band is not None:
            a, b = band
            ax.fill_betweenx([y - 0.35, y + 0.35], a if np.isfinite(a) else -1e300, b if np.isfinite(b) else 1e300,
                             color="#cfe3f5", lw=0, gid=f"{r.group}: band")
            lo_all += [x for x in band if np.isfinite(x)]
            hi_all += [x for x in band if np.isfinite(x)]
        if np.isfinite(lo) and np.isfinite(hi):
            ax.plot([lo, hi], [y, y], color=c, lw=2.2, solid_capstyle="butt", gid=f"{r.group}: 95% interval")
            lo_all.append(lo)
            hi_all.append(hi)
        ax.plot([v], [y], "o", color=c, ms=5, gid=f"{r.group}: {r.verdict} {v:.3g}")
        lo_all.append(v)
        hi_all.append(v)
        seeds = seed_values(getattr(r, "seed_values", ""))
        if seeds:                # each seed's own value, the unit the interval is over
            xs = np.array(list(seeds.values()))
            ax.plot(xs, np.full(len(xs), y + 0.22), "|", color="#444444", ms=7, mew=1.2,
                    gid=f"{r.group}: seeds {', '.join(f'{k}: {x:.3g}' for k, x in seeds.items())}")
            lo_all.append(float(xs.min()))
            hi_all.append(float(xs.max()))
            drew_seeds = True
    labels = [textwrap.fill(f"{setting_words(g)}{'' if m == 'all' else ' (' + m + ')'}", 38)
              for g, m in zip(rows["group"], rows["model"])]
    ax.set_yticks(range(n))
    ax.set_yticklabels(labels[::-1], fontsize=7)
    ax.set_ylim(-0.7, n - 0.3)
    x0, x1 = min(lo_all), max(hi_all)
    pad = 0.08 * (x1 - x0) if x1 > x0 else max(abs(x0), 1.0) * 0.1
    ax.set_xlim(x0 - pad, x1 + pad)
    if x0 - pad < 0 < x1 + pad:
        ax.axvline(0, color="grey", lw=0.6, ls=":", gid="zero")
    for v in (claims.HOLDS, claims.FAILS, claims.UNSURE):
        if (rows["verdict"] == v).any():
            ax.plot([], [], "o-", color=COLOURS[v], label=v)
    ax.fill_between([], [], color="#cfe3f5", label="the prediction's band")
    if drew_seeds:
        ax.plot([], [], "|", color="#444444", ms=7, mew=1.2, label="one seed's value")
    fig.legend(fontsize=7, loc="outside lower center", ncol=4, frameon=False)
    ax.set_xlabel("each row's statistic and 95% interval", fontsize=8)
    fig.suptitle(title, fontsize=8, wrap=True)
    return png(fig)


def evidence_figures(verdicts: pd.DataFrame) -> list[dict]:
    """Per claim with a decided row: its figure(s) (at most PER_FIGURE strips each), with the anchor
    the verdict table links to and the claim's words."""
    rows = decided(verdicts)
    out = []
    for cid, g in rows.groupby("claim_id", sort=False):
        parts = [g.iloc[i:i + PER_FIGURE] for i in range(0, len(g), PER_FIGURE)]
        for k, part in enumerate(parts):
            title = claim_words(cid) + (f" (part {k + 1} of {len(parts)})" if len(parts) > 1 else "")
            out.append({"claim_id": cid, "anchor": anchor(cid, k), "title": title,
                        "figure": later(evidence_figure, part, title),
                        "rows": [link_key(r) for r in part.to_dict("records")]})
        for i, r in enumerate(r for r in g.to_dict("records") if curve_of(r.get("curve"))):
            title = f"{claim_words(cid)}: per seed, what the row's statistic is read from"
            out.append({"claim_id": cid, "anchor": anchor(cid) + f"-curve-{i}", "title": title,
                        "figure": later(curve_figure, r, title), "rows": []})
    return out


def link_key(row: dict) -> str:
    """A verdict row's key in the page's map from rows to their evidence figure."""
    return f"{row['model']}|{row['claim_id']}|{row['group']}"


def links(evidence: list[dict]) -> dict[str, str]:
    """Each decided row's key (link_key) to its figure's anchor."""
    return {k: e["anchor"] for e in evidence for k in e["rows"]}
