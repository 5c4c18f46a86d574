"""Every evaluation shift (ZFB's covariate and query shifts) in one place: how it changes the test
prompts, what test law the LSA theory then sees, and the theory's error and slope on a cell
(theory_cell). A new shift is one entry of SHIFTS here plus its name in the schema
(evaluate.shifts.kind); an unknown kind is an error, never a silent fallback to the
in-distribution formula.

A *law* is what icl.theory.lsa needs to know about the test prompts:
  ("fixed", Λ_t, Λ_q)        tokens x ~ N(0, Λ_t), query ~ N(0, Λ_q) (None: Λ_q = Λ_t);
  ("random", scale, Λ_q)     per prompt Λ = diag(λ), λ_i ~ scale·Exp(1); query from the same Λ
                             (Λ_q None) or ~ N(0, Λ_q) independent of it.
The training law is the same thing for c = 1 and no shift.
"""
from __future__ import annotations

from typing import Callable, NamedTuple

import numpy as np

from icl.theory import lsa
from icl.theory.table import lsa_optimum


class Shift(NamedTuple):
    tokens: Callable      # (tokens spec, c) -> the tokens spec the test prompts are drawn from
    edit: Callable        # (x (P, M+1, d), c, generator) -> x after the shift (query last)
    law: Callable         # (training law, c, d) -> test law, or None where there is no closed form


def _same(tok, c):
    return tok


def _random(tok, c):
    return {"kind": "random_covariance", "d": tok["d"], "scale": c}


def _identity(tok, c):
    return {"kind": "gaussian", "d": tok["d"], "covariance": "identity"}


def _keep(x, c, g):
    return x


def _scale(x, c, g):
    return c * x


def _query(x, c, g):
    x[:, -1] *= c
    return x


def _indep_query(x, c, g):
    x[:, -1] = np.sqrt(c) * g.standard_normal(x[:, -1].shape)
    return x


def _scaled_law(train, c, d):
    kind, par, _ = train
    return (kind, c * c * par, None)           # covariance c²Λ; random: scale c²·s


def _query_law(train, c, d):
    kind, par, _ = train
    return ("fixed", par, c * c * par) if kind == "fixed" else None


SHIFTS = {
    "none": Shift(_same, _keep, lambda train, c, d: train),
    "scale": Shift(_same, _scale, _scaled_law),                     # x → c·x, query included
    "query_only": Shift(_same, _query, _query_law),                 # x_q → c·x_q
    # ZFB's test prompts: Λ = c·diag(λ), λ_i ~ Exp(1), new per prompt, whatever the training law
    "random_covariance": Shift(_random, _keep, lambda train, c, d: ("random", c, None)),
    "random_covariance_indep_query": Shift(_random, _indep_query, lambda train, c, d: ("random", c, c * np.eye(d))),
    # ZFB §5's fixed test prompts: x ~ N(0, I), whatever the training law (the seed's "fixed matrices")
    "identity": Shift(_identity, _keep, lambda train, c, d: ("fixed", np.eye(d), None)),
}


def get(kind: str) -> Shift:
    try:
        return SHIFTS[kind]
    except KeyError:
        raise ValueError(f"evaluate.shifts.kind: unknown shift {kind!r}; known: {', '.join(SHIFTS)}") from None


def shifted_law(kind: str, train, c: float, d: int):
    """The test law of shift `kind` at strength c for a model trained on law `train`."""
    return get(kind).law(train, c, d)


def theory(B, law, d: int, M: int) -> tuple[float, float]:
    """(MSE, slope of ŷ on y) of ŷ = x_qᵀ B m̂ on test prompts of length M drawn from `law`;
    exact for any B (not only the optimum): icl.theory.lsa."""
    if law is None:
        return np.nan, np.nan
    kind, par, q = law
    if kind == "fixed":
        return lsa.risk(B, par, M, Lam_query=q), lsa.slope(B, par, q)
    return lsa.random_cov_risk(B, d, M, scale=par, Lam_query=q), lsa.random_cov_slope(B, d, scale=par, Lam_query=q)


def theory_cell(spec: dict, kind: str, c, M: int, B=None):
    """(mse, slope) on this cell of ŷ = x_qᵀ B m̂, exact at finite N and M: B = the LSA optimum by
    default, or any matrix (a trained LSA's learned one). NaN where there is no closed form."""
    law = get(kind)                             # an unknown shift is an error here too
    if spec["task"]["kind"] != "linear":
        return np.nan, np.nan
    B0, tk, par = lsa_optimum(spec)
    if B0 is None:
        return np.nan, np.nan
    d = spec["tokens"]["d"]
    train = ("fixed", par, None) if tk == "gaussian" else ("random", par, None)
    return theory(B0 if B is None else B, law.law(train, c, d), d, M)
