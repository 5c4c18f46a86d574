"""A larger L converges faster, within each regime: the order LDL's experiments state (§6 on the
cosine: "the convergence time shortens with increasing L"; App. A on random quadratics: "within
both regimes, a larger Lipschitz constant L consistently results in faster convergence of the
prediction loss"), for whatever model and optimiser trained, not Theorems 1-2's rate (that is
ldl.time_vs_L, GD's T ∝ 1/L²).

The time is `t_unif_5e-1` (icl.tables.measures): the epoch at which the training loss first falls to
half of uniform attention's on the run's own prompts, what averaging the context labels gives and
so what any L's labels scale with. Per seed and regime, the slope of log T on log L over the
regime's values of L; predicted: below 0. The seeds are the units: the mean slope with its
Student-t interval over at least MIN_SEEDS seeds, against (−∞, 0]. A run that never reached the
level counts at its window's end, a bound on its time that moves its seed's slope toward 0 (the
side that decides neither way); a seed with no run of the regime that reached it has no slope. Runs
that crossed within RESOLUTION optimisation steps (the step, not the dynamics, set the time) are
left out and counted.

Under Adam the step does not grow with the gradient, so a row there tests the order the
experiments state, not the reason §6 gives for it ("stronger gradient updates").

Not testable where an identity fixes the order: softmax_q on labels ∝ L (GD at (η, L) is GD at
(ηL², 1); Adam traces one relative curve), and a step that the experiment's rule sets per L
(lr_rule: clock)."""
from __future__ import annotations

import math

import numpy as np
import pandas as pd

from icl.analyse import fits
from icl.analyse.claims import FAILS, NOT_TESTABLE, count, fmt
from icl.analyse.claims.judge import Band, Choices, DEFAULT, join, judge, too_few_seeds
from icl.analyse.claims.ldl.identities import _kind, _of, design_fixed, regimes, scale_identity
from icl.analyse.claims.ldl.setting import RESOLUTION, Setting
from icl.stats import mean_interval

CID = "ldl.faster_with_L"
TCOL = "t_unif_5e-1"
LEVEL = "half of uniform attention's loss"
BAND = Band(-math.inf, 0.0, floor=-math.inf, source="the order the claim states: a larger L takes less time")


def seed_slopes(g: pd.DataFrame) -> tuple[pd.Series, dict[str, int]]:
    """Per seed, the OLS slope of log T on log L over `g`'s runs (one regime of one setting), and
    how many runs were left out or bounded, by reason. A run that never reached the level counts at
    its window's end (`epochs`); runs that crossed within RESOLUTION steps are left out."""
    t = g[TCOL].astype(float)
    never = ~(t > 0)
    fast = ~never & ~fits.resolved(g, TCOL)
    t = t.where(~never, g["epochs"].astype(float))
    keep = g.assign(T=t)[~fast]
    out = {}
    for seed, s in keep.groupby("seed"):
        s = s[s["L"].astype(float) > 0]
        if s["L"].nunique() < 2 or not (s[TCOL].astype(float) > 0).any():
            continue          # one L, or no run of the seed that reached the level: no slope
        out[seed] = fits._ols_slope(np.log(s["L"].to_numpy(float)), np.log(s["T"].to_numpy(float)))
    counts = {f"never reached {LEVEL} (counted at the window's end)": int(never.sum()),
              f"crossed within {RESOLUTION} steps and are left out": int(fast.sum())}
    return pd.Series(out, dtype=float), {w: n for w, n in counts.items() if n}


def faster_with_L(s: Setting, choices: Choices = DEFAULT) -> list[dict]:
    """Per regime (flat, sharp), the mean over seeds of the per-seed slope of log T on log L, T the
    epoch the training loss first fell to half of uniform attention's, with its 95% Student-t
    interval (at least 5 seeds), against (−∞, 0]: it holds where larger L is faster on every
    reading the seeds allow, does not hold where it is slower."""
    df = s.runs
    pred = f"slope of log T on log L {BAND.text()} (T: the epoch the loss reaches {LEVEL})"
    if df["L"].nunique() < 2:
        return [s.row(CID, NOT_TESTABLE, prediction=pred, measurement=f"L = {', '.join(f'{L:g}' for L in df['L'].unique())}",
                      reason="one value of L in this setting: no order to read")]
    if (why := scale_identity(df)):
        return [s.row(CID, NOT_TESTABLE, prediction=pred, measurement="—", reason=why)]
    if (why := design_fixed(df, "the crossing time's order in L")):
        return [s.row(CID, NOT_TESTABLE, prediction=pred, measurement="—", reason=why)]
    if TCOL not in df:
        return [s.row(CID, NOT_TESTABLE, prediction=pred, measurement="—",
                      reason="the tables have no time to half of uniform attention's loss (tables made before it)")]
    reg = regimes(df, choices.lstar)
    rows = []
    for rg in ("flat", "sharp"):
        here = df[reg == rg]
        if here["L"].nunique() < 2:
            rows.append(s.row(CID, NOT_TESTABLE, group=rg, prediction=pred, measurement=f"{here['L'].nunique()} "
                              f"value(s) of L in the {rg} regime",
                              reason=f"fewer than two values of L in the {rg} regime: no order to read"))
            continue
        slopes, counts = seed_slopes(here)
        note = "; ".join(f"{count(n, 'run')} {w}" for w, n in counts.items())
        per = ", ".join(f"{int(k)}: {v:+.2f}" for k, v in slopes.items())
        med = here.assign(T=here[TCOL].astype(float)).groupby("L")["T"].median()
        meas = join(f"{_kind(here)} under {', '.join(sorted(set(here['optimizer'].astype(str))))}; T (epochs, median over seeds) by L: " + ", ".join(f"{L:g}: {fmt(T)}" for L, T in med.items())
                    + (f"; slope per seed {per}" if per else ""), note)
        if (few := too_few_seeds(len(slopes))):
            v, why = judge(math.nan, math.nan, BAND, choices, "the slope", no_interval=few)
            rows.append(s.row(CID, v, group=rg, prediction=pred, value=float(slopes.mean()) if len(slopes) else math.nan,
                              measurement=meas, reason=why))
            continue
        m, lo, hi = mean_interval(slopes.to_numpy())
        v, why = judge(lo, hi, BAND, choices, "the mean slope")
        if v == FAILS:
            why += f": in the {rg} regime a larger L took longer to reach {LEVEL}"
            if not _of(df, "mean_field"):
                why += (f"; LDL's own dynamics (Lemma 2's mean-field flow) are softmax_q's under GD, so whether "
                        f"they disagree too cannot be read for {_kind(df)}")
        rows.append(s.row(CID, v, group=rg, prediction=pred, value=m, ci_lo=lo, ci_hi=hi, reason=why,
                          measurement=join(meas, f"mean {m:+.2f} [{fmt(lo)}, {fmt(hi)}] (95% Student-t interval "
                                                 f"over {len(slopes)} seeds)")))
    return rows
