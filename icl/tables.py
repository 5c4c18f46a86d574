"""Long-format parquet tables (DESIGN §5) from the plan and the shards' logged arrays.

Every table is written to a temporary name and renamed, so a reader never sees half a file.
"""
from __future__ import annotations

import json
import os
from contextlib import ExitStack

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from icl import models
from icl.claims.ldl import logit_dynamics
from icl.files import atomic_path
from icl.parallel import Forked
from icl.phases import phases
from icl.provenance import code_version, stamp

REL_THRESHOLDS = (1e-1, 1e-2, 1e-3)
ABS_THRESHOLDS = (1e-2, 1e-3, 1e-4)   # on the loss itself: the theorems' loss ≤ ε² (icl.fits.eps_of)


def _tname(prefix: str, x: float) -> str:
    return f"{prefix}_{x:.0e}".replace("e-0", "e-")


PROVENANCE_KEY = b"icl"     # every table's key-value metadata: where and by what code it was made


def provenance_metadata(meta: dict) -> dict[bytes, bytes]:
    return {PROVENANCE_KEY: json.dumps(meta).encode()}


def write_parquet(df: pd.DataFrame, path: str, meta: dict | None = None) -> None:
    """Atomic write; `meta` (provenance) goes into the file's key-value metadata under 'icl'."""
    table = pa.Table.from_pandas(df, preserve_index=False)
    if meta:
        table = table.replace_schema_metadata({**(table.schema.metadata or {}), **provenance_metadata(meta)})
    with atomic_path(path) as tmp:
        pq.write_table(table, tmp)


def read_provenance(path: str) -> dict:
    """The provenance stamp a table was written with ({} if none)."""
    md = pq.read_schema(path).metadata or {}
    return json.loads(md[PROVENANCE_KEY]) if PROVENANCE_KEY in md else {}


def read_parquet(path: str, run_ids=None, **kw) -> pd.DataFrame:
    """A table, or an error that names the file and what to do. `run_ids`: only those runs' rows
    of a long table (curves, attention, matrices), the filter evaluated on the file's dictionary
    of ids, not on millions of decoded strings. `kw` go to pandas (columns, filters)."""
    if not os.path.exists(path):
        raise RuntimeError(f"table {path} not found; run snakemake to build it (is the path right?)")
    try:
        if run_ids is None:
            return pd.read_parquet(path, **kw)
        t = pq.read_table(path, columns=kw.get("columns"), read_dictionary=["run_id"],
                          filters=pc.field("run_id").isin(pa.array(list(run_ids), type=pa.string())))
        i = t.schema.get_field_index("run_id")
        return (t.set_column(i, "run_id", t["run_id"].cast(pa.string())) if i >= 0 else t).to_pandas()
    except Exception as e:
        raise RuntimeError(f"table {path} is unreadable ({type(e).__name__}: {e}); delete it and rerun "
                           "snakemake to rebuild it") from None


def run_row(run: dict) -> dict:
    """One row of runs.parquet: every parameter of the run by its leaf name; the model settings'
    columns are every kind's (icl.models.setting_columns), None where the run's kind has none."""
    s = run["spec"]
    tok, task, pr, model, tr = s["tokens"], s["task"], s["prompts"], s["model"], s["train"]
    row = {
        "run_id": run["run_id"], "shard": run["shard"], "data_id": run["data_id"],
        "model": model["name"], "model_kind": model["kind"], "optimizer": model["optimizer"],
        "lr": float(model["lr"]), **models.columns(s), "seed": int(s["seed"]),
        "token_kind": tok["kind"], "d": tok["d"], "K": tok.get("K"), "delta": tok.get("delta"),
        "noise": tok.get("noise"), "features": tok.get("features"),
        "probs": json.dumps(tok["probs"]) if tok.get("probs") is not None else None,
        "covariance": (tok["covariance"] if isinstance(tok.get("covariance"), str) else json.dumps(tok["covariance"]))
        if "covariance" in tok else None,
        "scale": tok.get("scale"), "fresh": bool(tr.get("fresh", False)),
        "task_kind": task["kind"], "L": task.get("L"), "c": task.get("c"),
        "N": pr["N"], "M": pr["train"], "n_test": pr["test"],
        "epochs": tr["epochs"], "log_every": tr["log_every"], "batch_size": tr.get("batch_size"),
    }
    return row


SHIFT_DTYPES = {"predictor": "string", "model_kind": "string", "run_id": "string", "eval_id": "string",
                "N": "Int64", "shift": "string", "c": "float64", "M": "int64", "mse": "float64", "mse_se": "float64",
                "slope": "float64", "slope_se": "float64", "theory_mse": "float64", "theory_slope": "float64",
                # trained LSA rows: the same theory at the run's learned matrix (formula vs optimisation error)
                "theory_mse_learned": "float64", "theory_slope_learned": "float64"}


SHIFT_KEY = ["predictor", "run_id", "eval_id", "N", "shift", "c", "M"]   # one row per these


def empty_shift() -> pd.DataFrame:
    """shift.parquet of an experiment without an evaluate section: no rows, the same columns."""
    return pd.DataFrame({c: pd.Series(dtype=t) for c, t in SHIFT_DTYPES.items()})


def runs_table(runs: list[dict], experiment: str, config_hash: str) -> pd.DataFrame:
    df = pd.DataFrame([run_row(r) for r in runs])
    for col, dtype in {"K": "Int64", "batch_size": "Int64", "delta": "Float64", "noise": "Float64", "L": "Float64",
                       "c": "Float64", "scale": "Float64", **models.setting_columns()}.items():
        df[col] = df[col].astype(dtype)
    df.insert(1, "experiment", experiment)
    df["config_hash"] = config_hash
    df["code_version"] = code_version()
    return df


def crossing_time(ratio: np.ndarray, epochs: np.ndarray, x: float) -> pd.array:
    """t_x: when train_loss / loss0 (or the loss itself) first falls to x, per run, interpolated
    in log-loss between the two logged epochs around the crossing (null if never). The first
    logged epoch at or below x would quantise times to the logging grid: on a 4-epoch grid a
    run crossing at epoch 1.3 reads 4, and slopes over L come out of the grid, not the run."""
    r = np.nan_to_num(np.asarray(ratio, float), nan=np.inf)
    hit = r <= x
    i = hit.argmax(1)
    rows = np.arange(len(r))
    prev = np.maximum(i - 1, 0)
    a, b = r[rows, prev], r[rows, i]
    with np.errstate(divide="ignore", invalid="ignore"):
        frac = np.where((i > 0) & (a > x) & (b > 0) & np.isfinite(a),
                        (np.log(a) - np.log(x)) / (np.log(a) - np.log(np.maximum(b, 1e-300))), 1.0)
    t = epochs[prev] + np.clip(frac, 0.0, 1.0) * (epochs[i] - epochs[prev])
    return pd.array(np.where(hit.any(1), t, np.nan), dtype="Float64")


TEXT = pa.dictionary(pa.int32(), pa.string())      # run ids, metric and matrix names
LONG_SCHEMAS = {   # the long tables, written shard by shard (DESIGN §5)
    "curves": pa.schema([("run_id", TEXT), ("epoch", pa.int64()), ("metric", TEXT), ("value", pa.float64())]),
    "attention": pa.schema([("run_id", TEXT), ("epoch", pa.int64()), ("query_feature", pa.int64()),
                            ("key_feature", pa.int64()), ("attn", pa.float64()), ("layer", pa.int64()),
                            ("head", pa.int64())]),
    "matrices": pa.schema([("run_id", TEXT), ("epoch", pa.int64()), ("name", TEXT), ("i", pa.int64()),
                           ("j", pa.int64()), ("value", pa.float64())]),
}


def long_writer(path: str, schema: pa.Schema) -> pq.ParquetWriter:
    """A parquet writer for millions of rows: ids and integers dictionary-encoded, floats
    byte-stream-split, zstd (half the size of the default, and a third of its read time);
    store_schema=False so the text columns read back as strings, not as pandas categoricals."""
    floats = [f.name for f in schema if pa.types.is_floating(f.type)]
    return pq.ParquetWriter(path, schema, store_schema=False, compression="zstd",
                            use_dictionary=[f.name for f in schema if f.name not in floats],
                            column_encoding={c: "BYTE_STREAM_SPLIT" for c in floats})


def coded(values, index: np.ndarray) -> pa.DictionaryArray:
    """values[index] as a dictionary-encoded text column: no Python string per row (a 720-run sweep
    logged every epoch has 10 M rows of run ids), and parquet stores it dictionary-encoded as is."""
    return pa.DictionaryArray.from_arrays(pa.array(np.asarray(index, dtype=np.int32)),
                                          pa.array(np.asarray(values, dtype=str), type=pa.string()))


def _grid(shape: tuple[int, ...]) -> list[np.ndarray]:
    """The index of every axis for each element of a C-ordered array of `shape`, flattened."""
    return [g.ravel() for g in np.meshgrid(*(np.arange(n) for n in shape), indexing="ij", copy=False)]


LOGGED_EXCEPT = ("run_id", "epoch", "diverged_at", "seconds", "device", "device_name", "threads", "code_version",
                 "code_hash")


def logged(sh: dict) -> dict:
    """The logged arrays of a shard, (runs, logged epochs, ...) each, in the order they were logged:
    everything but the parameters (param_*) and the bookkeeping."""
    return {k: v for k, v in sh.items() if k not in LOGGED_EXCEPT and not k.startswith("param_")}


def last_layer_map(attn: np.ndarray) -> np.ndarray:
    """attn (R, E, K, K), or (R, E, layers, heads, K, K): the map attn_own reads, the last layer's
    averaged over its heads."""
    return attn[:, :, -1].mean(2) if attn.ndim == 6 else attn


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
    return out


def summary_table(sh: dict) -> pd.DataFrame:
    """One summary row per run of a shard: losses, crossing times, phases, attention and logit dynamics."""
    rid, ep = sh["run_id"].astype(str), sh["epoch"]
    R, K = len(rid), sh["attn"].shape[-1]
    tl = sh["train_loss"]
    loss0 = tl[:, 0]
    ratio = tl / loss0[:, None]
    summ = pd.DataFrame({
        "run_id": rid, "loss0": loss0, "final_train_loss": tl[:, -1], "final_test_loss": sh["test_loss"][:, -1],
        "attn_own_final": sh["attn_own"][:, -1] if K else np.full(R, np.nan),
        "diverged": sh["diverged_at"] >= 0,
        "diverged_epoch": pd.array(np.where(sh["diverged_at"] >= 0, sh["diverged_at"], None), dtype="Int64"),
    })
    for x in REL_THRESHOLDS:
        summ[_tname("t_rel", x)] = crossing_time(ratio, ep, x)
    for x in ABS_THRESHOLDS:
        summ[_tname("t_abs", x)] = crossing_time(tl, ep, x)
    found = [phases(ep, tl[r]) for r in range(R)]
    summ["n_phases"] = pd.array([f[0] for f in found], dtype="Int64")
    summ["phase_ends"] = pd.Series([list(f[1]) for f in found], dtype="object")
    summ["test_loss0"] = sh["test_loss"][:, 0]
    summ["attn_knn_final"] = sh["attn_knn"][:, -1] if "attn_knn" in sh else np.nan
    summ["dist_target_final"] = sh["dist_target"][:, -1] if "dist_target" in sh else np.nan
    summ["attn_off_final"] = np.nan
    summ["attn_off_oscillates"] = pd.array([None] * R, dtype="boolean")
    if K:
        amap = last_layer_map(sh["attn"])
        off = (amap.sum(axis=(2, 3)) - np.trace(amap, axis1=2, axis2=3)) / (K * (K - 1))
        summ["attn_off_final"] = off[:, -1]
        # oscillation: the mean off-diagonal attention turns from falling to rising at least once
        d = np.diff(off, axis=1)
        summ["attn_off_oscillates"] = pd.array(((d[:, :-1] < -1e-4) & (d[:, 1:] > 1e-4)).any(1), dtype="boolean")
    q = sh.get("q_features")
    dyn = logit_dynamics(q) if q is not None and q.size and q.shape[1] > 1 else {}
    for col in ("qoff_rate", "qoff_fell", "qoff_oscillates"):
        summ[col] = dyn.get(col, np.full(R, np.nan))
    summ["train_seconds"] = float(sh["seconds"]) / R
    summ["device"] = str(sh["device"])
    summ["code_version"] = str(sh["code_version"]) if "code_version" in sh else "unknown"
    summ["code_hash"] = str(sh["code_hash"]) if "code_hash" in sh else "unknown"
    return summ


def read_shard(path: str, only: tuple[str, ...] = ()) -> dict:
    """The arrays of a trained shard's .npz (those whose names start with one of `only`, if
    given), or an error that names the file and what to do."""
    try:
        with np.load(path) as z:
            return {k: z[k] for k in z.files if not only or k.startswith(only)}
    except Exception as e:
        raise RuntimeError(f"shard file {path} is unreadable ({type(e).__name__}); delete it and rerun "
                           "snakemake to retrain that shard") from None


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
                               "threads": int(sh["threads"]), "runs": len(sh["run_id"])})
        summary = pd.concat(worker.results() if worker else summaries, ignore_index=True)
        missing = set(runs["run_id"]) - set(summary["run_id"])
        if missing:
            raise RuntimeError(f"{len(missing)} planned runs have no results (e.g. {sorted(missing)[0]}); "
                               "the shard files do not match runs.parquet: rerun snakemake")
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
