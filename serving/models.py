"""The champion models the service answers with, and the prediction backend it hands to the
optimizer: the in-process backend, restricted to loaded models and counted in the metrics."""

from __future__ import annotations

import copy
import dataclasses
import gc
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Literal, NamedTuple, overload

import pandas as pd

from perfcast.predictor.backend import Task
from perfcast.predictor.base import Columns, PredictionRows
from perfcast.serving.errors import ModelUnavailableError
from perfcast.serving.metrics import ServiceMetrics
from perfcast.training import model_store
from perfcast.training.inprocess import InProcessBackend


def missing_reason(task: str) -> str:
    return (
        f"no champion model is registered for {task}; train one with "
        f"`perfcast train --task {task}` (or run `perfcast serve`, which trains the default "
        "models), then POST /v1/models/reload"
    )


class _Observed(NamedTuple):
    """A loaded champion with measured rows added (`ServedModels.observe`)."""

    base: object  # the champion as loaded: the observations hold while it is the one loaded
    champion: object  # a copy of it that took the rows
    rows: int  # measured rows added to `base` so far


class ServedModels:
    """Champions of the served tasks, swapped as a whole on `reload()` so a request never sees
    a half-loaded set. `predict` follows the PredictionBackend protocol and takes whatever
    a predictor takes.

    `observe(task, rows)` adds measured rows to a champion: a copy takes them and is swapped in
    under the reload lock, so a request reads the champion before or after, never one being
    refitted. The observations live in memory, with the champion they were added to: a reload
    (or a restart) serves the registry's champions without them.

    `freeze_heap` (a long-running server): after each reload, what is alive (modules, models)
    leaves the cycle collector's generations (`gc.freeze`). Otherwise every full collection
    walks every object of the models while every request in flight waits."""

    def __init__(
        self,
        tasks: tuple[str, ...],
        metrics: ServiceMetrics | None = None,
        backend_factory: Callable[[tuple[str, ...]], InProcessBackend] = InProcessBackend,
        freeze_heap: bool = False,
    ) -> None:
        self.tasks = tasks
        self.freeze_heap = freeze_heap
        self.metrics = metrics
        self._factory = backend_factory
        self._backend = backend_factory(tasks)
        self._missing: list[str] = list(tasks)
        # by task; replaced as a whole (never changed in place) under the reload lock
        self._observed: dict[str, _Observed] = {}
        self._reload_lock = threading.Lock()
        # what the service is doing to get a task's missing model (`perfcast serve` trains
        # them after binding the port: waiting, training, or why it failed), by task; /readyz
        # and the 503s say it
        self.training: dict[str, str] = {}
        # why a task still serves the model it served before the last reload, by task
        self._kept: dict[str, str] = {}

    def reload(self) -> list[str]:
        """Load every served task's champion afresh; returns the tasks without one. A task
        whose new champion cannot be loaded (or fails its canary) keeps the model it served:
        `warning(task)` says why."""
        with self._reload_lock:
            model_store.reopen()  # the store's file may have been replaced since the last load
            backend = self._factory(self.tasks)
            missing = backend.load_all()
            serving, kept = self._backend.loaded(), {}
            for task in [t for t in missing if t in serving]:
                backend.keep(task, serving[task])
                missing.remove(task)
                kept[task] = (
                    f"still serving version {serving[task].version}: "
                    f"{getattr(backend, 'errors', {}).get(task, 'the new champion failed')}"
                )
            self._backend, self._missing, self._observed = backend, missing, {}
            self._kept = kept
            if self.metrics is not None:
                self.metrics.served(backend.loaded())
            if self.freeze_heap:  # the models replaced are garbage now: collect, then freeze
                gc.unfreeze()
                gc.collect()
                gc.freeze()
            return missing

    def warning(self, task: str) -> str | None:
        """Why `task` serves an older model than the registry's champion (None: it does not)."""
        return self._kept.get(task)

    @property
    def missing(self) -> list[str]:
        return list(self._missing)

    def champions(self) -> dict[str, object]:
        observed = self._observed
        return {
            task: self._with_observed(observed, task, champion)
            for task, champion in self._backend.loaded().items()
        }

    @staticmethod
    def _with_observed(observed: Mapping[str, _Observed], task: str, champion):
        """`champion` (as loaded), or its copy with the rows observed since it was loaded."""
        seen = observed.get(task)
        return seen.champion if seen is not None and seen.base is champion else champion

    def observed_rows(self, task: str) -> int:
        """Measured rows added to `task`'s loaded champion (0: none since it was loaded)."""
        seen = self._observed.get(task)
        if seen is None or seen.base is not self._backend.loaded().get(task):
            return 0
        return seen.rows

    def observe(self, task: str, rows: pd.DataFrame) -> tuple[object, int]:
        """Add measured contract rows to `task`'s champion (its predictor's `observe`): a deep
        copy takes them, then replaces the champion for the next requests. Returns (the new
        champion, the rows observed since it was loaded). ContractError on a bad row (nothing
        changes); ModelUnavailableError without a champion, or one that takes no rows."""
        with self._reload_lock:  # one change at a time: a reload or another observation
            current = self.champion(task)
            if not callable(getattr(current.predictor, "observe", None)):
                raise ModelUnavailableError(
                    task, f"its champion ({current.family}) takes no measured rows"
                )
            predictor = copy.deepcopy(current.predictor)
            predictor.observe(rows)
            champion = dataclasses.replace(current, predictor=predictor)
            base = self._backend.loaded().get(task)
            count = self.observed_rows(task) + len(rows)
            self._observed = {**self._observed, task: _Observed(base, champion, count)}
            return champion, count

    def champion(self, task: str):
        """The loaded champion of `task`, or ModelUnavailableError saying why there is none."""
        if task not in self.tasks:
            raise ModelUnavailableError(
                task, f"the service does not serve it (PERFCAST_TASKS={','.join(self.tasks)})"
            )
        observed = self._observed  # read once: a reload or observation may replace it
        champion = self._backend.loaded().get(task)
        if champion is None:
            raise ModelUnavailableError(task, self.reason(task))
        return self._with_observed(observed, task, champion)

    def reason(self, task: str) -> str:
        """Why `task` has no model: its default model is being trained (or failed to be), its
        champion failed to load (where and why), or there is none."""
        if task in self.training:
            return self.training[task]
        error = getattr(self._backend, "errors", {}).get(task)
        if error and "cannot be loaded" in error:
            return f"{error}, then POST /v1/models/reload"
        return missing_reason(task)

    @overload
    def predict(
        self,
        task: Task,
        rows: PredictionRows,
        groups: Sequence[int] | None = None,
        *,
        columns: Literal[False] = False,
    ) -> pd.DataFrame: ...

    @overload
    def predict(
        self,
        task: Task,
        rows: PredictionRows,
        groups: Sequence[int] | None = None,
        *,
        columns: Literal[True],
    ) -> Columns: ...

    def predict(
        self,
        task: Task,
        rows: PredictionRows,
        groups: Sequence[int] | None = None,
        *,
        columns: bool = False,
    ) -> pd.DataFrame | Columns:
        """The champion's `predict_interval` (`TaskPredictor.predict_interval`: a frame,
        `CheckedRows` such as the optimizer's candidates, or records such as the HTTP routes'
        rows; `groups` a micro-batch's requests; `columns=True` for the routes' columns)."""
        champion = self.champion(task)
        out = champion.predictor.predict_interval(rows, groups, columns=columns)
        self._count(task, champion, len(next(iter(out.values()))) if columns else len(out))
        return out

    def _count(self, task: str, champion, predictions: int) -> None:
        if self.metrics is not None:
            self.metrics.predicted(task, f"{champion.family}:v{champion.version}", predictions)
