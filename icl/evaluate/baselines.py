"""The baselines evaluated under shift beside every trained model: predictors of the query's label
from the context alone, with nothing trained. A baseline is one class here, registered with
`@register`; icl.evaluate.cells evaluates every registered one on every prompt set, and its rows of
shift.parquet carry its `name`. Registration order is the order of those rows.

`predict(x, y, feat, ridge, spec)` sees one cell's prompts: x (P, M+1, d) and y (P, M+1) with the
query last (its label is what is predicted, never read), the feature index of each token (P, M+1)
or None for continuous tokens, the ridge penalty (evaluate.ridge) and the run spec the prompts
were drawn for. It returns ŷ (P,), or None where it does not apply to these prompts.
"""
from __future__ import annotations

import numpy as np

from icl.evaluate.shifts import theory_cell
from icl.theory import lsa
from icl.theory.table import lsa_optimum


class Baseline:
    name = ""
    trained_length = False    # depends on the training length N (rows keyed by N as well as eval_id)

    def predict(self, x, y, feat, ridge: float, spec: dict) -> np.ndarray | None:
        raise NotImplementedError

    def theory(self, spec: dict, kind: str, c: float, M: int) -> tuple[float, float]:
        """(mse, slope) the LSA theory predicts for this baseline on the cell; NaN where none."""
        return np.nan, np.nan


REGISTRY: dict[str, Baseline] = {}


def register(cls: type[Baseline]) -> type[Baseline]:
    REGISTRY[cls.name] = cls()
    return cls


def _last_call(fn):
    """fn, remembering its last result for the same argument arrays (by identity; the arrays are
    held, so their ids cannot be reused): OLS and ridge share one XᵀX, nearest neighbour and
    Nadaraya-Watson one distance matrix, when predict_all asks both on the same prompts."""
    last: list = []

    def wrapped(*arrays):
        if last and len(last[0]) == len(arrays) and all(a is b for a, b in zip(last[0], arrays)):
            return last[1]
        out = fn(*arrays)
        last[:] = [arrays, out]
        return out
    wrapped.forget = last.clear         # predict_all lets go of the prompts once every baseline has run
    return wrapped


@_last_call
def _normal_equations(x, y):
    """XᵀX (P, d, d) and Xᵀy (P, d) of the context tokens, and the queries (P, d): batched
    matrix products (BLAS), not einsum, which loops in numpy for these shapes (~10x slower)."""
    X, t = x[:, :-1], y[:, :-1]
    Xt = X.transpose(0, 2, 1)
    return Xt @ X, (Xt @ t[..., None])[..., 0], x[:, -1]


@_last_call
def _sq_distances(x):
    """Squared distance of every context token to its prompt's query: (P, M)."""
    return ((x[:, :-1] - x[:, -1][:, None]) ** 2).sum(-1)


@register
class OLS(Baseline):
    """Least squares on the context, minimum norm where it is underdetermined (M < d)."""
    name = "ols"

    def predict(self, x, y, feat, ridge, spec):
        XtX, Xty, xq = _normal_equations(x, y)
        continuous = feat is None or (feat < 0).all()
        w = None
        if continuous and x.shape[1] - 1 >= x.shape[-1]:    # M ≥ d continuous tokens: XᵀX invertible, one solve
            try:
                w = np.linalg.solve(XtX, Xty[..., None])[..., 0]
            except np.linalg.LinAlgError:       # an exactly singular XᵀX (underflow): the pseudo-inverse below
                w = None
        if w is None:                            # = pinv(X) y: the minimum-norm solution
            w = (np.linalg.pinv(XtX, hermitian=True) @ Xty[..., None])[..., 0]
        return (xq * w).sum(-1)


@register
class Ridge(Baseline):
    name = "ridge"

    def predict(self, x, y, feat, ridge, spec):
        XtX, Xty, xq = _normal_equations(x, y)
        w = np.linalg.solve(XtX + ridge * np.eye(x.shape[-1]), Xty[..., None])[..., 0]
        return (xq * w).sum(-1)


@register
class UniformAttention(Baseline):
    """The mean of the context labels: what softmax attention computes before it has learned
    anything (Q = 0). What a model must beat to have learned in context."""
    name = "uniform_attention"

    def predict(self, x, y, feat, ridge, spec):
        return y[:, :-1].mean(1)


@register
class NearestNeighbor(Baseline):
    """The label of the context token nearest the query."""
    name = "nearest_neighbor"

    def predict(self, x, y, feat, ridge, spec):
        return np.take_along_axis(y[:, :-1], _sq_distances(x).argmin(1)[:, None], 1)[:, 0]


@register
class NadarayaWatson(Baseline):
    """A Gaussian kernel smoother (what softmax attention approximates); bandwidth: the median
    squared distance to the query in the prompt."""
    name = "nadaraya_watson"

    def predict(self, x, y, feat, ridge, spec):
        dist2 = _sq_distances(x)
        logits = -dist2 / (np.median(dist2, axis=1, keepdims=True) + 1e-12)
        wts = np.exp(logits - logits.max(1, keepdims=True))
        return (wts * y[:, :-1]).sum(1) / wts.sum(1)


@register
class FeatureOracle(Baseline):
    """Discrete tokens: the mean label of the context tokens that share the query's feature (of all
    context tokens when none does): what perfectly converged attention computes."""
    name = "feature_oracle"

    def predict(self, x, y, feat, ridge, spec):
        if feat is None or not (feat >= 0).all():
            return None
        t = y[:, :-1]
        same = feat[:, :-1] == feat[:, -1:]
        n_same = same.sum(1)
        return np.where(n_same > 0, (same * t).sum(1) / np.maximum(n_same, 1), t.mean(1))


@register
class LSALimit(Baseline):
    """The LSA's closed-form optimum for the run's training distribution and length N, untrained
    (linear tasks on Gaussian or random-covariance tokens)."""
    name = "lsa_limit"
    trained_length = True

    def predict(self, x, y, feat, ridge, spec):
        if spec is None or spec["task"]["kind"] != "linear":
            return None
        B = lsa_optimum(spec)[0]
        return None if B is None else lsa.lsa_predict(B, x[:, :-1], y[:, :-1], x[:, -1])

    def theory(self, spec, kind, c, M):
        return theory_cell(spec, kind, c, M)


def predict_all(x, y, ridge: float, feat=None, spec: dict | None = None) -> dict[str, np.ndarray]:
    """Every registered baseline's predictions on these prompts, by name (those that apply)."""
    out = {}
    for name, b in REGISTRY.items():
        p = b.predict(x, y, feat, ridge, spec)
        if p is not None:
            out[name] = p
    _normal_equations.forget()
    _sq_distances.forget()
    return out
