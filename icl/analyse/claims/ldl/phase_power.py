"""The phase counter's power, measured per setting: could it see the phases Props. 2-4 predict?

No table fixed in advance decides whether a count of phases can test LDL's "two phases flat, three
sharp". For each run the own attention's logit z = logit(Attn_own) is built as Props. 2-4 state it
(unit constants), the own logit q_k rising at
  Phase I    rate a        until Attn_own = 1/(1 + δ)    (Prop. 2; a = ηL²Δ²/K)
  Phase II   rate δ²a      until Attn_own = 1/(1 + εδ)   (Prop. 3: the flat regime has converged)
  Phase III  rate εδ²a     after that, sharp regime only (Prop. 4: T_s¹ = T_f*, then the slow phase)
and z = q_k·K/(K − 1) − log(K − 1) (balanced counts, the off-diagonal logits falling together as
softmax's shift invariance makes them). The flat trace keeps Phase II's rate to the end. The time
unit 1/a is set by the run itself, so that the trace reaches Phase I's end at the run's measured
`t_phase_one` (η, L and Δ enter through it); ε = 1/K, the accuracy at the edge of the theorems'
K ≥ 1/ε (Phase III begins where the flat regime would have converged to ε, so its onset depends on
the ε the statement is read at); the trace is cut where the run's counting window is (its epochs,
or its loss, by Lemma 1 ((1 − Attn)/(1 − 1/K))² of uniform attention's, at PHASE_WINDOW) and given
the run's measured epoch-to-epoch noise (`phase_noise`). The counter (icl.tables.phases) counts DRAWS noisy
copies of each run's 2-phase and 3-phase trace: the share it counts right is its power in that
regime. Where it is below POWER, a count cannot decide the claim.
"""
from __future__ import annotations

import math
import zlib
from typing import NamedTuple

import numpy as np
import pandas as pd

from icl.analyse.claims import count
from icl.tables.measures import PHASE_WINDOW
from icl.tables.phases import TOL, logit, phases
from icl.theory.ldl import delta_conc

_MEMO: dict = {}
DRAWS = 8            # noisy copies of each run's predicted trace
POWER = 0.8          # the share of predicted traces the counter must count right for a count to decide


class Power(NamedTuple):
    flat: float       # the share of runs' 2-phase traces counted 2 (NaN: no trace could be built)
    sharp: float      # the share of runs' 3-phase traces counted 3
    n: int            # runs whose traces were built
    eps: float        # the accuracy the traces are built at (1/K, the median over runs)
    noise: float      # the median measured noise (logit units)
    note: str         # why some runs have no trace


def levels(K: int, delta: float, eps: float) -> tuple[float, float]:
    """q_k at Phase I's end (Attn_own = 1/(1 + δ)) and at Phase II's (1/(1 + εδ)), by the balanced
    map z = q·K/(K − 1) − log(K − 1)."""
    q = lambda attn: (float(logit(attn)) + math.log(K - 1)) * (K - 1) / K      # noqa: E731
    q1 = q(1.0 / (1.0 + delta))
    return q1, max(q(1.0 / (1.0 + eps * delta)), q1)


def predicted_logit(s: np.ndarray, K: int, delta: float, eps: float, sharp: bool) -> np.ndarray:
    """z(s) of Props. 2-4 at theory time s (in units of 1/a, a the Phase-I rate; q_k starts at 0)."""
    q1, q2 = levels(K, delta, eps)
    s1 = max(q1, 0.0)
    s2 = s1 + (q2 - q1) / delta ** 2
    late = eps * delta ** 2 if sharp else delta ** 2
    q = np.minimum(s, s1) + delta ** 2 * np.clip(s - s1, 0.0, s2 - s1) + late * np.maximum(s - s2, 0.0)
    return q * K / (K - 1) - math.log(K - 1)


def _time_unit(t1: float, K: int, delta: float) -> float:
    """Epochs per unit of theory time: the trace ends Phase I at s1, the run at t1."""
    s1 = max(levels(K, delta, 1.0 / K)[0], 0.0)
    return t1 / s1 if s1 > 0 else math.nan


def _counts(z: np.ndarray, t: np.ndarray, noise: float, want: int, rng) -> float:
    """The share of DRAWS noisy copies of z that the counter counts as `want` phases. A noise whose
    four standard deviations are below 1% of the counter's tolerance (TOL) moves no residual across
    it: one copy is all the draws (full-batch GD's traces are that smooth: ~1e-5 in the logit)."""
    draws = 1 if 4.0 * noise < 0.01 * TOL else DRAWS
    hits = 0
    for _ in range(draws):
        found = phases(t, z + noise * rng.standard_normal(len(z)))
        hits += found.n == want
    return hits / draws


def run_power(K: int, N: int, t1: float, noise: float, epochs: float, seed: int = 0) -> tuple[float, float] | None:
    """(the share of the 2-phase trace's noisy copies counted 2, of the 3-phase trace's counted 3) for
    one run: its K, N, measured end of Phase I (epochs), trace noise and epochs; None where the run
    has no end of Phase I, noise or epochs to build its trace from."""
    if not (np.isfinite(t1) and t1 > 0 and np.isfinite(noise) and np.isfinite(epochs) and K >= 2):
        return None
    delta, eps = delta_conc(K, N), 1.0 / K
    unit = _time_unit(t1, K, delta)
    if not np.isfinite(unit):
        return None
    t = np.arange(int(epochs) + 1, dtype=float)
    rng = np.random.default_rng(seed)
    out = []
    for sharp, want in ((False, 2), (True, 3)):
        z = predicted_logit(t / unit, K, delta, eps, sharp)
        a = 1.0 / (1.0 + np.exp(-z))
        rel = ((1.0 - a) / (1.0 - 1.0 / K)) ** 2              # Lemma 1: the loss against uniform attention's
        end = int(np.argmax(rel <= PHASE_WINDOW)) if (rel <= PHASE_WINDOW).any() else len(t) - 1
        out.append(_counts(z[:end + 1], t[:end + 1], noise, want, rng))
    return out[0], out[1]


def power(runs: pd.DataFrame, memo: dict | None = None) -> Power:
    """The counter's power on the predicted traces of these runs (LDL's model on discrete features);
    `memo` keeps each run's (run_power, a pure function of its key) across calls: the process's own
    by default, since robust() and the flow's column ask for the same runs several times."""
    memo = _MEMO if memo is None else memo
    flat, sharp, Ks, noise_all, missing = [], [], [], [], 0
    for r in runs.itertuples(index=False):
        t1, noise = float(getattr(r, "t_phase_one", math.nan)), float(getattr(r, "phase_noise", math.nan))
        epochs = float(getattr(r, "epochs", math.nan))
        key = (r.run_id, int(r.K), int(r.N), t1, noise, epochs)
        if key not in memo:
            memo[key] = run_power(int(r.K), int(r.N), t1, noise, epochs, seed=trace_seed(str(r.run_id)))
        got = memo[key]
        if got is None:
            missing += 1
            continue
        flat.append(got[0])
        sharp.append(got[1])
        Ks.append(int(r.K))
        noise_all.append(noise)
    note = (f"{count(missing, 'run')} without a measured end of Phase I or trace noise have no predicted trace"
            if missing else "")
    med = lambda x: float(np.median(x)) if x else math.nan       # noqa: E731
    mean = lambda x: float(np.mean(x)) if x else math.nan       # noqa: E731
    return Power(mean(flat), mean(sharp), len(flat), med([1.0 / K for K in Ks]), med(noise_all), note)


def trace_seed(run_id: str) -> int:
    """A run's own noise stream for its predicted traces, stable across processes."""
    return zlib.crc32(run_id.encode())


def text(p: Power, regime: str) -> str:
    """'the counter counts Props. 2-4's predicted sharp trace (3 phases) right in 12% of 40 noisy copies …'."""
    want = {"flat": 2, "sharp": 3}[regime]
    return (f"the phase counter counts {want} phases on {pct(getattr(p, regime))} of the traces Props. 2-4 predict "
            f"for these {p.n} runs ({DRAWS} noisy copies each: Phase I's end as measured, ε = 1/K = {p.eps:.3g}, "
            f"noise {p.noise:.3g} in logit units)")


def pct(x: float) -> str:
    """A power as a percentage; '—' where none was measured."""
    return "—" if not np.isfinite(x) else f"{x:.0%}"
