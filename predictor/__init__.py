"""Predictors: one estimator contract (predictor.base), one predictor per task, several model
families each. `make_predictor(task, family)` is the one place that maps names to classes."""

from __future__ import annotations

from typing import TYPE_CHECKING

from perfcast.errors import PerfcastError
from perfcast.predictor.backend import TASKS, PredictionBackend, Task

if TYPE_CHECKING:  # sklearn stays out of import time (the command line reads FAMILIES)
    from perfcast.predictor.base import TaskPredictor

FAMILIES: dict[str, tuple[str, ...]] = {
    "scaling": ("gbm", "fcn"),
    "interference": ("gbm", "fcn"),
    "runtime": ("gbm", "fcn", "rnn", "gnn", "gbm-gnn"),
    "duration": ("gbm", "fcn"),
    "query": ("gbm", "fcn", "rnn", "gnn"),
}
# runtime's question is mostly a GPU never measured: gbm-gnn is the family that generalizes
# best there (leave one GPU out, docs/BENCHMARKS.md), at ~4x gbm's training time
DEFAULT_FAMILY = {
    "scaling": "gbm", "interference": "gbm", "runtime": "gbm-gnn", "duration": "gbm",
    "query": "gbm",
}  # fmt: skip


def make_predictor(task: str, family: str | None = None, **params: object) -> TaskPredictor:
    """A fresh, unfitted predictor for `task` with model family `family` (default per task)."""
    from perfcast.predictor.duration import DurationPredictor
    from perfcast.predictor.interference import InterferencePredictor
    from perfcast.predictor.query import QueryPredictor
    from perfcast.predictor.runtime import RuntimePredictor
    from perfcast.predictor.scaling import ScalingPredictor

    classes = {
        "scaling": ScalingPredictor,
        "interference": InterferencePredictor,
        "runtime": RuntimePredictor,
        "duration": DurationPredictor,
        "query": QueryPredictor,
    }
    if task not in classes:
        raise PerfcastError(f"unknown task {task!r}; expected one of {', '.join(TASKS)}")
    family = family or DEFAULT_FAMILY[task]
    if family not in FAMILIES[task]:
        raise PerfcastError(
            f"model {family!r} is not available for task {task}; "
            f"choose one of {', '.join(FAMILIES[task])} or auto"
        )
    return classes[task](model=family, **params)


def __getattr__(name: str) -> object:
    if name == "TaskPredictor":
        from perfcast.predictor.base import TaskPredictor

        return TaskPredictor
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "DEFAULT_FAMILY",
    "FAMILIES",
    "TASKS",
    "PredictionBackend",
    "Task",
    "TaskPredictor",
    "make_predictor",
]
