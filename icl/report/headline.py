"""What a report opens with (issue 30.1): per model what was trained and what it reached, with
numbers; the verdict counts per claim (per-setting rows, the figures the index shows); the paper's
sizes where the experiment scales them down (config/paper.yaml); a sentence per claim with a "does
not hold" in any setting, or one saying why no claim was decided; the index's line of what was
found; and the claims × settings grid of every per-setting verdict.

Reads only the experiment's tables and what icl.report.page.render is given; the learning test is the
claims' own (icl.analyse.claims.learned.below with the references the claims use), so a model the header
calls "not learned" is one whose claims were gated on it."""
from __future__ import annotations

import numpy as np
import pandas as pd

from icl.analyse import claims
from icl.analyse.claims.learned import LEARNED, below, held_out
from icl.report.findings import setting_key, setting_of

SYMBOL = {claims.HOLDS: "✓", claims.FAILS: "✗", claims.UNSURE: "?", claims.NOT_TESTABLE: "–"}


def _fmt(x: float) -> str:
    return "—" if x is None or not np.isfinite(x) else f"{x:.3g}"


def _spread(r: pd.Series, unit: str = "×") -> str:
    """The median of ratios, with their range where there are several and they differ."""
    r = r.dropna()
    if r.empty:
        return "—"
    med = float(r.median())
    lo, hi = float(r.min()), float(r.max())
    if len(r) < 2 or np.isclose(lo, hi, rtol=5e-3):
        return f"{_fmt(med)}{unit}"
    return f"{_fmt(med)}{unit} (median; {_fmt(lo)}–{_fmt(hi)})"


def _architecture(r: pd.Series) -> str:
    parts = []
    for col, what in (("layers", "layer"), ("heads", "head"), ("width", "width")):
        v = r.get(col)
        if v is not None and pd.notna(v) and not (col == "heads" and int(v) == 1 and pd.isna(r.get("layers"))):
            parts.append(f"width {int(v)}" if col == "width" else f"{int(v)} {what}{'s' if int(v) != 1 else ''}")
    return ", ".join(parts)


def _status(learned: int, n: int) -> str:
    if n == 0:
        return "nothing to judge"
    if learned == n:
        return "learned"
    if learned == 0:
        return "not learned"
    return f"learned in {claims.of(learned, n, 'run')}"


def model_outcomes(tabs: dict, ldl: bool) -> list[dict]:
    """Per model (in the runs table's order): what was trained (`trained`), what it reached with
    numbers (`reached`), and `status` — "learned", "not learned" or "learned in k of n runs" by the
    claims' own learning gate (LEARNED of the gap to uniform attention closed): the final train loss
    against uniform attention's for LDL experiments, the error at M = N against uniform attention's
    (shift.parquet) where the experiment evaluates under shift. Diverged runs are counted apart."""
    runs, summ = tabs["runs"], tabs["summary"]
    shift = tabs.get("shift")
    df = runs.merge(summ, on="run_id")
    out = []
    for name in runs["model"].drop_duplicates():
        g = df[df["model"] == name]
        first = g.iloc[0]
        div = g["diverged"].fillna(False).astype(bool)
        ok = g[~div]
        epochs = int(g["epochs"].max())
        arch = _architecture(first)
        trained = (f"{first['model_kind']}{' (' + arch + ')' if arch else ''}, {first['optimizer']}, {epochs} epochs, "
                   f"{len(g)} run{'s' if len(g) != 1 else ''}")
        reached, learned, judged, converged = [], 0, len(ok), None
        at_N = _at_length_N(tabs, ok) if shift is not None and len(shift) and not ldl else None
        if at_N is not None and len(at_N):
            ratio = at_N["mse_at_N"] / at_N["uniform_at_N"]
            Ns = sorted(ok["N"].dropna().astype(int).unique())
            reached.append(f"error at M = N ({'N = ' + ', '.join(map(str, Ns))}) {_spread(ratio)} uniform attention's "
                           f"after {epochs} epochs")
            ok_test = below("mse_at_N", "uniform_at_N", "", best="best_at_N").test(at_N).fillna(True).astype(bool)
            learned, judged = int(ok_test.sum()), len(at_N)
            if "best_at_N" in at_N and at_N["best_at_N"].notna().any():   # the gate's own measure, printed too
                best = at_N["best_at_N"].astype(float).fillna(0.0)
                gap = (at_N["uniform_at_N"] - at_N["mse_at_N"]) / (at_N["uniform_at_N"] - best)
                reached.append(f"the share of the gap from uniform attention's to the best reference's error closed, "
                               f"which decides 'learned' (at least {LEARNED:g}): {_spread(gap, '')}")
        else:
            loss, ref = ("final_train_loss", "uniform_train_loss") if ldl or "uniform_test_loss" not in ok \
                else ("final_test_loss", "uniform_test_loss")
            what = "final train loss" if loss == "final_train_loss" else "final test loss"
            query = {"final_train_loss": "final_query_train_loss", "final_test_loss": "final_query_test_loss"}[loss]
            if query in ok:                             # at the query, where the reference is (a GPT's loss: all)
                loss = query
                if "loss" in ok and ok["loss"].astype(str).eq("all").any():
                    what += " at the query"
            if ref in ok and ok[ref].notna().any():
                ratio = ok[loss].astype(float) / ok[ref].astype(float)
                reached.append(f"{what} {_spread(ratio)} uniform attention's after {epochs} epochs")
                ok_test = below(loss, ref, "").test(ok).fillna(True).astype(bool)
                if ldl:                                 # the claims' gate: held-out prompts too (learned.held_out)
                    ok_test &= held_out(ok).test(ok).fillna(True).astype(bool)
                    if (ok_test != below(loss, ref, "").test(ok).fillna(True).astype(bool)).any():
                        miss = int((~held_out(ok).test(ok).fillna(True).astype(bool)).sum())
                        reached.append(f"{claims.of(miss, len(ok), 'run')} closed less than half the gap from uniform "
                                       f"attention's test loss on held-out prompts to the feature oracle's (learned "
                                       f"their prompts, not to learn in context)")
                learned = int(ok_test.sum())
                if ldl:
                    converged = int((ok[loss].astype(float) <= 1e-2 * ok[ref].astype(float)).sum())
            else:
                ratio = ok["final_train_loss"].astype(float) / ok["loss0"].astype(float)
                reached.append(f"{what} {_spread(ratio)} its initial loss after {epochs} epochs")
                learned = judged
        if "t_escape" in ok and not ldl and ok["t_escape"].notna().any() | (at_N is not None):
            esc = ok["t_escape"].notna()
            reached.append(f"{claims.of(esc.sum(), len(ok), 'run')} left the plateau of predicting 0 (t_escape"
                           + (f", median epoch {int(ok.loc[esc, 't_escape'].median())})" if esc.any() else ")"))
        if div.any():
            reached.append(f"{claims.of(div.sum(), len(g), 'run')} diverged")
        status = _status(learned, judged) if judged else "all runs diverged"
        out.append({"model": str(name), "trained": trained, "reached": "; ".join(reached),
                    "status": status, "says": _says(status, converged, len(ok)),
                    "learned": learned, "judged": judged, "converged": converged})
    return out


def _says(status: str, converged: int | None, n: int) -> str:
    """The status as the headline prints it, first: the learning gate's word and, for LDL, how many
    runs converged — two tests, said as two, so that "learned" (half the gap to uniform attention
    closed) never reads as contradicting "0 of 2 converged" (10⁻² of it reached)."""
    if converged is None or not n:
        return status
    joint = "but" if status == "learned" and converged < n else "and"
    conv = "none" if converged == 0 else ("all" if converged == n else f"{converged}")
    return (f"{status} (≥ {LEARNED:.0%} of the gap to uniform attention's loss closed), {joint} {conv} of {n} run"
            f"{'s' if n != 1 else ''} converged (train loss ≤ 10⁻² × uniform attention's)")


def _at_length_N(tabs, ok: pd.DataFrame) -> pd.DataFrame | None:
    """The claims' own per-run error and uniform attention's at M = N (icl.analyse.claims.zfb.at_length_N)."""
    from icl.analyse.claims.zfb import at_length_N
    sh = tabs["shift"]
    trained = sh[sh["run_id"].isin(ok["run_id"])]
    if trained.empty:
        return None
    return at_length_N(trained, sh)


def learning_sentence(outcomes: list[dict]) -> str:
    """One line for the index: which models did not learn (empty where every model learned)."""
    bad = [o for o in outcomes if o["status"] != "learned"]
    return "; ".join(f"{o['model']}: {o['status']}" for o in bad)


def claim_counts(verdicts: pd.DataFrame, robustness: dict | None = None) -> list[dict]:
    """Per claim (and model where several judge it), its per-setting rows counted by verdict, with
    the fragile count from `robustness` (icl.report.page.claim_robustness)."""
    rows = verdicts[verdicts["scope"] != "run"] if "scope" in verdicts else verdicts
    out = []
    for cid, g in rows.groupby("claim_id", sort=False):
        vc = g["verdict"].value_counts()
        rb = (robustness or {}).get(cid, {})
        out.append({"claim_id": cid, "claim": claims.CLAIMS.get(claims.base_id(cid), ""), "n": len(g),
                    "counts": [(v, int(vc.get(v, 0))) for v in claims.VERDICTS],
                    "fragile": rb.get("text", ""), "header": rb.get("header", "")})
    return out


def verdict_grid(verdicts: pd.DataFrame) -> dict:
    """The claims × settings grid: `settings` (column heads, "" = every run), `rows` of
    (model, claim_id, claim, cells) with one list of verdict marks per setting; each mark one
    per-setting verdict row (symbol, verdict, its aspect and its reason for the hover text)."""
    rows = verdicts[verdicts["scope"] != "run"] if "scope" in verdicts else verdicts
    if rows.empty:
        return {"settings": [], "rows": [], "several": False}
    parts = rows["group"].map(setting_of)
    rows = rows.assign(_setting=parts.map(lambda p: p[0]), _aspect=parts.map(lambda p: p[1]))
    settings = list(dict.fromkeys(sorted(rows["_setting"].unique(), key=setting_key)))
    out = []
    for (model, cid), g in rows.groupby(["model", "claim_id"], sort=False):
        cells = []
        for s in settings:
            marks = []
            for _, v in g[g["_setting"] == s].iterrows():
                why = v["reason"] if isinstance(v["reason"], str) and v["reason"] else v.get("measurement", "")
                title = f"{cid}{' — ' + s if s else ''}{' — ' + v['_aspect'] if v['_aspect'] else ''}: {v['verdict']}"
                if why:
                    title += f". {why}"
                marks.append({"symbol": SYMBOL.get(v["verdict"], "·"), "verdict": v["verdict"],
                              "aspect": v["_aspect"], "title": title,
                              "fragile": bool(isinstance(v.get("fragile"), str) and v.get("fragile"))})
            cells.append(marks)
        out.append({"model": str(model), "claim_id": cid, "claim": claims.CLAIMS.get(claims.base_id(cid), ""), "cells": cells})
    return {"settings": settings, "rows": _fold_untestable(out), "several": len({r["model"] for r in out}) > 1}


def _fold_untestable(rows: list[dict]) -> list[dict]:
    """A model's claims that are not testable in every setting share one row (`ids`: their claim ids;
    each mark keeps its reason), after the model's other rows: what was decided stays on top and the
    grid a screen long, not three."""
    def untestable(r):
        marks = [m for cell in r["cells"] for m in cell]
        return bool(marks) and all(m["verdict"] == claims.NOT_TESTABLE for m in marks)
    out = []
    for model in dict.fromkeys(r["model"] for r in rows):
        mine = [r for r in rows if r["model"] == model]
        folded = [r for r in mine if untestable(r)]
        out += [r for r in mine if not untestable(r)]
        if len(folded) > 1:
            cells = [[{**m, "aspect": ""} for r in folded for m in r["cells"][k]] for k in range(len(folded[0]["cells"]))]
            out.append({"model": model, "claim_id": f"{len(folded)} claims not testable in any setting",
                        "claim": "; ".join(f"{r['claim_id']}: {r['claim']}" for r in folded),
                        "ids": [r["claim_id"] for r in folded], "cells": cells})
        else:
            out += folded
    return out


# ----------------------------------------------------------------------------- the paper's sizes

SIZES = (("tokens.d", "d"), ("tokens.K", "K"), ("tokens.delta", "Δ"), ("prompts.N", "N"),
         ("prompts.train", "training prompts"), ("train.epochs", "epochs"))
MODEL_SIZES = ("layers", "heads", "width")


def _get(d, path):
    for p in path.split("."):
        d = d.get(p) if isinstance(d, dict) else None
    return d


def values(exp: dict, path: str) -> list:
    """Every value the experiment gives a dotted path: its own, or its sweep's (the key swept
    directly, inside zip, or inside a swept whole section such as `tokens: [..]`)."""
    base = _get(exp, path)
    sweep = exp.get("sweep") or {}
    zipped = sweep.get("zip") or {}
    sec, _, leaf = path.partition(".")
    if path in sweep:
        vals = sweep[path]
    elif path in zipped:
        vals = zipped[path]
    elif isinstance(sweep.get(sec), list) and all(isinstance(s, dict) for s in sweep[sec]):
        vals = [s.get(leaf, base) for s in sweep[sec]]
    else:
        vals = [base]
    return sorted({v for v in vals if v is not None}, key=lambda v: (str(type(v)), v))


def _show(vals: list) -> str:
    txt = [f"{v:g}" if isinstance(v, float) else str(v) for v in vals]
    return txt[0] if len(txt) == 1 else "{" + ", ".join(txt) + "}"


def paper_sizes(exp: dict, paper: dict | None) -> str:
    """What config/paper.yaml's experiment of the same name sets larger or otherwise than this one
    ("paper size: d = 20 (here 5), N ∈ {40, 70, 100} (here {10, 20, 40}), gpt: 12 layers (here 3) …"),
    "" where there is no such experiment or the sizes agree."""
    if not paper:
        return ""
    diff = []
    for path, label in SIZES:
        here, there = values(exp, path), values(paper, path)
        if there and here != there:
            rel = "∈" if len(there) > 1 else "="
            diff.append(f"{label} {rel} {_show(there)} (here {_show(here) if here else '—'})"
                        if label not in ("epochs", "training prompts") else
                        f"{_show(there)} {label} (here {_show(here) if here else '—'})")
    seeds_here, seeds_there = len(values(exp, "seed") or [0]), len(values(paper, "seed") or [0])
    mine = {m["name"]: m for m in exp.get("models") or []}
    for m in paper.get("models") or []:
        h = mine.get(m["name"])
        if h is None:
            diff.append(f"model {m['name']} (not trained here)")
            continue
        parts = [(f"width {m[k]}" if k == "width" else f"{m[k]} {k}") + f" (here {h.get(k, '—')})"
                 for k in MODEL_SIZES if k in m and m[k] != h.get(k)]
        if parts:
            diff.append(f"{m['name']}: " + ", ".join(parts))
    if seeds_there != seeds_here:
        diff.append(f"{seeds_there} seeds (here {seeds_here})")
    return ("paper size: " + "; ".join(diff) + " (config/paper.yaml)") if diff else ""


CLOCK_SETTINGS = (("L", "values of L"), ("delta", "values of Δ"), ("N", "values of N"), ("c", "values of c"),
                  ("lr", "step sizes"))


def clock_sentences(tabs: dict) -> list[str]:
    """What LDL's model does, in a sentence per clock (collapse.parquet and clock.parquet,
    icl.analyse.collapse): which settings its runs span, how closely they collapse in rescaled
    time between settings on the same prompts and between seeds, the time on the clock to half of
    uniform attention's loss beside the continuous flow's, and how far the step, the sampled counts
    and the runs' own task draws move it. Empty where no run is on one clock."""
    col, clk = tabs.get("collapse"), tabs.get("clock")
    if col is None or clk is None or col.empty:
        return []
    runs = tabs["runs"].merge(clk, on=["run_id", "model"])
    out = []
    for r in col.to_dict("records"):
        mine = runs[(runs["model"] == r["model"]) & (runs["K"].astype(float) == float(r["K"]))]
        if "probs" in mine:                    # collapse.parquet is per K and p (as icl.analyse.collapse keys it)
            mine = mine[mine["probs"].astype(object).where(mine["probs"].notna(), "").astype(str) == (r["probs"] or "")]
        spans = [f"{mine[c].nunique()} {name}" for c, name in CLOCK_SETTINGS if c in mine and mine[c].nunique() > 1]
        n = int(r["runs"])
        text = (f"One clock: {r['model']}'s {claims.count(n, 'run')} at K = {int(r['K'])} ("
                + ", ".join([*spans, claims.count(int(r["seeds"]), "seed")]) + f") {'are' if n > 1 else 'is'} LDL's "
                f"model on one collapse clock τ = t·η‖v‖⁴E[(f(v_k) − f(v_k'))²], on which its dynamics at every L, Δ "
                f"and N are one curve")
        close = []
        if np.isfinite(r["loss_settings"]):
            close.append(f"between settings on the same prompts their losses differ by {_pct(r['loss_settings'])}"
                         + (f" and their own attention by {r['attn_settings']:.3f}" if np.isfinite(r["attn_settings"]) else ""))
        if np.isfinite(r["loss_seeds"]):
            close.append(f"between seeds by {_pct(r['loss_seeds'])}"
                         + (f" and {r['attn_seeds']:.3f}" if np.isfinite(r["attn_seeds"]) else ""))
        if close:
            text += (f"; over the loss's first decade in rescaled time (τ from {r['tau_lo']:.3g} to {r['tau_hi']:.3g}) "
                     + " and ".join(close))
        tau = mine["tau"].dropna()
        if len(tau):
            cont = mine["tau_continuous"].dropna()
            span = f"τ = {_fmt(tau.min())}" + (f" to {_fmt(tau.max())}" if len(tau) > 1 else "")
            text += (f"; they reach half of uniform attention's loss at {span}"
                     + (f" (the continuous flow at {_fmt(cont.iloc[0])})" if len(cont) else ""))
            parts = [f"{what} by {_pct(np.expm1(r[col_]))}" for what, col_ in
                     (("the step's discreteness moves it", "step_departure_max"),
                      ("the sampled feature counts", "count_departure_max"),
                      ("the runs' own task draws", "run_departure_max")) if np.isfinite(r[col_])]
            if parts:
                text += ": " + ", ".join(parts)
        apart = np.isfinite(r["loss_settings"]) and np.isfinite(r["loss_seeds"]) and r["loss_settings"] > r["loss_seeds"]
        text += (". Their settings sit further apart than their seeds, so the data can still tell L, Δ or N apart here "
                 "(the step and the counts are the clock's sources of that; the claims' rows check it per setting)."
                 if apart else
                 ". L, Δ and N differ in these runs only through the step, the counts and the draws: the flat/sharp "
                 "split is a difference between the theorems' bounds, not between the dynamics.")
        out.append(text)
    return out


def _pct(x: float) -> str:
    """A largest relative difference: 'up to 3.2 %', 'up to 41 %', past 100 % 'up to a factor of 3.1',
    below 0.1 % 'under 0.1 %'."""
    x = abs(float(x))
    if x < 1e-3:
        return "under 0.1 %"
    if x >= 1:
        return f"up to a factor of {1 + x:.3g}"
    return f"up to {100 * x:.2g} %" if x < 0.1 else f"up to {100 * x:.0f} %"
