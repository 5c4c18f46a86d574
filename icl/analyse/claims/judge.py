"""The rules every claim obeys, written once (../shared/DESIGN.md, "How a claim becomes a verdict").

- A prediction is a `Band`: the range the theory allows (from its unknown constants) widened by
  a stated tolerance, within natural bounds (an attention lies in [0, 1]).
- `judge`: holds only when the measurement's whole interval lies inside the band, does not hold
  only when the whole interval lies outside it, inconclusive otherwise (the interval's width in
  the reason); no interval is never "holds".
- `settings` / `by_setting`: one verdict per setting — runs are grouped by every swept setting
  other than the claim's own axis (L, seed), and the group label names each of them.
- `exclude` (icl.analyse.fits', as the fits read it too): runs that diverged, ended above their
  initial loss, or memorised their training prompts are left out and counted in the measurement.
- `robust`: a verdict's robustness is data — the claim is re-judged under the other reasonable
  analysis choices (L* halved or doubled, the band ± half its width, moved at the edge nearest the
  measurement: `Band.edges`) and the `fragile` column lists those that flip it.
- `boot`: the percentile bootstrap the intervals of continuous measurements come from
  (icl.stats); `share`: a share of runs gets its exact binomial (Clopper–Pearson) interval, and
  an integer count is judged as the share of runs that show the predicted count, never by
  bootstrapping identical integers; `too_few_seeds`: a statistic over seeds is judged on at least
  MIN_SEEDS seeds (fewer give a range, not an interval); a zero-width interval (every resample
  alike) decides nothing.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np
import pandas as pd

from icl.analyse.claims import FAILS, HOLDS, UNSURE, fmt
from icl import stats
from icl.analyse.fits import exclude  # noqa: F401  (a rule every claim obeys; icl.analyse.fits', as the fits read it too)
from icl.stats import MIN_SEEDS

# run columns that say which run it is, not how it was set up
IDENTITY = {"run_id", "shard", "data_id", "experiment", "config_hash", "code_version", "seed", "L"}


@dataclass(frozen=True)
class Band:
    """The measurements a prediction allows: [lo, hi] (the theory's range over its unknown
    constants) widened by `tol` on each side, clipped to [floor, ceil]. `source` says where the
    range and the tolerance come from (README, "Verdicts")."""

    lo: float
    hi: float
    tol: float = 0.0
    floor: float = -math.inf
    ceil: float = math.inf
    source: str = ""

    def edges(self, scale: float = 1.0, at: float | None = None) -> tuple[float, float]:
        """The band's edges with its width scaled by `scale` about its centre (one-sided bands:
        the tolerance scaled), clipped to the natural bounds. With `at` (the measurement), only the
        edge nearest it moves (as far as scaling about the centre moves it), the one a verdict can
        cross, and never an edge that is a natural bound: [0.9, 1] for a share half as wide is
        [0.95, 1], and a band the measurement lies above is tested at its upper edge, the lower
        one left where it is, so no version of the band is out of every measurement's reach."""
        a0, b0 = self._edges(1.0)
        if at is None or scale == 1.0 or not np.isfinite(at):
            return self._edges(scale)
        if not (math.isfinite(a0) and math.isfinite(b0)) or b0 <= a0:
            return self._edges(scale)
        movable = {"lo": a0 != self.floor, "hi": b0 != self.ceil}
        if not any(movable.values()):
            return self._edges(scale)
        side = min((k for k, m in movable.items() if m), key=lambda k: abs((a0 if k == "lo" else b0) - at))
        a_s, b_s = self._edges(scale)               # the near edge moves as scaling about the centre moves it
        return (a_s, b0) if side == "lo" else (a0, b_s)

    def _edges(self, scale: float) -> tuple[float, float]:
        if math.isfinite(self.lo) and math.isfinite(self.hi):
            mid, half = (self.lo + self.hi) / 2, (self.hi - self.lo) / 2 + self.tol
            a, b = mid - scale * half, mid + scale * half
        else:
            a, b = self.lo - scale * self.tol, self.hi + scale * self.tol
        return max(a, self.floor), min(b, self.ceil)

    def text(self, scale: float = 1.0, nd: int = 3, at: float | None = None) -> str:
        a, b = self.edges(scale, at)
        if not math.isfinite(b):
            return f"≥ {fmt(a, nd)}"
        if not math.isfinite(a):
            return f"≤ {fmt(b, nd)}"
        return f"[{fmt(a, nd)}, {fmt(b, nd)}]"


@dataclass(frozen=True)
class Choices:
    """The analysis choices a verdict may depend on: where flat meets sharp (a multiple of L*,
    whose constant is unknown), how wide the band is, and how ε is read (from the loss reached,
    ε² = loss, or from attention, 1 − Attn_own = εδ)."""

    lstar: float = 1.0
    band: float = 1.0
    eps: str = "loss"


DEFAULT = Choices()
ALTERNATIVES = {"L* halved": Choices(lstar=0.5), "L* doubled": Choices(lstar=2.0),
                "band half as wide": Choices(band=0.5), "band half again as wide": Choices(band=1.5)}


def judge(lo: float, hi: float, band: Band, choices: Choices = DEFAULT, what: str = "the measurement",
          no_interval: str = "", at_bound: bool = False) -> tuple[str, str]:
    """(verdict, reason) of an interval [lo, hi] against a band. An interval of zero width
    (lo == hi up to float rounding: a bootstrap of values that are all alike) is inconclusive: it is no evidence of
    precision (exact intervals, `share`'s, never have zero width). `at_bound`: the interval is
    [0, 0] because a quantity ≥ 0 had its whole interval clipped there (a root-mean-square whose
    mean square lies below 0, the test noise larger than the deviation), a bound and not a
    degenerate resample, so it is judged."""
    if not (np.isfinite(lo) and np.isfinite(hi)):
        return UNSURE, no_interval or f"{what} has no interval (too few independent runs), so it cannot hold"
    if math.isclose(lo, hi, rel_tol=1e-9, abs_tol=1e-12) and not at_bound:   # every resample alike (up to float rounding)
        return UNSURE, (f"{what}'s interval [{fmt(lo)}, {fmt(hi)}] has zero width: every resample gave the same "
                        f"value, which measures no spread between runs, so it decides nothing")
    at = (lo + hi) / 2                   # a band's width is varied at the edge nearest the measurement
    a, b = band.edges(choices.band, at)
    inside = f"[{fmt(lo)}, {fmt(hi)}]"
    if a <= lo and hi <= b:
        return HOLDS, ""
    if hi < a or lo > b:
        return FAILS, f"{what}'s interval {inside} lies outside the band {band.text(choices.band, at=at)}"
    return UNSURE, (f"{what}'s interval {inside} (width {fmt(hi - lo)}) overlaps the band "
                    f"{band.text(choices.band, at=at)} without lying inside it")


def boot(values, stat=np.median, clusters=None, seed: int = 0, min_units: int = 3) -> tuple[float, float]:
    """95% interval of stat(values) over icl.stats' resamples of the independent units
    (stats.percentile_interval): the values themselves, or the clusters (e.g. seeds) they belong to. Fewer than
    `min_units` units give no interval (NaN, NaN). `stat` takes the resampled values (with
    `clusters`, the rows of the drawn clusters stacked)."""
    x = np.asarray(values)
    units = np.arange(len(x)) if clusters is None else np.unique(np.asarray(clusters), return_inverse=True)[1]
    n_units = int(units.max()) + 1 if len(units) else 0
    if n_units < min_units:
        return math.nan, math.nan
    draws = stats.resamples(n_units, seed)
    members = [np.flatnonzero(units == u) for u in range(n_units)] if clusters is not None else None
    if stat in (np.mean, np.median) and (members is None or len({len(m) for m in members}) == 1):
        rows = draws if members is None else np.stack(members)[draws].reshape(len(draws), -1)
        out = stat(x[rows].astype(float), axis=1)                # every resample at once, row by row
    elif members is None:
        out = np.array([stat(x[d]) for d in draws], dtype=float)
    else:
        out = np.array([stat(x[np.concatenate([members[u] for u in d])]) for d in draws], dtype=float)
    return stats.percentile_interval(out, n_units)


def boot_median(values, min_units: int = 3, bounds: tuple[float, float] = (-math.inf, math.inf)) -> tuple[float, float]:
    """The bootstrap interval of a median over independent values (icl.stats.median_interval),
    within the values' natural `bounds`; none with fewer than `min_units` values."""
    x = np.asarray(values, float)
    return stats.median_interval(x, bounds=bounds) if len(x) >= min_units else (math.nan, math.nan)


def median_by_seed(values, seeds, bounds: tuple[float, float] = (-math.inf, math.inf)) -> tuple[float, float]:
    """The interval of a median over runs: over the runs themselves where each has its own seed
    (boot_median), else over whole seeds resampled (boot with clusters: the runs of one seed share
    its draws), within the values' natural `bounds`."""
    x, sd = np.asarray(values, float), np.asarray(seeds)
    if len(np.unique(sd)) >= len(x):
        return boot_median(x, bounds=bounds)
    lo, hi = boot(x, np.median, clusters=sd, min_units=3)
    return (float(np.clip(lo, *bounds)), float(np.clip(hi, *bounds))) if np.isfinite(lo) else (lo, hi)


def share(hits, clusters=None) -> tuple[float, float, float]:
    """(share, lo, hi): the share of runs for which `hits` is true and its exact binomial
    (Clopper–Pearson) 95% interval (icl.stats.clopper_pearson); NaN without a run. `clusters`
    (each run's seed): runs that share a seed's draws are not independent, and the interval is
    taken over the effective number of independent runs (icl.stats.clustered_share_interval)."""
    x = np.asarray(hits, bool)
    if not len(x):
        return math.nan, math.nan, math.nan
    if clusters is not None and len(np.unique(np.asarray(clusters))) < len(x):
        _, lo, hi = stats.clustered_share_interval(x, clusters)
    else:
        lo, hi = stats.clopper_pearson(int(x.sum()), len(x))
    return float(x.mean()), lo, hi


def too_few_seeds(n_seeds: int) -> str:
    """Why a statistic over n_seeds seeds is not judged ('3 seeds: an interval over seeds needs at
    least 5'), or '' where there are enough: with fewer than MIN_SEEDS a bootstrap over seeds is
    the range of a handful of values, not a 95% interval."""
    n = int(n_seeds)
    return "" if n >= MIN_SEEDS else \
        f"{n} seed{'s' if n != 1 else ''}: an interval over seeds needs at least {MIN_SEEDS}"


# ----------------------------------------------------------------------------- grouping

def settings(runs: pd.DataFrame, axis=("L", "seed")) -> list[str]:
    """The run settings that vary among these runs (one model's), other than the claim's own
    axis and the settings that move with L (a frequency zipped to L): each combination of
    them is one setting, judged on its own."""
    out = []
    for col in runs.columns:
        if col in IDENTITY or col in axis or col == "model" or runs[col].isna().all():
            continue
        if col == "lr" and "lr_rule" in runs and runs["lr_rule"].astype(str).eq("clock").all():
            continue                                    # the step the clock sets (icl.plan.shards.with_step); lr_ref names it
        if col == "lr" and _tied(runs, "lr", axis):
            continue                                    # one step per value of another setting (a zip): named by it
        if any(_tied(runs[[col, kept]], col, axis) for kept in out):
            continue                                    # one value per value of a setting kept (N zipped to K): named by it
        values = runs[col].astype(str)
        if values.nunique() < 2:
            continue
        if "L" in axis and "L" in runs and (values.groupby(runs["L"].astype(str)).nunique() <= 1).all() \
                and runs["L"].nunique() == values.nunique():
            continue                                    # moves with L: part of the L axis
        out.append(col)
    return out


def _tied(runs: pd.DataFrame, col: str, axis) -> bool:
    """`col` takes one value per value of another swept setting (zipped with it, e.g. one learning
    rate per Δ): that setting names the group, and `col` would only repeat it."""
    v = runs[col].astype(str)
    for other in runs.columns:
        if other in (col, "model", "run_id") or other in axis or other in IDENTITY or runs[other].isna().all():
            continue
        o = runs[other].astype(str)
        if o.nunique() == v.nunique() > 1 and (v.groupby(o).nunique() == 1).all():
            return True
    return False


def label(rec: dict, cols: list[str]) -> str:
    """'lr=5, delta=3': every setting that names a group."""
    return ", ".join(f"{c}={rec[c]:g}" if isinstance(rec[c], (float, np.floating)) else f"{c}={rec[c]}"
                     for c in cols)


def by_setting(df: pd.DataFrame, cols: list[str]):
    """(label, rows) for each combination of the settings `cols` (one group, label '', if none)."""
    if not cols:
        yield "", df
        return
    keyed = df.assign(**{f"_k{i}": df[c].astype(str) for i, c in enumerate(cols)})
    for _, g in keyed.groupby([f"_k{i}" for i in range(len(cols))], sort=True, dropna=False):
        yield label(g.iloc[0][cols].to_dict(), cols), df.loc[g.index]


def join(*parts: str) -> str:
    """A group label from its parts, empty ones left out."""
    return "; ".join(p for p in parts if p)


# ----------------------------------------------------------------------------- robustness

def robust(fn, *args, uses=("lstar", "band"), **kw) -> list[dict]:
    """fn's rows under the default choices, each with `fragile` listing the alternative choices
    (ALTERNATIVES, those in `uses`) under which the same row reads differently."""
    rows = fn(*args, choices=DEFAULT, **kw)
    for name, ch in ALTERNATIVES.items():
        if not any(getattr(ch, u) != getattr(DEFAULT, u) for u in uses):
            continue
        alt = {(r["claim_id"], r["model"], r["group"]): r["verdict"] for r in fn(*args, choices=ch, **kw)}
        for r in rows:
            v = alt.get((r["claim_id"], r["model"], r["group"]))
            if v is not None and v != r["verdict"]:
                r["fragile"] = "; ".join(p for p in (r.get("fragile", ""), f"{name}: {v}") if p)
    return rows


def with_choice(choices: Choices, **kw) -> Choices:
    return replace(choices, **kw)
