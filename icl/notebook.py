"""The tables of one experiment for a notebook, each run's parameters already joined:

    import icl
    exp = icl.load("results/ldl_cosine")
    exp.curves("train_loss").groupby(["model", "L", "epoch"])["value"].median()

Tables are read when first asked for, and only the rows of one metric for `curves`, so a sweep
logged every epoch (millions of rows) loads in seconds.
"""
from __future__ import annotations

import os
from functools import cached_property

import pandas as pd

from icl.analyse.claims import COLUMNS
from icl.store.io import read_parquet



class Experiment:
    """results/<experiment>/ as DataFrames: `runs`, `summary`, `verdicts`, `curves(metric)` and
    `table(name)`; every per-run table carries the run's parameters as columns."""

    def __init__(self, path: str):
        if not os.path.isdir(path):
            raise FileNotFoundError(f"no results directory {path!r}; run snakemake to make it "
                                    "(icl.load takes results/<experiment>)")
        self.path = path

    def _file(self, name: str) -> str:
        return os.path.join(self.path, f"{name}.parquet")

    def _joined(self, df: pd.DataFrame) -> pd.DataFrame:
        """df with the runs' parameters added (columns df already has are kept as they are)."""
        if "run_id" not in df.columns:
            return df
        extra = [c for c in self.runs.columns if c not in df.columns]
        return df.merge(self.runs[["run_id", *extra]], on="run_id", how="left")

    @cached_property
    def runs(self) -> pd.DataFrame:
        return read_parquet(self._file("runs"))

    @cached_property
    def summary(self) -> pd.DataFrame:
        return self._joined(read_parquet(self._file("summary")))

    @cached_property
    def verdicts(self) -> pd.DataFrame:
        """One row per claim x model (x group); empty where the experiment has no verdict table."""
        if not os.path.exists(self._file("verdicts")):
            return pd.DataFrame({c: pd.Series(dtype="object") for c in COLUMNS})
        return read_parquet(self._file("verdicts"))

    def metrics(self) -> list[str]:
        return sorted(read_parquet(self._file("curves"), columns=["metric"])["metric"].unique())

    def curves(self, metric: str) -> pd.DataFrame:
        """Long format: run_id, epoch, metric, value and the run's parameters, for one metric."""
        df = read_parquet(self._file("curves"), filters=[("metric", "==", metric)])
        if df.empty:
            raise ValueError(f"no curve {metric!r} in {self._file('curves')}; it has: {', '.join(self.metrics())}")
        return self._joined(df)

    def table(self, name: str) -> pd.DataFrame:
        """Any other table of the experiment (attention, matrices, theory, slopes, stability, shift, ...)."""
        return self._joined(read_parquet(self._file(name)))

    def __repr__(self) -> str:
        return f"Experiment({self.path!r}: {len(self.runs)} runs)"
