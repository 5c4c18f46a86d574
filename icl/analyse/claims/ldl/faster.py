"""A larger L converges faster, within each regime: the order LDL's experiments state (§6 on the
cosine, of the flat set: "the convergence time shortens with increasing L"; App. A on random
quadratics: "within both regimes, a larger Lipschitz constant L consistently results in faster
convergence of the prediction loss"), for whatever model and optimiser trained, not Theorems 1-2's
rate (that is ldl.time_vs_L, GD's T ∝ 1/L²).

The time is `t_unif_5e-1` (icl.tables.measures): the epoch at which the training loss (at the query)
first falls to half of uniform attention's on the run's own prompts, what averaging the context
labels gives and so what any L's labels scale with; read on the trace averaged over the run's
`crossing_window`, so that with fresh prompts it is the loss reaching the level, not its noise's
first dip (ldl_polynomial's sharp row at 300 epochs read +0.06 [−0.04, 0.15] raw and +0.59 [0.29,
0.88] averaged, every seed positive at windows of 3 to 31 epochs). Per seed and regime, the slope of
log T on log L over the regime's values of L; predicted: below 0. The seeds are the units: the mean
slope with its Student-t interval over at least MIN_SEEDS seeds, against (−∞, 0]. A seed has a slope
where at least two of its values of L reached the level (half of uniform attention's loss is the
learning gate, so those runs learned); its runs that never did count at the window's end, a bound on
their time, and a verdict stands only where it is the same with them left out (else inconclusive,
naming them). Runs that crossed within RESOLUTION optimisation steps (the step, not the dynamics,
set the time) are left out and counted.

Under Adam the step does not grow with the gradient, so a row there tests the order the
experiments state, not the reason §6 gives for it ("stronger gradient updates").

Not testable where an identity fixes the order: softmax_q on labels ∝ L (GD at (η, L) is GD at
(ηL², 1); Adam traces one relative curve), softmax_q under GD on one collapse clock that its runs
follow (icl.analyse.claims.ldl.clock: the order is the clock's rate in L), elsewhere the same
approximately within a regime (identities.approx_identity: T·ηL² constant within the seeds'
spread), and a step that the experiment's rule sets per L (lr_rule: clock)."""
from __future__ import annotations

import math

import numpy as np
import pandas as pd

from icl.analyse import fits
from icl.analyse.claims import FAILS, NOT_TESTABLE, UNSURE, count, fmt
from icl.analyse.claims.judge import Band, Choices, DEFAULT, join, judge, too_few_seeds
from icl.analyse.claims.ldl.clock import identity_of_L
from icl.analyse.claims.ldl.identities import _kind, _of, design_fixed, regimes, scale_identity
from icl.analyse.claims.ldl.setting import RESOLUTION, Setting
from icl.stats import mean_interval

CID = "ldl.faster_with_L"
TCOL = "t_unif_5e-1"
LEVEL = "half of uniform attention's loss"
BAND = Band(-math.inf, 0.0, floor=-math.inf, source="the order the claim states: a larger L takes less time")
SOURCE = {"flat": "§6 (the cosine's flat set) and App. A",
          "sharp": "App. A (\"within both regimes\", on random quadratics)"}


def seed_slopes(g: pd.DataFrame, censored: bool = True) -> tuple[pd.Series, dict[str, int], pd.Series]:
    """Per seed with at least two values of L that reached the level, the OLS slope of log T on
    log L over `g`'s runs (one regime of one setting); how many runs were left out or bounded, by
    reason; and the time each kept run is read at (a run that never reached the level at its
    window's end, `epochs`, where `censored`, else left out). Runs that crossed within RESOLUTION
    steps are left out."""
    t = g[TCOL].astype(float)
    never = t.isna()
    fast = ~never & ~fits.resolved(g, TCOL)
    T = t.where(~never, g["epochs"].astype(float))[~fast & (censored | ~never)]
    kept = g.loc[T.index]
    reached = kept[kept[TCOL].notna()].groupby("seed")["L"].nunique()
    out = {}
    for seed, s in kept.groupby("seed"):
        if reached.get(seed, 0) >= 2:
            out[seed] = fits._ols_slope(np.log(s["L"].to_numpy(float)), np.log(T[s.index].to_numpy(float)))
    how = "counted at the window's end" if censored else "left out"
    counts = {f"never reached {LEVEL} ({how})": int(never.sum()),
              f"crossed within {RESOLUTION} steps and are left out": int(fast.sum())}
    return pd.Series(out, dtype=float), {w: n for w, n in counts.items() if n}, T


def _judged(slopes: pd.Series, choices: Choices) -> tuple[str, str, float, float, float]:
    """(verdict, reason, mean, lo, hi) of the seeds' slopes against BAND."""
    if (few := too_few_seeds(len(slopes))):
        v, why = judge(math.nan, math.nan, BAND, choices, "the slope", no_interval=few)
        return v, why, float(slopes.mean()) if len(slopes) else math.nan, math.nan, math.nan
    m, lo, hi = mean_interval(slopes.to_numpy())
    return (*judge(lo, hi, BAND, choices, "the mean slope"), m, lo, hi)


def faster_with_L(s: Setting, choices: Choices = DEFAULT) -> list[dict]:
    """Per regime (flat, sharp), the mean over seeds of the per-seed slope of log T on log L, T the
    epoch the training loss first fell to half of uniform attention's, with its 95% Student-t
    interval (at least 5 seeds, each with two values of L that reached it), against (−∞, 0]: it
    holds where larger L is faster, does not hold where it is slower, in both cases with the runs
    that never reached the level counted at the window's end and left out alike."""
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
    if reg.isna().all():
        return [s.row(CID, NOT_TESTABLE, prediction=pred, measurement="—",
                      reason="no flat/sharp split: continuous tokens have no L*, and the config sets no report.flat_max_L")]
    rows = []
    for rg in ("flat", "sharp"):
        here = df[reg == rg]
        p = f"{pred}, as {SOURCE[rg]} state"
        if here["L"].nunique() < 2:
            rows.append(s.row(CID, NOT_TESTABLE, group=rg, prediction=p, measurement=f"{here['L'].nunique()} "
                              f"value(s) of L in the {rg} regime",
                              reason=f"fewer than two values of L in the {rg} regime: no order to read"))
            continue
        slopes, counts, T = seed_slopes(here)
        note = "; ".join(f"{count(n, 'run')} {w}" for w, n in counts.items())
        never = here[TCOL].isna().groupby(here["L"]).sum()
        med = T.groupby(here.loc[T.index, "L"]).median()
        per = ", ".join(f"{int(k)}: {v:+.2f}" for k, v in slopes.items())
        meas = join(f"{_kind(here)} under {', '.join(sorted(set(here['optimizer'].astype(str))))}; T (epochs, median "
                    f"over seeds, a run that never reached the level at its window's end) by L: "
                    + ", ".join(f"{L:g}: {fmt(T)}" + (f" ({int(never[L])} never)" if never.get(L, 0) else "")
                                for L, T in med.items())
                    + (f"; slope per seed {per}" if per else ""), note)
        if not len(slopes):
            rows.append(s.row(CID, NOT_TESTABLE, group=rg, prediction=p, measurement=meas,
                              reason=f"no seed has two values of L whose runs reached {LEVEL} after {RESOLUTION} "
                                     f"steps or more: no run here times the order"))
            continue
        if (why := identity_of_L(here[here[TCOL].notna()], TCOL, "the order in L")):
            rows.append(s.row(CID, NOT_TESTABLE, group=rg, prediction=p, measurement=meas, reason=why))
            continue
        v, why, m, lo, hi = _judged(slopes, choices)
        if int(here[TCOL].isna().sum()) and v != UNSURE:
            v2, _, m2, lo2, hi2 = _judged(seed_slopes(here, censored=False)[0], choices)
            if v2 != v:
                v, why = UNSURE, (f"the runs that never reached {LEVEL} decide it: counted at the window's end it "
                                  f"reads '{v}', left out '{v2}' ({fmt(m2)} [{fmt(lo2)}, {fmt(hi2)}])")
        if v == FAILS:
            why += f": in the {rg} regime a larger L took longer to reach {LEVEL}"
            if not _of(df, "mean_field"):
                why += (f"; LDL's own dynamics (Lemma 2's mean-field flow) are softmax_q's under GD, so whether "
                        f"they disagree too cannot be read for {_kind(df)}")
        if math.isfinite(lo):
            meas = join(meas, f"mean {m:+.2f} [{fmt(lo)}, {fmt(hi)}] (95% Student-t interval over {len(slopes)} seeds)")
        rows.append(s.row(CID, v, group=rg, prediction=p, value=m, ci_lo=lo, ci_hi=hi, reason=why, measurement=meas))
    return rows
