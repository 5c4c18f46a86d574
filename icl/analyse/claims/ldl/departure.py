"""Where runs leave their flow: the transition a fixed step makes on one collapse clock.

On one clock (icl.analyse.claims.ldl.clock) LDL's model has one curve in τ at every L, Δ and N, so
the regimes cannot differ in their dynamics; what can still differ at a fixed η is the step: a
larger L is a larger step on the clock, and past some L a run stops following its continuous flow
(it crosses sooner, within a few steps, oscillates or diverges). That L, read from the runs, is
the only transition the data can show, and it is what the paper's L* = Θ(1/(Δδ)) can be held to by
its exponents: −1 in Δ and +½ in N (δ = sqrt(20K/N)), where the step's edge moves with the step on
the clock alone, which N does not enter.

Per run: its log departure from the continuous flow, D = log(T·clock / τ_continuous) at half of
uniform attention's loss (icl.analyse.collapse.continuous_tau). Per seed, paired against the same
seed's run at the sweep's smallest L (the smallest step: the same prompts), P = D − D_ref: the
seed's own task draws and counts cancel to first order. A run whose crossing the step set (within
fits.RESOLUTION steps), that diverged, or that never crossed where its flow did, departs by BIG.
An L is where the runs leave their flow when their mean |P| over seeds reaches the margin: the
seeds' range of D at the reference (what one training set moves a run) plus the crossing's
half-epoch resolution.
"""
from __future__ import annotations

import functools
import math
from typing import NamedTuple

import numpy as np
import pandas as pd

from icl.analyse import fits
from icl.analyse.claims import fmt
from icl.analyse.claims.ldl.clock import on_one_clock
from icl.analyse.collapse import TCOL, continuous_tau, flow_times
from icl.analyse.fits import probs_of

BIG = math.log(1e3)      # a departure the step set outright (a crossing within RESOLUTION steps, a divergence, no crossing)


@functools.lru_cache(maxsize=32)
def _tau_continuous(K: int, p: tuple, level: float) -> float:
    return continuous_tau(K, np.asarray(p, float), level)


class Departure(NamedTuple):
    """How far the runs of one setting but L sit from their continuous flow, per L and seed."""
    Ls: np.ndarray          # the swept L, ascending
    Q: np.ndarray           # (L, seed): the larger over the crossings of |log departure| paired against the
                            # reference, over that crossing's margin (NaN: no run, or no crossing resolved)
    margins: dict           # per crossing: what one training set moves a run, plus the crossing's resolution (log)
    ref: float              # the reference L
    lstar: float            # the setting's L* = 1/(Δδ)
    step: np.ndarray        # per L: the own-step balanced flow's log departure from the continuous one (the theory's)
    seeds: np.ndarray       # the columns of Q
    edge: tuple = (math.nan, math.nan)   # step_edge: (the L where the step reaches GD's stability edge, the largest step)

    @property
    def mean(self) -> np.ndarray:
        """Per L, the seeds' mean departure in margins (NaN where no crossing is resolved)."""
        with np.errstate(invalid="ignore"):
            return np.array([np.nanmean(r) if np.isfinite(r).any() else np.nan for r in self.Q])

    @property
    def transition(self) -> float | None:
        """The L at which the runs leave their flow (geometric mean of the L before and the first L
        whose mean departure reaches the margin); NaN where they leave it at the first L swept, None
        where they follow it at every L resolved."""
        out = np.flatnonzero(self.mean >= 1.0)
        if not len(out):
            return None
        i = int(out[0])
        return math.nan if i == 0 else float(np.sqrt(self.Ls[i - 1] * self.Ls[i]))

    def lead(self) -> str:
        """Where the runs leave their flow, in a clause."""
        t = self.transition
        seen = self.Ls[np.isfinite(self.mean)]
        unres = self.Ls[~np.isfinite(self.mean)]
        unres = unres[unres > seen.max()] if len(seen) else unres
        lead = (f"no run leaves its flow at any L resolved (L = {fmt(seen[0])} to {fmt(seen[-1])}, up to "
                f"{seen[-1] / self.lstar:.1f}× L* = {fmt(self.lstar)})" + (
                    f"; at L ≥ {fmt(unres[0])} the runs cross within {fits.RESOLUTION} steps, where the step, not the "
                    f"flow, sets their time" if len(unres) else ": no transition in the swept range")
                if t is None else
                f"the runs leave their flow at L ≈ {fmt(t)} ({t / self.lstar:.2f}× L* = {fmt(self.lstar)})"
                if np.isfinite(t) else f"the runs leave their flow at the smallest L swept, {fmt(self.Ls[0])}")
        return lead

    def text(self) -> str:
        """The clause with its numbers: the departure per L in margins, the margins, the step's share."""
        per = ", ".join(f"{fmt(L)}: {'unresolved' if not np.isfinite(m) else f'{m:.2f}'}" for L, m in zip(self.Ls, self.mean))
        marg = ", ".join(f"{TEXT[c]} {m:.3f}" for c, m in self.margins.items())
        return (f"{self.lead()}; the runs' mean departure from the continuous flow (log time on the clock at half of uniform "
                f"attention's loss and at 10⁻² of the start, paired by seed against L = {fmt(self.ref)}), in margins, per "
                f"L {per}; a margin is what one training set moves a run there plus the crossing's half-epoch "
                f"resolution ({marg}); the step alone moves the flow by at most {np.nanmax(np.abs(self.step)):.3f}"
                + self.edge_text())

    def edge_text(self) -> str:
        """The step's stability edge beside the transition, in a clause ('' without the step)."""
        at, most = self.edge
        if np.isfinite(at):
            return (f"; beside it, the step reaches GD's stability edge on the population loss (η‖v‖⁴λ_max = {EDGE:g}) "
                    f"at L ≈ {fmt(at)} ({at / self.lstar:.2f}× L*)")
        if np.isfinite(most):
            return (f"; beside it, the step stays below GD's stability edge on the population loss in the swept range "
                    f"(η‖v‖⁴λ_max at most {most:.3g}, against {EDGE:g}; ldl_stability sweeps the step to its edge)")
        return ""


CROSSINGS = (TCOL, "t_rel_1e-2")     # early and late: a departure shows as a faster start or a slower tail
TEXT = {TCOL: "half of uniform attention's loss", "t_rel_1e-2": "10⁻²"}


def _level(tcol: str) -> float:
    return float(tcol.rsplit("_", 1)[-1])


def departure(g: pd.DataFrame) -> Departure | None:
    """The runs `g` (one setting but L, on one clock: icl.analyse.claims.ldl.clock.on_one_clock) against
    their continuous flow, per L and seed, at each crossing of CROSSINGS: a crossing within
    fits.RESOLUTION steps is unresolved (the step, not the flow, sets its time); a run that diverged
    or never crossed where its continuous flow did departs by BIG. Each crossing's reference is the
    smallest L with two seeds resolved there. None where the tables lack the crossings, fewer than
    two L are swept, or no crossing has a reference."""
    if not any(c in g for c in CROSSINGS) or g["L"].nunique() < 2 or not on_one_clock(g):
        return None
    K, p = int(g["K"].iloc[0]), tuple(probs_of(g))
    clock = g["clock_per_epoch"].astype(float).to_numpy()
    st = np.nan_to_num(fits.steps(g), nan=1.0)
    diverged = g["diverged"].fillna(False).astype(bool).to_numpy() if "diverged" in g else np.zeros(len(g), bool)
    Ls = np.sort(g["L"].astype(float).unique())
    seeds = np.sort(g["seed"].unique())
    parts, margins, refs = [], {}, []
    for tcol in (c for c in CROSSINGS if c in g):
        tau_c = _tau_continuous(K, p, _level(tcol))
        T = g[tcol].astype(float).to_numpy()
        lost = diverged | (~(T > 0) & (tau_c / clock <= g["epochs"].astype(float).to_numpy()))
        with np.errstate(divide="ignore", invalid="ignore"):
            D = np.where(lost | (T * st < fits.RESOLUTION), np.nan, np.log(T * clock / tau_c))
        h = g.assign(_D=D, _lost=lost, _T=T)
        wide = lambda col, how: h.pivot_table(index="L", columns="seed", values=col, aggfunc=how  # noqa: E731
                                              ).reindex(index=Ls, columns=seeds)
        Dw, lw, Tw = wide("_D", "first"), wide("_lost", "max").fillna(False).astype(bool), wide("_T", "first")
        ok = np.flatnonzero(Dw.notna().sum(axis=1).to_numpy() >= 2)
        if not len(ok):
            continue
        i = int(ok[0])
        ref = Dw.iloc[i].to_numpy(float)
        m = float(np.nanmax(ref) - np.nanmin(ref)) + float(np.log1p(0.5 / np.nanmin(Tw.iloc[i].to_numpy(float))))
        P = np.abs(Dw.to_numpy(float) - ref[None, :]) / m
        P[:i] = np.nan
        parts.append(np.where(lw.to_numpy(bool), BIG / m, P))
        margins[tcol] = m
        refs.append(Ls[i])
    if not parts:
        return None
    Q = np.fmax.reduce(np.stack(parts), axis=0)       # the larger over the crossings resolved, NaN where none is
    first = next(c for c in CROSSINGS if c in g)
    f = flow_times(g, first)
    tau_c = _tau_continuous(K, p, _level(first))
    with np.errstate(divide="ignore", invalid="ignore"):
        step = np.log(f * clock / tau_c) if f is not None else np.full(len(g), np.nan)
    step_L = pd.Series(step).groupby(g["L"].astype(float).to_numpy()).median().reindex(Ls).to_numpy(float)
    lstar = float(g["L_star"].astype(float).median()) if "L_star" in g else math.nan
    return Departure(Ls, Q, margins, float(min(refs)), lstar, step_L, seeds, step_edge(g))


EDGE = 2.0     # η‖v‖⁴λ_max at which GD on the population loss turns unstable (icl.theory.ldl.mean_field_step)


def step_edge(g: pd.DataFrame) -> tuple[float, float]:
    """Where the runs' step meets GD's stability edge on the population loss: the theory table's
    `mf_step` (η‖v‖⁴λ_max) per L, its median over seeds; (the L at which it reaches EDGE, interpolated
    in log-log between the swept L that bracket it, NaN where it stays below; the largest step swept).
    No extrapolation: at a fixed η the step saturates where the label gap does (Eq. 4), so a power law
    through the swept L would place an edge the runs may never reach. (NaN, NaN) without mf_step."""
    if "mf_step" not in g:
        return math.nan, math.nan
    m = g.groupby(g["L"].astype(float))["mf_step"].median().astype(float)
    m = m[np.isfinite(m.to_numpy()) & (m.to_numpy() > 0)]
    if m.empty:
        return math.nan, math.nan
    L, x = m.index.to_numpy(float), m.to_numpy(float)
    over = np.flatnonzero(x >= EDGE)
    if not len(over):
        return math.nan, float(x.max())
    i = int(over[0])
    if i == 0:
        return float(L[0]), float(x.max())
    f = (math.log(EDGE) - math.log(x[i - 1])) / (math.log(x[i]) - math.log(x[i - 1]))
    return float(math.exp(math.log(L[i - 1]) + f * (math.log(L[i]) - math.log(L[i - 1])))), float(x.max())


def cube(g: pd.DataFrame, axis: str) -> tuple[np.ndarray, list, list, dict] | None:
    """The departures of `g` (one setting but L and `axis`) as the phase-boundary machinery reads a
    count: an array [axis value, L, seed] equal to 2 + ½·Q, so that a mean over drawn seeds reaches
    2.5 where the seeds' mean departure reaches its margin (icl.analyse.claims.ldl.stability.
    _boundary_slopes); with each axis value's Departure. None where some value has none."""
    deps = {}
    for v, part in g.groupby(g[axis].astype(float), sort=True):
        d = departure(part)
        if d is None:
            return None
        deps[float(v)] = d
    Ls = sorted(set(np.concatenate([d.Ls for d in deps.values()]).tolist()))
    seeds = sorted(g["seed"].unique())
    vals = np.full((len(deps), len(Ls), len(seeds)), np.nan)
    for i, d in enumerate(deps.values()):
        cols = [seeds.index(s) for s in d.seeds]
        for j, L in enumerate(d.Ls):
            vals[i, Ls.index(float(L)), cols] = 2.0 + 0.5 * d.Q[j]
    return vals, list(deps), Ls, deps
