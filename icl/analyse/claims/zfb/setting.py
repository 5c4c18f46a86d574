"""One setting of one trained model, and the statistics the ZFB claims share."""
from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import NamedTuple

import numpy as np
import pandas as pd

from icl.analyse.claims import FAILS, UNSURE, fmt, verdict
from icl.analyse.claims.judge import join, too_few_seeds
from icl.analyse.claims.zfb.inputs import STILL_FALLING, _z
from icl.stats import MIN_SEEDS, mean_interval


class OverSeeds(NamedTuple):
    """A row's statistic as judged: over seeds (the mean of each seed's value, its Student-t
    interval), or, inside one seed, as the claim measured it. `text` joins the measurement;
    `few`, where there are too few seeds, is why there is no interval."""

    value: float
    lo: float
    hi: float
    text: str = ""
    few: str = ""
    seed_value: float = math.nan      # inside one seed: what this seed contributes (the value, unless `square`)
    at_bound: bool = False            # a root-mean-square whose whole interval of mean squares lies below 0 (judge's)
    logs: tuple | None = None         # two sets of seeds judged apart (Welch): each set's logs, for an equivalence test


@dataclass
class Setting:
    """One setting of one trained model: its runs (those a claim may read), the sentence counting
    the runs left out, its rows of shift.parquet (`cells`, with the runs' model, seed, d, token
    kind, data_id and positions), every healthy trained and baseline row of the experiment
    (`pool`, for claims that compare models), and its LSA runs' learned matrices."""

    model: str
    kind: str
    label: str
    runs: pd.DataFrame
    left_out: str = ""
    cells: pd.DataFrame = field(default_factory=pd.DataFrame)
    pool: pd.DataFrame = field(default_factory=pd.DataFrame)
    mats: dict = field(default_factory=dict)
    unlearned: str = ""      # where no run learned: why (icl.analyse.claims.learned), and every claim reads not testable
    # (claim id, group) -> {seed: that seed's value}: set by `with_seed_values`, the rows are then
    # judged over seeds; None inside one seed (or before), where a claim's own interval stands
    seed_values: dict | None = None

    def row(self, cid: str, v: str, *, group: str = "", measurement: str = "", seed_value: float = math.nan,
            **kw) -> dict:
        """A verdict row of this setting: its label joined to the claim's own group, the runs
        left out counted in the measurement; `seed_value` (not a column), where a seed contributes
        other than the row's value to the mean over seeds (Setting.over_seeds' `square`)."""
        meas = "; ".join(p for p in (measurement, self.left_out) if p)
        out = verdict(cid, v, model=self.model, group=join(self.label, group), measurement=meas or "—", **kw)
        return {**out, "seed_value": seed_value if math.isfinite(seed_value) else out["value"]}

    def only_seed(self, seed) -> "Setting":
        """This setting restricted to one seed's runs, judged as the claim measures it."""
        runs = self.runs[self.runs["seed"] == seed]
        ids = set(runs["run_id"])
        return replace(self, runs=runs, cells=self.cells[self.cells["run_id"].isin(ids)],
                       mats={r: m for r, m in self.mats.items() if r in ids}, seed_values=None)

    def over_seeds(self, cid: str, group: str, value: float, lo: float, hi: float, square: float | None = None,
                   ratio: bool = False) -> OverSeeds:
        """The statistic a row is judged on. Inside one seed (seed_values None): the claim's own
        (value, lo, hi), from the test prompts' standard errors. Over a setting's seeds: the mean
        of the seeds' values with its 95% Student-t interval (icl.stats.mean_interval), on at least
        MIN_SEEDS seeds: the test prompts measure how noisy one trained model's error is, not how
        differently another seed trains, so they give the interval only inside a seed. Fewer
        seeds: no interval, and `few` says why. A root-mean-square (`square`: the seed's unbiased
        mean square, which can be below 0 where the test noise exceeds the deviation) is averaged
        as the mean square and rooted after, so that seeds clipped at 0 do not read as agreement.
        A `ratio` (a positive quantity whose own interval is taken on its log, as the delta method
        gives it) is averaged on the log scale too: the geometric mean of the seeds' values and its
        Student-t interval on their logs, so that one seed's large ratio does not stretch the
        interval below 1 while every seed sits above it (ldl.depth's statistic)."""
        if self.seed_values is None:
            return OverSeeds(value, lo, hi, seed_value=value if square is None else square)
        per = {k: v for k, v in self.seed_values.get((cid, join(self.label, group)), {}).items() if math.isfinite(v)}
        listed = ", ".join(f"{k}: {fmt(v)}" for k, v in sorted(per.items()))
        if len(per) < MIN_SEEDS:
            few = (f"{too_few_seeds(len(per))}: the test prompts' standard errors measure one trained model's test noise, "
                   "not how another seed trains")     # each seed's value is in the measurement
            return OverSeeds(value, math.nan, math.nan, f"; per seed: {listed or 'none'} (too few for an interval "
                                                        f"over seeds)", few)
        geometric = ratio and min(per.values()) > 0
        if geometric:
            m, a, b = (math.exp(x) for x in mean_interval(np.log(list(per.values()))))
        else:
            m, a, b = mean_interval(list(per.values()))
        below = square is not None and b <= 0
        if square is not None:
            m, a, b = (math.sqrt(max(x, 0.0)) for x in (m, a, b))
            listed += " (mean squares" + (", all of the interval below 0: the deviation is below the test noise)"
                                          if below else ")")
        mean, on = ("geometric mean", "the logs of the seeds' values") if geometric else ("mean", "the seeds' values")
        return OverSeeds(m, a, b, at_bound=below, text=f"; judged over {len(per)} seeds: {mean} {fmt(m)} [{fmt(a)}, {fmt(b)}] "
                                  f"(95% Student-t interval over {on} {listed}; the interval before it is the "
                                  "test prompts' noise alone, on one seed)")

    def positional(self) -> str:
        """The runs' positions ('learned', 'none'), '' where they have no such setting or differ."""
        p = self.runs["positional"] if "positional" in self.runs else pd.Series(dtype=object)
        return str(p.iloc[0]) if len(p) and p.notna().all() and p.nunique() == 1 else ""

    def falling(self, run_ids) -> list[str]:
        """The runs among `run_ids` still approaching their optimum."""
        return [r for r in run_ids if r in self.mats and self.mats[r].falling()]

    def domain(self) -> str:
        opt = set(self.runs["optimizer"]) if "optimizer" in self.runs else set()
        return "" if opt <= {"gd"} else \
            "trained with Adam on sampled prompts; the theorems are about gradient flow on the population loss"



def with_seed_values(fn, s: Setting, choices) -> Setting:
    """s with each row's value on each seed alone (fn on s.only_seed), so that fn's rows on s are
    judged over seeds (Setting.over_seeds)."""
    vals: dict = {}
    for seed in sorted(s.runs["seed"].unique()) if "seed" in s.runs else []:
        for r in fn(s.only_seed(seed), choices=choices):
            vals.setdefault((r["claim_id"], r["group"]), {})[seed] = r.get("seed_value", r["value"])
    return replace(s, seed_values=vals)


def _agg(c: pd.DataFrame, cols: list[str], by=("shift", "c", "M")) -> pd.DataFrame:
    """Per test cell: the mean over the setting's runs of `cols`, and of each `<x>_se` column the
    standard error of that mean (runs are independent: their test prompts differ)."""
    g = c.groupby(list(by), dropna=False, sort=True)
    out = g[cols].mean()
    for col in cols:
        if f"{col}_se" in c:
            out[f"{col}_se"] = np.sqrt((c[f"{col}_se"] ** 2).groupby([c[b] for b in by], dropna=False).sum()) / g.size()
    out["runs"] = g.size()
    return out.reset_index()


def _pooled(ratio: np.ndarray, se: np.ndarray) -> tuple[float, float, float]:
    """Inverse-variance weighted mean of per-cell ratios and its LEVEL interval."""
    ok = np.isfinite(ratio) & np.isfinite(se) & (se > 0)
    if not ok.any():
        return math.nan, math.nan, math.nan
    w = 1 / se[ok] ** 2
    m = float(np.sum(w * ratio[ok]) / w.sum())
    h = _z() / math.sqrt(w.sum())
    return m, m - h, m + h


def _ratio_ci(num, num_se, den, den_se, k: int = 1):
    """num/den with a LEVEL interval (simultaneous over k) by the delta method on the log."""
    r = np.asarray(num, float) / np.asarray(den, float)
    s = np.sqrt((np.asarray(num_se, float) / num) ** 2 + (np.asarray(den_se, float) / den) ** 2)
    z = _z(k)
    return r, r * np.exp(-z * s), r * np.exp(z * s), s


def _err_sentence(v: str, why: str, s: Setting, runs, opt_name: str) -> tuple[str, str]:
    """An optimisation row outside its band does not hold when its runs have levelled off; while
    one is still approaching the optimum it is inconclusive."""
    if v != FAILS:
        return v, why
    still = s.falling(runs)
    if still:
        return UNSURE, (f"{why}; but {len(still)} of {len(set(runs))} runs are still approaching {opt_name} "
                        f"(the last fifth of training still brought ≥ {STILL_FALLING:.0%} of the distance's decline): "
                        "under-trained, train longer")
    return FAILS, f"{why}: the runs have levelled off away from the optimum"
