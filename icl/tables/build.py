"""The tables step: runs.parquet from the plan, and from the shards' logged arrays the long
tables (curves, attention, matrices, written shard by shard), summary.parquet (the per-run
measurements of icl.tables.measures) and shift.parquet (the shards' evaluations). How the files are
written is icl.store.io's.
"""
from __future__ import annotations

import json
import os
from contextlib import ExitStack

import numpy as np
import pandas as pd
import pyarrow as pa

from icl import models
from icl.store.files import atomic_path
from icl.settings import Tokens, Train
from icl.store.io import (LONG_SCHEMAS, SHIFT_KEY, coded, empty_shift, long_writer, provenance_metadata, read_parquet,
                    read_shard, write_parquet)
from icl.tables.measures import LLC_STATUS, last_layer_map, phases_over_seeds, summary_table
from icl.jobs.parallel import Forked
from icl.jobs.provenance import code_version, stamp


def run_row(run: dict) -> dict:
    """One row of runs.parquet: every parameter of the run by its leaf name; the model settings'
    columns are every kind's (icl.models.setting_columns), None where the run's kind has none."""
    s = run["spec"]
    tok, task, pr, model, tr = Tokens.of(s["tokens"]), s["task"], s["prompts"], s["model"], Train.of(s["train"])
    row = {
        "run_id": run["run_id"], "shard": run["shard"], "data_id": run["data_id"],
        "model": model["name"], "model_kind": model["kind"], "optimizer": model["optimizer"],
        "lr": float(model["lr"]), "lr_rule": model.get("lr_rule"), "lr_ref": model.get("lr_ref"),
        **models.columns(s), "seed": int(s["seed"]),
        "token_kind": tok.kind, "d": tok.d, "K": tok.K, "delta": tok.delta, "noise": tok.noise, "features": tok.features,
        "probs": json.dumps(tok.probs) if tok.probs is not None else None,
        "covariance": (tok.covariance if isinstance(tok.covariance, str) else json.dumps(tok.covariance))
        if tok.covariance is not None else None,
        "scale": tok.scale, "fresh": bool(tr.fresh),
        "task_kind": task["kind"], "L": task.get("L"), "c": task.get("c"),
        "N": pr["N"], "M": pr["train"], "n_test": pr["test"],
        "epochs": tr.epochs, "log_every": tr.log_every, "batch_size": tr.batch_size,
    }
    return row


def runs_table(runs: list[dict], experiment: str, config_hash: str) -> pd.DataFrame:
    df = pd.DataFrame([run_row(r) for r in runs])
    for col, dtype in {"K": "Int64", "batch_size": "Int64", "lr_rule": "string", "lr_ref": "Float64", "delta": "Float64", "noise": "Float64", "L": "Float64",
                       "c": "Float64", "scale": "Float64", **models.setting_columns()}.items():
        df[col] = df[col].astype(dtype)
    df.insert(1, "experiment", experiment)
    df["config_hash"] = config_hash
    df["code_version"] = code_version()
    return df


def _grid(shape: tuple[int, ...]) -> list[np.ndarray]:
    """The index of every axis for each element of a C-ordered array of `shape`, flattened."""
    return [g.ravel() for g in np.meshgrid(*(np.arange(n) for n in shape), indexing="ij", copy=False)]


LOGGED_EXCEPT = ("run_id", "epoch", "diverged_at", "seconds", "device", "device_name", "threads", "precision",
                 "compiled", "fresh_stream", "code_version",
                 "code_hash", "uniform_train_loss", "uniform_test_loss", "oracle_test_loss", "tokens_K", "prompts_N", "train_fresh")


def logged(sh: dict) -> dict:
    """The logged arrays of a shard, (runs, logged epochs, ...) each, in the order they were logged:
    everything but the parameters (param_*), the every-epoch trace (trace_*) and the bookkeeping."""
    return {k: v for k, v in sh.items() if k not in LOGGED_EXCEPT and not k.startswith(("param_", "trace_", "llc_"))}


def long_tables(sh: dict) -> dict[str, pa.Table]:
    """curves / attention / matrices rows of one shard's arrays, as Arrow tables. What a model logs
    decides where it goes: a number per run and epoch is a curve (metric = its name), `attn` the
    attention maps (per layer and head where it has them; layer 0, head 0 otherwise), any other
    matrix a matrix (name = its name)."""
    rid, ep = sh["run_id"].astype(str), sh["epoch"]
    R, E = len(rid), len(ep)
    r, e = _grid((R, E))
    logs = logged(sh)
    attn = logs.pop("attn")
    curves = [pa.table([coded(rid, r), ep[e], coded([metric], np.zeros(R * E)), arr.ravel()],
                       schema=LONG_SCHEMAS["curves"])
              for metric, arr in logs.items()
              if arr.ndim == 2 and not (metric == "attn_own" and attn.shape[-1] == 0) and not np.isnan(arr).all()]
    # attn[r, e, (layer, head,) k, j]: key feature k, query feature j
    shape = attn.shape if attn.ndim == 6 else (R, E, 1, 1, *attn.shape[2:])
    r, e, layer, head, k, j = _grid(shape)
    out = {"curves": pa.concat_tables(curves),
           "attention": pa.table([coded(rid, r), ep[e], j, k, attn.ravel(), layer, head], schema=LONG_SCHEMAS["attention"])}
    mats = []
    for name, arr in logs.items():
        if arr.ndim == 4 and arr.size:
            r, e, i, j = _grid(arr.shape)
            mats.append(pa.table([coded(rid, r), ep[e], coded([name], np.zeros(arr.size)), i, j, arr.ravel()],
                                 schema=LONG_SCHEMAS["matrices"]))
    out["matrices"] = pa.concat_tables(mats) if mats else LONG_SCHEMAS["matrices"].empty_table()
    out["llc"] = llc_table(sh)
    return out


def llc_table(sh: dict) -> pa.Table:
    """llc.parquet rows of one shard: per run and checkpoint λ̂ and its standard error where the
    chain check passed (NaN where not), L_n(w*), the drift statistic and the check's verdict."""
    if "llc_llc" not in sh:
        return LONG_SCHEMAS["llc"].empty_table()
    rid, status = sh["run_id"].astype(str), sh["llc_status"]
    r, e = _grid(status.shape)
    ok = (status == 0).ravel()
    names = [LLC_STATUS.get(int(c), "not measured") for c in range(-1, max(LLC_STATUS) + 1)]
    setting = lambda k: np.full(r.size, float(sh[f"llc_{k}"]) if f"llc_{k}" in sh else np.nan)   # noqa: E731
    checked = (sh["llc_plateau_status"] == 0).ravel() if "llc_plateau_status" in sh else np.zeros(r.size, bool)
    plateau = lambda k: np.where(checked, sh[f"llc_plateau_{k}"].ravel(), np.nan) if checked.any() else np.full(r.size, np.nan)  # noqa: E731
    return pa.table([coded(rid, r), sh["llc_epoch"][e], np.where(ok, sh["llc_llc"].ravel(), np.nan),
                     np.where(ok, sh["llc_se"].ravel(), np.nan), sh["llc_init"].ravel(), sh["llc_drift_z"].ravel(),
                     np.full(r.size, sh["llc_per_chain"].shape[-1]), coded(names, status.ravel() + 1),
                     setting("gamma"), setting("epsilon"), setting("nbeta"), setting("plateau_gamma"),
                     plateau("llc"), plateau("se")],
                    schema=LONG_SCHEMAS["llc"])

def shard_summary(path: str) -> pd.DataFrame:
    return summary_table(read_shard(path))


def aggregate(runs_path: str, shard_paths: list[str], outdir: str,
              shift_paths: list[str] | None = None, processes: int = 1) -> pd.DataFrame:
    """All shards of an experiment into its tables, checking every run is present; returns the
    summary. The long tables are written shard by shard: never all in memory at once. With
    `processes` > 1 a forked worker makes the summaries (the phase fit of every curve) meanwhile."""
    if not shard_paths:
        raise RuntimeError("no shard files given: there is nothing to aggregate")
    runs = read_parquet(runs_path)
    meta = stamp(str(runs["config_hash"].iloc[0]))
    shift = [s for s in (read_parquet(p) for p in shift_paths or []) if len(s)]    # read before anything is written
    summaries, shard_meta = [], []
    with ExitStack() as stack:      # on an error no table is left, half-written or complete
        worker = stack.enter_context(Forked(shard_summary, shard_paths, 1)) if processes > 1 else None
        tmp = {k: stack.enter_context(atomic_path(os.path.join(outdir, f"{k}.parquet"))) for k in LONG_SCHEMAS}
        writers = {k: stack.enter_context(long_writer(tmp[k], s)) for k, s in LONG_SCHEMAS.items()}
        for path in shard_paths:
            sh = read_shard(path)
            for k, t in long_tables(sh).items():
                writers[k].write_table(t)
            if worker is None:
                summaries.append(summary_table(sh))
            shard_meta.append({"shard": os.path.basename(path).removesuffix(".npz"), "seconds": float(sh["seconds"]),
                               "device": str(sh["device"]), "device_name": str(sh["device_name"]),
                               "threads": int(sh["threads"]), "runs": len(sh["run_id"]),
                               "precision": str(sh.get("precision", "float32")), "compiled": bool(sh.get("compiled", False)),
                               "fresh_stream": str(sh.get("fresh_stream", ""))})
        summary = pd.concat(worker.results() if worker else summaries, ignore_index=True)
        missing = set(runs["run_id"]) - set(summary["run_id"])
        if missing:
            raise RuntimeError(f"{len(missing)} planned runs have no results (e.g. {sorted(missing)[0]}); "
                               "the shard files do not match runs.parquet: rerun snakemake")
        summary = phases_over_seeds(summary, runs)      # a count is chosen against the run's replicates
        meta["trained_with"] = sorted(set(summary["code_version"]))
        for w in writers.values():
            w.add_key_value_metadata(provenance_metadata(meta))
    write_parquet(summary, os.path.join(outdir, "summary.parquet"), meta)
    # the workflow evaluates each prompt set's baselines in one shard; evaluate_trained called
    # by hand on several shards (baseline_keys=None) repeats them: keep one copy
    write_parquet(pd.concat(shift, ignore_index=True).drop_duplicates(subset=SHIFT_KEY, ignore_index=True)
                  if shift else empty_shift(), os.path.join(outdir, "shift.parquet"), meta)
    with atomic_path(os.path.join(outdir, "shards.json")) as tmp, open(tmp, "w") as fh:
        json.dump(shard_meta, fh, indent=1)
    return summary
