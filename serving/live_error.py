"""Live prediction error: the step time the `scaling` champion predicts for each job the live
scheduler ran, against the step time the job's own workers measured.

The hook times every step of a live job and the executor writes the mean of the current launch
into the scheduler's `JobStore` (`mean_step_time_s`); that is the measurement. The prediction is
the loaded champion's for the job's scaling row: a live MLP is named as perfcast's model zoo
names it (`mlp-w1024-d4-i784`), so a champion trained on the zoo measured here
(`measured-cpu-zoo-scaling`) knows it; a job on CUDA gives its GPU type in `config.gpu_type`.

A job counts only when its step time is its model's: jobs paced by a trace replay
(`min_step_time_s` > 0: the step is padded to the trace's time) and jobs sharing a GPU (the
slowdown is the interference task's) are left out and counted by reason.
"""

from __future__ import annotations

import math
import os
import statistics
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from perfcast.errors import PerfcastError
from perfcast.paths import state_dir
from perfcast.scheduler.live.spec import JobSpec
from perfcast.scheduler.live.store import JobRecord, JobStore, StoreError

TASK = "scaling"  # the one task whose prediction a live job measures: its step time
TARGET = "step_time_s"


def default_store_path() -> Path:
    """Where `perfcast run-trace` keeps its state unless given `--state`
    (`PERFCAST_LIVE_STATE` points the service at another folder)."""
    folder = os.environ.get("PERFCAST_LIVE_STATE")
    return (Path(folder) if folder else state_dir() / "live") / "state.db"


@dataclass(frozen=True)
class JobError:
    """One live job: its scaling row, what its workers measured and what the champion says."""

    job_id: str
    row: dict[str, object]
    measured_step_s: float
    predicted_step_s: float
    p10_s: float
    p90_s: float

    @property
    def error(self) -> float:
        """|predicted - measured| / measured."""
        return abs(self.predicted_step_s - self.measured_step_s) / self.measured_step_s


@dataclass(frozen=True)
class LiveError:
    """The champion's error on the live jobs measured so far."""

    task: str
    family: str
    version: str
    jobs: tuple[JobError, ...]
    left_out: dict[str, int] = field(default_factory=dict)  # reason -> jobs

    @property
    def mape(self) -> float | None:
        """Mean absolute percentage error over the counted jobs (None without any)."""
        return 100 * statistics.fmean(j.error for j in self.jobs) if self.jobs else None

    @property
    def coverage(self) -> float | None:
        """Share of counted jobs whose measured step time lies in the p10-p90 interval."""
        if not self.jobs:
            return None
        return statistics.fmean(j.p10_s <= j.measured_step_s <= j.p90_s for j in self.jobs)


def scaling_row(spec: JobSpec, record: JobRecord) -> dict[str, object] | str:
    """The job's row for the `scaling` champion, or why its step time is not its model's."""
    if spec.min_step_time_s > 0:
        return "paced by the trace (steps padded to min_step_time_s)"
    if record.share != "exclusive":
        return f"shares its GPU ({record.share})"
    gpu_type = "cpu" if spec.device == "cpu" else spec.config.get("gpu_type")
    if not gpu_type:
        return "runs on CUDA without config.gpu_type"
    # the GPUs it holds now; a finished job holds none: the ones it asked for
    gpus = record.gpus or ()
    num_gpus = len(gpus) or spec.num_gpus
    batch = record.batch_size or spec.batch_size
    return {
        "job": f"{spec.model}-w{spec.width}-d{spec.depth}-i{spec.input_dim}",
        "gpu_type": str(gpu_type),
        "num_nodes": len({node for node, _ in gpus}) or 1,
        "num_gpus": num_gpus,
        "local_batch_size": batch // num_gpus,
    }


def job_errors(records: list[JobRecord], champion) -> tuple[list[JobError], dict[str, int]]:
    """The champion's prediction for each measured job whose step time is its model's, and
    how many jobs were left out, by reason."""
    rows, measured, left_out = [], [], Counter()
    for record in records:
        step = record.mean_step_time_s
        if not step or step <= 0:
            continue  # not a step measured yet
        row = scaling_row(JobSpec(**record.spec), record)
        if isinstance(row, str):
            left_out[row] += 1
            continue
        rows.append(row)
        measured.append((record.job_id, step))
    counted: list[JobError] = []
    if rows:
        try:
            out = champion.predictor.predict_interval(pd.DataFrame(rows))
        except PerfcastError as err:  # the champion refuses these rows: say so, count none
            left_out[f"the champion refused them: {err}"[:200]] += len(rows)
            return counted, dict(left_out)
        columns = [out[c].to_numpy(dtype=float) for c in (TARGET, f"{TARGET}_p10", f"{TARGET}_p90")]
        for i, (job_id, step) in enumerate(measured):
            values = [float(c[i]) for c in columns]
            if all(math.isfinite(v) for v in values):
                counted.append(JobError(job_id, rows[i], step, *values))
            else:
                left_out["no finite prediction"] += 1
    return counted, dict(left_out)


def read_jobs(path: Path) -> list[JobRecord] | None:
    """The jobs in the live store at `path`; None when there is no usable store."""
    if not path.is_file():
        return None
    try:
        store = JobStore(path)
    except StoreError:
        return None
    try:
        return store.jobs()
    finally:
        store.close()


def live_error(path: Path, champion) -> LiveError | None:
    """The `scaling` champion's error on the jobs in the store at `path` (None: no store)."""
    records = read_jobs(path)
    if records is None:
        return None
    counted, left_out = job_errors(records, champion)
    return LiveError(TASK, champion.family, str(champion.version), tuple(counted), left_out)
