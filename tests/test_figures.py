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
