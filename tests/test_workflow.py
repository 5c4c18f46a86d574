"""End to end: snakemake on a tiny config in a temporary directory; tables and report read back."""
import base64
import copy
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import torch
import pytest
import yaml

REPO = Path(__file__).resolve().parent.parent

DESIGN_COLUMNS = {
    "runs": ["run_id", "shard", "model", "model_kind", "optimizer", "lr", "seed", "token_kind", "task_kind",
             "d", "K", "delta", "N", "M", "L", "c", "epochs"],
    "curves": ["run_id", "epoch", "metric", "value"],
    "attention": ["run_id", "epoch", "query_feature", "key_feature", "attn", "layer", "head"],
    "matrices": ["run_id", "epoch", "name", "i", "j", "value"],
    "summary": ["run_id", "loss0", "final_train_loss", "final_test_loss", "attn_own_final", "diverged",
                "t_rel_1e-1", "t_rel_1e-2", "t_rel_1e-3", "n_phases", "phase_ends"],
}


def snakemake(workdir, *args, timeout=600):
    cmd = [sys.executable, "-m", "snakemake", "-s", str(REPO / "Snakefile"), "-d", str(workdir), *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    from conftest import TINY
    wd = tmp_path_factory.mktemp("wf")
    (wd / "tiny.yaml").write_text(yaml.safe_dump(TINY))
    res = snakemake(wd, "--cores", "2", "--configfile", str(wd / "tiny.yaml"))
    assert res.returncode == 0, res.stderr[-3000:]
    return wd


def test_tables_have_design_columns(finished):
    for name, cols in DESIGN_COLUMNS.items():
        df = pd.read_parquet(finished / "results" / "tiny" / f"{name}.parquet")
        missing = set(cols) - set(df.columns)
        assert not missing, (name, missing)
    runs = pd.read_parquet(finished / "results/tiny/runs.parquet")
    assert len(runs) == 8 and runs["run_id"].is_unique
    assert sorted(runs["L"].unique()) == [0.2, 1.5]
    curves = pd.read_parquet(finished / "results/tiny/curves.parquet")
    # 8 runs x 5 logged epochs (0, 3, 6, 9, 12) x 5 metrics
    assert len(curves) == 8 * 5 * 5
    assert set(curves["metric"]) == {"train_loss", "test_loss", "attn_own", "attn_entropy", "attn_knn"}
    assert sorted(curves["epoch"].unique()) == [0, 3, 6, 9, 12]
    att = pd.read_parquet(finished / "results/tiny/attention.parquet")
    sums = att.groupby(["run_id", "epoch", "query_feature"])["attn"].sum()
    assert ((sums - 1).abs() < 1e-5).all()
    mat = pd.read_parquet(finished / "results/tiny/matrices.parquet")
    assert set(mat["name"]) == {"q_features"}
    assert set(mat["run_id"]) == set(runs.loc[runs["model_kind"] == "softmax_q", "run_id"])
    summ = pd.read_parquet(finished / "results/tiny/summary.parquet")
    tl = curves[curves["metric"] == "train_loss"].pivot(index="run_id", columns="epoch", values="value")
    traces = {}
    for shard in sorted((finished / "results/tiny/shards").glob("*.npz")):
        with np.load(shard) as z:
            traces.update(zip(z["run_id"].astype(str), z["trace_train_loss"]))
    for _, row in summ.iterrows():
        trace = traces[row["run_id"]]
        np.testing.assert_allclose(trace[tl.columns.to_numpy(int)], tl.loc[row["run_id"]].to_numpy(), rtol=1e-6)
        ratio = trace / row["loss0"]
        hit = np.flatnonzero(ratio <= 0.1)
        got = row["t_rel_1e-1"]
        if not len(hit):
            assert pd.isna(got)
            continue
        i = hit[0]
        if i == 0:
            assert got == 0
            continue
        # the crossing of 0.1, interpolated in log-loss between the two epochs around it, read
        # from the loss of every epoch (the trace), not only the logged ones
        a, b = np.log(ratio[i - 1]), np.log(ratio[i])
        expect = i - 1 + (a - np.log(0.1)) / (a - b)
        assert i - 1 < got <= i and abs(got - expect) < 1e-9


def test_long_tables_read_back_as_text_and_by_run(finished):
    """Written shard by shard with dictionary-encoded ids, they read back as plain strings (not
    categoricals); read_parquet(run_ids=...) gives the rows pandas' own filter gives."""
    from icl.store.io import read_parquet
    res = finished / "results/tiny"
    for name, text in (("curves", ["run_id", "metric"]), ("attention", ["run_id"]), ("matrices", ["run_id", "name"])):
        df = pd.read_parquet(res / f"{name}.parquet")
        for col in text:
            assert pd.api.types.is_string_dtype(df[col]) and not isinstance(df[col].dtype, pd.CategoricalDtype)
    ids = sorted(pd.read_parquet(res / "runs.parquet")["run_id"])[:3]
    got = read_parquet(str(res / "attention.parquet"), run_ids=ids)
    want = pd.read_parquet(res / "attention.parquet", filters=[("run_id", "in", ids)])
    pd.testing.assert_frame_equal(got, want)
    assert set(got["run_id"]) == set(ids) and len(read_parquet(str(res / "attention.parquet"), run_ids=[])) == 0


def test_report_is_self_contained(finished):
    html = (finished / "reports" / "tiny.html").read_text()
    assert html.count("data:image/png;base64,") >= 6        # 2 loss + 2 attention + 2 map figures per model
    assert not re.search(r'(src|href)="(https?:)?//', html)   # nothing fetched from the network
    assert "Provenance" in html and "torch" in html and "Configuration" in html
    index = (finished / "reports" / "index.html").read_text()
    assert 'href="tiny.html"' in index


def test_index_tells_what_was_found(finished):
    """The landing page counts each experiment's verdicts from its verdict table, shows its key
    figure, its runs, training time and device."""
    index = (finished / "reports" / "index.html").read_text()
    v = pd.read_parquet(finished / "results/tiny/verdicts.parquet")
    report = (finished / "reports" / "tiny.html").read_text()
    for verdict in ("holds", "does not hold", "inconclusive", "not testable"):
        n = int(((v["verdict"] == verdict) & (v["scope"] == "setting")).sum())      # per-setting verdicts only
        badge = f'<span class="badge v-{verdict.replace(" ", "-")}">{n} {verdict}</span>'
        assert badge in index and badge in report, verdict                       # the same counts in both
    assert (v["verdict"] == "not testable").sum() >= 5              # the softmax_q claims the identity decides
    device = "cuda" if torch.cuda.is_available() else "cpu"         # where the jobs trained (device: auto)
    assert 'alt="key figure of tiny"' in index and "8 runs; training" in index and f" on {device}" in index
    thumb = (finished / "results/tiny/thumbnail.png").read_bytes()
    assert thumb.startswith(b"\x89PNG") and base64.b64encode(thumb).decode() in index


def test_every_rule_logged(finished):
    logs = {p.relative_to(finished / "logs").as_posix() for p in (finished / "logs").rglob("*.log")}
    assert {"tiny/plan.log", "tiny/tables.log", "tiny/report.log", "index.log"} <= logs
    assert any(p.startswith("tiny/train/") for p in logs)
    # the training jobs wrote the prompt files, one per dataset (models on the same data share it)
    runs = pd.read_parquet(finished / "results/tiny/runs.parquet")
    assert {p.stem for p in (finished / "results/tiny/prompts").glob("*.npz")} == set(runs["data_id"])
    train_log = next((finished / "logs/tiny/train").glob("*.log")).read_text()
    assert "epoch 12/12" in train_log


def test_analyse_rejudges_a_results_folder_without_snakemake(finished, tmp_path):
    """`icl analyse results/<exp>` on a copy of a finished experiment, its analysis deleted: the
    config comes from the folder's plan.json, and the tables come back equal."""
    import shutil
    copy = tmp_path / "results" / "tiny"
    shutil.copytree(finished / "results/tiny", copy)
    names = ("verdicts", "slopes", "stability")
    for name in names:
        (copy / f"{name}.parquet").unlink()
    res = subprocess.run([sys.executable, "-m", "icl", "analyse", str(copy)], capture_output=True, text=True,
                         timeout=300, cwd=tmp_path)
    assert res.returncode == 0, res.stderr[-3000:]
    assert "verdicts (" in res.stderr
    for name in names:
        pd.testing.assert_frame_equal(pd.read_parquet(copy / f"{name}.parquet"),
                                      pd.read_parquet(finished / f"results/tiny/{name}.parquet"))


def test_one_flat_sharp_split_everywhere(finished, tmp_path):
    """With report.flat_max_L set, theory.parquet, slopes.parquet, the verdicts and the report's
    figures all split flat from sharp there: L* = 0.22 would call L = 1.5 sharp; the config's
    1.6 makes every run flat, and every place must say so."""
    import json
    import shutil
    from icl.analyse.claims import ldl as claims_ldl
    res_dir = tmp_path / "results" / "tiny"
    shutil.copytree(finished / "results/tiny", res_dir)
    plan = json.loads((res_dir / "plan.json").read_text())
    plan["config"]["report"] = {"flat_max_L": 1.6}
    (res_dir / "plan.json").write_text(json.dumps(plan))
    icl = lambda *a: subprocess.run([sys.executable, "-m", "icl", *a], capture_output=True, text=True, timeout=300,
                                    cwd=tmp_path)
    for step in (["theory", "--plan", str(res_dir / "plan.json"), "--out", str(res_dir / "theory.parquet"),
                  "--curves", str(res_dir / "theory_curves.parquet")], ["analyse", str(res_dir)],
                 ["report", "--plan", str(res_dir / "plan.json"), "--results", str(res_dir), "--out",
                  str(tmp_path / "tiny.html")]):
        out = icl(*step)
        assert out.returncode == 0, out.stderr[-2000:]
    theory = pd.read_parquet(res_dir / "theory.parquet")
    ldl_runs = theory[theory["L_star"].notna()]
    assert (ldl_runs["L_split"] == 1.6).all() and (ldl_runs["regime"] == "flat").all()
    assert (ldl_runs["L_star"] < 0.3).all()                       # the theory's own L* would split them
    slopes = pd.read_parquet(res_dir / "slopes.parquet")
    assert set(slopes["regime"].dropna()) == {"flat"}
    verdicts = pd.read_parquet(res_dir / "verdicts.parquet")
    tr = verdicts[(verdicts["claim_id"] == "ldl.transition_at_Lstar.ext") & (verdicts["model"] == "blk")]
    assert len(tr) and tr["reason"].str.contains("does not cross L\\*").all(), tr      # the block: an extension
    joined = pd.read_parquet(res_dir / "runs.parquet").merge(theory, on="run_id")
    assert (claims_ldl.regimes(joined) == "flat").all()
    html = (tmp_path / "tiny.html").read_text()
    assert "flat set: L ≤ 1.6 (report.flat_max_L in the config)" in html
    from icl.report.figures import page_csvs
    csvs = list(page_csvs(html).values())
    flat = [c for c in csvs if "(a) loss, flat set" in c]
    assert flat and all("L=1.5" in c and "L=0.2" in c for c in flat)      # both L drawn as flat
    assert not any("(b) loss, sharp set" in c for c in csvs)


def test_rerun_has_nothing_to_do(finished):
    res = snakemake(finished, "--cores", "1", "-n", "--configfile", str(finished / "tiny.yaml"))
    assert res.returncode == 0
    assert "Nothing to be done" in res.stdout + res.stderr


def test_bad_config_refused_before_any_job(tmp_path):
    from conftest import TINY
    bad = yaml.safe_load(yaml.safe_dump(TINY))
    bad["experiments"]["tiny"]["task"]["L"] = -2
    (tmp_path / "bad.yaml").write_text(yaml.safe_dump(bad))
    res = snakemake(tmp_path, "--cores", "1", "--configfile", str(tmp_path / "bad.yaml"))
    assert res.returncode != 0
    assert "config error: experiments.tiny.task.L: -2 is out of range; must be > 0" in res.stderr
    assert "Traceback" not in res.stderr
    assert not (tmp_path / "results").exists()


def test_sweep_over_K_reports_each_K_apart(tmp_path):
    """Attention maps, slopes and phase diagrams are per K when K is swept (they do not average)."""
    from conftest import TINY
    cfg = yaml.safe_load(yaml.safe_dump(TINY))
    exp = cfg["experiments"]["tiny"]
    exp["models"] = exp["models"][:1]
    exp["sweep"] = {"tokens.K": [2, 3], "task.L": [0.2, 1.5], "seed": [0, 1]}
    (tmp_path / "k.yaml").write_text(yaml.safe_dump(cfg))
    res = snakemake(tmp_path, "--cores", "2", "--configfile", str(tmp_path / "k.yaml"))
    assert res.returncode == 0, res.stderr[-3000:]
    slopes = pd.read_parquet(tmp_path / "results/tiny/slopes.parquet")
    assert set(slopes["group"]) == {"K=2", "K=3"}
    att = pd.read_parquet(tmp_path / "results/tiny/attention.parquet").merge(
        pd.read_parquet(tmp_path / "results/tiny/runs.parquet")[["run_id", "K"]], on="run_id")
    assert {int(k): int(v) for k, v in att.groupby("K")["key_feature"].max().items()} == {2: 1, 3: 2}
    html = (tmp_path / "reports/tiny.html").read_text()
    # with K swept there is no single L*: all L are drawn together, and one set of maps per K
    maps = re.findall(r'alt="sq attention maps, figure \d: attention maps [^"]*(K=\d)', html)
    assert sorted(maps) == ["K=2", "K=3"], maps            # the alt text names each figure, its K too
    assert len(re.findall(r'alt="sq, figure \d+: ', html)) == 1 + 2     # one loss figure, attention scores per K


def test_shape_group_of_several_shards_runs_to_the_report(tmp_path):
    """One shape group cut into several shards, sweep keys listed out of alphabetical order (the
    order the plan job's sorted JSON would change): every shard trains, tables and report follow."""
    from conftest import TINY
    from icl.config import validate
    from icl.plan.shards import plan
    cfg = yaml.safe_load(yaml.safe_dump(TINY))
    cfg["shard_size"] = 4
    exp = cfg["experiments"]["tiny"]
    exp["models"] = exp["models"][:1]
    exp["train"] = {"epochs": 6, "log_every": 3, "checkpoint_every": 6}
    exp["sweep"] = {"task.L": [0.2, 0.7, 1.5], "seed": [0, 1, 2, 3, 4]}
    assert list(exp["sweep"]) != sorted(exp["sweep"])
    shards = {r.shard for r in plan(validate(cfg), "tiny")}
    assert len(shards) >= 4
    (tmp_path / "multi.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))
    res = snakemake(tmp_path, "--cores", "2", "--configfile", str(tmp_path / "multi.yaml"))
    assert res.returncode == 0, res.stderr[-3000:]
    runs = pd.read_parquet(tmp_path / "results/tiny/runs.parquet")
    summary = pd.read_parquet(tmp_path / "results/tiny/summary.parquet")
    assert set(runs["shard"]) == shards and len(summary) == 15 == summary["run_id"].nunique()
    assert {p.stem for p in (tmp_path / "results/tiny/shards").glob("*.npz")} == shards
    assert (tmp_path / "reports/tiny.html").stat().st_size > 10_000
    timing = subprocess.run([sys.executable, "-m", "icl", "timing"], cwd=tmp_path, capture_output=True, text=True)
    assert timing.returncode == 0 and "train" in timing.stdout and "s of job time" in timing.stdout


def test_notebook_entry_point(finished, tmp_path):
    """icl.load: the tables with each run's parameters joined, so a groupby needs no merge."""
    import shutil

    import icl
    exp = icl.load(str(finished / "results/tiny"))
    assert len(exp.runs) == 8 and len(exp.summary) == 8
    assert {"model", "L", "seed", "final_train_loss"} <= set(exp.summary.columns)
    assert not [c for c in exp.summary.columns if c.endswith(("_x", "_y"))]
    tl = exp.curves("train_loss")
    assert set(tl["metric"]) == {"train_loss"} and len(tl) == 8 * 5
    med = tl.groupby(["model", "L", "epoch"])["value"].median()
    runs = pd.read_parquet(finished / "results/tiny/runs.parquet")
    raw = pd.read_parquet(finished / "results/tiny/curves.parquet").merge(runs, on="run_id")
    expect = raw[raw["metric"] == "train_loss"].groupby(["model", "L", "epoch"])["value"].median()
    pd.testing.assert_series_equal(med, expect)
    assert tl["L"].dtype == runs["L"].dtype and tl["seed"].dtype == runs["seed"].dtype
    v = exp.verdicts                           # written by the report job: one row per claim x model
    assert list(v.columns) == ["experiment", "claim_id", "model", "group", "claim", "prediction", "measurement",
                               "value", "ci_lo", "ci_hi", "verdict", "reason", "domain", "fragile", "scope", "flow_value",
                               "flow_lo", "flow_hi", "against", "hypotheses", "setting", "setting_hypotheses", "seed_values",
                               "curve"]
    assert set(v["model"]) == {"sq", "blk"} and set(v["verdict"]) <= {"holds", "does not hold", "inconclusive",
                                                                       "not testable"}
    assert {"attn", "model", "L"} <= set(exp.table("attention").columns)
    with pytest.raises(ValueError, match=r"no curve 'trainloss' .*curves.parquet; it has: attn_entropy, .*train_loss"):
        exp.curves("trainloss")
    with pytest.raises(FileNotFoundError, match=r"no results directory .*nowhere.*run snakemake"):
        icl.load(str(tmp_path / "nowhere"))
    part = tmp_path / "part"
    part.mkdir()
    shutil.copy(finished / "results/tiny/runs.parquet", part)
    with pytest.raises(RuntimeError, match=r"table .*part/summary.parquet not found; run snakemake"):
        icl.load(str(part)).summary


def test_L_claims_of_softmax_q_read_not_testable(finished):
    """On the tiny sweep (softmax_q by GD, cosine at one c) the claims about L are decided by the
    scale identity: `not testable`, with the reason; the block's and a shape-changing task's are not."""
    from icl.analyse import claims
    from icl.analyse.claims import ldl as claims_ldl
    tabs = {k: pd.read_parquet(finished / f"results/tiny/{k}.parquet")
            for k in ("runs", "summary", "theory", "curves", "theory_curves", "stability")}
    tabs["q_features"] = pd.read_parquet(finished / "results/tiny/matrices.parquet", filters=[("name", "==", "q_features")])
    L_claims = ("ldl.phases", "ldl.time_vs_L", "ldl.time_vs_eps", "ldl.transition_at_Lstar")
    by_id = lambda rows: {claims.base_id(r["claim_id"]): r for r in rows}     # the block's carry .ext
    rows = by_id(claims_ldl.verdicts(tabs, "sq"))
    for claim in L_claims:
        assert rows[claim]["verdict"] == "not testable", claim
        assert "GD at (η, L) is GD at (ηL², 1)" in rows[claim]["reason"], claim
    assert "linear in the labels" not in rows["ldl.attention_to_one"]["reason"]
    for name, t in (("blk", tabs), ("sq", {**tabs, "runs": tabs["runs"].assign(c=tabs["runs"]["L"])})):
        rows = by_id(claims_ldl.verdicts(t, name))
        assert not any("linear in the labels" in rows[c]["reason"] for c in L_claims), name
    html = (finished / "reports/tiny.html").read_text()
    assert 'class="v-not-testable"' in html and "the identity decides this claim" in html
    table = pd.read_parquet(finished / "results/tiny/verdicts.parquet")
    assert set(table.loc[table["model"] == "sq", "claim_id"]) >= {"ldl.attention_to_one", *L_claims}


def test_every_figure_carries_the_numbers_it_draws(finished):
    """Under every figure a link holds its drawn rows as CSV, embedded; for the loss figure they
    are the medians and min-max band of the train loss over seeds, recomputed here."""
    import io
    html = (finished / "reports" / "tiny.html").read_text()
    n_img = len(re.findall(r'<img alt="[^"]*" src="data:image/png', html))
    from icl.report.figures import page_csvs
    links = re.findall(r'<a class="data" download="(tiny-[^"]+\.csv)" href="#" data-gz="[^"]+"', html)
    assert n_img >= 6 and len(links) == n_img
    assert len(set(links)) == len(links)                                  # one file name per figure
    data = {name: pd.read_csv(io.StringIO(text)) for name, text in page_csvs(html).items()}
    loss = data["tiny-sq-1.csv"]                                           # (a) loss, flat set of softmax_q
    runs = pd.read_parquet(finished / "results/tiny/runs.parquet")
    curves = pd.read_parquet(finished / "results/tiny/curves.parquet").merge(runs, on="run_id")
    L = float(loss["series"].str.extract(r"L=([\d.]+) median")[0].dropna().iloc[0])
    tl = curves[(curves["model"] == "sq") & (curves["L"] == L) & (curves["metric"] == "train_loss")]
    for stat, how in (("median", "median"), ("min", "min"), ("max", "max")):
        got = loss[loss["series"] == f"L={L:g} {stat}"].set_index("x")["y"]
        expect = tl.groupby("epoch")["value"].agg(how)
        np.testing.assert_allclose(got.to_numpy(), expect.loc[got.index].to_numpy(), rtol=1e-5)
    maps = next(d for name, d in data.items() if "-maps-" in name)          # attention maps: K x K per panel
    assert set(maps["series"]) == {"image"} and maps.groupby("panel").size().eq(9).all()


def test_an_L_has_one_colour_in_every_figure(finished):
    """The same L is drawn in the same colour in every figure of a report (viridis over all the
    experiment's L), read from the colours the figures' CSVs record."""
    import io
    html = (finished / "reports" / "tiny.html").read_text()
    from icl.report.figures import page_csvs
    rows = pd.concat([pd.read_csv(io.StringIO(text)).assign(figure=name) for name, text in page_csvs(html).items()])
    lines = rows[rows["series"].astype(str).str.match(r"L=[\d.]+( median)?$")].copy()
    lines["L"] = lines["series"].str.extract(r"L=([\d.]+)")[0].astype(float)
    assert lines["figure"].nunique() >= 3 and set(lines["L"]) == {0.2, 1.5}
    per_L = lines.groupby("L")["colour"].unique()
    assert per_L.map(len).eq(1).all(), per_L
    assert per_L.loc[0.2][0] != per_L.loc[1.5][0]


def test_report_opens_with_its_headline(finished):
    """Issue 30.1: before any other table the page says per model what it reached, with the numbers
    of summary.parquet (its final train loss against uniform attention's, and its test loss on held-out
    prompts against uniform attention's and the feature oracle's), the verdict counts per
    claim (adding up to the badges the index shows), and then the claims × settings grid with one
    mark per per-setting verdict; the full verdict table is kept behind a toggle."""
    html = (finished / "reports" / "tiny.html").read_text()
    box = re.search(r'<div class="headline".*?</div>', html, re.S)
    assert box and box.start() < html.index('class="tbl verdict-grid"') < html.index('class="tbl verdict"')
    assert html.index('class="tbl verdict"') > html.index('<details class="all-verdicts">')
    assert "<table" not in html[:box.start()]
    runs = pd.read_parquet(finished / "results/tiny/runs.parquet")
    summ = runs.merge(pd.read_parquet(finished / "results/tiny/summary.parquet"), on="run_id")
    text = re.sub(r"<[^>]+>", "", box.group(0))
    stuck = []
    for model, g in summ.groupby("model"):
        ratio = (g["final_train_loss"] / g["uniform_train_loss"]).median()
        test = g["final_query_test_loss"] if "final_query_test_loss" in g else g["final_test_loss"]
        best = g["oracle_test_loss"].fillna(0.0)
        held_out = (test <= best + 0.5 * (g["uniform_test_loss"] - best)) | test.isna() | g["uniform_test_loss"].isna()
        learned = int(((g["final_train_loss"] <= 0.5 * g["uniform_train_loss"]) & held_out).sum())
        status = "learned" if learned == len(g) else "not learned" if not learned else f"learned in {learned} of {len(g)} runs"
        converged = int((g["final_train_loss"] <= 1e-2 * g["uniform_train_loss"]).sum())
        line = next(x.strip() for x in text.splitlines() if x.strip().startswith(model + ": "))
        assert f"final train loss {ratio:.3g}×" in line, (line, ratio)
        word = "none" if not converged else "all" if converged == len(g) else str(converged)
        assert line.startswith(f"{model}: {status} (") and f" {word} of {len(g)} runs converged" in line, \
            (line, status, converged)
        stuck += [model] if status == "not learned" else []
    v = pd.read_parquet(finished / "results/tiny/verdicts.parquet")
    setting = v[v["scope"] == "setting"]
    claim_rows = re.findall(r'<tr[^>]*data-claim="([^"]+)">(.*?)</tr>', box.group(0), re.S)
    assert {c for c, _ in claim_rows} == set(setting["claim_id"])
    for cid, row in claim_rows:
        cells = [int(x) if x else 0 for x in re.findall(r"<td[^>]*>(\d*)</td>", row)[:4]]
        expect = setting[setting["claim_id"] == cid]["verdict"].value_counts()
        assert cells == [int(expect.get(k, 0)) for k in ("holds", "does not hold", "inconclusive", "not testable")], cid
    grid = html[html.index('class="tbl verdict-grid"'):html.index('<details class="all-verdicts">')]
    marks = re.findall(r'<span class="mark [^"]*" data-verdict="([^"]+)" title="([^"]*)"', grid)
    assert len(marks) == len(setting) and sorted(m for m, _ in marks) == sorted(setting["verdict"])
    index = (finished / "reports" / "index.html").read_text()
    for model in stuck:                                       # a model that did not learn: said on the index too
        assert f"{model}: not learned" in index


def test_runs_table_has_a_column_per_swept_setting(finished):
    """Issue 30.2: the runs table has the model and every swept setting (L and seed here) as a
    column, and no column that is empty in every row."""
    html = (finished / "reports" / "tiny.html").read_text()
    table = html[html.index('class="dataframe tbl runs"'):]
    table = table[:table.index("</table>")]
    head = re.findall(r"<th>(.*?)</th>", table)
    assert head[:4] == ["model", "lr", "seed", "L"] or {"model", "seed", "L"} <= set(head), head
    rows = [re.findall(r"<td>(.*?)</td>", r) for r in re.findall(r"<tr>\s*(<td>.*?)</tr>", table, re.S)]
    assert len(rows) == 8
    for k, col in enumerate(head):
        assert any(r[k] != "—" for r in rows), col


def test_a_planner_that_groups_runs_otherwise_rewrites_the_plan(tmp_path):
    """An upgrade of icl whose planner groups runs into other shards (here every seed its own, put in
    by a site hook in every Python process) rewrites plan.json and trains the new shards, where the
    train jobs would otherwise ask for shards the old plan lacks and fail."""
    from conftest import TINY
    cfg = copy.deepcopy(TINY)
    cfg["experiments"]["tiny"]["models"] = cfg["experiments"]["tiny"]["models"][:1]      # softmax_q alone
    (tmp_path / "tiny.yaml").write_text(yaml.safe_dump(cfg))
    args = ("--cores", "2", "--configfile", str(tmp_path / "tiny.yaml"))
    res = snakemake(tmp_path, *args)
    assert res.returncode == 0, res.stderr[-3000:]
    plan = lambda: json.loads((tmp_path / "results/tiny/plan.json").read_text())["runs"]
    assert len({r["shard"] for r in plan()}) == 1
    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text("import icl.plan.shards as p\n_key = p.shape_key\n"
                                           "p.shape_key = lambda spec: {**_key(spec), 'seed': spec['seed']}\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(hook), *filter(None, [os.environ.get("PYTHONPATH")])])}
    cmd = [sys.executable, "-m", "snakemake", "-s", str(REPO / "Snakefile"), "-d", str(tmp_path), *args]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env)
    assert res.returncode == 0, res.stderr[-3000:]
    shards = {r["shard"] for r in plan()}
    assert len(shards) == 2 and all((tmp_path / f"results/tiny/shards/{s}.npz").exists() for s in shards)
    assert len(pd.read_parquet(tmp_path / "results/tiny/summary.parquet")) == 4


def test_the_longest_training_starts_first_on_one_core(tmp_path):
    """Jobs run longest first: on one core the training jobs run in the order of their work
    (icl.plan.estimate.priorities), the experiment listed last whose block has 12x the work of the
    other's first, each plan before the training it unlocks; the light one's jobs follow, none lost."""
    from conftest import TINY
    from icl.config import validate
    from icl.plan.estimate import priorities
    from icl.plan.shards import plan
    light = copy.deepcopy(TINY["experiments"]["tiny"])
    light["train"] = {"epochs": 5, "log_every": 5, "checkpoint_every": 5}
    heavy = copy.deepcopy(light)
    heavy["train"] = {"epochs": 30, "log_every": 10, "checkpoint_every": 30}
    heavy["sweep"] = {"task.L": [0.2, 1.5], "seed": [0, 1, 2, 3]}
    cfg = {"experiments": {"a_light": light, "b_heavy": heavy}}
    prio = {(e, s): p for e in cfg["experiments"] for s, p in priorities(plan(validate(copy.deepcopy(cfg)), e)).items()}
    by_work = sorted(prio, key=prio.get, reverse=True)
    assert by_work[0][0] == "b_heavy" and len(set(prio.values())) == 4
    (tmp_path / "two.yaml").write_text(yaml.safe_dump(cfg))
    targets = [f"results/{e}/summary.parquet" for e in cfg["experiments"]]
    res = snakemake(tmp_path, *targets, "--cores", "1", "--configfile", str(tmp_path / "two.yaml"))
    assert res.returncode == 0, res.stderr[-3000:]
    order = re.findall(r"^\s*(?:local)?rule (\w+):\n(?:\s+\w+: .*\n)*?\s+wildcards: exp=(\w+)(?:, shard=([\w-]+))?",
                       res.stderr + res.stdout, flags=re.M)
    assert [(e, s) for rule, e, s in order if rule == "train"] == by_work, order
    assert [e for rule, e, _ in order if rule == "plan"] == ["b_heavy", "a_light"]
    assert len(pd.read_parquet(tmp_path / "results/a_light/summary.parquet")) == 8

