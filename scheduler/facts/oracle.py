"""The `oracle` prediction backend: true values from the measured tables and the trace, with
p10 = p90 = the value. Simulating with it measures what perfect predictions would give."""

from __future__ import annotations

import numpy as np
import pandas as pd

from perfcast.errors import PerfcastError
from perfcast.predictor.backend import Task
from perfcast.scheduler.core.jobs import Job
from perfcast.scheduler.facts.catalog import InterferenceCatalog, ScalingCatalog


class OracleBackend:
    """`predict(task, rows)` for `scaling`, `interference` and `duration` from true values.
    Unmeasured pairs answer NaN (a consumer must then not pack them)."""

    def __init__(
        self, scaling: ScalingCatalog, interference: InterferenceCatalog, jobs: list[Job]
    ) -> None:
        self.scaling, self.interference = scaling, interference
        self.durations = {j.job_id: j.duration_s for j in jobs}

    def predict(self, task: Task, rows: pd.DataFrame) -> pd.DataFrame:
        if task == "scaling":
            keys = zip(
                rows["job"].astype(str),
                rows["gpu_type"].astype(str),
                rows["num_gpus"].astype(int),
                rows["local_batch_size"].astype(int),
                strict=True,
            )
            return _with_interval({"step_time_s": self.scaling.step_times(list(keys))})
        if task == "interference":
            speeds = []
            for gpu, aj, ab, bj, bb in rows[
                ["gpu_type", "a_job", "a_batch_size", "b_job", "b_batch_size"]
            ].itertuples(index=False):
                pair = self.interference.pair(str(gpu), str(aj), int(ab), str(bj), int(bb))
                speeds.append((pair.a_speed, pair.b_speed) if pair else (np.nan, np.nan))
            arr = np.array(speeds, dtype=float).reshape(len(rows), 2)
            return _with_interval({"a_speed": arr[:, 0], "b_speed": arr[:, 1]})
        if task == "duration":
            try:
                # (a list first: iterating a str column builds each string from Arrow, 3x slower)
                values = list(map(self.durations.__getitem__, rows["job_id"].astype(str).tolist()))
            except KeyError as err:
                raise PerfcastError(f"oracle: job {err.args[0]!r} is not in the workload") from None
            return _with_interval({"duration_s": np.array(values, dtype=float)})
        raise PerfcastError(f"the oracle backend does not answer task {task!r}")


def _with_interval(values: dict[str, np.ndarray]) -> pd.DataFrame:
    out = {}
    for name, v in values.items():
        out |= {name: v, f"{name}_p10": v, f"{name}_p90": v}
    return pd.DataFrame(out)
