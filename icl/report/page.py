"""One self-contained HTML report per experiment (figures as inline PNG, CSS inline), and an index.
The report reads and draws only: the verdicts, slopes and stability it shows are the analyse
step's tables (icl.analyse).

The figures are the analogues of LDL Fig. 1 (loss for the flat and the sharp set of L, attention
scores of feature 1) and Fig. 2-3 (K x K attention maps over training), with the spread over
seeds drawn as a band around the median.
"""
from __future__ import annotations

import datetime as dt
import json
import os

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import yaml  # noqa: E402

from icl import claims, tasks  # noqa: E402
from icl.report import headline as report_headline, heads as report_heads  # noqa: E402
from icl.report import ldl as report_ldl, zfb as report_zfb  # noqa: E402
from icl.report.settings import distinct_settings, setting_label, swept_columns  # noqa: E402
from icl.report.figures import (MAX_PANEL_LINES, QUALITATIVE, REFERENCE, Figure, draw_all, later, legend_below,  # noqa: E402
                                palette, png, report_layout, say_coinciding, thumbnail)
from icl.files import atomic_path  # noqa: E402
from icl.io import read_parquet  # noqa: E402
from icl.report.html import TEMPLATES, write_text  # noqa: E402
from icl.report.index import verdict_counts  # noqa: E402
from icl.provenance import code_hash, code_version, package_versions  # noqa: E402
from icl.timing import benchmark_table, summary_line  # noqa: E402


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


def attention_scores_figure(attn, runs, L, K, tag: str = "") -> Figure:
    """Attn_1 (own score of v_1) and Attn_{k,1}: mass a query with feature 1 puts on feature k;
    1/K, uniform attention's (what every score reads when nothing is learned), as a level. Where
    K scores times the settings of this L would put more than CROWDED lines on one panel, a panel
    per setting, three a row."""
    mine = runs[runs["L"] == L]
    df = attn[attn["run_id"].isin(mine["run_id"]) & (attn["query_feature"] == 0)]
    keys = distinct_settings(mine, "L")
    settings = list(mine.groupby(keys, dropna=False)) if keys else []
    panels = [(setting_label(keys, key), g) for key, g in settings] if K * len(settings) > CROWDED else [("", mine)]
    ncol = min(3, len(panels))
    nrow = -(-len(panels) // ncol)
    one = len(panels) == 1
    fig, axes = plt.subplots(nrow, ncol, figsize=(5.2, 4.0) if one else (3.4 * ncol, 2.4 * nrow + 1.2),
                             squeeze=False, sharex=True, sharey=True)
    pal, markers = QUALITATIVE, {}
    for ax, (name, rows) in zip(axes.ravel(), panels):
        for k in range(K):
            lab = r"$\mathrm{Attn}_{1}$ (own)" if k == 0 else rf"$\mathrm{{Attn}}_{{{k + 1},1}}$"
            _persetting_label(ax, df[(df["key_feature"] == k) & df["run_id"].isin(rows["run_id"])], rows, "L", "epoch",
                         "attn", lab, pal[k % len(pal)], log=False, markers=markers)
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


def split_L(runs: pd.DataFrame, theory: pd.DataFrame) -> tuple[list, list, float | None, str]:
    """The flat and the sharp set of L, at theory.parquet's L_split (icl.theory.ldl.split: the
    config's report.flat_max_L, else L*): the split the verdicts and slopes.parquet use too."""
    Ls = sorted(runs["L"].dropna().unique().tolist())
    cut = runs[["run_id"]].merge(theory[["run_id", "L_split", "L_star"]], on="run_id")
    if cut["L_split"].isna().all() or cut["L_split"].nunique() > 1:
        return Ls, [], None, "no single flat/sharp split for this sweep: all L drawn together"
    thr = float(cut["L_split"].iloc[0])
    how = (f"flat set: L ≤ {thr:g} (report.flat_max_L in the config)" if not np.isclose(thr, cut["L_star"].iloc[0])
           else f"flat set: L ≤ L* = 1/(Δδ) = {thr:.3f}, δ = sqrt(20K/N), unit constant")
    return [L for L in Ls if L <= thr], [L for L in Ls if L > thr], thr, how


def trained_line(n_runs: int, n_shards: int, loops: float, tim: pd.DataFrame, devices: list[str]) -> str:
    """The header's sentence on training: the training loops' seconds (the shards' own clocks) and,
    where Snakemake's benchmarks were read, the training jobs' (start-up, data and writing too): two
    quantities, each named, each computed once (the table below sums the same jobs)."""
    jobs = float(tim.loc[tim["step"] == "train", "seconds"].sum()) if len(tim) else 0.0
    out = f"{claims.count(n_runs, 'run')} in {claims.count(n_shards, 'shard')}; their training loops took {loops:.1f} s"
    if jobs:
        out += f" of the {jobs:.1f} s of training jobs (start-up, data and writing the rest: where the time went, below)"
    return out + f", on {', '.join(devices)}."


def model_section(name, runs, tables, exp, ldl: bool = True) -> dict:
    """Figures of one model. Diverged runs are left out of every curve and band, explicitly."""
    diverged = set(tables["summary"].loc[tables["summary"]["diverged"], "run_id"])
    r = runs[(runs["model"] == name) & ~runs["run_id"].isin(diverged)]
    n_div = int(((runs["model"] == name) & runs["run_id"].isin(diverged)).sum())
    if r.empty:
        mine = runs[runs["model"] == name]
        return {"name": name, "kind": mine["model_kind"].iloc[0], "optimizer": mine["optimizer"].iloc[0],
                "split": f"{claims.every(n_div, 'run')} diverged: nothing to draw", "figures": [], "maps": [],
                "theory_figures": []}
    curves = tables["curves"][tables["curves"]["run_id"].isin(r["run_id"])]
    figs = []
    th = tables["theory_curves"]
    summ = tables["summary"]
    uniform = summ.set_index("run_id")["uniform_train_loss"] if "uniform_train_loss" in summ else None
    if r["L"].notna().any():
        flat, sharp, thr, how = split_L(r, tables["theory"])
        colours = palette(tables["runs"]["L"])           # every L of the experiment: one colour each
        figs += [later(loss_figure, curves, r, flat, "(a) loss, flat set" if thr is not None else
                       "loss, every L (no single flat/sharp split)", th, colours=colours, reference=uniform),
                 later(loss_figure, curves, r, sharp, "(b) loss, sharp set", th, colours=colours, reference=uniform)]
    else:                      # tasks without a Lipschitz constant (linear): one figure, by prompt length
        flat, sharp = [], []
        how = "loss by training prompt length N (the task has no Lipschitz constant L)"
        figs.append(later(loss_figure, curves, r, sorted(r["N"].unique().tolist()), "loss over training", by="N",
                          test=True, colours=palette(tables["runs"]["N"]), reference=uniform))
        figs.append(later(report_zfb.escape_figure, tables["summary"][tables["summary"]["run_id"].isin(r["run_id"])], r))
    # attention of discrete tokens: one L of each regime per K (maps of different K do not average)
    Ks = sorted(r["K"].dropna().unique().tolist())
    drawn = []
    for K in Ks:
        rk = r[r["K"] == K]
        flat_k = [L for L in flat if L in set(rk["L"])]
        sharp_k = [L for L in sharp if L in set(rk["L"])]
        drawn += [(K, rk, L) for L in flat_k[:1] + ([min(sharp_k, key=lambda L: abs(L - 1.0))] if sharp_k else [])]
    # only the drawn runs' rows: the whole table is millions of rows at sweep scale
    ids = [rid for _, rk, L in drawn for rid in rk.loc[rk["L"] == L, "run_id"]]
    attn = tables["attention"](ids) if ids else pd.DataFrame()
    if not Ks and curves["metric"].isin(["attn_entropy", "attn_knn"]).any():   # continuous tokens
        figs.append(later(attention_summary_figure, curves, r, palette(tables["runs"]["L"])))
    maps, key = [], None
    if len(attn):
        epochs_all = sorted(attn["epoch"].unique().tolist())
        heads = report_heads.has_heads(attn)            # several layers or heads: the last layer's mean here
        mean = report_heads.last_layer(attn)
        for K, rk, L in drawn:
            tag = f", K={K}" if len(Ks) > 1 else ""
            which = tag + (" (last layer, mean of its heads)" if heads else "")
            figs.append(later(attention_scores_figure, mean, rk, L, int(K), which))
            key = key or figs[-1]                       # 1/K drawn: the figure that cannot read as learned
            maps.append(later(attention_maps_figure, mean, rk, L, epochs_all, which))
            if heads:                                   # a setting's heads apart from another's: no median pools them
                at = rk[rk["L"] == L]
                keys = distinct_settings(at, "L")
                for key, g in (at.groupby(keys, dropna=False) if keys else [(None, at)]):
                    each = tag + (f", {setting_label(keys, key)}" if keys else "")
                    maps += [later(report_heads.head_maps_figure, attn, g, L, each),
                             later(report_heads.own_by_head_figure, attn, g, L, each)]
    if n_div:
        how += f"; {claims.count(n_div, 'diverged run')} left out of these figures (listed above)"
    if not ldl:
        return {"name": name, "kind": r["model_kind"].iloc[0], "optimizer": r["optimizer"].iloc[0],
                "split": how, "figures": figs, "maps": maps, "theory_figures": [], "key": key}
    theory_figs = [later(report_ldl.collapse_figure, tables, name), later(report_ldl.slope_figure, tables, name),
                   later(report_ldl.stability_figure, tables, name), *report_ldl.phase_diagram_figures(tables, name)]
    return {"name": name, "kind": r["model_kind"].iloc[0], "optimizer": r["optimizer"].iloc[0],
            "split": how, "figures": figs, "maps": maps, "theory_figures": theory_figs, "key": key}


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


def _common_domain(rows: pd.DataFrame) -> str:
    """The domain note most of a model's verdict rows share: said once above its table."""
    d = rows["domain"][rows["domain"] != ""]
    return d.mode().iloc[0] if len(d) else ""


BAND_CHOICES = ("band half as wide", "band half again as wide")


def claim_robustness(verdicts: pd.DataFrame) -> dict[str, dict]:
    """Per claim, over its per-setting rows: how many are decided (holds / does not hold), how many
    of those are fragile (another reasonable analysis choice reads otherwise) and how many flip with
    the band alone (half as wide or half again as wide), and `header`: the sentence its header
    carries — "decided mostly by its band" where more than half of its decided rows flip with it."""
    out = {}
    rows = verdicts[verdicts["scope"] == "setting"] if "scope" in verdicts else verdicts
    for cid, g in rows.groupby("claim_id", sort=False):
        decided = g[g["verdict"].isin([claims.HOLDS, claims.FAILS])]
        frag = decided["fragile"].fillna("").astype(str)
        n, k = len(decided), int((frag != "").sum())
        band = sum(any(b in f for b in BAND_CHOICES) for f in frag)      # an empty str Series sums to ''
        header = ""
        if n and band > n / 2:
            header = (f"decided mostly by its band: {band} of {n} decided rows read otherwise when the band is half as "
                      "wide or half again as wide")
        out[cid] = {"decided": n, "fragile": k, "band": band, "share": k / n if n else float("nan"),
                    "text": (f"{k} of {n} decided rows fragile ({k / n:.0%})" if n else "no decided row"),
                    "header": header}
    return out


def key_figure(sections: list[dict], zfb: dict | None, models: list[dict] = ()) -> Figure | None:
    """The figure the index shows for an experiment: ZFB's error under shift, else the first loss
    figure — for the first model the headline calls "not learned", where there is one, its figure
    drawn against a level that reads "nothing learned" (section `key`: the attention scores with
    1/K, else its loss with uniform attention's), as a loss falling 100× alone reads as success."""
    stuck = [m["model"] for m in models if m.get("status") == "not learned"]
    pick = [s for s in sections if s["name"] in stuck][:1] or sections
    figs = (zfb or {}).get("figures") if not stuck else None
    figs = figs or [s.get("key") for s in pick if s.get("key")] or [f for s in pick for f in s["figures"]] \
        or [f for s in sections for f in s["figures"]]
    return figs[0] if figs else None


def render(experiment: str, exp: dict, results_dir: str, out_path: str, processes: int = 1,
           benchmarks: list[str] | None = None, paper: str | None = None) -> None:
    """reports/<experiment>.html and, for the index, results/<experiment>/thumbnail.png (the key
    figure) and headline.json (what the page's headline says of each model), from the experiment's
    tables, its analysis (slopes, stability, verdicts) and the Snakemake benchmark files of the jobs
    before it (`benchmarks`: its timing table, left out without them). `paper`: config/paper.yaml,
    whose experiment of the same name gives the sizes the headline quotes where this one is smaller.
    Figures are drawn by `processes`."""
    tabs = {k: read_parquet(os.path.join(results_dir, f"{k}.parquet"))
            for k in ("runs", "curves", "summary", "theory", "theory_curves", "shift", "slopes", "stability",
                      "verdicts")}
    attention = os.path.join(results_dir, "attention.parquet")
    tabs["attention"] = lambda ids: read_parquet(attention, run_ids=ids)
    # the report reads only the LSA's effective matrix: softmax_q's logits reach it through summary's qoff_*
    tabs["matrices"] = read_parquet(os.path.join(results_dir, "matrices.parquet"), filters=[("name", "==", "effective")])
    zfb = None
    if len(tabs["shift"]):
        clean = report_zfb._lsa_rows(tabs)
        laws = report_zfb.training_laws(tabs, clean)
        zfb = {"figures": [later(report_zfb.seed_figure, clean, laws),
                           *(later(report_zfb.error_vs_length_figure, rows, law) for law, rows in laws),
                           later(report_zfb.matrix_figure, tabs), later(report_zfb.slope_figure, clean)],
               "notes": report_zfb.SOURCE_NOTES,
               "predictors": report_zfb.predictor_table(clean, tabs)}
    runs = tabs["runs"]
    with open(os.path.join(results_dir, "shards.json")) as fh:
        shards = json.load(fh)
    ldl = tasks.family(exp["task"]["kind"]).ldl
    sections = [model_section(m, runs, tabs, exp, ldl) for m in runs["model"].unique()]
    verdicts = tabs["verdicts"]
    figure_lists = [s[k] for s in sections for k in ("figures", "maps", "theory_figures")] + ([zfb["figures"]] if zfb else [])
    draw_all([f for figs in figure_lists for f in figs], processes)
    layout = report_layout([f for figs in figure_lists for f in figs])
    for figs in figure_lists:       # those whose figure function found nothing to draw go
        figs[:] = [f for f in figs if f]
    summ = runs_table(runs, tabs["summary"])
    trained = tabs["summary"].groupby(["code_version", "code_hash"]).size().reset_index()
    versions = [f"{v} (source {h}, {claims.count(n, 'run')})" for v, h, n in trained.itertuples(index=False)]
    stale = sorted(set(trained["code_hash"]) - {code_hash()})
    devices = sorted({f"{s['device']} ({s['device_name']}, {claims.count(s['threads'], 'thread')}, {s.get('precision', 'float32')}"
                      f"{', compiled' if s.get('compiled') else ''}"
                      f"{'; fresh prompts: ' + s['fresh_stream'] if s.get('fresh_stream') else ''})" for s in shards})
    tim = benchmark_table(benchmarks or [])
    head = headline(experiment, exp, tabs, verdicts, ldl, paper)
    swept = swept_columns(runs)
    html = TEMPLATES.get_template("report.html.j2").render(
        experiment=experiment, description=exp.get("description", ""), sections=sections,
        task_kind=exp["task"]["kind"], zfb=zfb, ldl=ldl,
        verdict_counts=verdict_counts(verdicts),
        robustness=claim_robustness(verdicts),
        headline=head, grid=report_headline.verdict_grid(verdicts),
        verdict_groups=[(m, g[g["scope"] == "setting"].to_dict("records"), _common_domain(g),
                         g[g["scope"] == "run"].to_dict("records")) for m, g in verdicts.groupby("model", sort=False)],
        summary=summ.to_html(index=False, float_format=lambda v: f"{v:.4g}", na_rep="—", classes="tbl runs"),
        regimes_table=report_ldl.regimes_by_model_table(tabs) if ldl else "",
        phase_note=report_ldl.phase_note(tabs, verdicts) if ldl else "",
        diverged=[{"model": d["model"], "what": ", ".join(f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}"
                                                       for k, v in d.items() if k in swept and k != "lr")}
                  for d in summ[summ["diverged"].astype(bool)].to_dict("records")] if "diverged" in summ else [],
        trained=trained_line(len(runs), len(shards), sum(s["seconds"] for s in shards), tim, devices),
        n_diverged=claims.count(int(summ["diverged"].astype(bool).sum()) if "diverged" in summ else 0, "diverged run"),
        config=yaml.safe_dump({experiment: exp}, sort_keys=False), versions=versions,
        report_version=f"{code_version()} (source {code_hash()})", stale=stale, packages=package_versions(),
        timing=tim.to_html(index=False, float_format=lambda v: f"{v:.2f}", classes="tbl") if len(tim) else "",
        timing_line=summary_line(tim), layout=layout,
        generated=dt.datetime.now().isoformat(timespec="seconds"))
    thumb = key_figure(sections, zfb, head["models"])
    with atomic_path(os.path.join(results_dir, "thumbnail.png")) as tmp, open(tmp, "wb") as fh:
        fh.write(thumbnail(str(thumb), thumb.key_boxes) if thumb else b"")
    write_text(os.path.join(results_dir, "headline.json"),
               json.dumps({"models": head["models"], "learning": head["learning"], "finding": head["finding"]},
                          indent=1, ensure_ascii=False))
    write_text(out_path, html)


def headline(experiment: str, exp: dict, tabs: dict, verdicts: pd.DataFrame, ldl: bool,
             paper: str | None = None) -> dict:
    """What the page opens with (icl.report.headline): per model what was trained and what it
    reached, the verdict counts per claim (per-setting rows, as on the index), the paper's sizes
    where this experiment is smaller, a sentence per claim with a "does not hold" in any setting (or
    one saying why nothing was decided), and the index's line of what was found."""
    paper_exp = None
    if paper and os.path.exists(paper):
        with open(paper) as fh:
            paper_exp = ((yaml.safe_load(fh) or {}).get("experiments") or {}).get(experiment)
    models = report_headline.model_outcomes(tabs, ldl)
    return {"models": models, "learning": report_headline.learning_sentence(models),
            "claims": report_headline.claim_counts(verdicts, claim_robustness(verdicts)),
            "failing": report_headline.failing_claims(verdicts), "undecided": report_headline.undecided(verdicts),
            "finding": report_headline.finding(verdicts), "paper": report_headline.paper_sizes(exp, paper_exp)}


# run columns that identify or describe a run rather than set it
RUN_RESULTS = ["loss0", "final_train_loss", "final_test_loss", "uniform_train_loss", "uniform_test_loss",
               "oracle_test_loss", "attn_own_final", "t_rel_1e-1", "t_rel_1e-2", "t_rel_1e-3", "t_escape", "diverged"]





def runs_table(runs: pd.DataFrame, summary: pd.DataFrame) -> pd.DataFrame:
    """The report's runs table: the model, one column per swept setting, then what each run reached;
    columns that hold nothing (every value missing, e.g. L on a linear task) dropped."""
    keys = ["model"] + swept_columns(runs)
    t = runs[["run_id"] + keys].merge(summary, on="run_id")
    t = t[keys + [c for c in RUN_RESULTS if c in t]]
    t = t.sort_values([c for c in keys if c != "lr"], kind="stable")
    t = t.loc[:, t.notna().any()]
    # nullable columns print <NA> whatever na_rep says: as float64 they print "—" and format as numbers
    return t.apply(lambda c: c.astype("float64") if isinstance(c.dtype, (pd.Int64Dtype, pd.Float64Dtype)) else c)
