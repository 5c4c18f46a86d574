"""The papers' claims as data: one function per claim (icl.claims.ldl, icl.claims.zfb), each
taking small tidy tables and returning verdict rows; the report is rendered from these rows and
results/<exp>/verdicts.parquet holds them. A verdict that no table could flip is a defect, so
every claim function has tests that make it hold, fail and be inconclusive."""
from __future__ import annotations

import math

import pandas as pd

HOLDS, FAILS, UNSURE, NOT_TESTABLE = "holds", "does not hold", "inconclusive", "not testable"
VERDICTS = (HOLDS, FAILS, UNSURE, NOT_TESTABLE)

# stable ids (listed in README.md) and what each claims, in the papers' words
CLAIMS = {
    "ldl.attention_to_one": "attention on the query's own feature → 1",
    "ldl.offdiag_logits": "off-diagonal logits q_{k,k'} decay more slowly than own attention rises, and may oscillate",
    "ldl.phases": "two phases in the flat regime, three in the sharp",
    "ldl.time_vs_L": "convergence time T ∝ 1/L² at fixed η (GD)",
    "ldl.time_vs_eps": "T grows as log(1/ε) in the flat regime and as 1/ε in the sharp (GD)",
    "ldl.transition_at_Lstar": "a transition at L* = 1/(Δδ)",
    "ldl.step_size": "the flat regime tolerates larger steps",
    "ldl.unseen_functions": "accurate prediction for unseen functions (Prop. 1)",
    "ldl.mean_field": "the loss follows the mean-field curve of Lemma 2",
    "zfb.optimum": "the trained LSA converges to the theory's optimum",
    "zfb.thm42": "Theorem 4.2: the in-distribution test error of the LSA",
    "zfb.scaling": "covariate scaling by c: slope of ŷ on y = c²·tr(Γ⁻¹Λ²)/trΛ",
    "zfb.random_covariance": "random covariance: the prediction shrinks by a factor",
    "zfb.longer_prompts": "test prompts longer than training (M > N) keep lowering the error",
    "zfb.beyond_lsa": "beyond LSA: a nonlinear model escapes the LSA's limit",
}

COLUMNS = ["experiment", "claim_id", "model", "group", "claim", "prediction", "measurement", "value", "ci_lo",
           "ci_hi", "verdict", "reason", "domain"]


def verdict(claim_id: str, verdict: str, *, prediction: str, measurement: str, reason: str = "",
            value: float = math.nan, ci_lo: float = math.nan, ci_hi: float = math.nan, model: str = "all",
            group: str = "", domain: str = "") -> dict:
    """One verdict row. `reason` is required whenever the verdict is not `holds`: a reader must
    learn why in one sentence. `domain`: where the runs lie outside the theorem's assumptions, a
    sentence saying which (empty where they meet them or the claim has none)."""
    if claim_id not in CLAIMS:
        raise ValueError(f"unknown claim id {claim_id!r}; known: {', '.join(CLAIMS)}")
    if verdict not in VERDICTS:
        raise ValueError(f"verdict must be one of {VERDICTS}, got {verdict!r}")
    if verdict != HOLDS and not reason:
        raise ValueError(f"{claim_id}: a verdict of {verdict!r} needs a reason")
    return {"claim_id": claim_id, "model": model, "group": group, "claim": CLAIMS[claim_id],
            "prediction": prediction, "measurement": measurement, "value": float(value),
            "ci_lo": float(ci_lo), "ci_hi": float(ci_hi), "verdict": verdict, "reason": reason, "domain": domain}


def table(experiment: str, rows: list[dict]) -> pd.DataFrame:
    """The verdict rows of one experiment as results/<exp>/verdicts.parquet holds them."""
    return pd.DataFrame([{"experiment": experiment, **r} for r in rows], columns=COLUMNS)


def fmt(x, nd: int = 3) -> str:
    """A number for a measurement sentence; '—' for a missing one."""
    return "—" if x is None or (isinstance(x, float) and not math.isfinite(x)) else f"{x:.{nd}g}"
