"""Predictions as the scheduler asks for them, over any `PredictionBackend` (in-process, HTTP or
the oracle). Calls are batched: a policy asks for many jobs at once and only the rows not seen
before go to the backend, in one `predict` call per task; answers are cached, since a job type's
step time on a given configuration does not change during a run.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import pandas as pd

from perfcast.predictor.backend import PredictionBackend
from perfcast.scheduler.core.jobs import Job

# (job type, gpu type, num_nodes, num_gpus, local batch size)
ScalingKey = tuple[str, str, int, int, int]
# (gpu type, a job type, a batch size, b job type, b batch size)
PairKey = tuple[str, str, int, str, int]


class JobPredictor:
    """Step times, throughputs, durations and co-location speeds for scheduling decisions."""

    def __init__(self, backend: PredictionBackend, gpus_per_node: int = 8) -> None:
        self.backend = backend
        self.gpus_per_node = gpus_per_node
        self._step: dict[ScalingKey, float] = {}
        # duration intervals: each job's row in a (p10, p50, p90) table grown as jobs come, so a
        # policy ranking thousands of jobs every round reads them with one gather
        self._duration_row: dict[str, int] = {}
        self._duration_table = np.empty((0, 3))
        self._pair: dict[PairKey, tuple[float, float]] = {}
        self.calls = 0  # backend calls made, to check batching

    def scaling_key(self, job_type: str, gpu_type: str, num_gpus: int, batch: int) -> ScalingKey:
        nodes = max(1, math.ceil(num_gpus / self.gpus_per_node))
        return (job_type, gpu_type, nodes, num_gpus, max(1, batch // max(num_gpus, 1)))

    def step_times(self, keys: Sequence[ScalingKey]) -> np.ndarray:
        """Predicted seconds per iteration for each configuration key."""
        missing = list(dict.fromkeys(k for k in keys if k not in self._step))
        if missing:
            rows = pd.DataFrame(
                missing,
                columns=["job", "gpu_type", "num_nodes", "num_gpus", "local_batch_size"],
            )
            out = self._predict("scaling", rows)
            self._step.update(zip(missing, out["step_time_s"].to_numpy(float), strict=True))
        return np.array([self._step[k] for k in keys], dtype=float)

    def throughputs(self, keys: Sequence[ScalingKey]) -> np.ndarray:
        """Predicted samples per second (global batch over step time)."""
        batches = np.array([k[3] * k[4] for k in keys], dtype=float)
        return batches / self.step_times(keys)

    def durations(self, jobs: Sequence[Job]) -> np.ndarray:
        """Predicted run time of each job at its requested size (the `duration` task), from
        what is known at submission (the trace's own model name, never a drawn job type)."""
        return self.duration_intervals(jobs)[:, 1]

    def duration_intervals(self, jobs: Sequence[Job]) -> np.ndarray:
        """(p10, p50, p90) of each job's predicted run time, shape (len(jobs), 3)."""
        self.predict_durations(jobs)
        row = self._duration_row
        index = np.fromiter((row[j.job_id] for j in jobs), np.int64, len(jobs))
        return self._duration_table[index]

    def predict_durations(self, jobs: Sequence[Job]) -> None:
        """Predict, in one backend call, the durations of the jobs not asked about before."""
        known = self._duration_row
        missing = list({j.job_id: j for j in jobs if j.job_id not in known}.values())
        if not missing:
            return
        ids = [j.job_id for j in missing]
        rows = pd.DataFrame(
            {
                "job_id": ids,
                "submit_time_s": [j.submit_time_s for j in missing],
                "num_gpus": [j.num_gpus for j in missing],
                "user": [j.user for j in missing],
                "vc": [j.vc for j in missing],
                "job": [j.trace_job for j in missing],
                "batch_size": [j.batch_size for j in missing],
            }
        )
        out = self._predict("duration", rows)
        values = out[["duration_s_p10", "duration_s", "duration_s_p90"]].to_numpy(float)
        start = len(self._duration_row)
        table = self._duration_table
        if start + len(values) > len(table):  # grown by doubling: amortized O(1) a job
            table = np.empty((max(2 * len(table), start + len(values)), 3))
            table[:start] = self._duration_table[:start]
            self._duration_table = table
        table[start : start + len(values)] = values
        known.update(zip(ids, range(start, start + len(ids)), strict=True))

    def pair_speeds(self, keys: Sequence[PairKey]) -> dict[PairKey, tuple[float, float]]:
        """Predicted (a_speed, b_speed) when two jobs share a GPU: each one's throughput as a
        fraction of its throughput alone, by key."""
        missing = list(dict.fromkeys(k for k in keys if k not in self._pair))
        if missing:
            rows = pd.DataFrame(
                missing, columns=["gpu_type", "a_job", "a_batch_size", "b_job", "b_batch_size"]
            )
            out = self._predict("interference", rows)
            speeds = out[["a_speed", "b_speed"]].to_numpy(float).tolist()
            self._pair.update(zip(missing, map(tuple, speeds), strict=True))
        return {k: self._pair[k] for k in keys}

    def _predict(self, task: str, rows: pd.DataFrame) -> pd.DataFrame:
        self.calls += 1
        out = self.backend.predict(task, rows)  # type: ignore[arg-type]
        if len(out) != len(rows):
            raise ValueError(f"{task} backend answered {len(out)} rows for {len(rows)}")
        return out.reset_index(drop=True)
