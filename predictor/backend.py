"""What consumers of predictions (the optimizer, the service, the scheduler) call.

A backend answers `predict(task, rows)`: `rows` are contract-table rows for the task without
its target; the answer is a DataFrame aligned with the rows (for `runtime`: one row per
`sample_id`) holding, for each target of the task, the columns `<target>`, `<target>_p10` and
`<target>_p90`. The in-process predictors, the HTTP client (`serving.client.PerfcastClient`)
and the simulator's oracle all speak this, so a consumer switches between them with one setting.
Rows may come as `predictor.base.CheckedRows` (a DataFrame marked as already checked against
the contract, as the optimizer hands over its candidates): the in-process predictors do not
check them again, and any other backend reads them as the frame they are.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol, runtime_checkable

from perfcast.predictor.tasks import TASK_SPECS, TASKS, Task

__all__ = ["PER_SAMPLE_TASKS", "TASKS", "TASK_TABLES", "PredictionBackend", "Task"]

if TYPE_CHECKING:  # kept out of import time: the command line reads TASKS without pandas
    import pandas as pd

# tasks whose rows are the nodes of DAGs: one prediction per sample_id
PER_SAMPLE_TASKS = tuple(name for name, spec in TASK_SPECS.items() if spec.per_sample)

# task -> (contract table kind of its rows, target columns)
TASK_TABLES: dict[str, tuple[str, tuple[str, ...]]] = {
    name: (spec.table, spec.targets) for name, spec in TASK_SPECS.items()
}


@runtime_checkable
class PredictionBackend(Protocol):
    def predict(self, task: Task, rows: pd.DataFrame) -> pd.DataFrame:
        """Predictions with p10/p90 for each target of `task`, aligned with `rows` (a frame,
        `CheckedRows` among them)."""
        ...
