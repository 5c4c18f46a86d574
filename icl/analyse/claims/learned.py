"""The learning gate: one rule, for every claim about a trained model (../shared/DESIGN.md, "How a
claim becomes a verdict": a claim about a trained model reads runs that learned).

A run has learned when it meets every `Criterion` the claim's family gives it. The default one
(`below`) compares a run's loss with what needs no training on the same prompts, uniform attention
(the mean of the context labels): the run must have closed at least LEARNED of the gap from
uniform attention's loss to the best reference it can reach (0 where there is none), i.e.
    loss ≤ best + LEARNED · (uniform − best).
Runs that did not learn are counted and left out (`Gate.note`, said in the row's measurement);
a setting with none reads not testable (`Gate.none`, "the model has not learned: …" with the
numbers). A criterion that cannot be measured for a run (its reference was not written) passes
it: the gate never invents a failure.

Other criteria join through `gate(..., extra=[...])`: e.g. `reached("t_escape", ...)` for a
column that holds when a run escaped its plateau (NaN where it never did).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np
import pandas as pd

from icl.analyse.claims import count, every

LEARNED = 0.5         # a run has learned when it closed at least this share of the gap to its best reference


@dataclass(frozen=True)
class Criterion:
    """One test of learning: `test(df)` is True where a run passes, False where it fails and NA where
    it cannot be measured (passes); `says(failed)` is a sentence with the numbers of the runs that
    failed."""

    name: str
    test: Callable[[pd.DataFrame], pd.Series]
    says: Callable[[pd.DataFrame], str]


def _range(x: pd.Series) -> str:
    x = x.dropna()
    if not len(x):
        return "—"
    lo, hi = float(x.min()), float(x.max())
    return f"{lo:.3g}" if np.isclose(lo, hi, rtol=5e-3) else f"{lo:.3g}–{hi:.3g}"


def below(loss: str, ref: str, what: str, ref_name: str = "uniform attention's on the same prompts",
          best: str | None = None, best_name: str = "", share: float = LEARNED) -> Criterion:
    """The run's `loss` column closed at least `share` of the gap from `ref` (what needs no training)
    to `best` (the best reference the model can reach; 0 without one). Its sentence says the loss
    as a multiple of the reference and, where it is above the reference, that it is worse."""

    def parts(df):
        lo = df[loss].astype(float)
        rf = df[ref].astype(float)
        bs = df[best].astype(float).fillna(0.0) if best and best in df else pd.Series(0.0, index=df.index)
        return lo, rf, bs

    def test(df):
        if loss not in df or ref not in df:
            return pd.Series(pd.NA, index=df.index, dtype="boolean")
        lo, rf, bs = parts(df)
        ok = lo <= bs + share * (rf - bs)
        return ok.astype("boolean").mask(lo.isna() | rf.isna() | (rf <= 0))

    def says(failed):
        lo, rf, bs = parts(failed)
        r = lo / rf
        worse = r > 1
        head = f"{what} {_range(r)}× {ref_name}"
        if worse.all():
            head += " — worse than uniform attention, not better"
        elif worse.any():
            head += f" ({int(worse.sum())} of them worse than uniform attention)"
        if worse.all():
            return head
        gain = ((rf - lo) / (rf - bs)).where(rf > bs)
        towards = f" towards {best_name}" if best and best in failed and failed[best].notna().any() else ""
        return (f"{head}; it closed {_range(gain)} of the gap from uniform attention{towards}, less than the "
                f"{share:g} a run that learned closes")

    return Criterion(what, test, says)


def held_out(df: pd.DataFrame) -> Criterion:
    """The same test on prompts the run never trained on (its test prompts, new functions): its final
    error at the query closed LEARNED of the gap from uniform attention's on those prompts to the
    feature oracle's (the best the model can reach there: where a query's feature is missing from a
    context, no attention recovers its label). A run that drove its train loss down on its own
    prompts and not this learned its prompts, not to learn in context."""
    col = "final_query_test_loss" if "final_query_test_loss" in df else "final_test_loss"
    return below(col, "uniform_test_loss", "final test loss (held-out prompts)", "uniform attention's on the same prompts",
                 best="oracle_test_loss", best_name="the feature oracle's")


def reached(col: str, what: str, share: float | None = None) -> Criterion:
    """The run reached an event whose time `col` holds (NaN where it never did): e.g. t_escape, the
    first epoch its test error fell below half the zero predictor's."""

    def test(df):
        if col not in df:
            return pd.Series(pd.NA, index=df.index, dtype="boolean")
        return df[col].notna().astype("boolean")

    return Criterion(what, test, lambda failed: f"{count(len(failed), 'run')} never {what}")


@dataclass
class Gate:
    """The runs that learned (`kept`), how many of `total` did not (`left`), a sentence counting
    them for the measurement (`note`), and, where none learned, the reason the setting reads not
    testable (`none`)."""

    kept: pd.DataFrame
    left: int
    total: int
    note: str = ""
    none: str = ""


def gate(df: pd.DataFrame, criteria: list[Criterion] | tuple = (), extra: list[Criterion] | tuple = ()) -> Gate:
    """The learning gate: runs meeting every criterion are kept; the others are counted and left out,
    each criterion's failures said with their numbers."""
    crit = [*criteria, *extra]
    if df.empty or not crit:
        return Gate(df, 0, len(df))
    fail = pd.Series(False, index=df.index)
    said = []
    for c in crit:
        bad = ~c.test(df).fillna(True).astype(bool)
        if bad.any():
            said.append(c.says(df[bad]))
        fail |= bad
    kept = df[~fail]
    n = int(fail.sum())
    if not n:
        return Gate(kept, 0, len(df))
    why = "; ".join(said)
    note = f"{n} of {count(len(df), 'run')} left out as not learned ({why})"
    none = f"the model has not learned: {why} ({every(len(df), 'run')})" if kept.empty else ""
    return Gate(kept, n, len(df), note, none)
