"""The claims of Zhang, Frei & Bartlett (ZFB), one function per claim id, on the rules of
icl.analyse.claims.judge.

`verdicts(tabs)` groups each trained model's runs by every swept setting other than the seed
(judge.settings: N, and for the GPT model its positions, layers, ...), leaves out the runs that
diverged or ended above their initial loss (judge.exclude) and those that have not learned
(icl.analyse.claims.learned: in distribution at M = N, less than half the gap closed from uniform
attention's error to the best reachable, the LSA's optimum for an LSA, 0 otherwise), both counted
in each row's measurement; a setting where no run learned reads not testable for every claim,
with the numbers. It calls every claim on each setting (`Setting`); judge.robust re-judges each row with its band
half as wide and half again as wide and lists in `fragile` the choices that flip it.

Conventions that hold throughout:
- seeds: a row is judged over its setting's seeds (setting.with_seed_values): each seed's value
  measured as below, the row's value their mean and its interval the 95% Student-t interval over
  them, on at least MIN_SEEDS (5) seeds; with fewer the row has no interval and is inconclusive,
  saying so. The test prompts measure one trained model's test noise, not how another seed trains,
  so the intervals below are each seed's, in the measurement sentence, and decide nothing alone;
- intervals within a seed: 95%, from the standard errors that evaluation measured on its test prompts
  (shift.parquet's mse_se, slope_se: 1000 prompts per cell by default), combined over a
  setting's runs and test lengths (ratios by the delta method), or from a bootstrap over the
  logged epochs of the last fifth of training (zfb.optimum); the worst of several test lengths
  (zfb.longer_prompts) has intervals simultaneous over them (Bonferroni);
- test lengths M ≥ d only: below d the errors' tails are too heavy for a standard error from the
  test prompts to hold;
- bands, each from the theory or from measurements: the exact finite-(N, M) prediction ± half its
  distance to the same quantity at the optimum's N → ∞ limit (Λ⁻¹, or I/3 for Exp(1)
  covariances: the slides' large-N reading), for zfb.optimum on the exact excess population risk
  of the learned matrix in units of that same gap; halfway to a measured reference (OLS, on the same prompts); or the order the
  claim states (below the LSA, above the error at M = N: no tolerance);
- errors are not pooled by their signed deviations (a wrong matrix raises the error at some M and
  lowers it at others): their statistic is the root-mean-square deviation over the test cells in
  units of the N → ∞ gap, the test noise taken out; slopes, which do not depend on M, pool;
- error and slope claims are judged twice, against the theory at each run's *learned* matrix
  (group "formula": is the closed form right?) and at the optimum (group "optimisation": did
  training reach it?). An optimisation row whose interval lies outside its band does not hold
  when the runs have levelled off, and is inconclusive while a run is still approaching its
  optimum (STILL_FALLING, the same test zfb.optimum uses).

One module per section of claims: `inputs` (the kinds read, the thresholds, the shift cells with
the theory's limits), `matrices` (learned matrices), `setting` (the Setting and its statistics),
`checks` (the error and slope checks), `convergence` (zfb.optimum), `error_and_slope`,
`nonlinear` (models beyond the LSA), `positions` (the GPT's length spike); this module calls them all.
"""
from __future__ import annotations

import json
import math

import pandas as pd

from icl.analyse.claims import CLAIMS, NOT_TESTABLE, verdict
from icl.analyse.claims.judge import DEFAULT, by_setting, exclude, robust, settings
from icl.analyse.claims.learned import gate
from icl.analyse.claims.zfb.convergence import optimum
from icl.analyse.claims.zfb.error_and_slope import longer_prompts, query_shift, random_covariance, scaling, thm42
from icl.analyse.claims.zfb.inputs import (BEYOND_LINEAR, LINEAR_ATTENTION, RUN_COLS, TRAINED_LSA, WITH_POSITIONS,  # noqa: F401
                                   healthy_shift, with_limits)   # TRAINED_LSA, healthy_shift: for the report
from icl.analyse.claims.zfb.matrices import run_matrices
from icl.analyse.claims.zfb.nonlinear import at_length_N, beyond_lsa, gpt_in_distribution, learning_criteria
from icl.analyse.claims.zfb.positions import length_spike, spike_vs_variance
from icl.analyse.claims.zfb.setting import Setting, with_seed_values
from icl.models import kinds

# claim, the model kinds it reads (by their traits), and why it is not testable where the experiment has none
CLAIM_KINDS = [
    (optimum, LINEAR_ATTENTION, "no trained LSA"),
    (thm42, LINEAR_ATTENTION, "no trained LSA"),
    (scaling, LINEAR_ATTENTION, "no trained LSA"),
    (query_shift, LINEAR_ATTENTION, "no trained LSA"),
    (random_covariance, LINEAR_ATTENTION, "no trained LSA"),
    (longer_prompts, LINEAR_ATTENTION, "no trained LSA"),
    (beyond_lsa, BEYOND_LINEAR, "no trained model whose prediction is nonlinear in the labels "
                                f"(only {', '.join(sorted(kinds('linear_in_labels')))})"),
    (gpt_in_distribution, WITH_POSITIONS, "no trained gpt model"),
    (length_spike, WITH_POSITIONS, "no trained gpt model"),
    (spike_vs_variance, WITH_POSITIONS, "no trained gpt model"),
]


RULES = {f"zfb.{fn.__name__}": fn for fn, _, _ in CLAIM_KINDS}     # claim id -> function (icl claims)


def model_settings(tabs) -> list[Setting]:
    """Every trained model's settings: runs grouped by every swept setting other than the seed,
    each with its shift.parquet rows and learned matrices, the runs that diverged, ended above their
    initial loss or did not learn (the learning gate, `LEARNING`) left out and counted; the pool
    (for claims that compare models) holds the runs that learned and the baselines."""
    runs = tabs["runs"]
    summ = tabs["summary"]
    keep = [c for c in ("diverged", "loss0", "final_train_loss", "memorises", "t_escape") if c in summ]
    merged = runs.merge(summ[["run_id", *keep]], on="run_id", how="left")
    gone = set(summ.loc[summ["diverged"].astype(bool), "run_id"])
    sh = tabs["shift"][~tabs["shift"]["run_id"].isin(gone)]
    cols = [c for c in RUN_COLS if c in runs]
    trained = sh[sh["run_id"].notna()]
    trained = trained.drop(columns=[c for c in cols if c in trained]).merge(runs[["run_id", *cols]], on="run_id")
    trained = with_limits(trained, runs)
    mats = run_matrices(runs[~runs["run_id"].isin(gone)], tabs["matrices"], tabs["theory"]) \
        if "matrices" in tabs and "theory" in tabs else {}
    merged = merged.merge(at_length_N(trained, sh), on="run_id", how="left")
    out, kept_all = [], []
    for model, g in runs.groupby("model", sort=True):
        kind = str(g["model_kind"].iloc[0])
        cols_s = settings(g, axis=("seed",))
        for label, rg in by_setting(merged[merged["model"] == model], cols_s):
            kept, note = exclude(rg)
            learned = gate(kept, learning_criteria(kind))   # icl.analyse.claims.learned: runs that did not learn are counted and left out
            kept = learned.kept if not learned.none else kept
            kept_all.append(learned.kept["run_id"])
            out.append(Setting(model=model, kind=kind, label=label, runs=kept,
                               left_out="; ".join(p for p in (note, learned.note) if p),
                               cells=trained[trained["run_id"].isin(kept["run_id"])],
                               mats={r: mats[r] for r in kept["run_id"] if r in mats}, unlearned=learned.none))
    ok = set(pd.concat(kept_all)) if kept_all else set()
    pool = pd.concat([trained[trained["run_id"].isin(ok)], sh[sh["run_id"].isna()]], ignore_index=True)
    for s in out:
        s.pool = pool
    return out


def _collapse(rows: list[dict]) -> list[dict]:
    """A claim that is not testable on every setting of a model for one reason: one row, not one per setting."""
    out, seen = [], set()
    for r in rows:
        if r["verdict"] == NOT_TESTABLE and all(x["verdict"] == NOT_TESTABLE and x["reason"] == r["reason"]
                                                for x in rows if x["model"] == r["model"]):
            if r["model"] in seen:
                continue
            seen.add(r["model"])
            r = {**r, "group": ""}
        out.append(r)
    return out


def verdicts(tabs) -> list[dict]:
    """Every ZFB verdict row from the report's tables (runs, summary, shift, theory, matrices);
    [] for an experiment without an evaluation under shift."""
    if tabs["shift"].empty:
        return []
    rows = []
    sets = model_settings(tabs)
    for fn, reads, none_reason in CLAIM_KINDS:
        mine = [s for s in sets if s.kind in reads]
        if not mine:
            cid = f"zfb.{fn.__name__}"
            rows.append(verdict(cid, NOT_TESTABLE, prediction=CLAIMS[cid], measurement="—", reason=none_reason))
            continue
        rows += _collapse([r for s in mine for r in
                           ([_unlearned_row(fn, s)] if s.unlearned else judged_over_seeds(fn, s))])
    return rows


def judged_over_seeds(fn, s: Setting) -> list[dict]:
    """fn's rows on s, each judged over its seeds (with_seed_values, robust to the band) and carrying
    the seeds' own values (`seed_values`, JSON) where it was: what its evidence figure draws."""
    seeded = with_seed_values(fn, s, DEFAULT)
    rows = robust(fn, seeded, uses=("band",))
    for r in rows:
        per = (seeded.seed_values or {}).get((r["claim_id"], r["group"]), {})
        finite = {str(k): float(v) for k, v in sorted(per.items()) if math.isfinite(v)}
        r["seed_values"] = json.dumps(finite) if len(finite) >= 2 else ""
    return rows


def _unlearned_row(fn, s: Setting) -> dict:
    """A claim about a trained model on a setting where no run learned: not testable, with the numbers."""
    cid = f"zfb.{fn.__name__}"
    return s.row(cid, NOT_TESTABLE, prediction=CLAIMS[cid], reason=s.unlearned)
