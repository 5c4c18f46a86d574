"""One setting of one trained model, and the statistics the ZFB claims share."""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from icl.claims import FAILS, UNSURE, verdict
from icl.claims.judge import join
from icl.claims.zfb.inputs import STILL_FALLING, _z


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
    unlearned: str = ""      # where no run learned: why (icl.claims.learned), and every claim reads not testable

    def row(self, cid: str, v: str, *, group: str = "", measurement: str = "", **kw) -> dict:
        """A verdict row of this setting: its label joined to the claim's own group, the runs
        left out counted in the measurement."""
        meas = "; ".join(p for p in (measurement, self.left_out) if p)
        return verdict(cid, v, model=self.model, group=join(self.label, group), measurement=meas or "—", **kw)

    def falling(self, run_ids) -> list[str]:
        """The runs among `run_ids` still approaching their optimum."""
        return [r for r in run_ids if r in self.mats and self.mats[r].falling()]

    def domain(self) -> str:
        opt = set(self.runs["optimizer"]) if "optimizer" in self.runs else set()
        return "" if opt <= {"gd"} else \
            "trained with Adam on sampled prompts; the theorems are about gradient flow on the population loss"



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
