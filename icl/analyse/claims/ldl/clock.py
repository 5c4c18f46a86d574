"""One clock: what LDL's model does, and what it leaves the data to decide.

For softmax_q under full-batch GD on noise-free, orthogonal features of one norm and a task whose
label covariance at the features is aI + b·11ᵀ (any rotation-invariant task at equidistant features,
the cosine with c tied to L included: theory.parquet's `one_clock`, icl.theory.ldl.one_clock), the
b part cancels in every prompt (attention sums to 1), so the population dynamics depend on η, L,
c, Δ and N only through the collapse clock τ = t·η‖v‖⁴·E[(f(v_k) − f(v_k'))²] (theory.parquet's
`clock_per_epoch`): one curve in τ per K and p. Every time a theorem states in L, Δ or N is then
the clock's rate, a property of the task and the step, and the number of phases, the transition
and Phase I's rate are one curve's. What can still differ between runs on one clock is the step's
discreteness (a fixed η at a larger L is a larger step on the clock) and the sampled feature
counts (finite N).

`check` asks whether a group of runs follows the clock on a crossing time: per run the log ratio of
its time to Lemma 2's balanced flow at its own step and level (read every epoch:
icl.analyse.collapse.flow_times, which carries the step's discreteness), per setting (L, Δ, N, c,
step) its median over seeds; the settings' medians may span no more than one training set moves a
run (the seeds' spread) plus the crossing's half-epoch resolution, and no run may miss a crossing
its flow made (runs crossing within fits.RESOLUTION steps left out: the step sets their time).
`decides` turns checks that hold into the reason a claim whose statistic the clock fixes reads not
testable; runs that depart keep their verdict, judged on the data, with the departure said
(`departs`) where the claim reads it.
"""
from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np
import pandas as pd

from icl.analyse import fits
from icl.analyse.claims import fmt
from icl.analyse.collapse import SETTING_COLS, flow_times   # what the clock folds into one curve
from icl.analyse.claims.ldl.identities import _of, approx_identity

CROSSING = "t_unif_5e-1"                          # the setting-wide check's time: half of uniform attention's loss


class Check(NamedTuple):
    """Whether a group of runs follows the clock on one crossing time, and by how much."""
    follows: bool
    tcol: str
    tau: pd.Series         # the median over seeds of T·clock per setting (index: the settings' labels)
    across: float          # the range over settings of the median log(T / the flow's T at the run's own step and level)
    seeds: float           # the seeds' spread: the median over settings of the range of that log ratio
    step: float            # the step's discreteness: the range over settings of the flow's log(T·clock)
    timing: float          # the crossing's half-epoch resolution in log, at the fastest run
    missed: int = 0        # runs that never reached the crossing where their flow did

    @property
    def tol(self) -> float:
        return self.seeds + self.timing

    def text(self) -> str:
        vals = ", ".join(f"{fmt(v)} ({k})" for k, v in self.tau.items())
        miss = (f"; {self.missed} run{'s' if self.missed > 1 else ''} never reached it where {'their' if self.missed > 1 else 'its'} "
                f"flow did" if self.missed else "")
        return (f"T·clock ({self.tcol}) = {vals}; against Lemma 2's flow at each run's own step the settings' medians "
                f"differ by {self.across:.3f} in log, {'within' if self.across <= self.tol else 'beyond'} what one "
                f"training set moves a run, {self.tol:.3f} (the seeds' spread {self.seeds:.3f} and the crossing's "
                f"half-epoch resolution {self.timing:.3f}); the step's discreteness moves the flow's T·clock by "
                f"{self.step:.3f}{miss}")


def on_one_clock(df: pd.DataFrame) -> bool:
    """Every run is of a kind with LDL's mean-field limit (softmax_q) under full-batch GD, on data where
    icl.theory.ldl.one_clock holds, at one K and one p (one curve in τ)."""
    if df.empty or "one_clock" not in df or "clock_per_epoch" not in df or not _of(df, "mean_field"):
        return False
    if not (df["optimizer"] == "gd").all() or not df["one_clock"].fillna(False).astype(bool).all():
        return False
    if df["K"].nunique() != 1 or ("probs" in df and df["probs"].astype(str).nunique() > 1):
        return False
    return bool((df["clock_per_epoch"].astype(float) > 0).all())


def _key(df: pd.DataFrame) -> pd.Series:
    cols = [c for c in SETTING_COLS if c in df and df[c].nunique() > 1] or ["L"]
    return df[cols].astype(float).apply(lambda r: ", ".join(f"{'Δ' if c == 'delta' else c} = {r[c]:g}" for c in cols),
                                        axis=1)


def check(g: pd.DataFrame, tcol: str = CROSSING) -> Check | None:
    """Whether the runs `g` follow the clock on the crossing time `tcol`: per run the log ratio of
    its T to the balanced flow's at its own step and level (icl.analyse.collapse.flow_times, every
    epoch), per setting its median over seeds; they follow where the settings' medians span no more
    than one training set moves a run (the seeds' spread: the median over settings of the range of
    the ratio between seeds) plus the crossing's resolution, and no run missed a crossing its flow
    made. A margin, not a test of no difference: a departure smaller than what another training set
    does is no dynamics of L, Δ or N. None where the clock does not apply (icl.theory.ldl.one_clock,
    the model, the optimiser), the flow cannot read `tcol`, fewer than two settings reached the
    crossing after fits.RESOLUTION steps (a crossing within a few steps is the step's, not the clock's),
    or no setting has two seeds (the margin, a training set's effect, is then unmeasured)."""
    if tcol not in g or not on_one_clock(g):
        return None
    f = flow_times(g, tcol)
    if f is None:
        return None
    T = g[tcol].astype(float).to_numpy()
    missed = int((~(T > 0) & np.isfinite(f)).sum())
    ok = (T > 0) & (T * np.nan_to_num(fits.steps(g), nan=1.0) >= fits.RESOLUTION) & np.isfinite(f) & (f > 0)
    h, f, T = g[ok], f[ok], T[ok]
    key = _key(h) if len(h) else pd.Series(dtype=str)
    if key.nunique() < 2:
        return None
    clock = h["clock_per_epoch"].astype(float).to_numpy()
    order = h.groupby(key, sort=False)["L"].first().astype(float).sort_values().index
    resid = pd.Series(np.log(T / f), index=h.index).groupby(key, sort=False)
    med = resid.median().reindex(order)
    ranges = resid.agg(lambda v: float(v.max() - v.min()))
    if not (resid.size() > 1).any():      # one seed a setting: how far a training set moves a run is unmeasured
        return None
    seeds = float(ranges[resid.size() > 1].median())
    tau = pd.Series(T * clock, index=h.index).groupby(key, sort=False).median().reindex(order)
    flow = pd.Series(np.log(f * clock), index=h.index).groupby(key, sort=False).median()
    timing = float(np.log1p(0.5 / T.min()))
    across = float(med.max() - med.min())
    return Check(across <= seeds + timing and not missed, tcol, tau, across, seeds, float(flow.max() - flow.min()),
                 timing, missed)


CLOCK = ("one collapse clock: LDL's model under GD on orthogonal, equidistant, noise-free features has the labels' "
         "covariance aI + b·11ᵀ over the features, whose b part cancels in every prompt, so its population dynamics "
         "depend on η, L, c, Δ and N only through τ = t·η‖v‖⁴E[(f(v_k) − f(v_k'))²]")


def decides(g: pd.DataFrame, what: str, tcol: str | tuple = CROSSING) -> tuple[str | None, Check | None]:
    """The not-testable reason where the clock fixes `what` (a statistic of L, Δ or N) on runs `g`
    that follow it on every crossing of `tcol` (one, or several for a claim that reads more of the
    curve) that can be checked, else None; and the first check that departs (or the last made),
    None where the clock does not apply. On runs that follow one curve in τ, `what` is the clock's
    rate (the task's label gap, the features' norm and the step), not the dynamics'."""
    checks = [c for c in (check(g, t) for t in ((tcol,) if isinstance(tcol, str) else tcol)) if c is not None]
    if not checks:
        return None, None
    if not all(c.follows for c in checks):
        return None, next(c for c in checks if not c.follows)
    return (f"{CLOCK}; these runs follow it ({'; '.join(c.text() for c in checks)}), so {what} is the clock's (the "
            f"task's label gap, the features' norm and the step), not the dynamics', and only the step's discreteness "
            f"and the sampled feature counts could still differ: the clock decides this claim, not the data"), checks[-1]


def departs(c: Check | None) -> str:
    """The clause a verdict keeps where its runs depart from the clock (the data test something the
    clock does not fix), or ''."""
    if c is None or c.follows:
        return ""
    return f"these runs depart from the one collapse clock ({c.text()}): the data, not the clock, decide it"


def identity_of_L(g: pd.DataFrame, tcol: str, what: str, approx_col: str | None = None) -> str | None:
    """Why a time's dependence on L is fixed without the data, or None: on runs of LDL's model on
    one collapse clock, the clock where they follow it (and nothing where they depart: the data
    decide); elsewhere the approximate scale identity in ηL² (identities.approx_identity, on
    `approx_col`, default `tcol`)."""
    if on_one_clock(g):
        return decides(g, what, tcol)[0]
    return approx_identity(g, approx_col or tcol)
