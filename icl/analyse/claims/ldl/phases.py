"""Phase claims: two phases flat, three sharp, and the transition at L*."""
from __future__ import annotations

import math

import numpy as np
import pandas as pd

from icl import stats
from icl.analyse.claims import FAILS, NOT_TESTABLE, UNSURE, fmt
from icl.analyse.claims.judge import Band, Choices, DEFAULT, join, judge, share, too_few_seeds
from icl.analyse.claims.ldl import clock, departure
from icl.analyse.claims.ldl.identities import regimes, resolved, scale_identity, steps
from icl.analyse.claims.ldl.phase_power import POWER, Power, pct, power, text
from icl.analyse.claims.ldl.setting import CONVERGED, RESOLUTION, SHARE_BAND, Setting, converged
from icl.analyse.claims.ldl.stability import _boundary_slopes, _seed_counts, _seed_cube


WHOLE_CURVE = ("t_unif_5e-1", "t_rel_1e-2")    # a count reads the whole curve: the clock is checked early and late


def phase_runs(df: pd.DataFrame) -> tuple[pd.DataFrame, str]:
    """The runs whose window can show their phases, and a sentence counting the others: those
    whose own attention reached Phase I's end, 1/(1+δ), within RESOLUTION steps (Phase I shorter
    than the steps resolve), those that never converged (their later phases never came) and
    those whose trace follows no sequence of phases (irregular)."""
    t1 = df["t_phase_one"].astype(float) if "t_phase_one" in df else pd.Series(np.nan, index=df.index)
    fast = (t1 * steps(df) < RESOLUTION).fillna(False) if t1.notna().any() else ~resolved(df)
    short = ~fast & ~converged(df)
    alone = ~fast & ~short & df["n_phases"].isna() & ~(df["phase_spread"] > 0 if "phase_spread" in df else False)
    irregular = ~fast & ~short & ~alone & df["n_phases"].isna()
    keep = df[~(fast | short | alone | irregular)]
    parts = [f"{int(m.sum())} {w}" for m, w in ((fast, f"ended Phase I within {RESOLUTION} steps"),
                                               (short, f"never reached {CONVERGED:g} of the uniform-attention loss"),
                                               (alone, "without a replicate to choose the count against (one seed)"),
                                               (irregular, "irregular")) if m.any()]
    return keep, ("runs left out of the count: " + ", ".join(parts)) if parts else ""


def _weak(powers: dict[str, Power]) -> str:
    """Why a count of phases cannot decide on these runs (`powers`: each regime the row reads and
    the counter's power on its runs' sampled-count flows, below POWER), or ''."""
    low = {rg: pw for rg, pw in powers.items() if not (np.isfinite(getattr(pw, rg)) and getattr(pw, rg) >= POWER)}
    if not low:
        return ""
    parts = [text(pw, rg) if pw.n else f"no {rg} run has a counted flow to measure the counter's power on "
             f"({pw.note or 'no run'})" for rg, pw in low.items()]
    return "; ".join(parts) + f": below the {POWER:.0%} a count needs to decide, so a count of phases cannot test this here"


def _eps(df: pd.DataFrame) -> float:
    """The accuracy a phase row is read at: 1/K, the edge of the theorems' K ≥ 1/ε (phase_power)."""
    return 1.0 / float(df["K"].iloc[0]) if "K" in df and len(df) and np.isfinite(float(df["K"].iloc[0])) else math.nan


def phases_claim(s: Setting, choices: Choices = DEFAULT) -> list[dict]:
    """Two phases in the flat regime, three in the sharp (Props. 2-4): per regime the share of
    runs whose own logit shows the predicted number of phases (icl.tables.phases: the fewest laws of
    growth, each over its own stretch of every epoch, that fit the run within its seeds' spread), with its exact binomial
    (Clopper–Pearson) interval over the seeds, against [½, 1]: it holds when the predicted count is
    what most runs show, and does not hold when most runs show another. Decided only where the
    counter's power, measured on the theory's own dynamics (phase_power: Lemma 2's flow on each
    run's sampled counts, counted as the run is), is at least 80%; below it the row reads not testable and gives the power. Where the experiment
    measures the LLC (`train.llc`), each regime has a second row, `<regime>, by the LLC`: the share
    of its runs whose λ̂ shows the predicted number of stages (summary's `llc_stages`: Hoogland et
    al.'s critical points of λ̂ against log t), with the same interval and band; it holds inside
    the band and reads inconclusive outside it (no theorem makes λ̂'s stages LDL's phases, so
    another count questions reading one as the other, not Props. 2-4). Both rows say in how many
    runs the two instruments give the same count. On runs that follow one collapse clock early and
    late (icl.analyse.claims.ldl.clock) every L has one curve, so one count: both rows read not
    testable, naming the clock."""
    cid = "ldl.phases"
    df = s.runs
    if (why := scale_identity(df)):
        return [s.row(cid, NOT_TESTABLE, prediction="flat: 2, sharp: 3", measurement="—",
                      reason=why + " (every L traces one curve, so no L can show other phases)")]
    if df["L_star"].isna().all() or "n_phases" not in df or df["attn_own_final"].isna().all():
        return [s.row(cid, NOT_TESTABLE, prediction="flat: 2, sharp: 3", measurement="no own attention traced",
                      reason="phases are counted on the own-feature logit, which continuous tokens do not have "
                             "(App. A reads them off the loss curve by eye; a count there needs the theory's own flow "
                             "to measure the counter's power on, and Lemma 2 has one for discrete features only)")]
    keep, note = phase_runs(df)
    reg = regimes(keep, choices.lstar)
    fixed, _ = clock.decides(df, "the number of phases at every L (one curve in τ has one count: a count that "
                                 "differs between the regimes is the step's or the counter's)", WHOLE_CURVE)
    rows = []
    for rg, want in (("flat", 2), ("sharp", 3)):
        here = keep[reg == rg]
        n = here["n_phases"].astype(float).to_numpy()
        band = SHARE_BAND
        pred = f"{rg}: {want} phases in a share of runs {band.text(choices.band)}"
        if not len(n):
            rows.append(s.row(cid, UNSURE, eps=_eps(df), group=rg, prediction=pred, measurement=note or "—",
                              reason=f"no {rg} run whose window can show its phases"))
            continue
        pw = power(here)
        sh, lo, hi = share(n == want, here["seed"].to_numpy())      # the seed is the unit of independence
        v, why = judge(lo, hi, band, choices, f"the {want}-phase share")
        if (weak := _weak({rg: pw})):
            v, why = NOT_TESTABLE, weak
        if fixed:
            v, why = NOT_TESTABLE, fixed
        counts = ", ".join(f"{int(k)}: {c}" for k, c in sorted(pd.Series(n).value_counts().items()))
        llc = llc_stage_rows(s, here, rg, want, pred, choices, n)
        if fixed:                    # one curve in τ has one count by either instrument
            llc = [{**r, "verdict": NOT_TESTABLE, "fragile": "", "reason": join(fixed, r["reason"].rsplit("; ", 1)[-1])}
                   for r in llc]
        if llc:                      # the second instrument's agreement, on the counter's row too
            why = join(why, "by the LLC: " + llc[0]["reason"].rsplit("; ", 1)[-1])
        rows.append(s.row(cid, v, eps=_eps(df), group=rg, prediction=pred, value=sh, ci_lo=lo, ci_hi=hi, reason=why,
                          measurement=join(f"{int((n == want).sum())} of {len(n)} runs ({here['seed'].nunique()} "
                                           f"seeds) show {want} phases ({sh:.0%}, 95% interval [{fmt(lo)}, {fmt(hi)}] "
                                           f"over the seeds; phases: runs {counts}, each the fewest laws that fit "
                                           f"it within its seeds' spread); the counter's power {pct(getattr(pw, rg))} "
                                           f"on the theory's own flows", note)))
        rows += llc
    return rows


def llc_stage_rows(s: Setting, here: pd.DataFrame, rg: str, want: int, pred: str, choices: Choices,
                   counted: np.ndarray) -> list[dict]:
    """The same prediction read with a second instrument, the LLC's stages (train.llc; icl.tables.measures.
    llc_stages: critical points of λ̂ against log t, Hoogland et al.): the share of the regime's runs
    whose λ̂ shows `want` stages, with its interval over the seeds against the same band (a share
    outside it reads inconclusive, not "does not hold": no theorem makes λ̂'s stages LDL's phases),
    and where the two instruments agree run by run (`counted`: the counter's phases of the same
    runs; the reason's last clause, which the counter's row repeats). None where no run measured
    the LLC."""
    if "llc_stages" not in here or here["llc_stages"].isna().all():
        return []
    has = here["llc_stages"].notna().to_numpy()
    k = here["llc_stages"].astype(float).to_numpy()[has]
    sh, lo, hi = share(k == want, here["seed"].to_numpy()[has])
    v, why = judge(lo, hi, SHARE_BAND, choices, f"the {want}-stage share")
    if v == FAILS:       # Props. 2-4 count phases of the own logit; no theorem ties them to λ̂'s stages
        v, why = UNSURE, (f"{why}; the LLC's stages are not LDL's phases by any theorem, so a count other than "
                          f"{want} questions reading one as the other, not Props. 2-4")
    if (off := localisation(here)):
        v, why = NOT_TESTABLE, off
    same = int((k == counted[has]).sum())
    counts = ", ".join(f"{int(c)}: {m}" for c, m in sorted(pd.Series(k).value_counts().items()))
    agree = (f"the two instruments agree on {same} of {len(k)} runs" + (
        "" if same == len(k) else f" (the phase counter finds {want} phases in {int((counted[has] == want).sum())}, "
                                 f"the LLC {want} stages in {int((k == want).sum())})"))
    missing = int((~has).sum())
    return [s.row("ldl.phases", v, eps=_eps(s.runs), group=f"{rg}, by the LLC", prediction=pred.replace("phases", "stages"),
                  value=sh, ci_lo=lo, ci_hi=hi, reason=join(why, agree),
                  measurement=join(f"{int((k == want).sum())} of {len(k)} runs ({here['seed'][has].nunique()} seeds) show "
                                   f"{want} LLC stages ({sh:.0%}, 95% interval [{fmt(lo)}, {fmt(hi)}] over the seeds; "
                                   f"stages: runs {counts}): critical points of λ̂ against log t", agree,
                                   f"{missing} runs without three usable λ̂" if missing else ""))]


def localisation(df: pd.DataFrame) -> str:
    """Why λ̂'s stages are not λ's, where the runs' plateau check (summary's llc_on_plateau: the last
    checkpoint's λ̂ again at γ/10) found λ̂ off its plateau in γ; '' where none was off."""
    if "llc_on_plateau" not in df:
        return ""
    off = df["llc_on_plateau"].astype("boolean").eq(False).fillna(False)
    if not off.any():
        return ""
    ratio = df.loc[off, "llc_plateau_ratio"].astype(float)
    return (f"λ̂ reads the localisation, not λ: at the last checkpoint it moved {ratio.median():.2g}-fold (median) when "
            f"the localisation γ was cut tenfold, off its plateau in {int(off.sum())} of {len(df)} runs (where the "
            f"localisation dominates, λ̂ ≈ nβ·tr(H)/2γ, a curvature trace), so its turns are not stages of λ")


def transition_at_Lstar(s: Setting, choices: Choices = DEFAULT) -> list[dict]:
    """One phase more above L* than below (3 − 2): flat and sharp runs are paired (each sorted by
    seed and L, the i-th flat run with the i-th sharp one, so no run is used twice) and the share
    of pairs whose sharp run counts exactly one phase more, with its exact binomial
    (Clopper–Pearson) interval over the flat runs' seeds, is judged against [½, 1], where the
    counter's measured power is at least 80% in both regimes (else not testable). Where Δ or N is
    swept, the rows `boundary against Δ / N` (phase_boundary) fit where the count crosses 2.5. On
    runs that follow one collapse clock the row reads not testable, naming the clock, and says where
    the runs leave their flow (icl.analyse.claims.ldl.departure)."""
    cid = "ldl.transition_at_Lstar"
    band = SHARE_BAND
    pred = f"sharp run one phase more than flat (3 − 2) in a share of flat/sharp run pairs {band.text(choices.band)}"
    df = s.runs
    if (why := scale_identity(df)):
        return [s.row(cid, NOT_TESTABLE, prediction=pred, measurement="—", reason=why + " (no L can differ from another)")]
    if "n_phases" not in df or df["L_star"].isna().all():
        return [s.row(cid, NOT_TESTABLE, prediction=pred, measurement="—", reason="the runs have no L* (continuous tokens)")]
    if not ((regimes(df, choices.lstar) == "flat").any() and (regimes(df, choices.lstar) == "sharp").any()):
        return [s.row(cid, NOT_TESTABLE, prediction=pred, measurement="—", reason="the sweep does not cross L*")]
    keep, note = phase_runs(df)
    reg = regimes(keep, choices.lstar)
    srt = lambda d: d.sort_values(["seed", "L"])      # noqa: E731
    fr, sr = srt(keep[reg == "flat"]), srt(keep[reg == "sharp"])
    f, sh = fr["n_phases"].astype(float).to_numpy(), sr["n_phases"].astype(float).to_numpy()
    if not (len(f) and len(sh)):
        return [s.row(cid, UNSURE, eps=_eps(df), prediction=pred, measurement=note or "—",
                      reason="one regime has no run whose window can show its phases")]
    m = min(len(f), len(sh))
    one_more = sh[:m] - f[:m] == 1
    frac, lo, hi = share(one_more, fr["seed"].to_numpy()[:m])     # a pair is as independent as its seed
    v, why = judge(lo, hi, band, choices, "the one-phase-apart share")
    if (weak := _weak({"flat": power(fr), "sharp": power(sr)})):
        v, why = NOT_TESTABLE, weak
    left = ""
    if (fixed := clock.decides(df, "the phase count at every L, so a transition between the regimes", WHOLE_CURVE)[0]):
        v, why = NOT_TESTABLE, fixed
        d = departure.departure(df)      # the one transition a fixed step can still make: where the runs leave their flow
        left = f"where the runs leave their flow: {d.text()}" if d is not None else ""
    return [s.row(cid, v, eps=_eps(df), prediction=pred, value=frac, ci_lo=lo, ci_hi=hi, reason=why,
                  measurement=join(f"{int(one_more.sum())} of {m} flat/sharp run pairs one phase apart ({frac:.0%}, "
                                   f"95% interval [{fmt(lo)}, {fmt(hi)}] over the seeds); mean phases {f.mean():.2f} "
                                   f"below L* ({len(f)} runs), {sh.mean():.2f} above ({len(sh)})", left, note))]


def departure_boundary(s: Setting, axis: str, pred: str, band: Band, fixed: str, choices: Choices) -> list[dict]:
    """On runs that follow one clock the phase count cannot move with Δ or N; what can is where a
    fixed step makes the runs leave their flow (icl.analyse.claims.ldl.departure). Its L per value of
    `axis`, and the slope of log L on log value bootstrapped over seeds (at least 5), judged against
    L*'s exponent (`band`), with the step's edge beside it (the L at which the step on the clock is
    the one the runs left their flow at, per value: N does not enter the clock). Not testable where
    the runs leave their flow at fewer than two values inside the swept L."""
    cid, name, group = "ldl.transition_at_Lstar", {"delta": "Δ", "N": "N"}[axis], f"boundary against {'Δ' if axis == 'delta' else axis}"
    df = s.runs
    pred = pred.replace("phase boundary", "where the runs leave their flow")
    made = departure.cube(df, axis)
    if made is None:
        return [s.row(cid, NOT_TESTABLE, eps=_eps(df), group=group, prediction=pred, measurement="—",
                      reason=join(fixed, "where the runs leave their flow cannot be read here (a value with fewer "
                                         "than two L or two seeds resolved)"))]
    vals, vs, Ls, deps = made
    per = "; ".join(f"{name} = {v:g}: {d.lead()}" for v, d in deps.items())
    sl, bounds = _boundary_slopes(vals, vs, Ls, np.ones((1, vals.shape[-1])))
    sl, bounds = float(sl[0]), bounds[0]
    if not np.isfinite(sl):
        return [s.row(cid, NOT_TESTABLE, eps=_eps(df), group=group, prediction=pred, measurement=per,
                      reason=join(fixed, f"the only transition left at a fixed step is where the runs leave their flow, "
                                         f"and they leave it inside the swept L at fewer than two values of {name}, so "
                                         f"its move with {name} cannot be read"))]
    lo, hi = stats.percentile_interval(_boundary_slopes(vals, vs, Ls, _seed_counts(vals.shape[-1]))[0], vals.shape[-1])
    grid = _grid_sd(vs, Ls, bounds)            # a boundary on the L grid is known to within its cell
    lo, hi = lo - 1.96 * grid, hi + 1.96 * grid
    step_slope, edge = _step_edge(df, axis, vs, bounds)
    if np.isfinite(step_slope) and abs(band.lo - step_slope) < 2 * band.tol:    # the band must tell L* from the step
        band = Band(band.lo, band.hi, abs(band.lo - step_slope) / 2, source="half the way to the step's own exponent")
        pred = f"{pred.split(',')[0]}, {band.text(choices.band)} (half the way to the step's {step_slope:+.2f})"
    meas = join(f"where the runs leave their flow, by {name}: " + ", ".join(f"{v:g}: L ≈ {b:.3g}" for v, b in zip(vs, bounds))
                + f"; slope {sl:.2f} [{fmt(lo)}, {fmt(hi)}] over {vals.shape[-1]} seeds; the step's edge (the same step "
                  f"on the clock) predicts {edge}", per)
    if (few := too_few_seeds(vals.shape[-1])):
        return [s.row(cid, UNSURE, eps=_eps(df), group=group, prediction=pred, value=sl, reason=few, measurement=meas)]
    v, why = judge(lo, hi, band, choices, "the slope")
    return [s.row(cid, v, eps=_eps(df), group=group, prediction=pred, value=sl, ci_lo=lo, ci_hi=hi, measurement=meas,
                  reason=join(why, f"read where the runs leave their flow: on one clock the only transition that can move "
                                   f"with {name}"))]


def _grid_sd(vs: list, Ls: list, bounds: np.ndarray) -> float:
    """The standard deviation the L grid alone puts on the slope of log boundary on log value: each
    boundary lies somewhere in its cell [L before, L after] (uniform in log: variance width²/12),
    carried through the least-squares slope; 0 where fewer than two boundaries are finite."""
    ok = np.isfinite(bounds)
    if ok.sum() < 2:
        return 0.0
    lg = np.log(np.asarray(Ls, float))
    b = np.log(bounds[ok])
    width = np.array([lg[np.searchsorted(lg, v)] - lg[np.searchsorted(lg, v) - 1] for v in b])   # the cell around each
    x = np.log(np.asarray(vs, float))[ok]
    dx = x - x.mean()
    return float(np.sqrt(np.sum(dx ** 2 * width ** 2 / 12.0)) / np.sum(dx ** 2))


def _step_edge(df: pd.DataFrame, axis: str, vs: list, bounds: np.ndarray) -> tuple[float, str]:
    """The slope of log L on log `axis` that the step alone predicts, and its sentence: per value,
    the L at which the step on the clock (clock_per_epoch) equals the one at the first value's
    measured transition, interpolated in log-log over that value's L (NaN where it is outside them)."""
    ok = np.flatnonzero(np.isfinite(bounds))
    per = df.groupby([df[axis].astype(float), df["L"].astype(float)])["clock_per_epoch"].median()
    first = vs[int(ok[0])]
    c_star = float(np.exp(np.interp(np.log(bounds[ok[0]]), np.log(per[first].index.to_numpy(float)),
                                    np.log(per[first].to_numpy(float)))))
    edge = []
    for v in vs:
        x, y = np.log(per[v].to_numpy(float)), np.log(per[v].index.to_numpy(float))
        edge.append(float(np.exp(np.interp(np.log(c_star), x, y))) if x.min() <= np.log(c_star) <= x.max() else np.nan)
    e = np.log(np.asarray(edge))
    if np.isfinite(e).sum() < 2:
        return math.nan, "no slope (its edge lies outside the swept L)"
    slope = float(np.polyfit(np.log(np.asarray(vs, float))[np.isfinite(e)], e[np.isfinite(e)], 1)[0])
    return slope, f"a slope of {slope:+.2f} (L at the same step: " + ", ".join(f"{v:g}: {b:.3g}" for v, b in zip(vs, edge)) + ")"


def phase_boundary(s: Setting, axis: str, choices: Choices = DEFAULT) -> list[dict]:
    """Where Δ or N is swept (a setting of its own): the L at which the mean phase count first
    reaches 2.5 (geometric mean of the L either side), per value, and the slope of log boundary
    on log Δ (−1) or log N (+½), as L* = 1/(Δδ) with δ = sqrt(20K/N) says; bootstrapped over
    seeds (at least 5), within ±0.5. On runs of one collapse clock (icl.analyse.claims.ldl.clock) the
    count cannot move with Δ or N, and the boundary is read where a fixed step makes the runs leave
    their continuous flow (departure_boundary; icl.analyse.claims.ldl.departure), its interval widened
    by the L grid's cells, against a band half the way from L*'s exponent to the step's own."""
    cid = "ldl.transition_at_Lstar"
    want = {"delta": -1.0, "N": 0.5}[axis]
    name = {"delta": "Δ", "N": "N"}[axis]
    band = Band(want, want, 0.5)
    pred = f"phase boundary ∝ L* = 1/(Δδ): slope {want:+g} on log {name}, {band.text(choices.band)}"
    df = s.runs
    group = f"boundary against {name}"
    if df.empty and s.left_out:
        return [s.row(cid, NOT_TESTABLE, group=group, prediction=pred, measurement="no run to judge",
                      reason=f"every run of this setting was left out ({s.left_out})")]
    if df[axis].nunique() < 2:
        return []
    if (why := scale_identity(df)):
        return [s.row(cid, NOT_TESTABLE, group=group, prediction=pred, measurement="—", reason=why)]
    keep, note = phase_runs(df)
    reg = regimes(keep, choices.lstar)
    if clock.on_one_clock(df):      # one curve in τ: the phase count moves only where runs leave their flow
        fixed = clock.decides(df, f"the phase count at every L, Δ and N, so the boundary's move with {name}",
                              WHOLE_CURVE)[0] or f"{clock.CLOCK}; only where the runs leave it can anything move with {name}"
        return departure_boundary(s, axis, pred, band, fixed, choices)
    if (weak := _weak({"flat": power(keep[reg == "flat"]), "sharp": power(keep[reg == "sharp"])})):
        return [s.row(cid, NOT_TESTABLE, eps=_eps(df), group=group, prediction=pred, measurement=note or "—", reason=weak)]
    if not keep["n_phases"].notna().any():
        return [s.row(cid, UNSURE, eps=_eps(df), group=group, prediction=pred, measurement=note or "no phase count",
                      reason="no run of this setting has a phase count (see the measurement)")]
    vals, Ds, Ls = _seed_cube(keep, axis, "n_phases")
    one = np.ones((1, vals.shape[-1]))
    sl, bounds = _boundary_slopes(vals, Ds, Ls, one)
    sl, bounds = float(sl[0]), {D: b for D, b in zip(Ds, bounds[0]) if np.isfinite(b)}
    if not np.isfinite(sl):
        return [s.row(cid, UNSURE, eps=_eps(df), group=group, prediction=pred,
                      measurement=join(f"a boundary inside the L grid at {len(bounds)} value(s) of {name}", note),
                      reason=f"the phase count crosses 2.5 inside the L grid at fewer than two values of {name}")]
    lo, hi = stats.percentile_interval(_boundary_slopes(vals, Ds, Ls, _seed_counts(vals.shape[-1]))[0], vals.shape[-1])
    meas = join(f"boundary L by {name}: " + ", ".join(f"{D:g}: {bounds[D]:.3g}" for D in sorted(bounds))
                + f"; slope {sl:.2f} [{fmt(lo)}, {fmt(hi)}] over {vals.shape[-1]} seeds", note)
    if (few := too_few_seeds(vals.shape[-1])):
        return [s.row(cid, UNSURE, eps=_eps(df), group=group, prediction=pred, value=sl, reason=few, measurement=meas)]
    v, why = judge(lo, hi, band, choices, "the slope")
    return [s.row(cid, v, eps=_eps(df), group=group, prediction=pred, value=sl, ci_lo=lo, ci_hi=hi, reason=why, measurement=meas)]
