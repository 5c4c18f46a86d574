"""The claims of Li, Duan & Liang, one function each, from one setting's runs to verdict rows.

`verdicts(tabs, model)` groups one model's runs by every swept setting other than L and the
seed (icl.analyse.claims.judge), leaves out runs that diverged, ended above their initial loss or
memorised their prompts, and calls every claim on each setting (`Setting`). Each claim takes
the setting and the analysis `choices` and returns rows of icl.analyse.claims.verdict; `judge.robust`
re-runs it under the other choices and fills `fragile`. Conventions that hold throughout:
- accuracy: the theorems bound the loss by O(ε²). ε is read two ways, and time claims are
  judged under both: from the loss reached (a relative threshold x reads ε = sqrt(x·loss₀)) and
  from attention (1 − Attn_own = εδ at the crossing, the proofs' own link);
- time claims are about full-batch GD (Theorems 1-2), and a crossing within RESOLUTION
  optimisation steps carries no slope (the step, not the dynamics, sets it): such runs are left
  out and counted;
- an identity of the model and task that decides a claim makes it `not testable`, named: the
  scale identity (softmax_q on labels ∝ L), softmax's shift invariance (the off-diagonal logits'
  rate), the one collapse clock (`clock`: softmax_q under GD on orthogonal, equidistant, noise-free
  features follows one curve in τ = t·η‖v‖⁴E[(f(v_k) − f(v_k'))²] at every L, Δ and N, so where the
  runs follow it, what a claim reads of L, Δ or N — T against L, Phase I's end, β's difference
  between the regimes, the phase counts, the transition and its boundary — is the clock's), and,
  elsewhere, an approximate scale identity found in the data (T·ηL² constant within the seeds' spread);
- a theorem is judged as the bound it is: its needed constant along its own limit (`bound`, on the
  sampled-count flow inside every hypothesis), never a local exponent;
- flat/sharp is split at `choices.lstar` times theory.parquet's `L_split` (icl.theory.ldl.split:
  L* = 1/(Δδ), or report.flat_max_L), the same split every table and figure uses.

One module per section of claims: `setting` (the Setting and the shared thresholds),
`identities` (what decides a claim without the data, the theorems' domain), `clock` (the one
collapse clock: whether runs follow it), `bound` (Theorem 1's needed constant along K), `attention`,
`time_scales`, `faster` (the experiments' order in L, any optimiser), `phases`, `stability`, `unseen`, `mean_field_flow`, and `flow` (each dynamics
claim measured the same way on LDL's own mean-field flow: the third column); this module calls them all.
"""
from __future__ import annotations

import math

import pandas as pd

from icl.analyse.claims import CLAIMS, NOT_TESTABLE, base_id
from icl.analyse.claims.judge import by_setting, exclude, join, robust, settings
from icl.analyse.claims.ldl.bound import bound_along_K
from icl.analyse.claims.ldl.depth import depth
from icl.analyse.claims.ldl.faster import faster_with_L
from icl.analyse.claims.ldl.attention import attention_to_one, offdiag_logits, own_logit_monotone
from icl.analyse.claims.ldl.flow import with_flow
from icl.analyse.claims.ldl.flow_domain import flow_beta
from icl.analyse.claims.ldl.hypotheses import charge, setting_statement
from icl.analyse.claims.ldl.identities import domain, on_clock, regime_of, regimes, scale_identity  # noqa: F401  (tests)
from icl.analyse.claims.ldl.mean_field_flow import mean_field
from icl.analyse.claims.ldl.phases import phase_boundary, phases_claim, transition_at_Lstar
from icl.analyse.claims.ldl.setting import L_CLAIMS, Setting, inside_eq4
from icl.analyse.claims.ldl.stability import step_size
from icl.analyse.claims.ldl.time_scales import phase_one, time_vs_L, time_vs_eps
from icl.analyse.claims.ldl.unseen import unseen_functions

LDL_AXIS = ("L", "seed")
# the claims about the dynamics' shape: where a rule of the experiment makes two settings one dynamics, one row
DYNAMICS_CLAIMS = ("ldl.time_vs_eps", "ldl.time_vs_L", "ldl.faster_with_L", "ldl.phase_one", "ldl.phases", "ldl.transition_at_Lstar",
                   "ldl.mean_field", "ldl.attention_to_one", "ldl.offdiag_logits", "ldl.own_logit_monotone",
                   "ldl.unseen_functions")
RULES = {"ldl.attention_to_one": attention_to_one, "ldl.offdiag_logits": offdiag_logits,
         "ldl.own_logit_monotone": own_logit_monotone, "ldl.phase_one": phase_one, "ldl.phases": phases_claim,
         "ldl.time_vs_L": time_vs_L, "ldl.time_vs_eps": time_vs_eps, "ldl.transition_at_Lstar": transition_at_Lstar,
         "ldl.step_size": step_size, "ldl.unseen_functions": unseen_functions, "ldl.mean_field": mean_field,
         "ldl.depth": depth, "ldl.faster_with_L": faster_with_L}


def verdicts(tabs: dict, model: str) -> list[dict]:
    """Every LDL claim for one model of an experiment, one row per setting (and per regime or
    threshold within it), each with its fragility, in the order of icl.analyse.claims.CLAIMS."""
    runs = tabs["runs"][tabs["runs"]["model"] == model]
    df = runs.merge(tabs["summary"], on="run_id").merge(tabs["theory"], on="run_id")
    curves = tabs["curves"][(tabs["curves"]["metric"] == "train_loss") & tabs["curves"]["run_id"].isin(runs["run_id"])]
    cols = settings(runs, LDL_AXIS)

    def setting(lab, g, left_out=True):
        kept, note = exclude(g) if left_out else (g, "")
        return Setting(model, lab, kept, note, curves[curves["run_id"].isin(kept["run_id"])], tabs["theory_curves"])

    rows = []
    for lab, g in by_setting(df, cols):
        start = len(rows)
        s = setting(lab, g)
        rows += robust(flow_beta, setting(lab, g, left_out=False), uses=("band",))   # the flow: whatever the runs did
        if s.runs.empty:                  # every claim of the setting reads not testable, the runs counted
            rows += [s.row(cid, NOT_TESTABLE, prediction="—", measurement="no run to judge",
                           reason=f"every run of this setting was left out ({s.left_out})")
                     for cid in ("ldl.attention_to_one", "ldl.offdiag_logits", "ldl.own_logit_monotone",
                                 "ldl.time_vs_eps", "ldl.faster_with_L", "ldl.unseen_functions", "ldl.mean_field",
                                 *L_CLAIMS)]
            continue
        sL, why = inside_eq4(s)           # the L-claims read the runs inside Eq. 4's domain
        rows += charged([*robust(attention_to_one, s, uses=("band",)), *robust(offdiag_logits, s, uses=("band",)),
                         *robust(own_logit_monotone, s, uses=("band",)),
                         *with_flow(robust(time_vs_eps, s), time_vs_eps, s),
                         *robust(unseen_functions, s, uses=("band",)), *robust(mean_field, s, uses=("band",))], s)
        # the experiments' order in L is no theorem's: read on every run that trained, whatever the domain
        rows += with_flow(robust(faster_with_L, s, uses=("lstar",)), faster_with_L, s)
        if sL is None:
            rows += [s.row(cid, NOT_TESTABLE, prediction="—", measurement="—",
                           reason=f"every run of this setting is outside Eq. 4's domain: {why}") for cid in L_CLAIMS]
        else:
            rows += charged([*with_flow(robust(phases_claim, sL), phases_claim, sL),
                             *with_flow(robust(transition_at_Lstar, sL), transition_at_Lstar, sL),
                             *with_flow(robust(time_vs_L, sL), time_vs_L, sL),
                             *with_flow(robust(phase_one, sL, uses=("band",)), phase_one, sL)], sL)
        stated(rows[start:], lab, g)
    for axis in ("delta", "N"):          # L* = 1/(Δδ): the phase boundary against Δ and N, where swept
        if axis in cols:
            for lab, g in by_setting(df, [c for c in cols if c != axis]):
                start = len(rows)
                sL, why = inside_eq4(setting(lab, g))
                rows += charged(robust(phase_boundary, sL, axis), sL) if sL is not None else [setting(lab, g).row(
                    "ldl.transition_at_Lstar", NOT_TESTABLE, group=f"boundary against {'Δ' if axis == 'delta' else axis}", prediction="—",
                    measurement="—", reason=f"every run of this setting is outside Eq. 4's domain: {why}")]
                stated(rows[start:], lab, g)
    if "K" in cols:                      # Theorem 1 as a bound: its needed constant along K, on the flow inside it
        for lab, g in by_setting(df, [c for c in cols if c != "K"]):
            rows += stated(robust(bound_along_K, setting(lab, g, left_out=False), uses=("band",)), lab, g)
    for lab, g in by_setting(df, [c for c in cols if c != "lr"]):      # the learning rate is step size's axis
        rows += stated(robust(step_size, setting(lab, g, left_out=False), uses=("band",)), lab, g)
    rows = same_runs_once(clock_once(once(rows, df, cols), df, cols, tabs["theory_curves"]), df, cols, curves)
    order = {c: i for i, c in enumerate(CLAIMS)}
    return sorted(rows, key=lambda r: order[base_id(r["claim_id"])])


def stated(rows: list[dict], label: str, runs: pd.DataFrame) -> list[dict]:
    """`rows` of one setting, each carrying the setting's name and its one statement of the theorems'
    hypotheses (hypotheses.setting_statement), which the page says once per setting."""
    said = setting_statement(runs)
    for r in rows:
        r["setting"], r["setting_hypotheses"] = label, said
    return rows


def charged(rows: list[dict], s: Setting) -> list[dict]:
    """A theorem's rows held to its hypotheses at the setting's runs (icl.analyse.claims.ldl.hypotheses),
    each regime's row to its own runs (the default split at L*)."""
    return charge(rows, s.runs, regimes(s.runs) if not s.runs.empty else None)


def _flow_print(g, tc) -> tuple:
    """The balanced flows of these runs as a comparable value: each distinct curve of loss over its
    start (theory_curves' mean_field_loss, 4 significant digits), sorted."""
    m = tc[(tc["metric"] == "mean_field_loss") & tc["run_id"].isin(g["run_id"])]
    if m.empty:
        return ()
    curves = set()
    for _, c in m.sort_values("epoch").groupby("run_id")["value"]:
        v = c.to_numpy(float)
        curves.add(tuple(float(f"{x:.4g}") for x in v / v[0]))
    return tuple(sorted(curves))


def clock_once(rows: list[dict], df, cols: list[str], tc) -> list[dict]:
    """Settings that the experiment's rule makes one dynamics reported once. Under lr_rule: clock each
    run's step is set so its collapse clock runs at one speed, and where that makes the balanced flows
    of two settings (other Δ, N, …) the same curves in epochs, their rows of a dynamics claim measure
    one thing: the later reads not testable, pointing at the first (the runs' own numbers kept)."""
    if tc is None or tc.empty or not on_clock(df):
        return rows
    reg = regimes(df)
    groups = dict(by_setting(df, cols))
    prints = {}

    def fp(lab, rg, L):            # the flows of the runs a row reads: its setting's, regime's or L's
        if (lab, rg, L) not in prints:
            g = groups[lab]
            g = g[reg.loc[g.index] == rg] if rg else g
            g = g[g["L"].astype(float) == L] if L is not None else g
            prints[lab, rg, L] = _flow_print(g, tc)
        return prints[lab, rg, L]

    first, out = {}, []
    for r in rows:
        lab = "" if not cols else next((lab for lab in groups if r["group"] == lab or r["group"].startswith(lab + "; ")),
                                       None)
        if lab is None or base_id(r["claim_id"]) not in DYNAMICS_CLAIMS or r["scope"] != "setting":
            out.append(r)
            continue
        rest = r["group"][len(lab):].lstrip("; ") if lab else r["group"]
        rg = regime_of(rest)
        L = float(rest[2:].split(";")[0]) if rest.startswith("L=") else None
        f = fp(lab, rg, L)
        if not f:
            out.append(r)
            continue
        rest = "" if L is not None else rest             # the rows of every L with one flow are one row too
        key = (r["claim_id"], rest, f)
        if key not in first:
            first[key] = r["group"]
            out.append(r)
            continue
        out.append({**r, "verdict": NOT_TESTABLE, "fragile": "", "against": None,
                    "reason": f"the same dynamics as the row '{first[key]}' by the experiment's own rule (lr_rule: "
                              f"clock sets each run's step so that its collapse clock runs at one speed, and here it "
                              f"makes the balanced flows of both settings the same curves in epochs): one measurement, "
                              f"reported once, there"})
    return out


def once(rows: list[dict], df, cols: list[str]) -> list[dict]:
    """Rows an identity makes equal to another reported once: under the scale identity (GD at
    (η, L) is GD at (ηL², 1)) the per-L mean-field rows of two step sizes with one ηL² (the same
    seeds and other settings) are one measurement; the later reads not testable, pointing at the
    first, and its per-run rows are dropped."""
    if "lr" not in cols or not scale_identity(df) or not (df["optimizer"] == "gd").all():
        return rows
    first, dup = {}, {}
    rest = [c for c in cols if c != "lr"]
    for lab, g in by_setting(df, cols):
        for L, gL in g.groupby("L", sort=True):
            key = (tuple(str(gL.iloc[0][c]) for c in rest), f"{float(gL['lr'].iloc[0]) * float(L) ** 2:.6g}",
                   tuple(sorted(gL["seed"].tolist())))
            group = join(lab, f"L={L:g}")
            if key in first:
                dup[group] = (first[key], key[1])
            else:
                first[key] = group
    out = []
    for r in rows:
        if base_id(r["claim_id"]) != "ldl.mean_field" or not dup:
            out.append(r)
            continue
        if r["scope"] == "run" and any(r["group"].startswith(g + "; ") for g in dup):
            continue
        if r["scope"] == "setting" and r["group"] in dup:
            to, c = dup[r["group"]]
            r = {**r, "verdict": NOT_TESTABLE, "ci_lo": math.nan, "ci_hi": math.nan, "fragile": "", "against": None,
                 "reason": f"the same dynamics as the row '{to}' by the scale identity (GD at (η, L) is GD at (ηL², 1); "
                           f"ηL² = {c} in both): reported once, there"}
        out.append(r)
    return out


def _runs_print(g: pd.DataFrame, curves: pd.DataFrame) -> tuple:
    """The runs `g` as a comparable value: per seed its train loss at every logged epoch (8
    significant digits: the very same losses, not one relative curve), sorted by seed; () where a
    run has no curve."""
    c = curves[curves["run_id"].isin(g["run_id"])]
    if c["run_id"].nunique() < len(g):
        return ()
    seed = dict(zip(g["run_id"], g["seed"]))
    out = []
    for rid, r in c.sort_values("epoch").groupby("run_id"):
        out.append((int(seed[rid]), tuple(float(f"{x:.8g}") for x in r["value"].to_numpy(float))))
    return tuple(sorted(out))


def same_runs_once(rows: list[dict], df: pd.DataFrame, cols: list[str], curves: pd.DataFrame) -> list[dict]:
    """Per-L rows of a dynamics claim whose runs are the same runs as another row's, reported once:
    on one collapse clock an identity can make two settings train the very same losses (Δ → 2Δ with
    L → L/2, c tied to L and the step over 16 rescales Q and nothing else: ldl_phase_diagram's Δ = 6
    at L is its Δ = 3 at 2L), and then they are one measurement. Found from the runs' own train losses
    (equal per seed to 8 significant digits), not assumed: the later row reads not testable, pointing at
    the first, and its per-run rows are dropped."""
    if not cols or df.empty:
        return rows
    prints, group_of = {}, {}
    for lab, g in by_setting(df, cols):
        for L, gL in g.groupby("L", sort=True):
            fp = _runs_print(gL, curves)
            if fp:
                group_of[join(lab, f"L={float(L):g}")] = fp
    if len(set(group_of.values())) == len(group_of):
        return rows
    first, dup, out = {}, {}, []
    for grp, fp in group_of.items():
        if fp in first:
            dup[grp] = first[fp]
        else:
            first[fp] = grp
    for r in rows:
        cid = base_id(r["claim_id"])
        home = next((g for g in dup if r["group"] == g or r["group"].startswith(g + "; ")), None)
        if home is None or cid not in DYNAMICS_CLAIMS:
            out.append(r)
            continue
        if r["scope"] == "run":
            continue
        out.append({**r, "verdict": NOT_TESTABLE, "ci_lo": math.nan, "ci_hi": math.nan, "fragile": "", "against": None,
                    "reason": f"the same runs as the row '{dup[home]}': their train losses are equal at every logged "
                              f"epoch and seed (8 significant digits), so the two settings are one measurement, "
                              f"reported once, there"})
    return out
