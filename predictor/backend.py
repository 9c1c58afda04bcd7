"""What consumers of predictions (the optimizer, the service, the scheduler) call.

A backend answers `predict(task, rows)`: `rows` are contract-table rows for the task without
its target; the answer is a DataFrame aligned with the rows (for `runtime`: one row per
`sample_id`) holding, for each target of the task, the columns `<target>`, `<target>_p10` and
`<target>_p90`. The in-process predictors, the HTTP client (`serving.client.PerfcastClient`)
and the simulator's oracle all speak this, so a consumer switches between them with one setting.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal, Protocol, runtime_checkable

if TYPE_CHECKING:  # kept out of import time: the command line reads TASKS without pandas
    import pandas as pd

Task = Literal["scaling", "interference", "runtime", "duration", "query"]
TASKS: tuple[Task, ...] = ("scaling", "interference", "runtime", "duration", "query")
# tasks whose rows are the nodes of DAGs: one prediction per sample_id
PER_SAMPLE_TASKS = ("runtime", "query")

# task -> (contract table kind of its rows, target columns)
TASK_TABLES: dict[str, tuple[str, tuple[str, ...]]] = {
    "scaling": ("scaling", ("step_time_s",)),
    "interference": ("interference", ("a_speed", "b_speed")),
    "runtime": ("graph", ("e2e_latency_ms",)),
    "duration": ("trace", ("duration_s",)),
    "query": ("plan", ("e2e_latency_ms",)),
}


@runtime_checkable
class PredictionBackend(Protocol):
    def predict(self, task: Task, rows: pd.DataFrame) -> pd.DataFrame:
        """Predictions with p10/p90 for each target of `task`, aligned with `rows`."""
        ...
