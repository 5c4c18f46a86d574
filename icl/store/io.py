"""How the pipeline's files are read and written: parquet tables with their provenance in the
file's metadata, the long tables' schemas and writer, the plan, a trained shard's arrays. Every step, the
notebook and the report read files through here and nothing else, so reading a table never
imports the measurements or the claims that made it.

Every file is written to a temporary name and renamed (icl.store.files.atomic_path), so a reader never
sees half a file.
"""
from __future__ import annotations

import json
import os

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from icl.store.files import atomic_path, move_aside, read_plan  # noqa: F401  (read_plan: plan.json, for every reader)

PROVENANCE_KEY = b"icl"     # every table's key-value metadata: where and by what code it was made


def provenance_metadata(meta: dict) -> dict[bytes, bytes]:
    return {PROVENANCE_KEY: json.dumps(meta).encode()}


def write_parquet(df: pd.DataFrame, path: str, meta: dict | None = None) -> None:
    """Atomic write; `meta` (provenance, icl.jobs.provenance.stamp) goes into the file's key-value
    metadata under 'icl'."""
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
        raise RuntimeError(f"table {path} is unreadable ({type(e).__name__}: {e}); moved aside to "
                           f"{move_aside(path)} (kept for inspection): rerun snakemake (the same command) to rebuild it") from None


def read_shard(path: str, only: tuple[str, ...] = ()) -> dict:
    """The arrays of a trained shard's .npz (those whose names start with one of `only`, if
    given), or an error that names the file and what to do."""
    try:
        with np.load(path) as z:
            return {k: z[k] for k in z.files if not only or k.startswith(only)}
    except Exception as e:
        raise RuntimeError(f"shard file {path} is unreadable ({type(e).__name__}); moved aside to {move_aside(path)} "
                           "(kept for inspection): rerun snakemake (the same command) to retrain that shard") from None


TEXT = pa.dictionary(pa.int32(), pa.string())      # run ids, metric and matrix names
LONG_SCHEMAS = {   # the long tables, written shard by shard (DESIGN §5)
    "curves": pa.schema([("run_id", TEXT), ("epoch", pa.int64()), ("metric", TEXT), ("value", pa.float64())]),
    "attention": pa.schema([("run_id", TEXT), ("epoch", pa.int64()), ("query_feature", pa.int64()),
                            ("key_feature", pa.int64()), ("attn", pa.float64()), ("layer", pa.int64()),
                            ("head", pa.int64())]),
    "matrices": pa.schema([("run_id", TEXT), ("epoch", pa.int64()), ("name", TEXT), ("i", pa.int64()),
                           ("j", pa.int64()), ("value", pa.float64())]),
    # the LLC at each of train.llc's checkpoints (icl.train.llc): NaN where the chain check failed (`status` says why)
    "llc": pa.schema([("run_id", TEXT), ("epoch", pa.int64()), ("llc", pa.float64()), ("llc_se", pa.float64()),
                      ("init_loss", pa.float64()), ("drift_z", pa.float64()), ("chains", pa.int64()),
                      ("status", TEXT), ("gamma", pa.float64()), ("epsilon", pa.float64()), ("nbeta", pa.float64()),
                      ("plateau_gamma", pa.float64()), ("plateau_llc", pa.float64()), ("plateau_se", pa.float64())]),
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


SHIFT_DTYPES = {"predictor": "string", "model_kind": "string", "run_id": "string", "eval_id": "string",
                "N": "Int64", "shift": "string", "c": "float64", "M": "int64", "mse": "float64", "mse_se": "float64",
                "slope": "float64", "slope_se": "float64", "theory_mse": "float64", "theory_slope": "float64",
                # trained LSA rows: the same theory at the run's learned matrix (formula vs optimisation error)
                "theory_mse_learned": "float64", "theory_slope_learned": "float64"}


SHIFT_KEY = ["predictor", "run_id", "eval_id", "N", "shift", "c", "M"]   # one row per these


def empty_shift() -> pd.DataFrame:
    """shift.parquet of an experiment without an evaluate section: no rows, the same columns."""
    return pd.DataFrame({c: pd.Series(dtype=t) for c, t in SHIFT_DTYPES.items()})
