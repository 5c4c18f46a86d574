"""Evaluation under shift (ZFB): every trained model of a shard and every baseline, on the same
test prompts, over test lengths M and shifts; one row per (predictor, shift, c, M).

The baselines (OLS, ridge, 1-NN, Nadaraya-Watson, the feature oracle, the untrained LSA optimum
"lsa_limit") are icl.evaluate.baselines'. Rows of trained LSA runs and of lsa_limit carry the theory's
exact MSE and slope at the optimum (icl.evaluate.shifts.theory_cell); trained LSA rows also carry them at
the run's learned matrix (theory_*_learned), so formula error and optimisation error can be told
apart. What each shift does to the prompts and to the theory lives in icl.evaluate.shifts.

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

from icl.evaluate import baselines, shifts

from icl import models
from icl.data import STREAM_EVAL, read_datasets, rng, sample_tokens
from icl.store.io import SHIFT_DTYPES, empty_shift, read_shard, write_parquet
from icl.jobs.runtime import pick_device, stable_hash
from icl.evaluate.shifts import theory_cell
from icl.tasks import sample_labels


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
                for name, p in baselines.predict_all(xs, ys, ev.get("ridge", 0.1), fs, r["spec"]).items():
                    b = baselines.REGISTRY[name]
                    m, s_, sl, sl_se = _stats(p[None], ys[None, :, -1])
                    th = b.theory(r["spec"], kind, c1, M)
                    rows.append({"predictor": name, "model_kind": "baseline", "run_id": None,
                                 "eval_id": key[0], "N": key[1] if b.trained_length else None,
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
    size = max(1, min(len(runs), budget_mb * 2**20 // models.MODELS[spec0["model"]["kind"]].eval_bytes(spec0)))
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
