"""Predictors: one estimator contract (predictor.base), one predictor per task, several model
families each. `make_predictor(task, family)` is the one place that maps names to classes."""

from __future__ import annotations

from typing import TYPE_CHECKING

from perfcast.errors import PerfcastError
from perfcast.predictor.backend import PredictionBackend
from perfcast.predictor.tasks import TASK_SPECS, TASKS, Task

if TYPE_CHECKING:  # sklearn stays out of import time (the command line reads FAMILIES)
    from perfcast.predictor.base import TaskPredictor

FAMILIES = {name: spec.families for name, spec in TASK_SPECS.items()}
DEFAULT_FAMILY = {name: spec.default_family for name, spec in TASK_SPECS.items()}


def make_predictor(task: str, family: str | None = None, **params: object) -> TaskPredictor:
    """A fresh, unfitted predictor for `task` with model family `family` (default per task)."""
    spec = TASK_SPECS.get(task)
    if spec is None:
        raise PerfcastError(f"unknown task {task!r}; expected one of {', '.join(TASKS)}")
    family = family or spec.default_family
    if family not in spec.families:
        raise PerfcastError(
            f"model {family!r} is not available for task {task}; "
            f"choose one of {', '.join(spec.families)} or auto"
        )
    return spec.predictor_class()(model=family, **params)


def __getattr__(name: str) -> object:
    if name == "TaskPredictor":
        from perfcast.predictor.base import TaskPredictor

        return TaskPredictor
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "DEFAULT_FAMILY",
    "FAMILIES",
    "TASKS",
    "TASK_SPECS",
    "PredictionBackend",
    "Task",
    "TaskPredictor",
    "make_predictor",
]
