"""Report figures drawn in forked workers are the figures drawn one after another, byte for byte."""
import base64
import io

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import pytest

from icl.report.figures import draw_all, later, png, report_layout


def line_figure(slope: float, nothing: bool = False):
    """A figure function as the report's are: png(fig), or None when there is nothing to draw."""
    if nothing:
        return None
    fig, ax = plt.subplots(figsize=(3, 2))
    x = np.linspace(0, 1, 50)
    ax.plot(x, slope * x, label=f"slope {slope:g}")
    ax.set_title(f"line {slope:g}")
    return png(fig)


def figures():
    return [later(line_figure, s) for s in (1.0, 2.0, 3.0)] + [later(line_figure, 4.0, nothing=True),
                                                               line_figure(5.0)]


def test_workers_draw_what_one_process_draws():
    one, two = figures(), figures()
    draw_all(one, processes=1)
    draw_all(two, processes=2)
    for a, b in zip(one, two):
        assert str(a) == str(b) and a.csv == b.csv
    for f, slope in zip(one[:3] + one[4:], (1.0, 2.0, 3.0, 5.0)):
        assert base64.b64decode(str(f)).startswith(b"\x89PNG")
        rows = pd.read_csv(io.StringIO(base64.b64decode(f.csv).decode()))
        assert rows["panel"].iloc[0] == f"line {slope:g}"
        assert np.allclose(rows["y"], slope * rows["x"], atol=1e-5)      # the numbers drawn, not others
    assert not one[3] and not two[3] and str(one[3]) == ""               # nothing to draw: false, and no image
    assert not plt.get_fignums()                                         # every figure closed


def test_a_figure_not_drawn_beforehand_is_drawn_when_shown():
    f = later(line_figure, 2.0)
    assert f._png is None                       # built lazily: nothing drawn until asked for
    assert base64.b64decode(str(f)).startswith(b"\x89PNG") and f.csv


def test_attention_summary_figure_only_for_continuous_tokens():
    """A linear task has no L, so no attention map is drawn; with discrete tokens (K set) that
    must not turn into the continuous tokens' attention-summary figure."""
    from icl.report.page import model_section
    read = []
    def section(K):
        runs = pd.DataFrame({"run_id": ["a", "b"], "model": "m", "model_kind": "softmax_q", "optimizer": "gd",
                             "L": np.nan, "K": K, "N": [10, 20]})
        curves = pd.DataFrame([{"run_id": r, "epoch": e, "metric": m, "value": 1.0 / (1 + e)}
                               for r in ("a", "b") for e in range(3) for m in ("train_loss", "test_loss", "attn_entropy")])
        tables = {"runs": runs, "curves": curves, "theory_curves": pd.DataFrame(),
                  "summary": pd.DataFrame({"run_id": ["a", "b"], "diverged": False}),
                  "attention": lambda ids: read.append(ids) or pd.DataFrame()}
        return model_section("m", runs, tables, {"tokens": {"kind": "x"}}, ldl=False)
    discrete, continuous = section(4.0), section(np.nan)
    assert len(discrete["figures"]) == 2 and not discrete["maps"]         # the loss by N and t_escape only
    assert not discrete["figures"][1]                                     # no t_escape column: nothing drawn
    assert len(continuous["figures"]) == 3                                # loss, t_escape, attention summaries
    assert read == []                                                     # no attention rows to draw: none read


def _attention(layers, heads, K=3, epochs=(0, 5)):
    """attention.parquet rows of two runs: head h of layer l puts 0.5 + 0.1·h on the own feature."""
    rows = []
    for r in ("a", "b"):
        for e in epochs:
            for l in range(layers):
                for h in range(heads):
                    for j in range(K):
                        for k in range(K):
                            own = 0.5 + 0.1 * h
                            rows.append({"run_id": r, "epoch": e, "query_feature": j, "key_feature": k,
                                         "attn": own if j == k else (1 - own) / (K - 1), "layer": l, "head": h})
    return pd.DataFrame(rows)


def test_heads_figures_and_the_last_layer_mean():
    """A model with several heads: the LDL figures read the last layer's mean over its heads (a
    one-head table reads as it is), and each head is drawn on its own."""
    from icl.report import heads as report_heads
    attn = _attention(2, 3)
    assert report_heads.has_heads(attn) and not report_heads.has_heads(_attention(1, 1))
    mean = report_heads.last_layer(attn)
    assert set(mean.columns) == {"run_id", "epoch", "query_feature", "key_feature", "attn"}
    own = mean[mean["query_feature"] == mean["key_feature"]]["attn"]
    np.testing.assert_allclose(own, 0.6)                                # (0.5 + 0.6 + 0.7) / 3
    np.testing.assert_allclose(mean.groupby(["run_id", "epoch", "query_feature"])["attn"].sum(), 1.0)
    single = _attention(1, 1)
    pd.testing.assert_frame_equal(report_heads.last_layer(single), single.drop(columns=["layer", "head"]))
    runs = pd.DataFrame({"run_id": ["a", "b"], "L": [0.2, 0.2]})
    maps, own_fig = later(report_heads.head_maps_figure, attn, runs, 0.2), later(report_heads.own_by_head_figure, attn, runs, 0.2)
    draw_all([maps, own_fig], processes=1)
    drawn = pd.read_csv(io.StringIO(base64.b64decode(own_fig.csv).decode()))
    level = "1/K = 0.33: uniform"                                       # uniform attention's level, in each panel
    assert set(drawn["series"]) == {"head 1", "head 2", "head 3", level} and drawn["panel"].nunique() == 2
    heads = drawn[drawn["series"] != level]
    np.testing.assert_allclose(sorted(heads["y"].unique()), [0.5, 0.6, 0.7])
    np.testing.assert_allclose(drawn.loc[drawn["series"] == level, "y"], 1 / 3, rtol=1e-5)     # CSV: 6 digits
    assert maps and not plt.get_fignums()


def test_zfb_figure_draws_models_by_kind_and_splits_training_laws():
    """The error figure draws every trained model that is not linear attention (whatever its
    configured name), and one figure per training law when an experiment trains on several."""
    from icl.report import zfb as report_zfb
    rows = []
    for law, eval_id in (("gaussian", "e1"), ("random_covariance", "e2")):
        for name, kind in (("my_gpt", "gpt"), ("lsa", "lsa"), ("ols", "baseline")):
            for M in (5, 10, 20):
                rows.append({"predictor": name, "model_kind": kind, "run_id": None if kind == "baseline" else f"{name}-{law}",
                             "eval_id": eval_id, "N": 10 if kind != "baseline" else np.nan, "shift": "none", "c": np.nan,
                             "M": M, "mse": 1.0 / M + (law == "gaussian")})
    shift = pd.DataFrame(rows).astype({"N": "Int64"})
    runs = pd.DataFrame({"run_id": [f"{n}-{law}" for law in ("gaussian", "random_covariance") for n in ("my_gpt", "lsa")],
                         "token_kind": ["gaussian", "gaussian", "random_covariance", "random_covariance"],
                         "covariance": ["identity", "identity", None, None]})
    laws = report_zfb.training_laws({"runs": runs}, shift)
    assert [name for name, _ in laws] == ["trained on gaussian (identity)", "trained on random_covariance"]
    assert all(len(part) == 9 and part["eval_id"].nunique() == 1 for _, part in laws)
    fig = later(report_zfb.error_vs_length_figure, laws[0][1], laws[0][0])
    draw_all([fig], processes=1)
    drawn = pd.read_csv(io.StringIO(base64.b64decode(fig.csv).decode()))
    assert "my_gpt, N=10" in set(drawn["series"])
    assert report_zfb.training_laws({"runs": runs[runs["token_kind"] == "gaussian"]}, shift)[0][0] == ""


def test_the_lsa_limit_stays_visible_under_the_trained_lsa():
    """Where the trained LSA lies on its limit (as it should), the two are told apart by more than
    their colour: the theory wide, pale and dashed beneath, the runs thin with points on top."""
    from icl.report import zfb as report_zfb
    rows = [{"predictor": p, "model_kind": k, "run_id": r, "eval_id": "e", "N": 10, "shift": "none", "c": np.nan,
             "M": M, "mse": 1.0 / M, "mse_se": 0.01 / M, "theory_mse": 1.0 / M if p == "lsa_limit" else np.nan}
            for p, k, r in (("lsa", "lsa", "a"), ("lsa_limit", None, None)) for M in (5, 10, 20)]
    f = report_zfb.error_vs_length_figure(pd.DataFrame(rows).astype({"N": "Int64"}))
    lines = {ln.get_label(): ln for ln in f.fig.axes[0].get_lines()}
    run, theory = lines["LSA trained, N=10"], lines["LSA limit (theory), N=10"]
    assert np.allclose(run.get_ydata(), theory.get_ydata()) and run.get_color() == theory.get_color()
    assert theory.get_linewidth() >= 2.5 * run.get_linewidth() and theory.get_alpha() < 1
    assert theory.get_linestyle() != run.get_linestyle() and run.get_marker() not in ("", "None", None)
    assert run.get_zorder() > theory.get_zorder() and str(f) and f.problems == []       # drawn, read clean


def test_escape_figure_draws_every_run_and_counts_the_stuck():
    """t_escape per run against N, one colour per training law; a run that never left its
    plateau drawn at the top and counted in the legend."""
    from icl.report.zfb import escape_figure
    runs = pd.DataFrame({"run_id": list("abcd"), "N": [10, 10, 20, 20], "epochs": 3000,
                         "token_kind": ["gaussian", "random_covariance"] * 2})
    summary = pd.DataFrame({"run_id": list("abcd"), "t_escape": pd.array([1300, 900, None, 1500], dtype="Int64")})
    f = escape_figure(summary, runs)
    rows = pd.read_csv(io.StringIO(base64.b64decode(f.csv).decode()))
    pts = rows[rows["series"].str.startswith(("trained on", "gaussian:", "random"))]
    assert sorted(pts["y"]) == [900, 1300, 1500, 3000]
    assert (rows["series"] == "gaussian: 1 run never left the plateau").sum() == 1


def test_seed_figure_has_a_panel_per_law_and_N():
    """ZFB §5's grid: a panel per (training law, N) with each nonlinear model's curve per test law,
    the LSA limit beside it and OLS (exact for M ≥ d) drawn at the axis floor, not at 1e-24."""
    from icl.report.zfb import seed_figure
    rows = []
    for law, eid in (("gaussian", "e1"), ("random_covariance", "e2")):
        for N in (10, 20):
            for M in (2, 5, 10, 20, 40):
                for shift, c in (("identity", 1.0), ("random_covariance", 4.0)):
                    rows.append({"predictor": "gpt", "model_kind": "gpt", "run_id": f"{law}{N}", "eval_id": eid + str(N),
                                 "N": N, "shift": shift, "c": c, "M": M, "mse": 1.0 + M / N})
                    rows.append({"predictor": "ols", "model_kind": None, "run_id": None, "eval_id": eid + str(N),
                                 "N": np.nan, "shift": shift, "c": c, "M": M, "mse": 1e-24 if M >= 5 else 3.0})
    shift = pd.DataFrame(rows)
    laws = [(f"trained on {law}", shift[shift["eval_id"].str.startswith(e)]) for law, e in
            (("gaussian", "e1"), ("random_covariance", "e2"))]
    f = seed_figure(shift, laws)
    drawn = pd.read_csv(io.StringIO(base64.b64decode(f.csv).decode()))
    assert sorted(drawn["panel"].unique()) == sorted(f"trained on {law}, N={N}" for law in ("gaussian", "random_covariance")
                                                     for N in (10, 20))
    curves = drawn[~drawn["x"].isin([10, 20]) | ~drawn["y"].isin([0, 1])]       # not the vertical line at N
    assert curves["y"].min() > 1e-3                 # the floor: a third of the smallest model error
    assert len(drawn) == 4 * (2 * 2 * 5 + 2)        # 4 panels x (2 tests x (gpt, ols) x 5 lengths + the line at N)


# ---------------------------------------------------------------- the layout check, on figures made to fail it

def _checked(fig, tidied: bool = True) -> list[str]:
    """layout_problems of a figure after it is drawn as the report draws it (tidy first unless not)."""
    from icl.report.figures import layout_problems, tidy
    fig.set_layout_engine("tight")
    if tidied:
        tidy(fig)
    fig.set_dpi(110)
    fig.canvas.draw()
    try:
        return layout_problems(fig)
    finally:
        plt.close(fig)


def test_layout_check_passes_a_clean_figure_and_fails_broken_ones():
    """Each kind of unreadable figure is caught, and its tidy counterpart is not."""
    x = np.linspace(0, 1, 200)

    def clean():
        fig, ax = plt.subplots(figsize=(5, 3))
        ax.plot(x, x, label="y = x")
        ax.set(title="a title", xlabel="x", ylabel="y")
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1))
        return fig
    assert _checked(clean()) == []

    fig = clean()
    fig.axes[0].legend(loc="center")                                  # over the line
    assert any("legend covers" in p for p in _checked(fig))

    fig = clean()
    fig.axes[0].set_title("a title far too long for its panel " * 4)  # not wrapped: leaves the figure
    assert any("title leaves the figure" in p for p in _checked(fig, tidied=False))

    fig = clean()
    fig.axes[0].set_ylabel("a long y label", labelpad=-14)                       # drawn onto its tick labels
    assert any("y label overlaps" in p and "y tick" in p for p in _checked(fig))


def test_a_legend_entry_for_a_curve_drawn_nowhere_is_caught():
    """A dashed "mean field" entry with no dashed line drawn (the block's loss figure listed one);
    with the dashed line drawn, in another colour, it passes."""
    def figure(with_curve: bool):
        fig, ax = plt.subplots(figsize=(5, 3.5))
        ax.plot([0, 1], [1, 2], color="C0", label="L=0.1")
        if with_curve:
            ax.plot([0, 1], [1, 1.5], color="C0", ls="--")
        ax.plot([], [], color="grey", ls="--", label="mean field")
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1))
        return fig
    assert any("legend lists 'mean field', drawn nowhere" in p for p in _checked(figure(False)))
    assert _checked(figure(True)) == []


def test_log_axis_minor_labels_collide_untidied_and_not_tidied():
    """A log axis spanning under a decade labels its minor ticks (3×10⁰4×10⁰ ran together); tidy
    labels 1-2-5 majors only."""
    def narrow(lo=2.1, hi=9.5):
        fig, ax = plt.subplots(figsize=(2.2, 2))
        ax.plot([lo, hi], [1, 2])
        ax.set_xscale("log")
        return fig
    assert any("x tick" in p and "overlaps" in p for p in _checked(narrow(), tidied=False))
    assert _checked(narrow()) == []
    assert _checked(narrow(5, 8)) == []             # under half a decade: a few plain steps


def test_legend_below_fits_the_figure_and_merges_repeats():
    """Long labels that three columns would push past both sides of the figure (zfb_gpt's clipped
    "ss, fresh prompts (median)") get fewer columns, or wrap; repeated labels are listed once; text
    under 9 px is named."""
    from icl.report.figures import _drawn, legend_below

    def crowded(place):
        fig, ax = plt.subplots(figsize=(5.2, 3.4))
        x = np.arange(1, 10)
        for k in range(3):
            ax.plot(x, x * (k + 1), label=f"token_kind=random_covariance, a long setting name {k}")
            ax.plot(x, x * (k + 1.5), color=f"C{k}", label=f"token_kind=random_covariance, a long setting name {k}")
        ax.plot(x, x + 1, ls=":", label="test loss, fresh prompts (median)")
        ax.set_title("loss over training")
        place(ax)
        return fig

    def three(ax):
        fig = ax.get_figure()
        fig.legend(*ax.get_legend_handles_labels(), loc="lower center", ncol=3, fontsize=7, frameon=False)
        fig.set_layout_engine("tight", rect=(0, 0.2, 1, 1))

    def problems(fig):                      # drawn as the report draws it, its layout kept
        try:
            return _drawn(fig)[2]
        finally:
            plt.close(fig)

    assert any("figure legend leaves the figure" in p for p in problems(crowded(three)))
    fig = crowded(legend_below)
    assert len(fig.legends[0].get_texts()) == 4                         # six lines, three labels, and the test line
    assert problems(fig) == []
    found = problems(crowded(lambda ax: legend_below(ax, fontsize=5)))
    assert any("legend text 7.6 px high, under 9 px" in p for p in found), found


def test_long_titles_are_wrapped_to_their_panel():
    fig, ax = plt.subplots(figsize=(3, 2.5))
    ax.plot([0, 1], [0, 1])
    ax.set_title("attention maps of the last layer, every head, mean over seeds, L = 0.2, K = 4")
    assert _checked(fig) == []


def test_report_figures_on_synthetic_tables_read_clean():
    """The loss figure (reference level drawn, one line per setting where a band would pool them),
    the attention figures (1/K drawn) and the maps pass the layout check."""
    from icl.report import page as report
    runs = pd.DataFrame({"run_id": list("abcd"), "L": 0.2, "delta": [1.0, 1.0, 3.0, 3.0], "seed": [0, 1, 0, 1],
                         "model": "m", "lr": 0.1})
    curves = pd.DataFrame([{"run_id": r, "epoch": e, "metric": "train_loss", "value": (1 + (r in "cd")) / (1 + e)}
                           for r in "abcd" for e in range(20)])
    uniform = pd.Series([0.5, 0.5, 1.0, 1.0], index=list("abcd"))
    others = pd.DataFrame({"run_id": "z", "epoch": [0, 1], "metric": "mean_field_loss", "value": 1.0})
    f = report.loss_figure(curves, runs, [0.2], "(a) loss", others, reference=uniform)   # no mean field of these runs
    rows = pd.read_csv(io.StringIO(base64.b64decode(f.csv).decode()))
    # one L: each Δ a line of its own colour, with its band over seeds and its own level
    assert f.problems == [] and "(a line per delta, band: min–max over seeds)" in " ".join(rows["panel"].iloc[0].split())
    colour = rows.groupby("series")["colour"].first()
    assert colour["delta=1 median"] != colour["delta=3 median"]
    assert {"delta=1 min", "delta=1 max", "delta=3 min", "delta=3 max"} <= set(rows["series"])
    assert np.allclose(rows.loc[rows["series"] == "delta=1 uniform attention", "y"], 0.5)
    assert np.allclose(rows.loc[rows["series"] == "delta=3 uniform attention", "y"], 1.0)
    # several L: a colour per L, one line per Δ within it, no band (it would pool settings)
    both = pd.concat([runs, runs.assign(run_id=lambda r: r["run_id"] + "2", L=1.5)])
    curves2 = pd.concat([curves, curves.assign(run_id=lambda c: c["run_id"] + "2")])
    f = report.loss_figure(curves2, both, [0.2, 1.5], "(a) loss", others)
    marker = {ln.get_gid(): ln.get_marker() for ln in f.fig.axes[0].get_lines() if ln.get_gid()}
    rows = pd.read_csv(io.StringIO(base64.b64decode(f.csv).decode()))
    assert f.problems == [] and "(a line per delta: no band)" in rows["panel"].iloc[0]
    assert {"L=0.2, delta=1 median", "L=0.2, delta=3 median", "L=1.5, delta=3 median"} <= set(rows["series"])
    assert not rows["series"].str.endswith((" min", " max")).any()
    # a c tied to L (ldl_shape's zip) is no setting of its own: the title does not name it
    tied = report.loss_figure(curves2, both.assign(c=both["L"]), [0.2, 1.5], "(a) loss", others)
    assert tied.fig.axes[0].get_title() == "(a) loss (a line per delta: no band)"
    one = both[both["delta"] == 1.0].assign(c=lambda r: r["L"])           # c the only other column that varies
    tied = report.loss_figure(curves2, one, [0.2, 1.5], "(a) loss", others)
    assert tied.fig.axes[0].get_title() == "(a) loss" and str(tied) and tied.problems == []
    # a marker per Δ, the same at every L, named in the legend beside a swatch per L
    assert marker["L=0.2, delta=1 median"] == marker["L=1.5, delta=1 median"] != marker["L=0.2, delta=3 median"]
    legend = [t.get_text() for t in f.fig.legends[0].get_texts()]
    assert {"L=0.2", "L=1.5", "delta=1", "delta=3"} <= set(legend), legend
    attn = _attention(1, 1, K=4).assign(run_id=lambda d: d["run_id"].map({"a": "a", "b": "b"}))
    two = runs[runs["run_id"].isin(["a", "b"])]
    scores = report.attention_scores_figure(report.report_heads.last_layer(attn), two, 0.2, 4)
    maps = report.attention_maps_figure(report.report_heads.last_layer(attn), two, 0.2, [0, 5])
    srows = pd.read_csv(io.StringIO(base64.b64decode(scores.csv).decode()))
    assert np.allclose(srows.loc[srows["series"].str.startswith("1/K"), "y"], 0.25)
    assert scores.problems == [] and maps.problems == [], (scores.problems, maps.problems)


def test_thumbnail_is_small_and_key_figure_follows_the_headline():
    """The index's thumbnail: a PNG at most THUMB_WIDTH px wide of a few KB; for a model the headline
    calls not learned, its own loss figure (which draws uniform attention's level) rather than another's."""
    from PIL import Image
    from icl.report.figures import THUMB_WIDTH, thumbnail
    from icl.report.page import key_figure
    big = line_figure(2.0)
    small = thumbnail(str(big))
    im = Image.open(io.BytesIO(small))
    assert im.format == "PNG" and im.width == min(THUMB_WIDTH, 330) and len(small) < 15_000
    a, b, z = later(line_figure, 1.0), later(line_figure, 2.0), later(line_figure, 3.0)
    sections = [{"name": "ok", "figures": [a]}, {"name": "stuck", "figures": [b]}]
    assert key_figure(sections, None, [{"model": "ok", "status": "learned"}]) is a
    assert key_figure(sections, {"figures": [z]}, [{"model": "ok", "status": "learned"}]) is z
    assert key_figure(sections, {"figures": [z]}, [{"model": "stuck", "status": "not learned"}]) is b
    sections[1]["key"] = c = later(line_figure, 4.0)           # its attention against 1/K, where it has one
    assert key_figure(sections, {"figures": [z]}, [{"model": "stuck", "status": "not learned"}]) is c


def test_a_thumbnail_of_many_panels_shows_one_and_a_legend_legible_at_its_size():
    """Eight panels with a legend below them all (zfb_fixed's key figure): the thumbnail is the first
    panel at two thirds of its size or more, and the legend's entries drawn again in columns that fit,
    at the figure's own font size (so at least MIN_LEGEND_PX high as shown), every entry in it.
    The whole figure shrunk to the thumbnail's width, as before, fails both."""
    from PIL import Image
    from icl.report.figures import MIN_LEGEND_PX, THUMB_WIDTH, legend_below, thumbnail
    fig, axes = plt.subplots(4, 2, figsize=(9, 12))
    labels = [f"LSA trained, N={n}" for n in (10, 20, 40)] + [f"LSA limit (theory), N={n}" for n in (10, 20, 40)] \
        + ["ols, N=40 (exact for M >= d: drawn at the axis floor)", "uniform attention (the labels' mean)"]
    for ax in axes.flat:
        for i, lab in enumerate(labels):
            ax.plot([1, 10, 100], np.array([3.0, 2.0, 1.0]) * (i + 1), label=lab)
        ax.set_title("none")
    legend_below(list(axes.flat), fontsize=9)
    drawn = png(fig)
    png_b64 = str(drawn)
    whole = Image.open(io.BytesIO(base64.b64decode(png_b64)))
    box, legend = drawn.key_boxes
    panel_w = box[2] - box[0]
    leg = Image.open(io.BytesIO(base64.b64decode(legend)))
    assert leg.width <= THUMB_WIDTH and 9 * 110 / 72 >= MIN_LEGEND_PX       # drawn at 9 pt, 110 dpi, not shrunk
    assert leg.height > len(labels) / 3 * 9 * 110 / 72                        # every entry, in at most 3 columns
    thumb = Image.open(io.BytesIO(thumbnail(png_b64, drawn.key_boxes)))
    assert thumb.width <= THUMB_WIDTH and min(1.0, THUMB_WIDTH / panel_w) >= 2 / 3
    assert thumb.height >= leg.height + (box[3] - box[1]) * min(1.0, THUMB_WIDTH / panel_w) - 2
    shrunk = THUMB_WIDTH / whole.width                                        # the old thumbnail's scale
    assert shrunk < 2 / 3 and 9 * 110 / 72 * shrunk < MIN_LEGEND_PX


def test_no_uniform_level_against_an_objective_over_every_position():
    """A GPT trained on every x position (loss: all): its train loss is not the query's error, so
    uniform attention's level (the query's) is drawn only against its test loss at the query."""
    from icl.report import page as report
    runs = pd.DataFrame({"run_id": ["a", "b"], "L": 0.2, "seed": [0, 1], "model": "g", "lr": 0.1, "loss": "all"})
    curves = pd.DataFrame([{"run_id": r, "epoch": e, "metric": "train_loss", "value": 1 / (1 + e)}
                           for r in "ab" for e in range(5)])
    uniform = pd.Series([0.5, 0.5], index=["a", "b"])
    def series(curves):
        f = report.loss_figure(curves, runs, [0.2], "(a) loss", reference=uniform)
        return set(pd.read_csv(io.StringIO(base64.b64decode(f.csv).decode()))["series"]), f
    drawn, f = series(curves)
    assert "L=0.2 uniform attention" not in drawn and f.problems == []
    query = curves.assign(metric="test_query_loss")
    drawn, _ = series(pd.concat([curves, query]))
    assert {"L=0.2 uniform attention", "L=0.2 query median"} <= drawn


def test_a_layout_problem_is_named_not_fatal():
    """A problem found while drawing is logged and returned with the figure's title (also its alt
    text), for the page to name; it never costs the report (issue 50); figures without one give none."""
    out = io.StringIO()
    f = later(line_figure, 1.0)
    str(f)
    assert f.title == "line 1"
    f.problems = ["[x] a legend covers 3 data point(s)"]
    assert report_layout([f, later(line_figure, 2.0)], out) == ["line 1: [x] a legend covers 3 data point(s)"]
    assert out.getvalue() == "layout: line 1: [x] a legend covers 3 data point(s)\n"
    assert report_layout([later(line_figure, 2.0)], out) == []


def _legend_texts(fig) -> list[str]:
    return [t.get_text() for leg in [*fig.legends, *(ax.get_legend() for ax in fig.axes if ax.get_legend())]
            for t in leg.get_texts()]


def _legend_px(fig) -> float:
    """The smallest legend text's height in px at the dpi the figure was drawn at (its natural size)."""
    return min(t.get_fontsize() * fig.dpi / 72 for leg in [*fig.legends, *(ax.get_legend() for ax in fig.axes
                                                                           if ax.get_legend())] for t in leg.get_texts())


def _panels(fig) -> list:
    return [ax for ax in fig.axes if ax.get_visible() and ax.axison]


def test_repeated_legend_labels_and_crowded_panels_are_layout_problems():
    """Seven "the flat/sharp split" entries and a panel of 108 lines (ldl_phase_diagram's old
    convergence-time and loss figures) fail the check; legend_below lists the label once."""
    from icl.report.figures import MAX_PANEL_LINES, legend_below

    def splits(place):
        fig, ax = plt.subplots(figsize=(5.2, 4))
        ax.plot([0.1, 1], [1, 2], label="fit")
        for x in np.linspace(0.2, 0.8, 7):
            ax.axvline(x, color="grey", ls=":", label="the flat/sharp split")
        place(ax)
        return fig
    found = _checked(splits(lambda ax: ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1), fontsize=8)))
    assert "legend lists 'the flat/sharp split' 7 times" in " ".join(found), found
    assert not any("times" in p for p in _checked(splits(legend_below)))

    def lines(n):
        fig, ax = plt.subplots(figsize=(5.2, 3.4))
        for k in range(n):
            ax.plot([0, 1], [k, k + 1], color="C0")
        ax.plot([0, 1], [0, 1], alpha=0)                  # a band's edge: not drawn, not counted
        return fig
    assert any(f"{MAX_PANEL_LINES + 1} lines on one panel, over {MAX_PANEL_LINES}" in p
               for p in _checked(lines(MAX_PANEL_LINES + 1)))
    assert _checked(lines(MAX_PANEL_LINES)) == []


def _grid_sweep(Ls=(0.05, 0.1, 0.2, 0.5, 1.0, 2.0), deltas=(1.5, 3.0, 6.0), Ns=(50, 100), seeds=(0, 1)):
    """runs, curves and attention of a Δ × N × L sweep (ldl_phase_diagram's shape, smaller)."""
    runs = pd.DataFrame([{"run_id": f"{d}-{N}-{L}-{s}", "model": "m", "lr": 0.9, "delta": d, "N": N, "L": L, "seed": s}
                         for d in deltas for N in Ns for L in Ls for s in seeds])
    ep = np.arange(0, 50, 5)
    curves = pd.DataFrame([{"run_id": r.run_id, "epoch": e, "metric": "train_loss",
                            "value": r.L ** 2 / (1 + e * r.delta) * (1 + 0.01 * r.seed)} for r in runs.itertuples()
                           for e in ep])
    return runs, curves


def test_a_crowded_loss_figure_gets_a_panel_per_setting():
    """6 L × 6 settings of Δ and N (36 lines, over CROWDED) on one panel could not be told apart:
    a panel per setting, each titled with it, every L a colour named once; legend text ≥ 9 px."""
    from icl.report import page as report
    runs, curves = _grid_sweep()
    Ls = sorted(runs["L"].unique())
    f = report.loss_figure(curves, runs, Ls, "loss")
    str(f)
    panels = _panels(f.fig)
    assert [ax.get_title() for ax in panels] == [f"delta={d:g}, N={N}" for d in (1.5, 3.0, 6.0) for N in (50, 100)]
    assert "a panel per delta, N" in f.fig._suptitle.get_text()
    labels = _legend_texts(f.fig)
    assert len(labels) == len(set(labels)) and {f"L={L:g}" for L in Ls} <= set(labels)
    assert _legend_px(f.fig) >= 9 and f.problems == [], f.problems
    colours = {ln.get_gid(): ln.get_color() for ln in panels[0].get_lines() if ln.get_gid()}
    assert len({colours[f"L={L:g} median"] for L in Ls}) == len(Ls)          # an L a colour
    rows = pd.read_csv(io.StringIO(base64.b64decode(f.csv).decode()))
    one = rows[(rows["panel"] == "delta=3, N=100") & (rows["series"] == "L=0.5 median")]
    np.testing.assert_allclose(one["y"], 0.25 / (1 + one["x"] * 3.0) * 1.005, rtol=1e-5)   # its own setting's median
    few = report.loss_figure(curves, runs[runs["delta"] == 1.5], Ls[:3], "loss")       # 3 L × 2 N: one panel
    str(few)
    assert len(_panels(few.fig)) == 1 and few.problems == []


def test_a_setting_with_many_L_spreads_them_over_panels_within_the_line_limit():
    """config/paper.yaml's ldl_phase_diagram: 14 L per Δ, each with its median, mean field and
    uniform attention's level, drew 42 lines on each Δ's panel and failed the report step: the L of a
    setting are spread over panels of at most MAX_PANEL_LINES lines, each titled with its range."""
    from icl.report import page as report
    from icl.report.figures import MAX_PANEL_LINES, crowded_panels
    Ls = tuple(float(x) for x in np.geomspace(0.05, 5, 14).round(4))
    runs, curves = _grid_sweep(Ls=Ls, deltas=(1.0, 3.0), Ns=(100,))
    mf = curves.assign(metric="mean_field_loss", value=curves["value"] * 1.1)
    ref = pd.Series(runs["L"].to_numpy() ** 2, index=runs["run_id"].to_numpy())
    f = report.loss_figure(curves, runs, list(Ls), "loss", theory_curves=mf, reference=ref)
    str(f)
    panels = _panels(f.fig)
    lo, hi = f"L {Ls[0]:.3g}–{Ls[6]:.3g}", f"L {Ls[7]:.3g}–{Ls[13]:.3g}"           # 7 and 7
    assert [ax.get_title() for ax in panels] == [f"delta=1; {lo}", f"delta=1; {hi}", f"delta=3; {lo}", f"delta=3; {hi}"]
    assert all(len(ax.get_lines()) <= MAX_PANEL_LINES for ax in panels) and not crowded_panels(f.fig)
    assert f.problems == [], f.problems
    drawn = {ln.get_gid() for ax in panels for ln in ax.get_lines() if ln.get_gid()}
    assert {f"L={L:g} median" for L in Ls} <= drawn                             # every L drawn somewhere


def test_a_crowded_attention_figure_gets_a_panel_per_setting():
    from icl.report import page as report
    runs, _ = _grid_sweep(Ls=(0.05,))
    K = 4
    attn = pd.DataFrame([{"run_id": r, "epoch": e, "query_feature": 0, "key_feature": k,
                          "attn": 0.25 + (0.7 if k == 0 else -0.7 / 3) * e / 45} for r in runs["run_id"]
                         for e in range(0, 50, 5) for k in range(K)])
    f = report.attention_scores_figure(attn, runs, 0.05, K)          # 4 scores × 6 settings = 24: one panel
    str(f)
    assert len(_panels(f.fig)) == 1
    runs9, _ = _grid_sweep(Ls=(0.05,), Ns=(50, 100, 200))
    attn9 = pd.concat([attn, attn.assign(run_id=attn["run_id"].str.replace("-100-", "-200-"))])
    f = report.attention_scores_figure(attn9, runs9, 0.05, K)        # 4 × 9 = 36: a panel per setting
    str(f)
    assert len(_panels(f.fig)) == 9 and f.problems == [], f.problems
    labels = _legend_texts(f.fig)
    assert len(labels) == len(set(labels)) and r"$\mathrm{Attn}_{1}$ (own)" in labels and not any("_{" in x and not x.startswith("$") for x in labels) and _legend_px(f.fig) >= 9


def test_the_convergence_time_figure_has_a_panel_per_group():
    """Nine groups (Δ × N) drew 18 dashed theory lines and 9 splits on one panel: now a panel per
    group with its own split and slopes in its title, each kind of line named once."""
    from icl.analyse.fits import convergence_slopes
    from icl.report import ldl as report_ldl
    rows, summ = [], []
    for d in (1.5, 3.0, 6.0):
        for N in (50, 100, 200):
            for L in (0.1, 0.2, 0.4, 1.0, 2.0, 4.0):
                for s in range(3):
                    rid = f"{d}-{N}-{L}-{s}"
                    rows.append({"run_id": rid, "model": "sq", "model_kind": "softmax_q", "lr": 1.0, "delta": d, "K": 4,
                                 "N": N, "L": L, "seed": s, "probs": None})
                    summ.append({"run_id": rid, "diverged": False, "loss0": 2.0, "final_train_loss": 1e-3,
                                 "t_rel_1e-2": 100 * L ** (-0.1 if L < 0.5 else -1.0) * (1 + 0.02 * s)})
    runs, summ = pd.DataFrame(rows), pd.DataFrame(summ)
    split = 1 / runs["delta"] * 0.8
    theory = pd.DataFrame({"run_id": runs["run_id"], "regime": np.where(runs["L"] < split, "flat", "sharp"),
                           "L_star": split, "L_split": split})
    tabs = {"runs": runs, "summary": summ, "theory": theory,
            "slopes": convergence_slopes(runs, summ, theory, tcols=("t_rel_1e-2",))}
    f = report_ldl.slope_figure(tabs, "sq")
    str(f)
    panels = _panels(f.fig)
    assert len(panels) == 9 and f.problems == [], f.problems
    for ax in panels:
        drawn = [ln for ln in ax.get_lines() if len(ln.get_xdata())]               # not the legend's stand-ins
        assert len([ln for ln in drawn if ln.get_linestyle() == ":"]) == 1                 # its own split only
        theory = [ln for ln in drawn if ln.get_linestyle() == "--"]
        assert len(theory) == (2 if ax is panels[0] else len(theory)) <= 2          # a theory line a regime fitted
    first = panels[0].get_title().split("\n")
    assert first[0] == "delta=1.5, N=50" and first[1].startswith("flat ") and first[2].startswith("sharp ")
    split_x = [ln.get_xdata()[0] for ln in panels[0].get_lines() if ln.get_linestyle() == ":" and len(ln.get_xdata())]
    np.testing.assert_allclose(split_x, 0.8 / 1.5)
    labels = _legend_texts(f.fig)
    assert len(labels) == len(set(labels)) == 5 and _legend_px(f.fig) >= 9
    assert not any("not testable" in x for x in labels)
    # the sharp rows not testable (the clock rule): its theory lines pale, its legend entry says so
    tabs["verdicts"] = pd.DataFrame({"model": "sq", "scope": "setting", "claim_id": "ldl.time_vs_L",
                                     "group": ["flat", "sharp"], "verdict": ["holds", "not testable"],
                                     "reason": ["", "L-independent by construction"]})
    f = report_ldl.slope_figure(tabs, "sq")
    str(f)
    theory = [ln for ln in _panels(f.fig)[0].get_lines() if ln.get_linestyle() == "--" and len(ln.get_xdata())]
    assert sorted(ln.get_alpha() or 1 for ln in theory) == [0.35, 1]
    assert sum("not testable here" in x for x in _legend_texts(f.fig)) == 1 and f.problems == [], f.problems


def test_heads_are_told_apart_and_their_figures_fit_the_page():
    """Four heads of four layers: each head its own colour and marker (viridis drew heads 1-3 in
    near teals), named once in a legend of text ≥ 9 px under the panels (uniform's level, drawn in
    each panel, listed once); layers and maps wrap so neither figure is wider than the page's 1,150 px."""
    from icl.report import heads as report_heads
    attn = _attention(4, 4, K=4)
    runs = pd.DataFrame({"run_id": ["a", "b"], "L": [0.2, 0.2]})
    own = report_heads.own_by_head_figure(attn, runs, 0.2)
    str(own)
    lines = {ln.get_label(): ln for ln in own.fig.axes[0].get_lines() if ln.get_label().startswith("head")}
    assert len(lines) == 4 and len({ln.get_color() for ln in lines.values()}) == 4
    assert len({ln.get_marker() for ln in lines.values()}) == 4
    labels = _legend_texts(own.fig)
    assert labels == ["head 1", "head 2", "head 3", "head 4", "1/K = 0.25: uniform"]
    assert _legend_px(own.fig) >= 9 and own.problems == [], own.problems
    assert len(_panels(own.fig)) == 4 and own.fig.get_figwidth() * own.fig.dpi <= 1150
    wide = _attention(1, 8, K=3)
    maps = report_heads.head_maps_figure(wide, runs, 0.2)
    str(maps)
    assert len([ax for ax in _panels(maps.fig) if ax.get_title().startswith("head")]) == 8
    assert maps.fig.get_figwidth() * maps.fig.dpi <= 1150 and maps.problems == [], maps.problems


def test_heads_of_different_settings_are_drawn_apart():
    """Runs of one L with two Δ: each Δ its own head figures, named in their titles, not one median
    over both."""
    from icl.report.page import model_section
    base = _attention(2, 2, K=3)
    attn = pd.concat([base, base.assign(run_id=base["run_id"] + "3", attn=lambda d: d["attn"] * 0 + 1 / 3)])
    runs = pd.DataFrame({"run_id": ["a", "b", "a3", "b3"], "model": "m", "model_kind": "block", "optimizer": "gd",
                         "L": 0.2, "K": 3.0, "N": 10, "delta": [1.0, 1.0, 3.0, 3.0], "seed": [0, 1, 0, 1], "lr": 0.1})
    curves = pd.DataFrame([{"run_id": r, "epoch": e, "metric": "train_loss", "value": 1 / (1 + e)}
                           for r in runs["run_id"] for e in (0, 5)])
    tables = {"runs": runs, "curves": curves, "theory_curves": pd.DataFrame(),
              "summary": pd.DataFrame({"run_id": runs["run_id"], "diverged": False}),
              "theory": pd.DataFrame({"run_id": runs["run_id"], "L_split": 1.0, "L_star": 1.0}),
              "attention": lambda ids: attn[attn["run_id"].isin(ids)]}
    s = model_section("m", runs, tables, {}, ldl=False)
    draw_all(s["maps"], processes=1)
    titles = [f.title for f in s["maps"]]
    own = [t for t in titles if t.startswith("own-feature")]
    assert len(own) == 2 and ", delta=1" in own[0] and ", delta=3" in own[1], titles
    assert [p for f in s["maps"] for p in f.problems] == []


def test_a_figure_wider_than_the_page_is_a_layout_problem():
    """The page (1,150 px) shrinks a wider image and its text with it: 13 in at 110 dpi is 1,430 px."""
    from icl.report.figures import PAGE_PX

    def wide(inches):
        fig, ax = plt.subplots(figsize=(inches, 3))
        ax.plot([0, 1], [0, 1])
        return fig
    assert any(f"figure 1430 px wide, over the page's {PAGE_PX} px" in p for p in _checked(wide(13)))
    assert _checked(wide(10.4)) == []


def test_the_stability_figure_draws_every_group_in_its_own_colour():
    """Twelve groups (more than the qualitative palette's ten colours): every group drawn, each in
    its own colour and named once; the two kinds of line named once each (before, groups past the
    tenth were dropped and each group had two entries)."""
    from icl.report import ldl as report_ldl
    rows = [{"model": "sq", "group": f"delta={d}", "L": L, "max_stable_lr": 10.0 / L / d, "max_converged_lr": 5.0 / L / d,
             "lrs_tried": 4} for d in range(1, 13) for L in (0.1, 0.5, 2.0)]
    runs = pd.DataFrame({"run_id": ["a"], "model": ["sq"], "L": [1.0]})
    tabs = {"stability": pd.DataFrame(rows), "runs": runs, "summary": pd.DataFrame({"run_id": ["a"], "diverged": [False]}),
            "theory": pd.DataFrame({"run_id": ["a"], "L_star": [0.4], "regime": ["flat"]})}
    fig = report_ldl.stability_figure(tabs, "sq")
    str(fig)
    drawn = [ln for ln in fig.fig.axes[0].get_lines() if len(ln.get_xdata()) and ln.get_marker() in ("o", "s")]
    assert len(drawn) == 24 and len({ln.get_color() for ln in drawn}) == 12
    labels = _legend_texts(fig.fig)
    assert len(labels) == len(set(labels)) == 14 and {f"delta={d}" for d in range(1, 13)} <= set(labels)
    assert fig.problems == [] and _legend_px(fig.fig) >= 9, fig.problems
    groups = [t for t in labels if t.startswith("delta=")]
    assert groups == [f"delta={d}" for d in range(1, 13)], groups     # by Δ's value: 2 before 10, not as text


def test_group_labels_sort_by_their_numbers():
    """label_order compares a label's numbers as numbers, its text as text, key by key."""
    from icl.report.settings import label_order
    labels = ["delta=10", "delta=2", "delta=1.5", "delta=1", "delta=1e-3", "delta=-4"]
    assert sorted(labels, key=label_order) == ["delta=-4", "delta=1e-3", "delta=1", "delta=1.5", "delta=2", "delta=10"]
    two = ["delta=2, N=100", "delta=10, N=20", "delta=2, N=20", "c=1, N=5"]
    assert sorted(two, key=label_order) == ["c=1, N=5", "delta=2, N=20", "delta=2, N=100", "delta=10, N=20"]
    assert sorted(["", "delta=3"], key=label_order) == ["", "delta=3"]


def test_the_collapse_figure_has_a_panel_per_setting_and_the_mean_field_from_its_start():
    """Runs of two Δ: a panel per Δ (not one median over both), each L its own line in each; the
    dashed mean-field curve divided by its value at epoch 0, as the runs' loss by loss₀ (before, by
    its value at the first logged epoch > 0: drawn 1/0.3 above runs that followed it)."""
    from icl.report import ldl as report_ldl
    runs, summ, theory, curves, tc = [], [], [], [], []
    epochs = np.arange(0, 101, 10)
    for delta in (1.5, 3.0):
        for L in (0.1, 1.0, 3.0):
            for seed in range(3):
                rid = f"r{delta}-{L}-{seed}"
                clock = 0.5 / L
                runs.append({"run_id": rid, "model": "sq", "L": L, "delta": delta, "seed": seed, "lr": 1.0})
                summ.append({"run_id": rid, "diverged": False, "loss0": 2.0})
                theory.append({"run_id": rid, "clock_per_epoch": clock, "L_star": 0.5, "regime": "flat"})
                loss = 2.0 * np.exp(-epochs * clock / 20)                  # the mean field itself, on its clock
                curves += [{"run_id": rid, "metric": "train_loss", "epoch": e, "value": v} for e, v in zip(epochs, loss)]
                tc += [{"run_id": rid, "metric": "mean_field_loss", "epoch": e, "value": v} for e, v in zip(epochs, loss)]
    tabs = {"runs": pd.DataFrame(runs), "summary": pd.DataFrame(summ), "theory": pd.DataFrame(theory),
            "curves": pd.DataFrame(curves), "theory_curves": pd.DataFrame(tc)}
    fig = report_ldl.collapse_figure(tabs, "sq")
    str(fig)
    panels = _panels(fig.fig)
    assert [ax.get_title() for ax in panels] == ["delta=1.5", "delta=3"]
    for ax in panels:
        lines = {ln.get_label(): ln for ln in ax.get_lines()}
        assert {"L=0.1", "L=1", "L=3", "mean field"} <= set(lines)
        mf = lines["mean field"]
        tau = epochs[1:] * 0.5 / 0.1                                   # the first run's clock (L = 0.1)
        assert mf.get_xdata() == pytest.approx(tau) and mf.get_ydata() == pytest.approx(np.exp(-tau / 20))
        run = lines["L=0.1"]
        assert run.get_ydata() == pytest.approx(mf.get_ydata())          # the runs on it, not 3× below
    assert fig.problems == [] and _legend_px(fig.fig) >= 9, fig.problems
    assert sorted(set(_legend_texts(fig.fig))) == sorted(_legend_texts(fig.fig))


def test_two_decimals_never_print_negative_zero():
    from icl.report.ldl import _2f
    assert (_2f(-0.004), _2f(-0.006), _2f(0.125), _2f(-0.0)) == ("0.00", "-0.01", "0.12", "0.00")


def test_the_lsa_limit_is_drawn_as_theory_only_where_a_closed_form_exists():
    """Issue 50: a Monte-Carlo estimate drawn as a theory curve read as a zig-zagging prediction. With
    theory_mse at every M the line is the closed form; without, the prompts' mean with a ± 2 SE band,
    labelled an estimate."""
    import matplotlib.pyplot as plt
    from icl.report.zfb import limit_curve
    rng = np.random.default_rng(0)
    Ms = np.array([2, 5, 10, 20, 40])
    rows = [{"M": M, "mse": 30 / M * (1 + 0.4 * rng.standard_normal()), "mse_se": 3 / M, "theory_mse": 30 / M}
            for M in Ms for _ in range(5)]
    d = pd.DataFrame(rows)
    fig, ax = plt.subplots()
    limit_curve(ax, d, "C0", "", {"ls": "--"})
    (line,) = ax.get_lines()
    assert line.get_label() == "LSA limit (theory)" and np.allclose(line.get_ydata(), 30 / Ms)
    assert not ax.collections
    fig, ax = plt.subplots()
    limit_curve(ax, d.assign(theory_mse=np.nan), "C0", ", N=20", {"ls": "--"})
    (line,) = ax.get_lines()
    assert "estimate" in line.get_label() and line.get_label().endswith(", N=20")
    mean = d.groupby("M")["mse"].mean().to_numpy()
    assert np.allclose(line.get_ydata(), mean)
    (band,) = ax.collections
    ys = band.get_paths()[0].vertices[:, 1]
    se = np.sqrt(5 * (3 / Ms) ** 2) / 5
    assert ys.max() == pytest.approx((mean + 2 * se).max()) and ys.min() == pytest.approx((mean - 2 * se).min())
    plt.close("all")


def test_a_theory_line_the_verdicts_call_not_testable_says_so_on_the_figure():
    """Issue 50: under the clock rule the runs are L-independent by construction and the time_vs_L rows
    read not testable, so the sharp theory line (falling tenfold over L) is drawn pale and its legend
    entry says not testable; a regime whose rows were judged keeps its line as it was."""
    from icl.report.ldl import untestable_regimes
    v = pd.DataFrame({"model": "softmax_q", "scope": "setting",
                      "claim_id": ["ldl.time_vs_L", "ldl.time_vs_L", "ldl.time_vs_L", "ldl.phases"],
                      "group": ["flat, relative 1e-2", "sharp, relative 1e-2", "sharp, relative 1e-1", "sharp"],
                      "verdict": ["holds", "not testable", "not testable", "not testable"],
                      "reason": ["", "L-independent by construction", "L-independent by construction", "x"]})
    out = untestable_regimes(v, "softmax_q", "ldl.time_vs_L")
    assert set(out) == {"sharp"} and "ldl.time_vs_L" in out["sharp"]
    v.loc[2, "verdict"] = "inconclusive"                    # one sharp row judged: the line stands
    assert untestable_regimes(v, "softmax_q", "ldl.time_vs_L") == {}
    assert untestable_regimes(v, "block", "ldl.time_vs_L") == {} and untestable_regimes(None, "softmax_q", "x") == {}


def test_the_palette_keeps_every_two_values_apart():
    """Issue 50: L = 0.1 and 0.2 were two near-identical blues. Every pair of a palette's colours, up to
    the 12 values a page sweeps, is at least 15 ΔE apart (CIE76), and the same value keeps its
    colour whatever else is drawn. ΔE checked against published CIELAB values first."""
    from icl.report.figures import delta_e, palette
    assert delta_e((1, 1, 1), (0, 0, 0)) == pytest.approx(100.0, abs=0.01)        # L* 100 against 0
    assert delta_e((1, 0, 0), (1, 1, 1)) == pytest.approx(114.55, abs=0.05)       # red: L* 53.24, a* 80.09, b* 67.20
    for n in range(2, 13):
        vals = [0.1 * 1.4 ** k for k in range(n)]
        cols = list(palette(vals).values())
        assert min(delta_e(a, b) for i, a in enumerate(cols) for b in cols[:i]) >= 15, n
    p = palette([0.1, 0.2, 0.4, 1.0, 1.5, 2.0])
    assert p == palette([2.0, 0.1, 1.0, 0.4, 1.5, 0.2, 0.2])


def _shift_frame(models, shifts, Ns, seeds=1, name_len=0, rng=None):
    """shift.parquet as an evaluation writes it: each trained model (name padded to `name_len`) per N
    and seed, the LSA beside them, OLS, the LSA's limit and uniform attention, over test lengths up
    to 2N, for every (shift, c) cell, errors with the test prompts' noise."""
    rng = rng or np.random.default_rng(0)
    rows = []
    names = [(m + "_" + "x" * max(0, name_len - len(m)) if name_len else m, "gpt") for m in models] + [("lsa", "lsa")]
    for N in Ns:
        for s in range(seeds):
            eid = f"e{N}-{s}"
            for shift, cs in shifts:
                for c in cs:
                    for M in sorted({2, 5, N // 2, N, 3 * N // 2, 2 * N}):
                        base = 5.0 * (1.0 if pd.isna(c) else c) ** 2 / M
                        noise = lambda: 1 + 0.1 * rng.standard_normal()  # noqa: E731
                        for pred, kind in names:
                            rows.append({"predictor": pred, "model_kind": kind, "run_id": f"{pred}{N}{s}", "eval_id": eid,
                                         "N": N, "shift": shift, "c": c, "M": M, "mse": base * noise(), "mse_se": 0.05 * base,
                                         "theory_mse": np.nan})
                        for pred, th in (("ols", np.nan), ("lsa_limit", base if shift == "none" else np.nan),
                                         ("uniform_attention", np.nan)):
                            rows.append({"predictor": pred, "model_kind": "baseline", "run_id": None, "eval_id": eid,
                                         "N": N if pred == "lsa_limit" else np.nan, "shift": shift, "c": c, "M": M,
                                         "mse": (1e-20 if pred == "ols" and M >= 5 else base * (3 if pred == "uniform_attention" else 1)) * noise(),
                                         "mse_se": 0.05 * base, "theory_mse": th})
    return pd.DataFrame(rows).astype({"N": "Int64"})


@pytest.mark.parametrize("models", [["gpt"], ["gpt", "gpt_nopos"], ["gpt", "gpt_nopos", "gpt_wide"]])
@pytest.mark.parametrize("shifts", [[("none", [np.nan])],
                                    [("none", [np.nan]), ("random_covariance", [1.0, 4.0, 9.0])],
                                    [("none", [np.nan]), ("scale", [1.0, 2.0]), ("random_covariance", [1.0, 4.0, 9.0]),
                                     ("query_only", [2.0])]])
@pytest.mark.parametrize("Ns, seeds, name_len", [((20,), 1, 0), ((10, 20, 40), 5, 0), ((10, 20), 2, 40)])
def test_zfb_figures_lay_out_clean_for_every_config_shape(models, shifts, Ns, seeds, name_len):
    """Issue 50: a valid config lost its report to 'figure legend leaves the figure' (two GPTs, one
    shift). Over a matrix of config shapes (one to three models, one to four shifts, one or three N,
    one or five seeds, long names) the ZFB figures are drawn and read clean."""
    from icl.report import zfb as report_zfb
    shift = _shift_frame(models, shifts, Ns, seeds, name_len)
    figs = [later(report_zfb.error_vs_length_figure, shift), later(report_zfb.seed_figure, shift, [("", shift)])]
    draw_all(figs, processes=1)
    for f in figs:
        if f:
            assert f.problems == [], f.problems


def test_maps_carry_their_numbers_only_where_a_cell_can_hold_one():
    """64×64 numbered cells were most of ldl_flow_K's report time and unreadable: numbers up to
    NUMBERED_K features, ticks thinned to about ten past that."""
    from icl.report.heads import NUMBERED_K, draw_map
    for K, texts in ((4, 16), (NUMBERED_K, NUMBERED_K ** 2), (64, 0)):
        fig, ax = plt.subplots()
        draw_map(ax, pd.DataFrame(np.full((K, K), 1.0 / K)))
        assert len(ax.texts) == texts and len(ax.get_xticks()) <= max(K, 10)
        plt.close(fig)


def test_curves_on_each_other_are_said_to_be():
    """Issue 50: in softmax_q's sharp panel L = 1, 1.5 and 2 lay on each other, three colours reading
    as one. Curves within 2 % at every shared epoch: the later one's label names the curve it is on;
    curves 5 % apart, or on other epochs, are left alone."""
    from icl.report.figures import say_coinciding
    x = np.arange(0, 400, 4)
    y = 2.0 * np.exp(-x / 50) + 1e-3
    rng = np.random.default_rng(0)
    fig, ax = plt.subplots()
    ax.plot(x, y, label="L=1")
    ax.plot(x, y * (1 + 0.005 * rng.standard_normal(len(x))), label="L=1.5")
    ax.plot(x, y * 1.05, label="L=2")
    ax.plot(x[::2], y[::2], label="L=0.4")
    ax.plot(x, y, label="_band")
    assert say_coinciding(ax) == [("L=1", "L=1.5 (on L=1's curve)")]
    assert [ln.get_label() for ln in ax.get_lines()][:4] == ["L=1", "L=1.5 (on L=1's curve)", "L=2", "L=0.4"]
    plt.close(fig)


def test_a_v1_querys_scores_past_four_features_are_its_own_and_the_others_mean_and_largest():
    """At K = 32 (ldl_flow_K's) one line per feature drew 32 lines in ten colours: the panel now draws
    the own score and the other 31 features' mean and largest, per run and epoch, their medians over
    the seeds equal to a recomputation from the table; at K = 4 each feature keeps its line."""
    from icl.report import page as report
    K, seeds = 32, 5
    g = np.random.default_rng(0)
    rows = []
    for s in range(seeds):
        w = g.uniform(0.5, 1.5, K - 1)                   # the others unequal, so mean and largest differ
        for e in range(0, 50, 5):
            own = 1 / K + (1 - 1 / K) * e / 50
            rest = (1 - own) * w / w.sum()
            rows += [{"run_id": f"r{s}", "epoch": e, "query_feature": 0, "key_feature": k,
                      "attn": own if k == 0 else rest[k - 1]} for k in range(K)]
    attn = pd.DataFrame(rows)
    runs = pd.DataFrame({"run_id": [f"r{s}" for s in range(seeds)], "L": 2.0, "seed": range(seeds), "model": "m"})
    f = report.attention_scores_figure(attn, runs, 2.0, K)
    str(f)
    ax = _panels(f.fig)[0]
    from icl.report.figures import crowded_panels
    assert len(_panels(f.fig)) == 1 and not crowded_panels(f.fig) and f.problems == [], f.problems
    labels = _legend_texts(f.fig)
    assert "the other 31 features' mean score" in labels and "the largest of the other 31" in labels
    assert not any("Attn}_{2" in x for x in labels)
    others = attn[attn["key_feature"] != 0].groupby(["run_id", "epoch"])["attn"]
    for name, want in (("the other 31 features' mean score", others.mean()), ("the largest of the other 31", others.max())):
        med = want.groupby("epoch").median()
        line = next(ln for ln in ax.get_lines() if ln.get_gid() == f"{name} median")
        np.testing.assert_allclose(line.get_ydata(), med.to_numpy(), rtol=1e-12)
    small = attn[attn["key_feature"] < 4].assign(attn=lambda d: d["attn"])
    f4 = report.attention_scores_figure(small, runs, 2.0, 4)
    str(f4)
    assert r"$\mathrm{Attn}_{4,1}$" in _legend_texts(f4.fig)
