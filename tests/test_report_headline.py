"""The box a report opens with (issue 30.1) and its tables (30.2), on small hand-made tables: each
check is one a wrong headline, grid or runs table would fail."""
import json
import re

import numpy as np
import pandas as pd
import pytest

from icl.analyse import claims
from icl.report import findings as fd, headline as hl, index as report_index, page as report, zfb as report_zfb


def _verdicts(rows):
    base = {"experiment": "x", "model": "m", "claim": "", "prediction": "", "measurement": "meas", "value": np.nan,
            "ci_lo": np.nan, "ci_hi": np.nan, "domain": "", "fragile": "", "scope": "setting"}
    return pd.DataFrame([{**base, **r} for r in rows])


def test_grid_has_one_mark_per_setting_verdict_in_its_setting_column():
    v = _verdicts([
        {"claim_id": "ldl.phases", "group": "delta=1.5, N=50; flat", "verdict": claims.HOLDS, "reason": ""},
        {"claim_id": "ldl.phases", "group": "delta=1.5, N=50; sharp", "verdict": claims.FAILS, "reason": "two, not three"},
        {"claim_id": "ldl.phases", "group": "delta=3, N=50", "verdict": claims.UNSURE, "reason": "wide"},
        {"claim_id": "ldl.step_size", "group": "", "verdict": claims.NOT_TESTABLE, "reason": "GD only"},
        {"claim_id": "ldl.mean_field", "group": "run abc", "verdict": claims.HOLDS, "reason": "", "scope": "run"},
    ])
    g = hl.verdict_grid(v)
    assert g["settings"] == ["", "delta=1.5, N=50", "delta=3, N=50"]
    marks = [(r["claim_id"], g["settings"][i], m["verdict"], m["aspect"])
             for r in g["rows"] for i, cell in enumerate(r["cells"]) for m in cell]
    assert sorted(marks) == sorted([("ldl.phases", "delta=1.5, N=50", claims.HOLDS, "flat"),
                                    ("ldl.phases", "delta=1.5, N=50", claims.FAILS, "sharp"),
                                    ("ldl.phases", "delta=3, N=50", claims.UNSURE, ""),
                                    ("ldl.step_size", "", claims.NOT_TESTABLE, "")])
    fails = [m for r in g["rows"] for c in r["cells"] for m in c if m["verdict"] == claims.FAILS]
    assert fails[0]["symbol"] == "✗" and "two, not three" in fails[0]["title"]     # the reason, on hover
    assert fd.setting_of("N=10; slope; formula") == ("N=10", "slope; formula")
    assert fd.setting_of("at the optimum") == ("", "at the optimum")


def test_claims_not_testable_anywhere_share_one_row_after_the_decided_ones():
    """A model's claims not testable in every setting fold into one row (their ids listed, every mark
    and its reason kept); a claim with one decided or inconclusive mark keeps its own row."""
    v = _verdicts([
        {"claim_id": "ldl.phase_one", "group": "delta=1.5", "verdict": claims.NOT_TESTABLE, "reason": "GD only"},
        {"claim_id": "ldl.phase_one", "group": "delta=3", "verdict": claims.NOT_TESTABLE, "reason": "GD only"},
        {"claim_id": "ldl.phases", "group": "delta=1.5", "verdict": claims.NOT_TESTABLE, "reason": "blind"},
        {"claim_id": "ldl.phases", "group": "delta=3", "verdict": claims.UNSURE, "reason": "wide"},
        {"claim_id": "ldl.step_size", "group": "delta=3", "verdict": claims.NOT_TESTABLE, "reason": "one lr"},
        {"claim_id": "ldl.phases", "group": "delta=3", "verdict": claims.NOT_TESTABLE, "reason": "x", "model": "n"},
    ])
    g = hl.verdict_grid(v)
    assert [(r["model"], r["claim_id"]) for r in g["rows"]] == [
        ("m", "ldl.phases"), ("m", "2 claims not testable in any setting"), ("n", "ldl.phases")]   # one alone stays
    folded = g["rows"][1]
    assert folded["ids"] == ["ldl.phase_one", "ldl.step_size"]
    titles = [m["title"] for cell in folded["cells"] for m in cell]
    assert len(titles) == 3 and sum("one lr" in t for t in titles) == 1 and sum("GD only" in t for t in titles) == 2
    assert [len(c) for c in folded["cells"]] == [1, 2]            # each mark still in its setting's column


def test_every_claim_with_a_failure_gets_a_sentence_naming_models_and_settings():
    """A claim with one "does not hold" anywhere is said in words (its text, never its id), per model
    that fails it, with the share of its testable settings (not-testable rows out of it) and the
    settings named, and its commonest reason; a claim that fails nowhere, and a model that fails
    nowhere, are not said to fail."""
    v = _verdicts([
        {"claim_id": "ldl.phases", "group": f"N={n}", "verdict": claims.FAILS,
         "reason": f"the sharp runs show 2 phases, not 3 (median of {n} runs)"} for n in (10, 20)] + [
        {"claim_id": "ldl.phases", "group": "N=40", "verdict": claims.FAILS, "reason": "diverged early"},
        {"claim_id": "ldl.phases", "group": "N=80", "verdict": claims.HOLDS, "reason": ""},
        *({"claim_id": "ldl.phases", "group": f"N={n}; sharp", "verdict": claims.NOT_TESTABLE, "reason": "GD only"}
          for n in (160, 320, 640)),
        {"claim_id": "ldl.step_size", "group": "N=10", "verdict": claims.FAILS, "reason": "no"},
        {"claim_id": "ldl.step_size", "group": "N=20", "verdict": claims.HOLDS, "reason": ""},
        {"claim_id": "ldl.unseen_functions", "group": "N=10", "verdict": claims.HOLDS, "reason": ""},
        # zfb_gpt's shape: gpt_nopos fails in both training laws, gpt holds in both
        *({"claim_id": "zfb.gpt_in_distribution", "model": m, "group": f"token_kind={k}",
           "verdict": claims.FAILS if m == "gpt_nopos" else claims.HOLDS,
           "reason": "error at M = N 1.9× least squares', outside 1-1.25×" if m == "gpt_nopos" else ""}
          for m in ("gpt", "gpt_nopos") for k in ("gaussian", "random_covariance")),
    ])
    out = [s for s in fd.claim_sentences(v) if " does not hold" in s]
    assert [s.split("” ", 1)[0] for s in out] == ["“Two phases in the flat regime, three in the sharp",
                                                   "“The flat regime tolerates larger steps",
                                                   "“GPT-2 trained on linear models matches least squares in "
                                                   "distribution (§5, Garg et al.)"]
    assert not any(re.search(r"\b(ldl|zfb)\.\w", s) for s in fd.claim_sentences(v))      # no claim id in a sentence
    phases, step, gpt = out
    assert "for m in 3 of 4 testable settings (N = 10; N = 20; N = 40)" in phases       # 3 not-testable rows left out
    assert "the sharp runs show 2 phases, not 3" in phases and "diverged" not in phases
    assert phases.endswith("; it holds in 1 other setting.")
    assert "for m in 1 of 2 testable settings (N = 10): no" in step
    assert "for gpt_nopos in all 2 testable settings (tokens = gaussian; tokens = random_covariance)" in gpt
    assert "for gpt " not in gpt and "1.9× least squares'" in gpt
    held = [s for s in fd.claim_sentences(v) if " does not hold" not in s]
    assert "“Accurate prediction for unseen functions (Prop. 1)” holds for m in the one testable setting (N = 10)." in held
    assert any(s.startswith("“GPT-2 trained") and "holds for gpt in all 2 testable settings" in s for s in held)
    # ldl_phase_diagram's shape: one claim failing in each of its Δ × N settings for both regimes
    eps = _verdicts([{"claim_id": "ldl.time_vs_eps", "group": f"delta={d}, N={n}; {r}", "verdict": claims.FAILS,
                      "reason": "β outside the band"} for d in (1.5, 3) for n in (50, 100) for r in ("flat", "sharp")]
                    + [{"claim_id": "ldl.time_vs_eps", "group": "delta=6, N=50; flat", "verdict": claims.HOLDS,
                        "reason": ""}])
    said = fd.claim_sentences(eps.iloc[:-1])[0]
    assert "for m in all 8 testable settings (flat: every Δ × N (4) | sharp: every Δ × N (4)): β" in said, said
    said = fd.claim_sentences(eps)[0]                    # Δ = 6 holds: the failing settings named, not "every"
    assert "for m in 8 of 9 testable settings (flat: Δ = 1.5, N = 50; Δ = 1.5, N = 100; Δ = 3, N = 50; " \
           "Δ = 3, N = 100 | sharp: Δ = 1.5, N = 50;" in said, said
    # the index's line: the failing sentences whole, the holding claims named by their words
    line = fd.index_line(v)
    assert line.startswith(out[0] + " " + out[1]), line
    assert "Elsewhere it confirms 3 claims wherever decided: “Two phases" not in line
    assert "“Accurate prediction for unseen functions (Prop. 1)”" in line


def test_no_decided_claim_is_said_with_why_every_untestable_row_counted_once():
    """ldl_depth's shape: 12 inconclusive and 36 not testable rows, nothing decided: the page and the
    index say so; the not-testable rows are counted by why, each in exactly one group (a reason no
    group names is grouped by its own first clause), the largest first."""
    v = _verdicts([{"claim_id": f"ldl.c{i}", "group": f"L={i}", "verdict": claims.NOT_TESTABLE,
                    "reason": "the theorem is about full-batch GD; an adaptive optimiser rescales each step" if i < 20
                    else "outside Theorems 1-2's hypotheses (unit constants): N = 100" if i < 30
                    else f"Adam is blind to L; {i}"} for i in range(36)] +
                  [{"claim_id": "ldl.phases", "group": f"seed={i}", "verdict": claims.UNSURE,
                    "reason": f"the interval 0.{i}–2.{i} straddles the band"} for i in range(12)])
    groups = fd.untestable_groups(v)
    assert groups == [("the claim is about full-batch GD and these runs used Adam", 20),
                      ("their runs lie outside the theorem's hypotheses", 10), ("Adam is blind to L", 6)]
    assert sum(n for _, n in groups) == 36
    said = fd.findings(v)
    assert said[0] == "No claim was decided: none of the 48 rows holds or does not hold."
    assert said[1] == "Inconclusive wherever testable (the interval straddles its band): “Two phases in the flat " \
                      "regime, three in the sharp” (12 settings)."
    assert said[2] == ("36 of 48 rows are not testable: 20 because the claim is about full-batch GD and these runs used "
                       "Adam; 10 because their runs lie outside the theorem's hypotheses; 6 because Adam is blind to L.")
    line = fd.index_line(v)
    assert line.startswith("No claim was decided") and line.endswith(said[2])
    decided = pd.concat([v, _verdicts([{"claim_id": "ldl.phases", "group": "x", "verdict": claims.HOLDS,
                                        "reason": ""}])])
    assert not fd.index_line(decided).startswith("No claim")
    assert fd.findings(v.iloc[:0]) == [] and fd.index_line(v.iloc[:0]) == ""


def test_every_untestable_reason_of_the_default_run_is_named_by_a_group():
    """The default run's not-testable reasons (one of each kind as the claims write them today): each
    falls in a named group, not the fallback of its own first clause."""
    named = {lab for lab, _ in fd.UNTESTABLE}
    reasons = [
        "one collapse clock: LDL's model under GD …", "softmax_q is linear in the labels and this task scales them by L, so",
        "outside Prop. 1's hypotheses (unit constants): N = 100", "softmax's shift invariance: adding a constant",
        "every run of this setting was left out (30 of 30 runs left out (30 diverged))",
        "the theorem is about full-batch GD; an adaptive optimiser rescales each step",
        "at this learning rate one step overshoots the population loss's curvature scale (η‖v‖⁴λ_max > 2)",
        "no accuracy inside Theorem 1's K ≥ 1/ε on this flow: K = 8 < 1/ε = 10",
        "Proposition 3 bounds the off-diagonal logits' rate and states their overall decrease; \"oscillates\"",
        "GD on noise-free tokens at orthogonal features: each prompt's gradient … by algebra (Lemma 2's g_k ≥ 0)",
        "softmax_q predicts a convex combination of the context labels, so its loss is bounded",
        "the same runs as the row 'delta=3, N=1600'", "no seed has two values of L whose runs reached half",
        "only softmax_q on discrete features logs the logits q_k", "the mean-field curve is derived for softmax_q",
        "no run's logits trace dynamics", "no value of L of this setting lies in the flat regime",
        "the same dynamics as the row 'lr=1'", "no trained gpt model", "nothing to follow: the runs' loss fell by less",
        "the sweep does not cross L*", "trained on a fixed covariance", "one value of L in this setting",
        "a bound is judged as a bound: Theorem 1's T ≤ C", "no run reached Proposition 1's precondition",
        "Lemma 2's flow on each of these 12 runs' own feature counts, counted as the runs are (within", "fewer than two values of L in the flat regime",
        "the claim is about discrete features; bilinear logits", "continuous tokens have no feature oracle",
        "the model has not learned: final train loss", "every flat run was left out (2 runs started less than 10×",
        "no in-distribution test of an LSA trained on a fixed covariance", "no shift of kind 'scale'",
        "positional: none — ZFB §5's GPT-2", "the spike is a learned-positions effect (zfb.length_spike)",
        "the runs have no L* (continuous tokens)", "no 'random_covariance_indep_query' shift at c = 1",
        "no GPT with positional: learned", "no trained model whose prediction is nonlinear in the labels",
        "phases are counted on the own-feature logit, which continuous tokens do not have",
        "the end of Phase I is read from the own attention of discrete features",
        "this setting does not sweep the learning rate over two or more values of L"]
    v = _verdicts([{"claim_id": "ldl.phases", "group": f"N={i}", "verdict": claims.NOT_TESTABLE, "reason": r}
                   for i, r in enumerate(reasons)])
    assert {lab for lab, _ in fd.untestable_groups(v)} <= named, [g for g in fd.untestable_groups(v) if g[0] not in named]


def test_claim_counts_are_per_setting_rows_and_add_up_to_the_page_badges():
    v = _verdicts([{"claim_id": "ldl.phases", "group": "N=1", "verdict": claims.HOLDS, "reason": ""},
                   {"claim_id": "ldl.phases", "group": "N=2", "verdict": claims.UNSURE, "reason": ""},
                   {"claim_id": "ldl.mean_field", "group": "r1", "verdict": claims.FAILS, "reason": "", "scope": "run"},
                   {"claim_id": "ldl.mean_field", "group": "", "verdict": claims.HOLDS, "reason": ""}])
    per_claim = hl.claim_counts(v)
    total = {k: sum(dict(c["counts"])[k] for c in per_claim) for k in claims.VERDICTS}
    assert total == dict(report.verdict_counts(v)[0])            # the index's and the page's figures
    assert dict(next(c for c in per_claim if c["claim_id"] == "ldl.mean_field")["counts"])[claims.FAILS] == 0


def test_paper_sizes_say_what_the_seed_sets_larger():
    here = {"tokens": {"kind": "gaussian", "d": 5}, "prompts": {"N": 20, "train": 64},
            "models": [{"name": "gpt", "layers": 3, "heads": 2, "width": 32}], "train": {"epochs": 500},
            "sweep": {"tokens": [{"kind": "gaussian", "d": 5}, {"kind": "random_covariance", "d": 5}], "seed": [0, 1]}}
    paper = {"tokens": {"kind": "gaussian", "d": 20}, "prompts": {"N": 40, "train": 64},
             "models": [{"name": "gpt", "layers": 12, "heads": 8, "width": 256}], "train": {"epochs": 50000},
             "sweep": {"tokens": [{"kind": "gaussian", "d": 20}, {"kind": "random_covariance", "d": 20}],
                       "zip": {"prompts.N": [40, 70, 100]}, "seed": [0, 1, 2]}}
    s = hl.paper_sizes(here, paper)
    for part in ("d = 20 (here 5)", "N ∈ {40, 70, 100} (here 20)", "50000 epochs (here 500)",
                 "gpt: 12 layers (here 3), 8 heads (here 2), width 256 (here 32)", "3 seeds (here 2)",
                 "(config/paper.yaml)"):
        assert part in s, (part, s)
    assert "training prompts" not in s                             # 64 in both
    assert hl.paper_sizes(here, here) == "" and hl.paper_sizes(here, None) == ""


def _tables(ratio_gpt: float, ratio_lsa: float):
    runs = pd.DataFrame({"run_id": list("abcd"), "model": ["gpt", "gpt", "lsa", "lsa"],
                         "model_kind": ["gpt", "gpt", "lsa", "lsa"], "optimizer": "adam", "lr": [2e-3, 2e-3, 1e-2, 1e-2],
                         "layers": [3, 3, np.nan, np.nan], "heads": [2, 2, 1, 1], "width": [32, 32, np.nan, np.nan],
                         "seed": [0, 1, 0, 1], "token_kind": "gaussian", "N": 20, "L": np.nan, "epochs": 500,
                         "shard": "s", "data_id": ["d0", "d1", "d0", "d1"]})
    summary = pd.DataFrame({"run_id": list("abcd"), "loss0": 2.5, "final_train_loss": 2.4, "final_test_loss": 2.4,
                            "uniform_train_loss": 2.5, "uniform_test_loss": 2.5, "attn_own_final": np.nan,
                            "t_escape": [np.nan, np.nan, 40.0, 60.0], "diverged": False})
    rows = []
    for rid, model, kind, ratio in (("a", "gpt", "gpt", ratio_gpt), ("b", "gpt", "gpt", ratio_gpt),
                                    ("c", "lsa", "lsa", ratio_lsa), ("d", "lsa", "lsa", ratio_lsa)):
        ev = "e0" if rid in "ac" else "e1"
        rows.append({"predictor": model, "model_kind": kind, "run_id": rid, "eval_id": ev, "N": 20, "shift": "none",
                     "c": np.nan, "M": 20, "mse": 4.0 * ratio})
    for ev in ("e0", "e1"):
        rows += [{"predictor": p, "model_kind": None, "run_id": None, "eval_id": ev, "N": pd.NA, "shift": "none",
                  "c": np.nan, "M": 20, "mse": m} for p, m in (("uniform_attention", 4.0), ("ols", 0.1))]
    shift = pd.DataFrame(rows)
    shift["N"] = shift["N"].astype("Int64")
    return {"runs": runs, "summary": summary, "shift": shift}


def test_a_model_that_has_not_learned_is_said_with_its_numbers():
    t = _tables(ratio_gpt=0.95, ratio_lsa=0.3)
    out = {o["model"]: o for o in hl.model_outcomes(t, ldl=False)}
    assert out["gpt"]["status"] == "not learned" and out["lsa"]["status"] == "learned"
    assert "error at M = N (N = 20) 0.95× uniform attention's after 500 epochs" in out["gpt"]["reached"]
    assert "0 of 2 runs left the plateau" in out["gpt"]["reached"]
    assert "3 layers, 2 heads, width 32" in out["gpt"]["trained"]
    assert hl.learning_sentence(list(out.values())) == "gpt: not learned"
    # an LDL experiment: the final train loss against uniform attention's, and how many converged
    ldl = hl.model_outcomes({**t, "shift": pd.DataFrame()}, ldl=True)
    assert "final train loss 0.96× uniform attention's" in ldl[0]["reached"] and ldl[0]["status"] == "not learned"
    assert ldl[0]["converged"] == 0 and ldl[0]["says"].startswith("not learned (≥ 50% of the gap")
    assert ldl[0]["says"].endswith("and none of 2 runs converged (train loss ≤ 10⁻² × uniform attention's)")
    # a GPT trained on every x position: judged at the query (final_query_train_loss), and said so
    summ = t["summary"].assign(final_query_train_loss=0.2 * t["summary"]["uniform_train_loss"],
                               final_query_test_loss=0.2 * t["summary"]["uniform_test_loss"])     # held-out too
    runs = t["runs"].assign(loss="all")
    gpt = hl.model_outcomes({**t, "runs": runs, "summary": summ, "shift": pd.DataFrame()}, ldl=True)
    assert "final train loss at the query 0.2× uniform attention's" in gpt[0]["reached"] and gpt[0]["status"] == "learned"
    # learned (half the gap closed) but none converged (10⁻² of it): two tests, said as two, never
    # "0 of 2 runs converged: learned"
    assert gpt[0]["says"].startswith("learned (≥ 50% of the gap") and ", but none of 2 runs converged" in gpt[0]["says"]
    assert "converged" not in gpt[0]["reached"]
    summ = summ.assign(final_query_train_loss=[0.005 * 2.5, 0.2 * 2.5, 0.005 * 2.5, 0.005 * 2.5])
    some = hl.model_outcomes({**t, "runs": runs, "summary": summ, "shift": pd.DataFrame()}, ldl=True)
    assert some[0]["says"].endswith("but 1 of 2 runs converged (train loss ≤ 10⁻² × uniform attention's)")
    assert some[1]["says"].startswith("learned") and ", and all of 2 runs converged" in some[1]["says"]
    assert hl.model_outcomes(t, ldl=False)[1]["says"] == "learned"      # no convergence test outside LDL


def test_index_says_which_models_did_not_learn(tmp_path):
    t = _tables(ratio_gpt=0.95, ratio_lsa=0.3)
    d = tmp_path / "results" / "x"
    d.mkdir(parents=True)
    _verdicts([{"claim_id": "zfb.beyond_lsa", "group": "", "verdict": claims.NOT_TESTABLE, "reason": "r"}]) \
        .to_parquet(d / "verdicts.parquet")
    t["summary"].assign(train_seconds=1.0, device="cpu").to_parquet(d / "summary.parquet")
    (d / "thumbnail.png").write_bytes(b"")
    models = hl.model_outcomes(t, ldl=False)
    (d / "headline.json").write_text(json.dumps({"models": models, "learning": hl.learning_sentence(models),
                                                 "finding": "“X” does not hold for gpt in all 2 testable settings."}))
    out = tmp_path / "index.html"
    report_index.render_index({"x": {"description": ""}}, str(tmp_path / "results"), str(out))
    html = out.read_text()
    assert "gpt: not learned" in html
    assert '<p class="finding">“X” does not hold for gpt in all 2 testable settings.</p>' in html


def test_runs_table_has_a_column_per_swept_setting_and_no_empty_column():
    t = _tables(0.9, 0.3)
    runs = pd.concat([t["runs"], t["runs"].assign(run_id=lambda r: r["run_id"] + "2", token_kind="random_covariance",
                                                  N=40)])
    summ = pd.concat([t["summary"], t["summary"].assign(run_id=lambda r: r["run_id"] + "2")])
    tab = report.runs_table(runs, summ)
    for col in ("model", "seed", "token_kind", "N"):
        assert col in tab.columns, col
    assert "L" not in tab.columns and "attn_own_final" not in tab.columns        # all missing: dropped
    assert tab.notna().any().all()
    assert len(tab) == 8


def test_predictor_table_names_its_N():
    t = _tables(0.9, 0.3)
    html = report_zfb.predictor_table(t["shift"])
    head = re.findall(r"<th>(.*?)</th>", html)
    rows = [re.findall(r"<td>(.*?)</td>", r) for r in re.findall(r"<tr>\s*(<td>.*?)</tr>", html, re.S)]
    assert head == ["N", "predictor", "M=20"]
    assert {r[0] for r in rows} == {"20"} and {r[1] for r in rows} == {"ols", "uniform_attention", "gpt", "lsa"}
    assert float(next(r for r in rows if r[1] == "ols")[2]) == pytest.approx(0.1)


def test_a_failing_claim_says_whom_its_rows_are_against():
    v = _verdicts([{"claim_id": "ldl.time_vs_eps", "group": f"N={n}", "verdict": claims.FAILS,
                    "reason": "the median β's interval lies outside the band"} for n in (10, 20, 40)])
    v["against"] = pd.array(["theorem", "theorem", "dynamics"], dtype="string")
    (out,) = fd.claim_sentences(v)
    assert "does not hold for m in all 3 testable settings (every N (3)), against the theorem in 2 and against the " \
           "theory's own dynamics in 1: the median β's" in out, out
    assert fd.against_words(v.drop(columns="against")) == ""


def test_a_headline_sentence_is_never_cut_mid_phrase():
    """Issue 50: the headline quotes a reason in whole clauses; what does not fit is left to the
    verdict table, never cut at a word with an ellipsis."""
    from icl.report.findings import _first_sentence
    reason = ("the 3-phase share's interval [0, 0.459] lies outside the band [0.5, 1]; the theorem's "
              "statement disagrees with its own mean-field dynamics, which the runs follow: Lemma 2's flow at the "
              "runs' own step reads 0, measured the same way, within 5% of the runs' interval [0, 0.459]")
    got = _first_sentence(reason)
    assert got == "the 3-phase share's interval [0, 0.459] lies outside the band [0.5, 1]"
    assert "…" not in got and _first_sentence(reason, 1000) == reason
    assert _first_sentence("x" * 300) == "x" * 300          # one clause longer than the limit: whole
    gpt = ("GPT's error is nearer the LSA's than OLS's (this GPT: 2 layers, 2 heads, width 32, 2000 epochs of 64 "
           "prompts; Garg et al.'s GPT-2 has 12 layers, 8 heads, width 256 and trained 500k steps of 64 prompts) " + "y" * 200
           + "; and more")
    assert _first_sentence(gpt).count("(") == _first_sentence(gpt).count(")")      # never cut inside a bracket


def test_the_header_names_the_training_loops_and_the_training_jobs_apart():
    """Issue 50: the header said training took 5.5 s, 'Where the time went' 11.5 s. Two quantities:
    the loops' own clocks and the jobs' (start-up, data and writing too), each named."""
    from icl.report.page import trained_line
    from icl.jobs.timing import summary_line
    tim = pd.DataFrame({"experiment": "e", "step": ["train", "train", "report"], "seconds": [6.0, 5.5, 3.0]})
    line = trained_line(1, 2, 5.5, tim, ["cpu (x86, 1 thread, float32)"])
    assert line.startswith("1 run in 2 shards; their training loops took 5.5 s of the 11.5 s of training jobs")
    assert "11.5 s training jobs" in summary_line(tim.groupby("step", as_index=False)["seconds"].sum())
    assert "training jobs" not in trained_line(3, 1, 5.5, tim.iloc[:0], ["cpu"])


def test_a_sentence_over_both_regimes_quotes_each_regimes_band():
    """Issue 50: the time_vs_eps sentence covered both regimes and quoted the flat band only."""
    from icl.report.findings import claim_sentences as failing_claims
    v = pd.DataFrame({"claim_id": "ldl.time_vs_eps", "model": "softmax_q", "scope": "setting",
                      "group": ["flat, relative", "flat, attention", "sharp, relative"],
                      "verdict": ["does not hold"] * 3, "against": None,
                      "reason": ["the median β's interval [0.8, 1.1] lies outside the band [0, 0.25]",
                                 "the median β's interval [0.7, 1.2] lies outside the band [0, 0.25]",
                                 "the median β's interval [0.1, 0.3] lies outside the band [0.6, 1.4]"]})
    (out,) = failing_claims(v)
    assert "flat: the median β's interval [0.8, 1.1] lies outside the band [0, 0.25]" in out
    assert "sharp: the median β's interval [0.1, 0.3] lies outside the band [0.6, 1.4]" in out
    (one,) = failing_claims(v.iloc[:2])
    assert "flat:" not in one and "[0, 0.25]" in one


def test_each_baseline_at_its_own_N_as_the_parquet_holds_it():
    """Issue 62.5: the LSA's limit is a baseline of a training length of its own; on prompts shared by
    runs of N = 10 and 20 the table gives each N its own limit (zfb_fixed's table repeated N = 40's at
    every N), and the page's number is the parquet's median at that N."""
    t = _tables(ratio_gpt=0.5, ratio_lsa=0.3)
    sh = t["shift"]
    more = sh[sh["run_id"].notna()].assign(N=10, run_id=lambda d: d["run_id"] + "10", mse=lambda d: d["mse"] * 2)
    limits = pd.DataFrame([{"predictor": "lsa_limit", "model_kind": None, "run_id": None, "eval_id": ev, "N": N,
                            "shift": "none", "c": np.nan, "M": 20, "mse": m}
                           for ev in ("e0", "e1") for N, m in ((10, 16.0 + (ev == "e1")), (20, 0.941))])
    shift = pd.concat([sh, more, limits], ignore_index=True)
    shift["N"] = shift["N"].astype("Int64")
    html = report_zfb.predictor_table(shift)
    rows = {(r[0], r[1]): r[2] for r in (re.findall(r"<td>(.*?)</td>", x)
                                         for x in re.findall(r"<tr>\s*(<td>.*?)</tr>", html, re.S))}
    for N in (10, 20):
        want = float(limits.loc[limits["N"] == N, "mse"].median())
        assert float(rows[(str(N), "lsa_limit")]) == pytest.approx(want, rel=1e-3), (N, rows)


def test_one_model_name_under_two_settings_is_two_lines_never_pooled():
    """Issue 62.4: zfb_gpt trains 'gpt' with learned positions and with none; its figures and table
    pooled both in one 'gpt' line (1.82 … 1.23 where learned positions alone read 1.61 … 0.87). Each
    setting is a predictor of its own, with its own median, in the table and in the figure's data."""
    import base64
    import io
    t = _tables(ratio_gpt=0.5, ratio_lsa=0.3)
    t["runs"] = t["runs"].assign(positional=["learned", "none", None, None])
    t["summary"] = t["summary"].assign(diverged=False)
    t["shift"].loc[t["shift"]["run_id"] == "b", "mse"] = 8.0            # the run without positions: worse
    sh = report_zfb._lsa_rows(t)
    assert set(sh.loc[sh["run_id"].isin(["a", "b"]), "predictor"]) == {"gpt (positional: learned)", "gpt (positional: none)"}
    html = report_zfb.predictor_table(sh)
    rows = {r[1]: float(r[2]) for r in (re.findall(r"<td>(.*?)</td>", x) for x in re.findall(r"<tr>\s*(<td>.*?)</tr>", html, re.S))}
    assert rows["gpt (positional: learned)"] == pytest.approx(2.0) and rows["gpt (positional: none)"] == pytest.approx(8.0)
    assert "gpt" not in rows
    fig = report_zfb.error_vs_length_figure(sh)
    drawn = pd.read_csv(io.StringIO(base64.b64decode(fig.csv).decode()))
    assert {"gpt (positional: learned), N=20", "gpt (positional: none), N=20"} <= set(drawn["series"])
