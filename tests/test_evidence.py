"""The evidence figure of every decided row (issue 62.2): the band read back from the prediction as
icl.analyse.claims.judge.Band.text writes it, one strip per decided row with its value and interval,
and the verdict table's link from each decided row to its claim's figure."""
import base64
import json
import io
import math

import numpy as np
import pandas as pd
import pytest

from icl.analyse import claims
from icl.analyse.claims.judge import Band
from icl.report import evidence


@pytest.mark.parametrize("band", [Band(0.5, 1.0), Band(-1.0, -1.0, 0.5), Band(-math.inf, 0.0),
                                  Band(1.0, math.inf), Band(1e-3, 2.5e-3)])
def test_the_band_is_read_back_from_the_prediction_as_the_judge_writes_it(band):
    a, b = band.edges()
    got = evidence.band_of(f"slope of log T on log L {band.text()} (T: the epoch …), as App. A states")
    assert got == (pytest.approx(a, rel=1e-3), pytest.approx(b, rel=1e-3))


def test_a_prediction_without_a_band_has_none():
    assert evidence.band_of("Γ⁻¹ nearer than Λ⁻¹") is None and evidence.band_of(None) is None


def _rows():
    base = {"experiment": "x", "claim": "", "measurement": "m", "domain": "", "fragile": "", "scope": "setting",
            "reason": ""}
    # ldl_cosine's block rows of ldl.faster_with_L as the default run wrote them, and a not-testable one
    return pd.DataFrame([
        {**base, "claim_id": "ldl.faster_with_L.ext", "model": "block", "group": "flat", "verdict": claims.HOLDS,
         "value": -1.24, "ci_lo": -1.42, "ci_hi": -1.07, "prediction": "slope of log T on log L ≤ 0 (T: …)"},
        {**base, "claim_id": "ldl.faster_with_L.ext", "model": "block", "group": "sharp", "verdict": claims.FAILS,
         "value": 0.649, "ci_lo": 0.284, "ci_hi": 1.013, "prediction": "slope of log T on log L ≤ 0 (T: …)"},
        {**base, "claim_id": "ldl.phases", "model": "block", "group": "flat", "verdict": claims.NOT_TESTABLE,
         "value": np.nan, "ci_lo": np.nan, "ci_hi": np.nan, "prediction": "—"},
    ])


def test_each_decided_row_is_a_strip_with_its_value_and_interval_and_is_linked():
    v = _rows()
    figs = evidence.evidence_figures(v)
    assert [e["claim_id"] for e in figs] == ["ldl.faster_with_L.ext"]          # the not-testable claim has none
    drawn = pd.read_csv(io.StringIO(base64.b64decode(figs[0]["figure"].csv).decode()))
    for g, verdict, value, lo, hi in (("flat", claims.HOLDS, -1.24, -1.42, -1.07),
                                      ("sharp", claims.FAILS, 0.649, 0.284, 1.013)):
        dot = drawn[drawn["series"] == f"{g}: {verdict} {value:.3g}"]
        assert len(dot) == 1 and dot["x"].iloc[0] == pytest.approx(value)
        bar = drawn[drawn["series"] == f"{g}: 95% interval"]
        assert sorted(bar["x"]) == pytest.approx([lo, hi])
    links = evidence.links(figs)
    assert links == {"block|ldl.faster_with_L.ext|flat": "evidence-ldl.faster_with_L.ext",
                     "block|ldl.faster_with_L.ext|sharp": "evidence-ldl.faster_with_L.ext"}
    assert figs[0]["figure"].problems == []


def test_a_claim_with_many_rows_is_split_over_figures():
    v = pd.concat([_rows().iloc[[0]].assign(group=f"N={n}") for n in range(evidence.PER_FIGURE + 3)], ignore_index=True)
    figs = evidence.evidence_figures(v)
    assert [len(e["rows"]) for e in figs] == [evidence.PER_FIGURE, 3]
    assert figs[1]["anchor"] == "evidence-ldl.faster_with_L.ext-1" and "(part 2 of 2)" in figs[1]["title"]


def test_a_row_judged_over_seeds_draws_each_seed():
    """A ratio judged over five seeds (zfb_gpt's GPT/LSA error at M = N as the default run wrote it):
    each seed's value is drawn as a tick above the interval, at its own x, and the legend names it
    once; a row without seed values draws none."""
    seeds = {"0": 1.61, "1": 1.12, "2": 0.87, "3": 1.30, "4": 0.95}
    v = _rows().assign(seed_values=[json.dumps(seeds), "", ""])
    figs = evidence.evidence_figures(v)
    drawn = pd.read_csv(io.StringIO(base64.b64decode(figs[0]["figure"].csv).decode()))
    ticks = drawn[drawn["series"].str.startswith("flat: seeds")]
    assert sorted(ticks["x"]) == pytest.approx(sorted(seeds.values()))
    assert not drawn["series"].str.startswith("sharp: seeds").any()
    assert figs[0]["figure"].problems == []
    assert evidence.seed_values("") == {} and evidence.seed_values(None) == {}



def test_a_row_read_off_a_curve_per_seed_draws_that_curve():
    """ldl_flow_K's bound row on runs as the default run wrote it (the needed constant at K = 8, 16, 32
    per seed): a figure of its own after the claim's strips, one line per seed through its stored values
    on log axes; rows without a curve get none."""
    lines = {"seed 0": [0.93, 0.61, 0.38], "seed 1": [0.90, 0.58, 0.37], "seed 2": [0.88, 0.62, 0.36]}
    v = _rows().assign(curve=[claims.curve_json("K", "the needed constant C", [8, 16, 32], lines, log=True), "", ""])
    figs = evidence.evidence_figures(v)
    assert [e["anchor"] for e in figs] == ["evidence-ldl.faster_with_L.ext", "evidence-ldl.faster_with_L.ext-curve-0"]
    curve = figs[1]["figure"]
    drawn = pd.read_csv(io.StringIO(base64.b64decode(curve.csv).decode()))
    for name, ys in lines.items():
        got = drawn[drawn["series"] == name]
        assert list(got["x"]) == [3, 4, 5] and list(got["y"]) == pytest.approx(ys)       # at log₂ K
    assert curve.problems == []
    one = evidence.curve_figure(v.iloc[0].to_dict(), "t")           # labelled by K, drawn at log₂ K
    assert [t.get_text() for t in one.fig.axes[0].get_xticklabels()] == ["8", "16", "32"]
    str(one)                                                         # drawn, and so closed: no figure left open
    import matplotlib.pyplot as plt
    assert not plt.get_fignums()
    assert figs[1]["rows"] == [] and evidence.links(figs) == {
        "block|ldl.faster_with_L.ext|flat": "evidence-ldl.faster_with_L.ext",
        "block|ldl.faster_with_L.ext|sharp": "evidence-ldl.faster_with_L.ext"}
    assert len(evidence.evidence_figures(_rows())) == 1
