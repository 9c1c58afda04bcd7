"""Features for the `interference` task: each job's speed when two jobs share one accelerator.

A pair is seen from both sides: predicting `a_speed` uses (self=a, other=b), `b_speed` uses
(self=b, other=a), so one model serves both and training sees every pair twice.

Two feature sets. `transform` describes each workload's appetite for the device in detail
(solo throughput, samples/s, batch, utilization and memory counters, model family, never its
name); with these a model learns the workloads it was trained on well, but on a pair of
workloads it has never seen it does worse than predicting the training mean (measured on
Gavel's pairs), because the details identify workloads rather than describe interference.
`general` keeps only what carries over between workloads: how fast the other job iterates
alone and how that compares with this job (the job with the shorter iterations loses the larger
share of its speed), and the device.

`evidence` says how much of the slowdown learned from the training pairs a pair with a new
workload should get (the rest shrinks toward "no interference", speed 1.0): the slowdowns
Gavel measured (two jobs that each keep a GPU busy, about 0.55 each) do not carry over to
workloads that leave the device half idle. Where both jobs' solo utilization counters are
measured they decide it (on a CPU, the share of its cores each job kept busy); otherwise the
model families the training pairs covered do.
"""

from __future__ import annotations

import re
from typing import Self

import numpy as np
import pandas as pd

from perfcast.features.devices import SPEC_COLUMNS, fill_specs

_COUNTERS = ("gpu_util", "mem_util")


def model_family(job: str) -> str:
    """The architecture family in a workload name: `resnet50-imagenet` -> `resnet`."""
    match = re.match(r"[a-z]+", str(job).lower())
    return match.group(0) if match else "unknown"


class InterferenceFeatures:
    """fit(rows), then transform(rows, side) or general(rows, side) -> features for predicting
    `<side>_speed`; known_pair(rows) says which pairs have both workloads in the fitted rows."""

    def fit(self, rows: pd.DataFrame) -> Self:
        jobs = pd.concat([rows["a_job"], rows["b_job"]]).astype(str)
        self.families_ = pd.Index(sorted(jobs.map(model_family).unique()))
        self.jobs_ = pd.Index(sorted(jobs.unique()))
        return self

    def known_pair(self, rows: pd.DataFrame) -> np.ndarray:
        """True where both workloads of the pair were in the fitted rows."""
        known = rows["a_job"].astype(str).isin(self.jobs_) & rows["b_job"].astype(str).isin(
            self.jobs_
        )
        return known.to_numpy()

    def transform(self, rows: pd.DataFrame, side: str) -> pd.DataFrame:
        other = _other(side)
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
                _families(rows[f"{prefix}_job"]), categories=self.families_
            )
        X["tput_ratio"] = X["self_log_tput"] - X["other_log_tput"]
        X["util_sum"] = X["self_gpu_util"] + X["other_gpu_util"]
        X["mem_util_sum"] = X["self_mem_util"] + X["other_mem_util"]
        _add_specs(X, rows)
        return X

    def general(self, rows: pd.DataFrame, side: str) -> pd.DataFrame:
        rows = fill_specs(rows, "gpu_type")
        self_tput = np.log(_column(rows, f"{side}_solo_throughput"))
        other_tput = np.log(_column(rows, f"{_other(side)}_solo_throughput"))
        X = pd.DataFrame({"tput_ratio": self_tput - other_tput, "other_log_tput": other_tput})
        _add_specs(X, rows)
        return X

    def evidence(self, rows: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
        """(share of the learned log-slowdown in [0, 1], whether counters decided it) per
        pair; see the module docstring. The worse-contended counter (GPU busy time or
        memory bandwidth) decides where both jobs have it."""
        seen = sum(
            _families(rows[f"{side}_job"].astype(str)).isin(self.families_).to_numpy(int)
            for side in ("a", "b")
        )
        share = np.asarray(FAMILY_EVIDENCE)[seen]
        measured = pd.concat(
            [
                contention(_counter(rows, "a", counter), _counter(rows, "b", counter))
                for counter in _COUNTERS
            ],
            axis=1,
        ).max(axis=1, skipna=True)
        from_counters = measured.notna().to_numpy()
        return np.where(from_counters, measured.to_numpy(dtype=float), share), from_counters


# Share of the learned slowdown a new-workload pair gets from the model families alone, when no
# utilization counter was measured for both jobs: with neither family in training, halfway
# between the learned slowdown and none (each hypothesis is then at most half wrong); each
# family seen moves it a quarter closer to the learned one.
FAMILY_EVIDENCE = (0.5, 0.75, 1.0)


def contention(self_util: pd.Series, other_util: pd.Series) -> pd.Series:
    """How far two jobs' solo busy fractions (%) overflow one device, in [0, 1]: 0 while
    they fit in 100% together (time-sharing costs nothing), 1 when both keep it fully busy
    (the Gavel pairs' situation); NaN where either counter is missing."""
    return ((self_util + other_util) / 100.0 - 1.0).clip(0.0, 1.0)


# `sharing`: how the pair shared the device, where the row says (an optional contract column).
TIME_SLICE = "time-slice"


def time_sliced(rows: pd.DataFrame) -> np.ndarray:
    """True where the row says its two jobs took turns on the device (two processes, no MPS
    or MIG) and both jobs' solo `gpu_util` was measured: `time_slice_speed` applies."""
    if "sharing" not in rows.columns:
        return np.zeros(len(rows), dtype=bool)
    both = _column(rows, "a_gpu_util").notna() & _column(rows, "b_gpu_util").notna()
    return ((rows["sharing"].astype("string") == TIME_SLICE).fillna(False) & both).to_numpy()


def time_slice_speed(rows: pd.DataFrame, side: str) -> np.ndarray:
    """`side`'s speed when the device runs one process's kernels at a time: each of its steps
    is stretched by the other job's busy fraction alone (its solo `gpu_util`), since its
    kernels wait while the other's run, 1 / (1 + u_other). Two jobs that each keep the device
    busy get 1/2 each; beside a launch-bound job busy a third of the time, 3/4. No fitted
    parameter: the context switches themselves (a few % on the H100) are left out."""
    other = _column(rows, f"{_other(side)}_gpu_util").to_numpy(dtype=float)
    return 1.0 / (1.0 + np.clip(other, 0.0, 100.0) / 100.0)


def _other(side: str) -> str:
    return "b" if side == "a" else "a"


def _add_specs(X: pd.DataFrame, rows: pd.DataFrame) -> None:
    for column in SPEC_COLUMNS:
        X[column] = np.log(rows[column].astype(float))


def _families(jobs: pd.Series) -> pd.Series:
    """model_family of each job name, the regex run once per distinct name."""
    return jobs.map({job: model_family(job) for job in jobs.unique()})


def _counter(rows: pd.DataFrame, side: str, counter: str) -> pd.Series:
    """One side's solo `counter` (%). Where the shared device is the CPU itself (`gpu_type`
    "cpu") its busy fraction is the share of the machine's logical CPUs the job kept busy,
    `cpu_util` as the profilers write it: two one-thread jobs on two cores fit (50% + 50%), as
    a GPU pair whose busy times sum to 100% does (measured on this project's 2-core machine,
    quiet, 2026-11-26: speeds 0.73-1.30, mean |1 - speed| 0.12)."""
    value = _column(rows, f"{side}_{counter}")
    if counter != "gpu_util" or f"{side}_cpu_util" not in rows.columns:
        return value
    on_cpu = (rows["gpu_type"].astype("string").str.lower() == "cpu").fillna(False)
    return value.where(~on_cpu, _column(rows, f"{side}_cpu_util"))


def _column(rows: pd.DataFrame, name: str) -> pd.Series:
    if name not in rows.columns:
        return pd.Series(np.nan, index=rows.index)
    return pd.to_numeric(rows[name], errors="coerce").astype(float)
