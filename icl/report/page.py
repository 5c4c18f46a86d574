"""One self-contained HTML report per experiment (figures as inline PNG, CSS inline), and an index.
The report reads and draws only: the verdicts, slopes and stability it shows are the analyse
step's tables (icl.analyse.verdicts).

It composes the page: each model's section (its figures drawn by icl.report.curves, the analogues
of LDL Fig. 1-3; the theory's by icl.report.ldl and icl.report.zfb), the headline, the verdict
tables, the runs and the provenance.
"""
from __future__ import annotations

import datetime as dt
import json
import os

import numpy as np
import pandas as pd
import yaml

from icl.analyse import claims

from icl import models, tasks
from icl.report import findings as report_findings, headline as report_headline, heads as report_heads
from icl.report import evidence as report_evidence, ldl as report_ldl, llc as report_llc, zfb as report_zfb
from icl.report import prose
from icl.report.settings import distinct_settings, setting_label, swept_columns
from icl.report.curves import (attention_maps_figure, attention_scores_figure, attention_summary_figure,
                               loss_figure)
from icl.report.figures import Figure, draw_all, later, palette, report_layout, thumbnail
from icl.store.files import atomic_path
from icl.store.io import LONG_SCHEMAS, read_parquet
from icl.report.glossary import with_symbols
from icl.report.html import TEMPLATES, write_text
from icl.report.index import verdict_counts
from icl.jobs.provenance import code_hash, code_version, package_versions
from icl.jobs.timing import benchmark_table, summary_line


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
    llc_table = ""
    llc = tables.get("llc")
    if llc is not None and llc["run_id"].isin(r["run_id"]).any():       # train.llc: λ̂ and both instruments
        figs.append(later(report_llc.llc_figure, llc, curves, r, summ))
        agree = report_llc.agreement_table(r, summ)
        kind = models.MODELS[r["model_kind"].iloc[0]]
        note = report_llc.hoogland_note(r, summ, kind.nonlinear, tasks.family(exp["task"]["kind"]).regression)
        llc_table = (agree.to_html(index=False, classes="tbl") if len(agree) else "") + (f"<p class=\"note\">{note}</p>" if note else "")
    if n_div:
        how += f"; {claims.count(n_div, 'diverged run')} left out of these figures (listed above)"
    if not ldl:
        return {"name": name, "kind": r["model_kind"].iloc[0], "optimizer": r["optimizer"].iloc[0],
                "split": how, "figures": figs, "maps": maps, "theory_figures": [], "key": key, "llc_table": llc_table}
    theory_figs = [later(report_ldl.collapse_figure, tables, name), later(report_ldl.slope_figure, tables, name),
                   later(report_ldl.stability_figure, tables, name), *report_ldl.phase_diagram_figures(tables, name)]
    return {"name": name, "kind": r["model_kind"].iloc[0], "optimizer": r["optimizer"].iloc[0],
            "split": how, "figures": figs, "maps": maps, "theory_figures": theory_figs, "key": key,
            "llc_table": llc_table}


def _common_domain(rows: pd.DataFrame) -> str:
    """The domain note most of a model's verdict rows share: said once above its table."""
    d = rows["domain"][rows["domain"] != ""]
    return d.mode().iloc[0] if len(d) else ""


def setting_statements(rows: pd.DataFrame) -> list[tuple[str, str]]:
    """(setting, its statement of the theorems' hypotheses), once per setting, in the rows' order:
    what every row, banner and figure of the setting refers to (analyse's setting_hypotheses)."""
    if "setting_hypotheses" not in rows:
        return []
    said = rows[rows["setting_hypotheses"].fillna("") != ""]
    return list(dict.fromkeys(zip(said["setting"].fillna("").astype(str), said["setting_hypotheses"].astype(str))))


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
    for k in ("clock", "collapse"):                              # results analysed before the clock's tables have none
        path = os.path.join(results_dir, f"{k}.parquet")
        tabs[k] = read_parquet(path) if os.path.exists(path) else pd.DataFrame()
    attention = os.path.join(results_dir, "attention.parquet")
    tabs["attention"] = lambda ids: read_parquet(attention, run_ids=ids)
    # the report reads only the LSA's effective matrix: softmax_q's logits reach it through summary's qoff_*
    tabs["matrices"] = read_parquet(os.path.join(results_dir, "matrices.parquet"), filters=[("name", "==", "effective")])
    llc_path = os.path.join(results_dir, "llc.parquet")          # tables made before the LLC have none
    tabs["llc"] = read_parquet(llc_path) if os.path.exists(llc_path) else LONG_SCHEMAS["llc"].empty_table().to_pandas()
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
    evidence = report_evidence.evidence_figures(verdicts)
    evidence_figs = [e["figure"] for e in evidence]
    figure_lists = [s[k] for s in sections for k in ("figures", "maps", "theory_figures")] + ([zfb["figures"]] if zfb else []) \
        + [evidence_figs]
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
    layout += [f"prose: {p}" for p in prose.check(headline_sentences(head))]      # a reader's stumbles, said
    statements = {m: setting_statements(g) for m, g in verdicts.groupby("model", sort=False)}
    layout += [f"prose: {p}" for said in statements.values()
               for p in prose.against_hypotheses(exp.get("description", ""), said)]
    swept = swept_columns(runs)
    html = TEMPLATES.get_template("report.html.j2").render(
        experiment=experiment, description=exp.get("description", ""), sections=sections,
        task_kind=exp["task"]["kind"], zfb=zfb, ldl=ldl,
        verdict_counts=verdict_counts(verdicts),
        robustness=claim_robustness(verdicts),
        headline=head, grid=report_headline.verdict_grid(verdicts),
        evidence=[e for e in evidence if e["figure"]], evidence_links=report_evidence.links(evidence),
        verdict_groups=[(m, g[g["scope"] == "setting"].to_dict("records"), _common_domain(g),
                         g[g["scope"] == "run"].to_dict("records"), statements[m])
                        for m, g in verdicts.groupby("model", sort=False)],
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
    write_text(out_path, with_symbols(html))      # every symbol defined at its first use


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
            "findings": report_findings.findings(verdicts), "finding": report_findings.index_line(verdicts),
            "paper": report_headline.paper_sizes(exp, paper_exp),
            "clock": report_headline.clock_sentences(tabs) if ldl else []}


def headline_sentences(head: dict) -> list[str]:
    """The sentences of the page's first screen, as icl.report.prose checks them."""
    models = [f"{m['says'] or m['status']}. {m['trained']}; {m['reached']}." for m in head["models"]]
    return [*head["clock"], *head["findings"], *models, *([head["paper"] + "."] if head["paper"] else [])]


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
