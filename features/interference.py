"""Features for the `interference` task: each job's speed when two jobs share one accelerator.

A pair is seen from both sides: predicting `a_speed` uses (self=a, other=b), `b_speed` uses
(self=b, other=a), so one model serves both and training sees every pair twice. Only what
describes a workload's appetite for the device enters (solo throughput, samples/s, batch,
utilization and memory counters, model family), never its name, so pairs of unseen jobs are
predicted from their counters.
"""

from __future__ import annotations

import re
from typing import Self

import numpy as np
import pandas as pd

from features.devices import SPEC_COLUMNS, fill_specs

_COUNTERS = ("gpu_util", "mem_util")


def model_family(job: str) -> str:
    """The architecture family in a workload name: `resnet50-imagenet` -> `resnet`."""
    match = re.match(r"[a-z]+", str(job).lower())
    return match.group(0) if match else "unknown"


class InterferenceFeatures:
    """fit(rows) then transform(rows, side) -> features for predicting `<side>_speed`."""

    def fit(self, rows: pd.DataFrame) -> Self:
        families = pd.concat([rows["a_job"], rows["b_job"]]).map(model_family)
        self.families_ = pd.Index(sorted(families.unique()))
        return self

    def transform(self, rows: pd.DataFrame, side: str) -> pd.DataFrame:
        other = "b" if side == "a" else "a"
        rows = fill_specs(rows, "gpu_type")
        X = pd.DataFrame(index=rows.index)
        for role, prefix in (("self", side), ("other", other)):
            tput = _column(rows, f"{prefix}_solo_throughput")
            bsz = rows[f"{prefix}_batch_size"].astype(float)
            X[f"{role}_log_tput"] = np.log(tput)
            X[f"{role}_log_samples_s"] = np.log(tput * bsz)
            X[f"{role}_log_bsz"] = np.log2(bsz)
            for counter in _COUNTERS:
                X[f"{role}_{counter}"] = _column(rows, f"{prefix}_{counter}")
            X[f"{role}_log_mem_mb"] = np.log1p(_column(rows, f"{prefix}_mem_mb"))
            X[f"{role}_family"] = pd.Categorical(
                rows[f"{prefix}_job"].map(model_family), categories=self.families_
            )
        X["tput_ratio"] = X["self_log_tput"] - X["other_log_tput"]
        X["util_sum"] = X["self_gpu_util"] + X["other_gpu_util"]
        X["mem_util_sum"] = X["self_mem_util"] + X["other_mem_util"]
        for column in SPEC_COLUMNS:
            X[column] = np.log(rows[column].astype(float))
        return X


def _column(rows: pd.DataFrame, name: str) -> pd.Series:
    if name not in rows.columns:
        return pd.Series(np.nan, index=rows.index)
    return pd.to_numeric(rows[name], errors="coerce").astype(float)
