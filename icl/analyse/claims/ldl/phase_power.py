"""The phase counter's power, measured per setting on the theory's own dynamics.

No table fixed in advance says whether a count of phases can test LDL's "two phases flat, three
sharp". The theory's own smooth dynamics can: Lemma 2's mean-field flow on each run's own sampled
feature counts (theory.parquet's `flow_phase_rms_sampled`: its own logit fitted every epoch, over
the window the run's is fitted on), counted exactly as the run is, the fewest pieces that fit it
within the run's seeds' spread (icl.tables.phases.choose). The share of a regime's runs whose flow
shows the predicted count is the counter's power there. Below POWER the theory's own dynamics,
counted at the resolution the runs' replicates give, do not show the phases Props. 2-4 state, and
a count of the runs cannot test them either way.
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np
import pandas as pd

from icl.analyse.claims import count
from icl.analyse.claims.ldl.flow import flow_counts

POWER = 0.8          # the share of the theory's own flows the counter must count as predicted for a count to decide


class Power(NamedTuple):
    flat: float       # the share of the runs' sampled-count flows counted 2 (NaN: no flow counted)
    sharp: float      # the share counted 3
    n: int            # runs whose flow was counted
    counts: str       # the flows' counts: 'phases: flows 2: 12, 3: 1'
    spread: float     # the median seeds' spread the flows were counted at (logit units)
    note: str         # why some runs have no counted flow


def power(runs: pd.DataFrame) -> Power:
    """The counter's power on the sampled-count flows of these runs (LDL's model on discrete features)."""
    n = flow_counts(runs, "flow_phase_rms_sampled").astype(float).to_numpy()
    has = np.isfinite(n)
    missing = int((~has).sum())
    note = (f"{count(missing, 'run')} without a counted flow (no flow of LDL's model, or one seed: no spread "
            "to count at)" if missing else "")
    k = n[has]
    share = (lambda want: float(np.mean(k == want)) if len(k) else float("nan"))   # noqa: E731
    spreads = runs["phase_spread"].to_numpy(float)[has] if "phase_spread" in runs else np.array([])
    counts = ", ".join(f"{int(c)}: {m}" for c, m in sorted(pd.Series(k).value_counts().items()))
    return Power(share(2), share(3), int(has.sum()), counts,
                 float(np.median(spreads)) if len(spreads) else float("nan"), note)


def text(p: Power, regime: str) -> str:
    """'the sampled-count flows of these 18 runs, counted as the runs are, show 3 phases in 0% …'."""
    want = {"flat": 2, "sharp": 3}[regime]
    return (f"Lemma 2's flow on each of these {p.n} runs' own feature counts, counted as the runs are (within "
            f"the seeds' spread, median {p.spread:.3g} in the logit), shows {want} phases in "
            f"{pct(getattr(p, regime))} (phases: flows {p.counts})")


def pct(x: float) -> str:
    """A power as a percentage; '—' where none was measured."""
    return "—" if not np.isfinite(x) else f"{x:.0%}"
