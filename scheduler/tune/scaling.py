"""Whether giving a trial more GPUs pays before the deadline, from perfcast's scaling predictions.

The trial's workload is described by a `scaling` contract row (`job`, `gpu_type`,
`local_batch_size`, optional `amp` and job features). With the local batch fixed, g data-parallel
replicas process g local batches per step, so the predicted throughput at g GPUs is
`g / step_time_s(g)` and an iteration (a fixed amount of data) takes
`compute_s * speed(g) / speed(g')` after a resize from g to g', plus what does not scale (the
rest of `iteration_s`: Tune's reporting, data loading). A resize costs a pause and a
restart from the checkpoint (`restart_s`); it pays when the trial then gets further by the
deadline than it would without it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import pandas as pd

from perfcast.errors import PerfcastError
from perfcast.predictor.backend import PredictionBackend

REQUIRED_JOB_KEYS = ("job", "gpu_type", "local_batch_size")


def progress_by_deadline(
    iteration_s: float, iterations_left: float, time_left_s: float, restart_s: float = 0.0
) -> float:
    """Iterations a trial completes before the deadline (at most `iterations_left`)."""
    usable = max(time_left_s - restart_s, 0.0)
    return min(iterations_left, usable / iteration_s)


class ScalingAdvisor:
    """Chooses a trial's GPU count from predicted step times (`backend.predict("scaling", ...)`)."""

    def __init__(
        self, backend: PredictionBackend, job: Mapping[str, Any], gpus_per_node: int = 8
    ) -> None:
        missing = [k for k in REQUIRED_JOB_KEYS if k not in job]
        if missing:
            raise PerfcastError(
                f"the job row for scaling predictions lacks {', '.join(missing)}; "
                f"give at least {', '.join(REQUIRED_JOB_KEYS)}"
            )
        if gpus_per_node < 1:
            raise PerfcastError(f"gpus_per_node must be at least 1, got {gpus_per_node}")
        self.backend, self.job, self.gpus_per_node = backend, dict(job), gpus_per_node
        self._step_s: dict[int, float] = {}  # predictions do not change during a search

    def __getstate__(self) -> dict[str, Any]:
        # Tune pickles its scheduler with the experiment; a backend holds locks, models or a
        # connection, so a copy keeps only the predictions it already has.
        return {**self.__dict__, "backend": None}

    def step_times(self, gpu_counts: list[int]) -> dict[int, float]:
        """Predicted seconds per step (p50) at each GPU count."""
        ask = sorted({g for g in gpu_counts if g not in self._step_s})
        if ask and self.backend is None:
            raise PerfcastError(
                "this scheduler was restored from a pickle without its prediction backend; "
                "create it again with backend=..."
            )
        if ask:
            rows = pd.DataFrame(
                [
                    {**self.job, "num_gpus": g, "num_nodes": math.ceil(g / self.gpus_per_node)}
                    for g in ask
                ]
            )
            answer = self.backend.predict("scaling", rows)
            for g, step in zip(ask, answer["step_time_s"].to_numpy(), strict=True):
                if not (math.isfinite(step) and step > 0):
                    raise PerfcastError(
                        f"scaling prediction for {self.job['job']} at {g} GPUs is {step}; "
                        "expected a positive step time"
                    )
                self._step_s[g] = float(step)
        return {g: self._step_s[g] for g in gpu_counts}

    def speedup(self, gpus: int, new_gpus: int) -> float:
        """Predicted throughput at `new_gpus` over throughput at `gpus`."""
        step = self.step_times([gpus, new_gpus])
        return (new_gpus / step[new_gpus]) / (gpus / step[gpus])

    def best_gpus(
        self,
        gpus: int,
        most: int,
        iteration_s: float,
        compute_s: float,
        iterations_left: float,
        time_left_s: float,
        restart_s: float,
    ) -> int:
        """The GPU count in `gpus..most` that gets the trial furthest by the deadline (the
        current count unless a resize pays for its restart; the fewest GPUs among equals)."""
        if most <= gpus or iterations_left <= 0:
            return gpus
        self.step_times(list(range(gpus, most + 1)))  # one request for every candidate
        stay = progress_by_deadline(iteration_s, iterations_left, time_left_s)
        best, best_progress = gpus, stay
        for g in range(gpus + 1, most + 1):
            new_iteration_s = iteration_s - compute_s + compute_s / self.speedup(gpus, g)
            progress = progress_by_deadline(
                new_iteration_s, iterations_left, time_left_s, restart_s
            )
            # a resize must do strictly better; below 1% better is within prediction noise
            if progress > best_progress * 1.01 + 1e-9:
                best, best_progress = g, progress
        return best
