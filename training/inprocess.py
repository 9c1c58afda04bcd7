"""The in-process prediction backend: champion models from the MLflow registry, in memory."""

from __future__ import annotations

import threading

import pandas as pd

from perfcast.errors import PerfcastError
from perfcast.predictor.backend import TASKS, Task


class InProcessBackend:
    """`predict(task, rows)` with the registered champions, loaded on first use per task.

    `tasks` limits which tasks are loaded; `reload()` picks up new champions.
    """

    def __init__(self, tasks: tuple[str, ...] = TASKS) -> None:
        self.tasks = tasks
        self._champions: dict[str, object] = {}
        self.errors: dict[str, str] = {}  # why a task has no champion loaded, by task
        self._lock = threading.Lock()

    def _champion(self, task: str):
        from perfcast.training.model_store import require_champion

        if task not in self.tasks:
            raise PerfcastError(
                f"task {task!r} is not served; expected one of {', '.join(self.tasks)}"
            )
        with self._lock:
            if task not in self._champions:
                self._champions[task] = require_champion(task)
            return self._champions[task]

    def predict(self, task: Task, rows: pd.DataFrame) -> pd.DataFrame:
        return self._champion(task).predictor.predict_interval(rows)

    def keep(self, task: str, champion: object) -> None:
        """Serve `champion` (loaded before) for `task`, whose champion did not load now."""
        with self._lock:
            self._champions[task] = champion

    def loaded(self) -> dict[str, object]:
        """The champions loaded so far, by task."""
        return dict(self._champions)

    def load_all(self) -> list[str]:
        """Load every task's champion that exists; returns the tasks without one."""
        from mlflow.exceptions import MlflowException

        missing = []
        for task in self.tasks:
            try:
                self._champion(task)
            except PerfcastError as err:  # one task's broken champion leaves the others served
                missing.append(task)
                self.errors[task] = str(err)
            except MlflowException as err:  # the store itself: unreadable, replaced, locked
                missing.append(task)
                first = str(err.message).split("\n")[0][:200]
                self.errors[task] = f"the model store cannot be read ({first})"
        return missing

    def reload(self) -> list[str]:
        with self._lock:
            self._champions.clear()
        return self.load_all()
