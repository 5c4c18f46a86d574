"""The prose checks (issue 62.6), each against the defect it names: every check fails on a sentence
with the defect and passes on the same sentence mended."""
import pytest

from icl.report import prose


@pytest.mark.parametrize("bad, what", [
    ("GPT's error is nearer the LSA's (this GPT: 2 layers, 2 heads, width 32, 2000 epochs of 64 prompts.", "'(' left open"),
    ("the interval [0.1, 0.5 straddles the band.", "'[' left open"),
    ("“Two phases in the flat regime does not hold.", "'“' left open"),
    ("the block converges faster in the sharp set and", "cut off"),
    ("ldl_depth's one claim holds in 1 stages.", "a plural after 1"),
    ("the runs reach t_rel_1e-2 within 40 epochs.", "a column name in prose"),
    ("(App.) does not hold in 1 settings.", "a plural after 1"),
])
def test_each_defect_is_found(bad, what):
    assert any(p.startswith(what) for p in prose.problems(bad)), prose.problems(bad)


@pytest.mark.parametrize("good", [
    "GPT's error is nearer the LSA's (this GPT: 2 layers, 2 heads, width 32; 2000 epochs of 64 prompts).",
    "“Two phases in the flat regime, three in the sharp” does not hold for m in 1 of 2 testable settings (N = 10).",
    "ldl_depth's one claim holds in 1 stage, 11 runs and 21 settings.",
    "the runs reach 10⁻² of their initial loss within 40 epochs.",
    "0.1 settings is not a count; 21 runs is.",
])
def test_mended_sentences_pass(good):
    assert prose.problems(good) == []


def test_check_names_the_sentence():
    (p,) = prose.check(["fine.", "it holds in 1 runs."])
    assert "1 runs" in p
