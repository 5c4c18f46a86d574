"""reports/index.html, the landing page: per experiment its verdict counts, the line of its main
finding, its runs, training time and device, and its key figure. It reads what each report wrote
(verdicts, summary, thumbnail, headline.json) and draws nothing, so it imports no plotting."""
from __future__ import annotations

import base64
import datetime as dt
import json
import os

import pandas as pd

from icl.analyse import claims
from icl.store.io import read_parquet
from icl.jobs.provenance import code_version
from icl.report.glossary import with_symbols
from icl.report.html import TEMPLATES, write_text


def verdict_counts(verdicts: pd.DataFrame) -> tuple[list[tuple[str, int]], int]:
    """The counts a reader sees first, the same on the index and on each report page: per verdict,
    the per-setting rows (scope `setting`, one verdict per claim and setting), and apart from them
    how many per-run rows (scope `run`, e.g. every run against the mean-field curve) lie behind."""
    scope = verdicts["scope"] if "scope" in verdicts else pd.Series("setting", index=verdicts.index)
    counts = verdicts.loc[scope != "run", "verdict"].value_counts()
    return [(v, int(counts.get(v, 0))) for v in claims.VERDICTS], int((scope == "run").sum())


def index_entry(name: str, description: str, results_dir: str) -> dict:
    """What the index says of one experiment: verdict counts and the line of its main finding (the
    report's headline.json), runs, training time, device, key figure."""
    verdicts = read_parquet(os.path.join(results_dir, "verdicts.parquet"))
    summary = read_parquet(os.path.join(results_dir, "summary.parquet"))
    with open(os.path.join(results_dir, "thumbnail.png"), "rb") as fh:
        thumb = base64.b64encode(fh.read()).decode()
    counts, per_run = verdict_counts(verdicts)
    head = os.path.join(results_dir, "headline.json")
    said = {}
    if os.path.exists(head):               # written by the report beside the thumbnail
        with open(head) as fh:
            said = json.load(fh)
    return {"name": name, "description": description, "runs": len(summary), "runs_said": claims.count(len(summary), "run"),
            "counts": counts, "per_run": per_run,
            "learning": said.get("learning", ""), "finding": said.get("finding", ""),
            "train_seconds": float(summary["train_seconds"].sum()),
            "devices": ", ".join(sorted(set(summary["device"].astype(str)))), "thumbnail": thumb}


def render_index(experiments: dict, results: str, out_path: str) -> None:
    """reports/index.html: per experiment what was found (verdict counts), its key figure, its size
    and where it ran, and the link to its report."""
    entries = [index_entry(n, e.get("description", ""), os.path.join(results, n)) for n, e in experiments.items()]
    html = TEMPLATES.get_template("index.html.j2").render(
        experiments=entries, version=code_version(), generated=dt.datetime.now().isoformat(timespec="seconds"))
    write_text(out_path, with_symbols(html))      # every symbol defined at its first use
