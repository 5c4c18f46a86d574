"""Task families: how each draws its labels, and what the theory and the report may say about it.

A family lives in one place: a new one is a class here (registered in TASKS) plus its settings in
the schema (`$defs.task` of icl/schema/config.schema.yaml). The rest of the package asks it:
data.py draws labels through `sample_labels`, theory/table.py asks `ldl` and `label_cov`, the
report asks `ldl`, `regression` and `scales_with_L` (the scale identity of icl.analyse.claims.ldl). A family's closed
forms (the cosine's label covariance) live here too, so the theory imports the tasks and never
the other way round.
"""
from __future__ import annotations

import functools
import math

import numpy as np


PURPOSE = 10          # the first purpose of a task's draws in a fresh-prompt stream (icl.train.streams); tokens' are below


class Task:
    """A family of functions f, one drawn per prompt; `task` is the config's task section."""

    kind = ""
    ldl = False          # has a Lipschitz constant L: reported against LDL's flat/sharp theory
    regression = False   # in-context linear regression, y = <w, x>: Garg et al.'s and Hoogland et al.'s task

    def draw(self, task: dict, x: np.ndarray, g: np.random.Generator) -> np.ndarray:
        """Labels y (P, T) of tokens x (P, T, d), a fresh function per prompt."""
        raise NotImplementedError

    def fresh_settings(self, tasks: list[dict], d: int) -> dict:
        """The per-run numbers `draw_fresh` needs, from each run's task section, as float32 arrays
        (R, 1, 1): made once per job and moved to the device once."""
        return {}

    def draw_fresh(self, settings: dict, x, stream):
        """Labels (R, B, T) of tokens x (R, B, T, d) on x's device, for R runs at once (`settings`:
        fresh_settings' arrays as tensors there), from `stream` (icl.train.streams.Stream: a
        counter-based stream per run)."""
        raise NotImplementedError

    def scales_with_L(self, runs) -> bool:
        """True when these runs (rows with the task's settings as columns, as in runs.parquet)
        see labels that are L times one function of the same draws. Then a model linear in the
        labels has Loss(L) = L²·Loss(1) and the data cannot test the theory's L."""
        return True

    def label_cov(self, task: dict, V: np.ndarray) -> np.ndarray | None:
        """C[n, m] = E_f[f(v_n) f(v_m)] at the features V (rows), for LDL's mean-field curve;
        None where the family has no closed form (no curve is drawn)."""
        return None


class Cosine(Task):
    """LDL §6: f(x) = (L/c)·cos(c·<w,x> + φ), w uniform on the sphere, φ ~ U[0, 2π). Exactly
    L-Lipschitz. At one c, L only scales the labels; with c tied to L (fixed amplitude L/c) L is
    the frequency and changes the function's shape."""

    kind, ldl = "cosine", True

    def draw(self, task, x, g):
        P, _, d = x.shape
        L, c = task["L"], task["c"]
        w = g.standard_normal((P, d))
        w /= np.linalg.norm(w, axis=1, keepdims=True)
        phi = g.uniform(0.0, 2 * np.pi, size=(P, 1))
        return (L / c) * np.cos(c * np.einsum("ptd,pd->pt", x, w) + phi)

    def fresh_settings(self, tasks, d):
        return {k: np.asarray([t[k] for t in tasks], np.float32).reshape(-1, 1, 1) for k in ("L", "c")}

    def draw_fresh(self, settings, x, stream):
        _, B, _, d = x.shape
        L, c = settings["L"], settings["c"]
        w = stream.normal(PURPOSE, (B, d))
        w = w / w.norm(dim=-1, keepdim=True)
        phi = (2 * math.pi) * stream.uniform(PURPOSE + 1, (B, 1))
        return (L / c) * (c * (x * w.unsqueeze(2)).sum(-1) + phi).cos()

    def scales_with_L(self, runs):
        return "c" in runs and runs["c"].nunique() <= 1

    def label_cov(self, task, V):
        return cosine_label_cov(V, task["L"], task["c"])


def sphere_cos_mean(r: np.ndarray, d: int) -> np.ndarray:
    """Ω_d(r) = E[cos(r w_1)] for w uniform on the unit sphere in R^d (d >= 1).

    For d >= 2, t = w_1 has density ∝ (1 - t²)^{(d-3)/2} on [-1, 1]; with t = cos θ the integrand
    cos(r cos θ) sin^{d-2} θ is smooth and periodic, so 256-point Gauss-Legendre quadrature is
    exact to rounding for r up to ~100 (d = 3 gives sin(r)/r, d = 2 gives J0(r)).
    """
    r = np.asarray(r, dtype=float)
    if d == 1:
        return np.cos(r)
    theta, wgt = _sphere_quadrature(d)
    vals = np.cos(r[..., None] * np.cos(theta))
    return (vals * wgt).sum(-1) / wgt.sum()


@functools.lru_cache(maxsize=None)
def _sphere_quadrature(d: int):
    """Nodes θ and weights of sphere_cos_mean's 256-point Gauss-Legendre rule (made once per d:
    the rule costs milliseconds, and the theory step asks for it once per run)."""
    nodes, weights = np.polynomial.legendre.leggauss(256)
    theta = 0.5 * math.pi * (nodes + 1.0)
    return theta, weights * np.sin(theta) ** (d - 2)


def cosine_label_cov(V: np.ndarray, L: float, c: float) -> np.ndarray:
    """C[n, m] = E_f[f(v_n) f(v_m)] for the cosine task (L/c) cos(c<w,x> + φ)."""
    dist = np.linalg.norm(V[:, None] - V[None], axis=-1)
    return 0.5 * (L / c) ** 2 * sphere_cos_mean(c * dist, V.shape[1])


class Polynomial(Task):
    """LDL App. A: f(x) = xᵀAx + bᵀx, A_ij, b_i ~ N(0, (L/d)²); L scales the labels."""

    kind, ldl = "polynomial", True

    def draw(self, task, x, g):
        P, _, d = x.shape
        s = task["L"] / d
        A = s * g.standard_normal((P, d, d))
        b = s * g.standard_normal((P, d))
        return np.einsum("pti,pij,ptj->pt", x, A, x) + np.einsum("ptd,pd->pt", x, b)

    def fresh_settings(self, tasks, d):
        return {"s": np.asarray([t["L"] / d for t in tasks], np.float32).reshape(-1, 1, 1)}

    def draw_fresh(self, settings, x, stream):
        _, B, _, d = x.shape
        s = settings["s"]
        A = s.unsqueeze(-1) * stream.normal(PURPOSE, (B, d, d))
        b = s * stream.normal(PURPOSE + 1, (B, d))
        return ((x @ A) * x).sum(-1) + (x * b.unsqueeze(2)).sum(-1)


class Linear(Task):
    """ZFB: f(x) = <w,x>, w ~ N(0, I_d); no L (reported against ZFB, not LDL)."""

    kind = "linear"
    regression = True

    def draw(self, task, x, g):
        P, _, d = x.shape
        w = g.standard_normal((P, d))
        return np.einsum("ptd,pd->pt", x, w)

    def draw_fresh(self, settings, x, stream):
        w = stream.normal(PURPOSE, (x.shape[1], x.shape[3]))
        return (x * w.unsqueeze(2)).sum(-1)


TASKS: dict[str, Task] = {t.kind: t for t in (Cosine(), Polynomial(), Linear())}


def family(kind: str) -> Task:
    try:
        return TASKS[kind]
    except KeyError:
        raise ValueError(f"task.kind: unknown {kind!r}; known: {', '.join(TASKS)}") from None


def sample_labels(task: dict, x: np.ndarray, g: np.random.Generator) -> np.ndarray:
    """y = f(x) with a fresh task function per prompt (first axis of x)."""
    return family(task["kind"]).draw(task, x, g)


def scales_with_L(runs) -> bool:
    """True when every family among these runs (task_kind column) only scales its labels by L."""
    return all(family(kind).scales_with_L(group) for kind, group in runs.groupby("task_kind"))
