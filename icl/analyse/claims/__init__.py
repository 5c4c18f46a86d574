"""The papers' claims as data: one function per claim (icl.analyse.claims.ldl, icl.analyse.claims.zfb), each
taking small tidy tables and returning verdict rows; the report is rendered from these rows and
results/<exp>/verdicts.parquet holds them. A verdict that no table could flip is a defect, so
every claim function has tests that make it hold, fail and be inconclusive."""
from __future__ import annotations

import json
import math

import pandas as pd

HOLDS, FAILS, UNSURE, NOT_TESTABLE = "holds", "does not hold", "inconclusive", "not testable"
VERDICTS = (HOLDS, FAILS, UNSURE, NOT_TESTABLE)

# stable ids (listed in docs/claims.md) and what each claims, in the papers' words
CLAIMS = {
    "ldl.attention_to_one": "after the loss converges, attention on the query's own feature → 1 (Prop. 1)",
    "ldl.offdiag_logits": "in each phase the off-diagonal logits q_{k,k'} move at O(1/K) of q_k's rate and fall overall; they may oscillate (Props. 2-4)",
    "ldl.own_logit_monotone": "the own logit q_k never decreases under GD (Lemma 2: g_k ≥ 0)",
    "ldl.phase_one": "Phase I ends at T1 = Θ(K log K/(ηL²Δ²)), own attention Ω(1/(1+δ)) by then (Prop. 2)",
    "ldl.phases": "two phases in the flat regime, three in the sharp",
    "ldl.time_vs_L": "convergence time T ∝ 1/L² at fixed η (GD)",
    "ldl.faster_with_L": "a larger L converges faster: in the flat set on the cosine (§6), within both regimes on random quadratics (App. A: \"the role of the Lipschitz constant\" beyond the cosine)",
    "ldl.time_vs_eps": "T grows as log(1/ε) in the flat regime and as 1/ε in the sharp (GD)",
    "ldl.transition_at_Lstar": "a transition at L* = 1/(Δδ)",
    "ldl.step_size": "the flat regime tolerates larger steps",
    "ldl.unseen_functions": "accurate prediction for unseen functions (Prop. 1)",
    "ldl.mean_field": "the loss follows the mean-field curve of Lemma 2",
    "ldl.depth": "beyond one layer (the analysis's future work): depth lets the model learn the task in context where fewer layers do not",
    "zfb.optimum": "the trained LSA converges to the theory's optimum, Γ⁻¹ = ((1 + 1/N)Λ + trΛ/N·I)⁻¹ (Thms 4.1, 4.5)",
    "zfb.thm42": "Theorem 4.2: the in-distribution test error of the LSA",
    "zfb.scaling": "covariate scaling by c: ŷ ≈ c²·x_qᵀw (eq. 5), slope c²·tr(Γ⁻¹Λ²)/trΛ, error → c²(c²−1)²·trΛ",
    "zfb.query_shift": "query shifts: ŷ ≈ x_qᵀΛ⁻¹Λw = x_qᵀw (eq. 4.8): \"very general shifts in the query distribution can be tolerated\"",
    "zfb.random_covariance": "random covariance: E ŷ → ⅓⟨w, x_q⟩ (eq. 8), so the error stays far from zero",
    "zfb.longer_prompts": "test prompts longer than training (M > N) keep lowering the error",
    "zfb.beyond_lsa": "GPT-2 \"performs well\" on random covariances where the LSA fails (§5): a nonlinear model escapes the LSA's limit",
    "zfb.gpt_in_distribution": "GPT-2 trained on linear models matches least squares in distribution (§5, Garg et al.)",
    "zfb.length_spike": "\"an evident spike in prediction error\" at M > N, from learned positions never trained past N (§5)",
    "zfb.spike_vs_variance": "\"the spike appears to decrease when evaluated on prompts with higher variance\" (§5)",
}

COLUMNS = ["experiment", "claim_id", "model", "group", "claim", "prediction", "measurement", "value", "ci_lo",
           "ci_hi", "verdict", "reason", "domain", "fragile", "scope", "flow_value", "flow_lo", "flow_hi", "against",
           "hypotheses", "setting", "setting_hypotheses", "seed_values", "curve"]
# `seed_values`: a row judged over its seeds, each seed's own value as JSON {"seed": value} (the evidence
# figure draws them beside the interval); empty where the row's statistic is not a mean over seeds.
# `curve`: where a row's statistic is read off a curve per seed (a bound's needed constant against K), that
# curve as JSON {"x": name, "y": name, "xs": [...], "lines": {"seed": [...]}, "log": bool} (curve_json); its
# evidence figure draws it. Empty elsewhere.
# `setting`, `setting_hypotheses`: the setting a row of LDL's claims belongs to and the theorems' hypotheses
# there, one statement per setting (icl.analyse.claims.ldl.hypotheses.setting_statement); empty elsewhere
# `hypotheses`, on a row of LDL's theorems and propositions: each hypothesis at the setting with unit
# constants, met or not and by how far (icl.analyse.claims.ldl.hypotheses); empty elsewhere
# `against`, on a row that does not hold where the theory's own dynamics were measured too (icl.analyse.claims.ldl.flow):
# "theorem" (the runs follow LDL's mean-field flow; the theorem's statement disagrees with it) or
# "dynamics" (the runs disagree with that flow too); null elsewhere
AGAINST = ("theorem", "dynamics")
EXT = ".ext"    # a claim about LDL's model judged on another model: an extension, in its own id
SCOPES = ("setting", "run")      # a row per setting (the report's table), or per run (behind a toggle)


def verdict(claim_id: str, verdict: str, *, prediction: str, measurement: str, reason: str = "",
            value: float = math.nan, ci_lo: float = math.nan, ci_hi: float = math.nan, model: str = "all",
            group: str = "", domain: str = "", fragile: str = "", scope: str = "setting") -> dict:
    """One verdict row. `reason` is required whenever the verdict is not `holds`: a reader must
    learn why in one sentence. `domain`: where the runs lie outside the theorem's assumptions, a
    sentence saying which (empty where they meet them or the claim has none). `fragile`: the
    analysis choices that flip the verdict (icl.analyse.claims.judge.robust fills it). `scope`: 'setting'
    for a row per setting, 'run' for a claim's per-run detail. `flow_value`, `flow_lo`, `flow_hi`
    and `against`: the same statistic on LDL's mean-field flow and who a "does not hold" is against
    (icl.analyse.claims.ldl.flow fills them; NaN and None where the claim has no flow reading)."""
    if base_id(claim_id) not in CLAIMS:
        raise ValueError(f"unknown claim id {claim_id!r}; known: {', '.join(CLAIMS)} (and each with {EXT})")
    if verdict not in VERDICTS:
        raise ValueError(f"verdict must be one of {VERDICTS}, got {verdict!r}")
    if verdict != HOLDS and not reason:
        raise ValueError(f"{claim_id}: a verdict of {verdict!r} needs a reason")
    if verdict == HOLDS and not (math.isfinite(ci_lo) and math.isfinite(ci_hi)):
        raise ValueError(f"{claim_id}: 'holds' needs an interval (ci_lo, ci_hi) inside the prediction's band")
    if scope not in SCOPES:
        raise ValueError(f"scope must be one of {SCOPES}, got {scope!r}")
    return {"claim_id": claim_id, "model": model, "group": group, "claim": CLAIMS[base_id(claim_id)],
            "prediction": prediction, "measurement": measurement, "value": float(value),
            "ci_lo": float(ci_lo), "ci_hi": float(ci_hi), "verdict": verdict, "reason": reason, "domain": domain,
            "fragile": fragile, "scope": scope, "flow_value": math.nan, "flow_lo": math.nan, "flow_hi": math.nan,
            "against": None, "hypotheses": ""}


def base_id(claim_id: str) -> str:
    """The paper's claim id of a row's: `ldl.unseen_functions.ext` (the claim judged on a model that
    is not the paper's, an extension) is `ldl.unseen_functions`."""
    return claim_id[:-len(EXT)] if claim_id.endswith(EXT) else claim_id


def table(experiment: str, rows: list[dict]) -> pd.DataFrame:
    """The verdict rows of one experiment as results/<exp>/verdicts.parquet holds them."""
    out = pd.DataFrame([{"experiment": experiment, **r} for r in rows], columns=COLUMNS)
    text = ["setting", "setting_hypotheses", "seed_values", "curve"]
    out[text] = out[text].astype(object).where(out[text].notna(), "")
    return out.astype({"against": "string", **{c: "string" for c in text}})


def curve_json(x: str, y: str, xs, lines: dict, log: bool = False) -> str:
    """A row's `curve`: per seed (or draw) the values its statistic was read from, at xs."""
    return json.dumps({"x": x, "y": y, "xs": [float(v) for v in xs], "log": bool(log),
                       "lines": {str(k): [float(v) for v in vals] for k, vals in lines.items()}})


def count(n: int, noun: str, plural: str = "") -> str:
    """'1 run', '3 runs' (`plural` where adding an s is wrong)."""
    n = int(n)
    return f"{n} {noun if n == 1 else (plural or noun + 's')}"


def of(k: int, n: int, noun: str) -> str:
    """'2 of 5 runs', '1 of 1 run'."""
    return f"{int(k)} of {count(n, noun)}"


def every(n: int, noun: str) -> str:
    """'the one run', 'all 3 runs'."""
    return f"the one {noun}" if int(n) == 1 else f"all {count(n, noun)}"


def fmt(x, nd: int = 3) -> str:
    """A number for a measurement sentence; '—' for a missing one."""
    return "—" if x is None or (isinstance(x, float) and not math.isfinite(x)) else f"{x:.{nd}g}"

