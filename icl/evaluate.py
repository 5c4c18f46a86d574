"""Evaluation under shift (ZFB): every trained model of a shard and every baseline, on the same
test prompts, over test lengths M and shifts; one row per (predictor, shift, c, M).

Baselines: OLS (minimum norm), ridge, 1-NN, a Nadaraya-Watson kernel smoother (what softmax
attention approximates), for discrete tokens the oracle that averages the labels of the tokens
sharing the query's feature (what perfectly converged attention computes), and the closed-form
LSA optimum with no training ("lsa_limit"). Rows of
trained LSA runs and of lsa_limit carry the theory's exact MSE and slope at the optimum
(icl.theory.lsa); trained LSA rows also carry them at the run's learned matrix
(theory_*_learned), so formula error and optimisation error can be told apart. What each shift
does to the prompts and to the theory lives in icl.shifts.

A step of its own after training (`icl evaluate`, reading the trained parameters from the
shard's .npz): adding a shift or a test length reruns this, never the training.
"""
from __future__ import annotations

import os
import sys
import time

import numpy as np
import pandas as pd
import torch

from icl import models, shifts
from icl.data import STREAM_EVAL, read_datasets, rng, sample_tokens
from icl.plan import eval_bytes, stable_hash
from icl.tables import SHIFT_DTYPES, empty_shift, read_shard, write_parquet
from icl.tasks import sample_labels
from icl.theory import lsa
from icl.theory.table import lsa_optimum
from icl.train import pick_device


def cells(ev: dict) -> list[tuple[str, float | None]]:
    out = []
    for sh in ev["shifts"]:
        if sh["kind"] == "none":
            out.append(("none", None))
        else:
            out += [(sh["kind"], float(c)) for c in sh.get("c", [1.0])]
    return out


def eval_id(spec: dict) -> str:
    """Evaluation prompts depend on the data distribution, the evaluate section and the seed only."""
    return stable_hash({k: spec[k] for k in ("tokens", "task", "evaluate", "seed")})


def prompt_set(spec: dict) -> tuple[str, int]:
    """What a run's baselines depend on: its evaluation prompts, and N (lsa_limit's training length)."""
    return eval_id(spec), spec["prompts"]["N"]


def eval_prompts(spec: dict, feats, kind: str, c, M: int, stream: int):
    """P prompts of M context tokens and a query (last), shifted as the cell says; float64.
    Returns x (P, M+1, d), y (P, M+1) and each token's feature index (-1 for continuous tokens)."""
    shift, P = shifts.get(kind), spec["evaluate"]["prompts"]
    g = rng(spec["seed"], STREAM_EVAL + stream)
    x, feat = sample_tokens(shift.tokens(spec["tokens"], c), feats, P, M + 1, g)
    x = shift.edit(x, c, g)
    y = sample_labels(spec["task"], x, g)
    return x, y, feat


def theory_cell(spec: dict, kind: str, c, M: int, B=None):
    """(mse, slope) on this cell of ŷ = x_qᵀ B m̂, exact at finite N and M: B = the LSA optimum by
    default, or any matrix (a trained LSA's learned one). NaN where there is no closed form."""
    law = shifts.get(kind)                                    # an unknown shift is an error here too
    if spec["task"]["kind"] != "linear":
        return np.nan, np.nan
    B0, tk, par = lsa_optimum(spec)
    if B0 is None:
        return np.nan, np.nan
    d = spec["tokens"]["d"]
    train = ("fixed", par, None) if tk == "gaussian" else ("random", par, None)
    return shifts.theory(B0 if B is None else B, law.law(train, c, d), d, M)


def _stats(pred: np.ndarray, y: np.ndarray):
    """MSE, its standard error, the slope Σŷy/Σy² (regression through the origin, as the theory's
    E[ŷy]/E[y²]) and the slope's heteroskedasticity-robust standard error sqrt(Σ r²y²)/Σy²."""
    err = (pred - y) ** 2
    n = err.shape[-1]
    yy = (y * y).sum(-1)
    slope = (pred * y).sum(-1) / yy
    resid = pred - slope[..., None] * y
    slope_se = np.sqrt((resid * resid * y * y).sum(-1)) / yy
    return err.mean(-1), err.std(-1, ddof=1) / np.sqrt(n), slope, slope_se


def baselines(x: np.ndarray, y: np.ndarray, ridge: float, feat: np.ndarray | None = None) -> dict:
    """Predictions of the query's label from the context alone: x (P, M+1, d), y (P, M+1).
    feat (P, M+1): feature indices of discrete tokens; with it, the feature oracle is added (the
    mean label of the context tokens that share the query's feature, or of all context tokens
    when none does)."""
    X, t, xq = x[:, :-1], y[:, :-1], x[:, -1]
    d = X.shape[-1]
    XtX = np.einsum("pmi,pmj->pij", X, X)
    Xty = np.einsum("pmi,pm->pi", X, t)
    w_ols = np.einsum("pij,pj->pi", np.linalg.pinv(XtX, hermitian=True), Xty)   # = pinv(X) y: minimum norm
    w_ridge = np.linalg.solve(XtX + ridge * np.eye(d), Xty[..., None])[..., 0]
    dist2 = ((X - xq[:, None]) ** 2).sum(-1)
    h2 = np.median(dist2, axis=1, keepdims=True) + 1e-12    # bandwidth: median squared distance
    logits = -dist2 / h2
    wts = np.exp(logits - logits.max(1, keepdims=True))
    nw = (wts * t).sum(1) / wts.sum(1)
    nn = np.take_along_axis(t, dist2.argmin(1)[:, None], 1)[:, 0]
    out = {"ols": (xq * w_ols).sum(-1), "ridge": (xq * w_ridge).sum(-1), "nearest_neighbor": nn,
           "nadaraya_watson": nw}
    if feat is not None and (feat >= 0).all():
        same = feat[:, :-1] == feat[:, -1:]
        n_same = same.sum(1)
        out["feature_oracle"] = np.where(n_same > 0, (same * t).sum(1) / np.maximum(n_same, 1), t.mean(1))
    return out


def baseline_owners(runs: list[dict]) -> dict:
    """Which shard evaluates the baselines of each prompt set (eval_id, N): the first by name of
    the shards that hold it, so every set is done once per experiment, not once per model."""
    owners: dict = {}
    for r in runs:
        key = prompt_set(r["spec"])
        owners[key] = min(owners.get(key, r["shard"]), r["shard"])
    return owners


def evaluate_shard(runs, cache, model, params, active, dev, label="shard", baseline_keys=None) -> pd.DataFrame:
    """All rows of shift.parquet that this shard contributes (empty without an evaluate section).
    baseline_keys: the (eval_id, N) prompt sets whose baselines this shard evaluates (None: all)."""
    spec0 = runs[0]["spec"]
    ev = spec0.get("evaluate")
    if not ev:
        return empty_shift()
    rows = []
    live = active.cpu().numpy()
    # the trained LSA's own matrix: the theory at it separates formula error (measured vs theory at
    # the learned B) from optimisation error (theory at the learned B vs at the optimum)
    learned = model.effective(params).double().cpu().numpy() if model.linear_attention else None
    nan2 = (np.nan, np.nan)
    for ci, (kind, c) in enumerate(cells(ev)):
        for li, M in enumerate(ev["lengths"]):
            stream = 1000 * ci + li
            data = [eval_prompts(r["spec"], cache[r["data_id"]]["features"], kind, c, M, stream) for r in runs]
            x = torch.as_tensor(np.stack([d[0] for d in data]), dtype=torch.float32, device=dev)
            y = torch.as_tensor(np.stack([d[1] for d in data]), dtype=torch.float32, device=dev)
            with torch.no_grad():
                pred = model.forward(params, x, y)[0].double().cpu().numpy()
            target = np.stack([d[1][:, -1] for d in data])
            mse, se, slope, slope_se = _stats(pred, target)
            cval = np.nan if c is None else c
            c1 = c if c is not None else 1.0
            for i, r in enumerate(runs):
                th = theory_cell(r["spec"], kind, c1, M) if learned is not None else nan2
                thl = theory_cell(r["spec"], kind, c1, M, B=learned[i]) if learned is not None and live[i] else nan2
                rows.append({"predictor": r["spec"]["model"]["name"], "model_kind": model.kind, "run_id": r["run_id"],
                             "eval_id": eval_id(r["spec"]), "N": r["spec"]["prompts"]["N"], "shift": kind, "c": cval,
                             "M": M, "mse": mse[i] if live[i] else np.nan, "mse_se": se[i] if live[i] else np.nan,
                             "slope": slope[i] if live[i] else np.nan, "slope_se": slope_se[i] if live[i] else np.nan,
                             "theory_mse": th[0], "theory_slope": th[1],
                             "theory_mse_learned": thl[0], "theory_slope_learned": thl[1]})
            done = set()
            for i, r in enumerate(runs):                      # baselines once per distinct prompt set
                key = prompt_set(r["spec"])
                if key in done or (baseline_keys is not None and key not in baseline_keys):
                    continue
                done.add(key)
                xs, ys, fs = data[i]
                preds = baselines(xs, ys, ev.get("ridge", 0.1), fs)
                B, _, _ = lsa_optimum(r["spec"])
                if B is not None and r["spec"]["task"]["kind"] == "linear":
                    preds["lsa_limit"] = lsa.lsa_predict(B, xs[:, :-1], ys[:, :-1], xs[:, -1])
                for name, p in preds.items():
                    m, s_, sl, sl_se = _stats(p[None], ys[None, :, -1])
                    th = theory_cell(r["spec"], kind, c1, M) if name == "lsa_limit" else nan2
                    rows.append({"predictor": name, "model_kind": "baseline", "run_id": None,
                                 "eval_id": key[0], "N": key[1] if name == "lsa_limit" else None,
                                 "shift": kind, "c": cval, "M": M, "mse": m[0], "mse_se": s_[0], "slope": sl[0],
                                 "slope_se": sl_se[0],
                                 "theory_mse": th[0], "theory_slope": th[1],
                                 "theory_mse_learned": np.nan, "theory_slope_learned": np.nan})
        print(f"[{label}] evaluated shift {kind} c={c}", file=sys.stderr, flush=True)
    return pd.DataFrame(rows, columns=list(SHIFT_DTYPES)).astype(SHIFT_DTYPES)


def evaluate_trained(runs: list[dict], data_paths: dict, trained_path: str, out_path: str, device: str = "auto",
                     threads: int | None = None, budget_mb: int = 4096, label: str = "shard",
                     baseline_keys=None) -> pd.DataFrame:
    """shift.parquet rows of one trained shard. Runs are evaluated in chunks that fit budget_mb;
    each prompt set's baselines once, in the first chunk that holds it."""
    if threads:
        torch.set_num_threads(threads)
    dev = pick_device(device)
    trained = read_shard(trained_path, only=("param_", "run_id", "diverged_at"))
    order = {str(r): i for i, r in enumerate(trained["run_id"])}
    missing = [r["run_id"] for r in runs if r["run_id"] not in order]
    if missing:
        raise RuntimeError(f"{trained_path} holds no run {missing[0]}: it was trained for another plan; "
                           "delete it and rerun snakemake")
    t0 = time.time()
    spec0 = runs[0]["spec"]
    if not spec0.get("evaluate"):
        write_parquet(empty_shift(), out_path)
        return empty_shift()
    model = models.build(spec0["model"], spec0["tokens"]["d"])
    cache = read_datasets(runs, data_paths)
    todo = {prompt_set(r["spec"]) for r in runs} if baseline_keys is None else set(baseline_keys)
    size = max(1, min(len(runs), budget_mb * 2**20 // eval_bytes(spec0)))
    parts = []
    for i in range(0, len(runs), size):
        chunk = runs[i:i + size]
        idx = [order[r["run_id"]] for r in chunk]
        params = {k[len("param_"):]: torch.as_tensor(v[idx], device=dev) for k, v in trained.items()
                  if k.startswith("param_")}
        active = torch.as_tensor(trained["diverged_at"][idx] < 0, device=dev)
        where = label if size >= len(runs) else f"{label} runs {i + 1}-{i + len(chunk)}/{len(runs)}"
        parts.append(evaluate_shard(chunk, cache, model, params, active, dev, where, todo))
        todo -= {prompt_set(r["spec"]) for r in chunk}
    df = pd.concat(parts, ignore_index=True) if len(parts) > 1 else parts[0]
    write_parquet(df, out_path)
    print(f"[{label}] {len(runs)} runs evaluated on {dev} in {time.time() - t0:.1f}s -> {os.path.basename(out_path)}",
          file=sys.stderr, flush=True)
    return df
