"""Report figures drawn in forked workers are the figures drawn one after another, byte for byte."""
import base64
import io

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from icl.figures import draw_all, later, png


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
    from icl.report import model_section
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
    assert len(discrete["figures"]) == 1 and not discrete["maps"]         # the loss by N only
    assert len(continuous["figures"]) == 2                                # loss, attention summaries
    assert read == []                                                     # no attention rows to draw: none read
