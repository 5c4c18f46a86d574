"""One setting of one model (the runs a claim reads) and the thresholds the LDL claims share."""
from __future__ import annotations

import functools
from dataclasses import dataclass, field

import pandas as pd

from icl.analyse import fits
from icl.analyse.claims import EXT, NOT_TESTABLE, UNSURE, count, verdict
from icl.analyse.claims.judge import Band, join
from icl.analyse.claims.ldl.identities import _of, domain, eq4_outside, eq4_text, eq4_where
from icl.analyse.claims.learned import Gate, below, gate, held_out


RESOLUTION = fits.RESOLUTION   # optimisation steps: a crossing sooner than this is set by the step, not the dynamics
CONVERGED = 1e-2          # Prop. 1's precondition: train loss ≤ this × the uniform-attention loss (ε = 0.1)
ATTN_TOL = 0.1            # 1 − Attn_own = O(ε) at ε = 0.1, unit constant
GAIN_TOL = 0.1            # unseen functions: the share of the achievable gain within 0.1 of all of it
MEAN_FIELD_SPREAD = 2.0   # mean field: the band's tolerance is this many standard errors of the seeds' median log ratio
MEAN_FIELD_DECADES = 1.0  # mean field: the runs' loss must fall by at least this many decades in the window
MEAN_FIELD_STEP = 1.0     # mean field applies where one step is at most this times the loss's curvature scale
# an integer count is judged as the share of runs that show the predicted count: it holds when most runs
# do (the share's exact binomial interval inside [½, 1]) and does not hold when most show another
SHARE_BAND = Band(1.0, 1.0, 0.5, floor=0.0, ceil=1.0, source="the predicted count is what most runs show")
MONOTONE = 1e-3           # an own logit "never decreases" if no step lowers it by more than this share of its rise
OSCILLATES = 0.02         # the off-diagonal logits' path is at least this much longer than their net change
TIME_COLS = ("t_rel_1e-2", "t_abs_1e-3")


@dataclass
class Setting:
    """One setting of one model: its runs (those a claim may read), the sentence counting the
    runs left out, and the curves the per-curve claims read."""

    model: str
    label: str
    runs: pd.DataFrame
    left_out: str = ""
    curves: pd.DataFrame = field(default_factory=pd.DataFrame)          # train_loss rows of these runs
    theory_curves: pd.DataFrame = field(default_factory=pd.DataFrame)
    domain_note: str = ""      # a broken assumption of runs left out of `runs` (Eq. 4, for the L-claims)
    flows: dict = field(default_factory=dict, repr=False)   # readings made once per setting (icl.analyse.claims.ldl.flow's, mean_field's)

    @functools.cached_property
    def broken(self) -> str:
        """The theorems' assumptions these runs break at ε = ATTN_TOL (identities.domain), read once
        per setting: every row of it names them."""
        return domain(self.runs, ATTN_TOL)

    def row(self, cid: str, v: str, *, group: str = "", measurement: str = "", eps: float | None = None,
            **kw) -> dict:
        """A verdict row of this setting: its label joined to the claim's own group, the runs
        left out counted in the measurement, the broken assumptions in `domain` (at the accuracy
        the claims read, ε = 0.1, unless the claim gives its own), and the claim id marked an
        extension (`ldl.X.ext`) where the model is not LDL's (a kind without its mean-field limit).
        `eps`: the accuracy the row reads, where it is not ATTN_TOL (the time claims' thresholds)."""
        meas = "; ".join(p for p in (measurement, self.left_out) if p)
        own = domain(self.runs, eps) if eps is not None else self.broken
        kw["domain"] = join(kw["domain"] if "domain" in kw else own, self.domain_note)
        if not self.runs.empty and not _of(self.runs, "mean_field"):
            cid += EXT
        r = verdict(cid, v, model=self.model, group=join(self.label, group), measurement=meas or "—", **kw)
        if eps is not None:
            r["_eps"] = float(eps)     # the accuracy the row reads, for its hypotheses (icl.analyse.claims.ldl.hypotheses)
        return r


L_CLAIMS = ("ldl.phases", "ldl.transition_at_Lstar", "ldl.time_vs_L", "ldl.phase_one")   # and phase_boundary


def inside_eq4(s: Setting) -> tuple[Setting | None, str]:
    """The setting as its L-claims read it: the runs outside Eq. 4 left out and counted (the
    domain column names them); None where no run is inside (the claims read not testable), with
    the reason."""
    out = eq4_outside(s.runs)
    if not out.any():
        return s, ""
    why = eq4_text(s.runs[out])
    if out.all():
        return None, why
    kept = s.runs[~out]
    note = f"{count(out.sum(), 'run')} outside Eq. 4's domain left out of this L-claim"
    return Setting(s.model, s.label, kept, join(s.left_out, note), s.curves[s.curves["run_id"].isin(kept["run_id"])],
                   s.theory_curves, join(s.domain_note, f"Eq. 4 at {eq4_where(s.runs[out])} (left out)")), why


def _not_gd(s: Setting, cid: str, group: str = "") -> dict:
    return s.row(cid, NOT_TESTABLE, group=group, prediction="—",
                 measurement=f"optimizer {', '.join(sorted(set(s.runs['optimizer'])))}",
                 reason="the theorem is about full-batch GD; an adaptive optimiser rescales each step")


def _empty(s: Setting, cid: str, why: str, pred: str = "—", group: str = "") -> dict:
    return s.row(cid, UNSURE, group=group, prediction=pred, measurement="no run to judge", reason=why)


def learning(df: pd.DataFrame, extra=(), on_new_prompts: bool = True) -> Gate:
    """icl.analyse.claims.learned's gate for LDL's models: a run learned when its final train loss at the
    query is at most half of uniform attention's on its own training prompts (what needs no
    training; the train side has no oracle, so the best reachable is taken as 0), and its final
    test loss on held-out prompts closed half the gap from uniform attention's there to the feature
    oracle's (learned.held_out: a run that only learned its prompts did not learn in context). A
    GPT trained on every x position (loss: all) is judged by its error at the query, where the
    reference is, not by the mean over positions it trained on; `extra` adds criteria. A claim about
    the held-out prompts themselves (ldl.unseen_functions) gates on the train side alone
    (`on_new_prompts=False`): a gate on what it measures would leave it nothing to fail on."""
    col = "final_query_train_loss" if "final_query_train_loss" in df else "final_train_loss"
    what = "final train loss"
    if "loss" in df and df["loss"].astype(str).eq("all").any():
        what = "(at the query, not the mean over every x position it trained on) final train loss"
    return gate(df, [below(col, "uniform_train_loss", what), *([held_out(df)] if on_new_prompts else [])], extra)


def dynamics_runs(df: pd.DataFrame) -> tuple[pd.DataFrame, str]:
    """The runs a claim about the dynamics' path reads (the logits' paths): those that trained
    (icl.analyse.claims.learned's gate) and whose loss took at least RESOLUTION steps to cross 10⁻¹ of its
    start (a path crossed in fewer is set by the step, not the dynamics); a sentence counts the rest."""
    learned = learning(df)
    kept = learned.kept
    fast = ~fits.resolved(kept) if "t_rel_1e-1" in kept else pd.Series(False, index=kept.index)
    note = join(learned.note, f"{count(fast.sum(), 'run')} crossed 10⁻¹ of their initial loss within {RESOLUTION} "
                              f"steps and are left out" if fast.any() else "")
    return kept[~fast], note


def converged(df: pd.DataFrame) -> pd.Series:
    """Runs that met Prop. 1's precondition: a final train loss ≤ CONVERGED × the loss of uniform
    attention on the same prompts (what needs no training; loss₀ where it was not measured)."""
    ref = df["uniform_train_loss"].astype(float) if "uniform_train_loss" in df else df["loss0"].astype(float)
    ref = ref.fillna(df["loss0"].astype(float))
    return (df["final_train_loss"].astype(float) <= CONVERGED * ref).fillna(False)
