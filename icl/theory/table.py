"""theory.parquet and theory_curves.parquet: the theory's prediction for every planned run, so
reports and notebooks compare like with like (one row per run_id, as the measured tables)."""
from __future__ import annotations

import functools
import hashlib
import json
import os
import zipfile
from pathlib import Path
from typing import NamedTuple

import numpy as np

from icl.data import covariance, feature_probs, features
from icl.jobs.runtime import log_epochs
from icl.settings import Tokens
from icl.tasks import family
from icl.theory import ldl, lsa
from icl.theory.lsa import lsa_optimum, lsa_target  # noqa: F401  (here too: shifts, baselines, claims import them from the table)

EPS = 1e-2   # the theorems' absolute accuracy ε used for T_star (unit constants)


def ldl_rows(plan_runs: list[dict], flat_max_L: float | None = None, mean_field: frozenset = frozenset()) -> pd.DataFrame:
    """LDL's predictions per run: L*, the flat/sharp split every table and figure uses (`L_split`,
    icl.theory.ldl.split: the config's report.flat_max_L, else L*; on continuous tokens only the
    config's split, with no regime: they have no L*) and the regime it gives, the
    time scales at unit constants, the collapse clock's rate, Eq. 4's label gap measured
    (`eq4_ratio`), and for softmax_q under GD how large
    one step is against the population loss's curvature (`mf_step`, icl.theory.ldl.mean_field_step:
    where the mean-field curve makes a prediction). `mean_field`: the kinds with a mean-field limit
    (icl.models.kinds("mean_field"), asked by the caller: the theory sits below the models)."""
    import pandas as pd   # here, not at the top: training jobs import lsa_optimum and never a table
    rows, memo = [], {}
    for r in plan_runs:
        s = r["spec"]
        tok, task, model = s["tokens"], s["task"], s["model"]
        row = {"run_id": r["run_id"], "regime": None, "L_star": np.nan, "L_split": np.nan, "delta_conc": np.nan,
               "T1": np.nan, "T_star": np.nan, "n_phases_pred": pd.NA, "clock_per_epoch": np.nan, "mf_step": np.nan,
               "eq4_ratio": np.nan, "one_clock": False}
        if tok["kind"] == "discrete" and family(task["kind"]).ldl:
            K, N, D, L, eta = tok["K"], s["prompts"]["N"], tok["delta"], task["L"], model["lr"]
            cut = ldl.split(K, N, D, flat_max_L)
            reg = "flat" if L <= cut else "sharp"
            row.update(regime=reg, L_star=ldl.L_star(K, N, D), L_split=cut, delta_conc=ldl.delta_conc(K, N),
                       T1=ldl.T1(K, eta, L, D),
                       T_star=(ldl.T_flat if reg == "flat" else ldl.T_sharp)(K, N, eta, L, D, EPS),
                       n_phases_pred=ldl.predicted_phases(reg), clock_per_epoch=clock_per_epoch(s),
                       mf_step=mean_field_step(s, memo, mean_field), eq4_ratio=eq4_ratio(s),
                       one_clock=on_one_clock(s))
        elif family(task["kind"]).ldl and flat_max_L is not None:
            # continuous tokens have no L* (no Δ, no δ) and no predicted phases: only the config's split of
            # L into the paper's two sets (App. A), which ldl.faster_with_L reads per set
            row.update(L_split=float(flat_max_L))
        rows.append(row)
    df = pd.DataFrame(rows)
    df["n_phases_pred"] = df["n_phases_pred"].astype("Int64")
    df["regime"] = df["regime"].astype("string")
    return df


def label_cov(task: dict, V: np.ndarray) -> np.ndarray | None:
    """The task family's label covariance at features V (icl.tasks: Task.label_cov), computed once
    per task and features: the seeds of a sweep share them, and each run asks four times. Read-only."""
    return _label_cov(json.dumps(task, sort_keys=True), V.shape, np.ascontiguousarray(V, float).tobytes())


@functools.lru_cache(maxsize=1024)
def _label_cov(task: str, shape: tuple, V: bytes) -> np.ndarray | None:
    spec = json.loads(task)
    C = family(spec["kind"]).label_cov(spec, np.frombuffer(V).reshape(shape))
    if C is not None:
        C.setflags(write=False)
    return C


def mean_field_step(spec: dict, memo: dict, mean_field: frozenset) -> float:
    """icl.theory.ldl.mean_field_step for a run of a mean-field kind (softmax_q) under GD whose task
    knows its label covariance (NaN otherwise); runs that share features, frequencies, task and η
    share it."""
    tok, task, model = spec["tokens"], spec["task"], spec["model"]
    if not (model["kind"] in mean_field and model["optimizer"] == "gd"):
        return np.nan
    V = features(tok, spec["seed"]).astype(float)
    C = label_cov(task, V)
    if C is None:
        return np.nan
    p = feature_probs(tok)
    key = (V.tobytes(), p.tobytes(), C.tobytes(), model["lr"], spec["train"]["epochs"])
    if key not in memo:
        memo[key] = ldl.mean_field_step(V, p, C, model["lr"], spec["train"]["epochs"])
    return memo[key]


EQ4_SHRINK = 1e-3     # the small-LΔ reference of eq4_ratio: the same task at 10⁻³ of the features' separation


def eq4_ratio(spec: dict) -> float:
    """Eq. 4 measured (icl.theory.ldl.eq4_ratio): the label gap sqrt(E[(f(v_k) − f(v_k'))²]) per
    unit LΔ at the run's features, against its small-LΔ value (the same task at EQ4_SHRINK times
    the separation); NaN where the task family has no label covariance. Below
    icl.theory.ldl.EQ4_MIN the run is outside the theorems' label-gap assumption (icl.analyse.claims.ldl)."""
    tok, task = spec["tokens"], spec["task"]
    V = features(tok, spec["seed"]).astype(float)
    C = label_cov(task, V)
    if C is None:
        return np.nan
    return ldl.eq4_ratio(V, C, label_cov(task, V * EQ4_SHRINK), EQ4_SHRINK)


def on_one_clock(spec: dict) -> bool:
    """icl.theory.ldl.one_clock at the run's features and labels: whether a mean-field kind under GD
    would follow the one collapse clock there (the claims ask the model and the optimiser)."""
    tok = spec["tokens"]
    V = features(tok, spec["seed"]).astype(float)
    return ldl.one_clock(V, label_cov(spec["task"], V), float(Tokens.of(tok).noise or 0.0))


def clock_per_epoch(spec: dict) -> float:
    """Collapse-clock units per epoch (icl.theory.ldl.collapse_rate) where the task family knows
    its label covariance (icl.tasks), else the theorems' η L² Δ² / K."""
    tok, task, eta = spec["tokens"], spec["task"], spec["model"]["lr"]
    V = features(tok, spec["seed"]).astype(float)
    C = label_cov(task, V)
    return ldl.collapse_rate(V, C, eta) if C is not None else eta * task["L"] ** 2 * tok["delta"] ** 2 / tok["K"]


def lsa_target_limit(spec: dict):
    """The optimum's N → ∞ limit: Λ⁻¹ (fixed covariance), I/(3·scale) (random covariances). A
    trained LSA must be told apart from it, or the claim that it finds Γ⁻¹ is not tested."""
    tok = spec["tokens"]
    if spec["task"]["kind"] != "linear" or tok["kind"] not in ("gaussian", "random_covariance"):
        return None
    if tok["kind"] == "gaussian":
        return np.linalg.inv(covariance(tok))
    return np.eye(tok["d"]) / (3.0 * Tokens.of(tok).scale)


def lsa_rows(plan_runs: list[dict]) -> pd.DataFrame:
    """target (flattened effective matrix), its N → ∞ limit `target_limit`, and the optimum's
    in-distribution test error at length N."""
    import pandas as pd   # here, not at the top: training jobs import lsa_optimum and never a table
    rows = []
    for r in plan_runs:
        s = r["spec"]
        B, lim = lsa_target(s), lsa_target_limit(s)
        mse = np.nan
        if B is not None:
            tok, N = s["tokens"], s["prompts"]["N"]
            mse = lsa.risk(B, covariance(tok), N) if tok["kind"] == "gaussian" else \
                lsa.random_cov_risk(B, tok["d"], N, scale=Tokens.of(tok).scale)
        rows.append({"run_id": r["run_id"], "target": None if B is None else B.ravel().tolist(),
                     "target_limit": None if lim is None else lim.ravel().tolist(),
                     "theory_test_mse": mse, "theory_test_loss": 0.5 * mse})
    return pd.DataFrame(rows)


def train_counts(spec: dict) -> tuple[np.ndarray, np.ndarray]:
    """The feature counts (P, K) of a run's training prompts' contexts and their queries' features
    (P,), drawn as icl.data draws them (the stored training split; for fresh-prompt runs it stands in
    for each epoch's prompts, drawn from the same law)."""
    from icl.data import STREAM_TRAIN, make_split
    tok = spec["tokens"]
    drawn = make_split(spec, features(tok, spec["seed"]), spec["prompts"]["train"], STREAM_TRAIN, tokens=False)
    if "counts" in drawn:                  # prompts.form: counts
        return drawn["counts"].astype(np.int64), drawn["query"].astype(np.int64)
    feat = drawn["feat"].astype(np.int64)
    counts = (feat[:, :-1, None] == np.arange(tok["K"])).sum(1)
    return counts, feat[:, -1]


def mean_field_rows(plan_runs: list[dict], mean_field: frozenset, store: str | None = None) -> pd.DataFrame:
    """theory_curves.parquet's rows (mean_field_flows, on each run's logged epochs)."""
    return curve_rows(mean_field_flows(plan_runs, mean_field, store))


def mean_field_flows(plan_runs: list[dict], mean_field: frozenset, store: str | None = None) -> list[tuple]:
    """LDL mean-field loss and own-attention for softmax_q runs on discrete tokens with GD, and the
    same flow on each run's own training prompts' feature counts (`mean_field_loss_sampled`, beside
    the balanced |V_k| = p_k N: the approximation's measured bias, which ldl.mean_field's band reads),
    every epoch: per run (run id, its logged epochs, (balanced loss, own attention), sampled loss).
    Each distinct flow is integrated once (`flow_curves`): seeds whose features do not depend on the
    seed share the balanced flow, runs with the same prompts' counts, task and step the sampled one;
    `store`: flow_curves' file of flows integrated before."""
    flows, runs, drawn = {}, [], {}
    for r in plan_runs:
        s = r["spec"]
        tok, task, model = s["tokens"], s["task"], s["model"]
        if not (model["kind"] in mean_field and model["optimizer"] == "gd" and tok["kind"] == "discrete"):
            continue
        V = features(tok, s["seed"]).astype(float)
        C = label_cov(task, V)
        if C is None:   # no closed-form label covariance for this task family: no curve
            continue
        p = feature_probs(tok)
        eta, epochs, K = model["lr"], s["train"]["epochs"], len(p)
        ep = np.asarray(log_epochs(epochs, s["train"]["log_every"]))
        data_key = (s["seed"], json.dumps(tok, sort_keys=True), s["prompts"]["N"], s["prompts"]["train"])
        if data_key not in drawn:     # the prompts' features are drawn before their labels: one draw for every task
            drawn[data_key] = train_counts(s)
        counts, query = drawn[data_key]
        task_key = (V.shape, V.tobytes(), C.tobytes(), eta, epochs)
        balanced = ("balanced", p.tobytes()) + task_key
        sampled = ("sampled", counts.shape, counts.tobytes(), query.tobytes()) + task_key
        if balanced not in flows:      # the balanced counts as K prompts, query k, weighted p_k
            flows[balanced] = Flow(V, C, np.tile(p, (K, 1)), np.arange(K), p, eta, epochs)
        if sampled not in flows:
            flows[sampled] = Flow(V, C, counts, query, np.full(len(query), 1.0 / len(query)), eta, epochs)
        runs.append((r["run_id"], ep, balanced, sampled))
    curves = flow_curves(flows, store)
    return [(run_id, ep, curves[balanced], curves[sampled]) for run_id, ep, balanced, sampled in runs]


def curve_rows(flows: list[tuple]) -> pd.DataFrame:
    """The flows (mean_field_flows: run id, logged epochs, (loss, own attention) of the balanced flow
    and of the sampled-count one, each every epoch) on each run's logged epochs, long:
    theory_curves.parquet (the sampled-count flow's loss; its own attention is counted by flow_rows)."""
    import pandas as pd
    if not flows:
        return pd.DataFrame({"run_id": pd.Series(dtype="string"), "epoch": pd.Series(dtype="int64"),
                             "metric": pd.Series(dtype="string"), "value": pd.Series(dtype="float64")})
    names = np.array(["mean_field_loss", "mean_field_attn_own", "mean_field_loss_sampled"])
    cols = {"run_id": [], "epoch": [], "metric": [], "value": []}
    for run_id, ep, (loss, own), (smp, _) in flows:
        cols["run_id"].append(np.repeat(run_id, 3 * len(ep)))
        cols["epoch"].append(np.tile(ep, 3))
        cols["metric"].append(np.repeat(names, len(ep)))
        cols["value"].append(np.concatenate([loss[ep], own[ep], smp[ep]]))
    return pd.DataFrame({k: np.concatenate(v) for k, v in cols.items()})


FLOW_LEVEL = 0.5     # half of the flow's start (uniform attention's loss): the crossing on the collapse clock


def flow_rows(flows: list[tuple]) -> pd.DataFrame:
    """Per run, read on every epoch of its flows (mean_field_flows): the epoch at which the
    sampled-count flow first falls to FLOW_LEVEL of its start (`flow_t_unif_5e-1_sampled`),
    interpolated in log-loss (NaN if never): the time icl.analyse.collapse sets beside the run's own
    t_unif_5e-1 on the clock (the balanced flow's it integrates itself, from the step alone); and
    the phase fits of both flows' own logit (icl.tables.phases.fit over the window the runs' are
    fitted on: `flow_phase_rms`, `flow_phase_ends`, the same `_sampled`), which the analysis counts
    against the runs' own seeds' spread, as it counts the runs."""
    import pandas as pd
    from icl.tables.phases import fit, logit, phase_window
    rows, fitted = [], {}

    def fits(loss, own):
        key = (loss.tobytes(), own.tobytes())
        if key not in fitted:
            z = logit(own[:phase_window(loss, loss[0]) + 1])
            fitted[key] = fit(np.arange(len(z), dtype=float), z)
        return fitted[key]
    for run_id, _, (loss, own), (smp, smp_own) in flows:
        bal, sam = fits(loss, own), fits(smp, smp_own)
        rows.append({"run_id": run_id, "flow_t_unif_5e-1_sampled": first_crossing(smp / smp[0], FLOW_LEVEL),
                     "flow_phase_rms": bal.rms, "flow_phase_ends": bal.ends,
                     "flow_phase_rms_sampled": sam.rms, "flow_phase_ends_sampled": sam.ends})
    return pd.DataFrame(rows, columns=["run_id", "flow_t_unif_5e-1_sampled", "flow_phase_rms", "flow_phase_ends",
                                       "flow_phase_rms_sampled", "flow_phase_ends_sampled"])


def first_crossing(ratio: np.ndarray, x: float) -> float:
    """The first epoch at which an every-epoch ratio falls to x, interpolated in its log between the
    epochs around it; NaN if never."""
    r = np.asarray(ratio, float)
    hit = np.flatnonzero(r <= x)
    if not len(hit):
        return float("nan")
    i = int(hit[0])
    if i == 0:
        return 0.0
    a, b = r[i - 1], max(r[i], 1e-300)
    return float(i - 1 + (np.log(a) - np.log(x)) / (np.log(a) - np.log(b)))


class Flow(NamedTuple):
    """One mean-field flow's inputs: features V (K, d), label covariance C (K, K), prompts' counts
    (P, K), their queries (P,) and shares of the loss (P,), the step and the number of epochs."""
    V: np.ndarray
    C: np.ndarray
    counts: np.ndarray
    query: np.ndarray
    weight: np.ndarray
    eta: float
    epochs: int


def flow_curves(flows: dict, store: str | None = None) -> dict:
    """{key: (loss, own attention)} over epochs 0..epochs of every flow (flows.count_flows): flows of one
    K, number of prompts and epochs are integrated in one call. With `store` (an .npz), the flows it
    holds under the same inputs and integrator are read, not integrated again, and it is rewritten
    with this call's flows: a plan that gains runs integrates only theirs."""
    from icl.theory.flows import count_flows   # here: numba is the theory step's alone
    names = {key: flow_key(f) for key, f in flows.items()} if store else {}
    known = read_flows(store) if store and os.path.exists(store) else {}
    out = {key: known[h] for key, h in names.items() if h in known}
    groups: dict = {}
    for key, f in flows.items():
        if key not in out:
            groups.setdefault((len(f.V), len(f.query), f.epochs), []).append(key)
    for (K, P, epochs), keys in groups.items():
        fs = [flows[k] for k in keys]
        loss, own = count_flows(np.stack([f.V @ f.V.T for f in fs]), np.stack([ldl.diff_cov(f.C) for f in fs]),
                                np.stack([f.counts for f in fs]), np.stack([f.query for f in fs]),
                                np.stack([f.weight for f in fs]), np.array([f.eta for f in fs], float), epochs)
        out.update(zip(keys, zip(loss, own)))
    if store and flows:
        write_flows(store, {names[key]: out[key] for key in flows})
    return out


def flow_key(f: Flow) -> str:
    """A flow's name in a store: a hash of its inputs and of the integrator's sources (ldl.py, flows.py), so a
    changed input or a changed flow is integrated anew."""
    h = hashlib.sha256(_integrator())
    for a in (f.V, f.C, f.counts, f.query, f.weight):
        a = np.ascontiguousarray(a)
        h.update(repr((a.shape, a.dtype.str)).encode())
        h.update(a.tobytes())
    h.update(repr((float(f.eta), int(f.epochs))).encode())
    return h.hexdigest()[:32]


@functools.cache
def _integrator() -> bytes:
    """The sources a flow's numbers depend on: the flow's formulas and its compiled loop."""
    return b"".join(Path(ldl.__file__).with_name(f).read_bytes() for f in ("ldl.py", "flows.py"))


def read_flows(path: str) -> dict:
    """{name: (loss, own)} from a store written by write_flows; none from a file it cannot read (a
    cache: the flows are integrated anew)."""
    try:
        with np.load(path) as z:
            names, ends, loss, own = z["names"], z["ends"], z["loss"], z["own"]
    except (OSError, ValueError, KeyError, zipfile.BadZipFile):
        return {}
    starts = np.r_[0, ends[:-1]]
    return {str(n): (loss[a:b], own[a:b]) for n, a, b in zip(names, starts, ends)}


def write_flows(path: str, curves: dict) -> None:
    """The flows' curves, concatenated (one file, whatever the number of flows)."""
    from icl.store.files import atomic_path
    lengths = [len(loss) for loss, _ in curves.values()]
    with atomic_path(path) as tmp:
        np.savez(tmp, names=np.array(list(curves), dtype=str), ends=np.cumsum(lengths, dtype=np.int64),
                 loss=np.concatenate([c[0] for c in curves.values()]), own=np.concatenate([c[1] for c in curves.values()]))
