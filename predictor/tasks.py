"""The task registry: everything the system knows about each prediction task, in one entry.

Every other table of tasks derives from `TASK_SPECS` (the task names, their contract tables and
targets, model families and defaults, the data `perfcast serve` trains on, the route's summary,
the predictor class). Adding a task is one `TaskSpec` here plus its predictor class;
tests/test_architecture.py fails on a second definition of a task's names or targets.

Light on purpose (no pandas, no sklearn): the command line reads it to print its help.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from perfcast.predictor.base import TaskPredictor

Task = Literal["scaling", "interference", "runtime", "duration", "query"]


@dataclass(frozen=True)
class TaskSpec:
    name: Task
    table: str  # the contract table kind its rows follow
    targets: tuple[str, ...]  # the columns it learns and predicts (each with _p10 and _p90)
    families: tuple[str, ...]  # the model families it can be fitted with
    default_family: str
    default_data: str  # the datasets `perfcast serve` trains on when the task has no champion
    summary: str  # one line: the question it answers (its route's summary)
    predictor: str  # "module:Class" of its predictor, imported when first needed
    per_sample: bool = False  # rows are the nodes of DAGs: one answer per sample_id
    batched: bool = False  # the service micro-batches concurrent single-row requests
    own_router: bool = False  # served by its own router, not /v1/predict/<task>
    auto_split: str = "random"  # the split `--model auto` validates on

    def predictor_class(self) -> type[TaskPredictor]:
        module, _, name = self.predictor.partition(":")
        return getattr(importlib.import_module(module), name)


TASK_SPECS: dict[str, TaskSpec] = {
    spec.name: spec
    for spec in (
        TaskSpec(
            "scaling", "scaling", ("step_time_s",), ("gbm", "fcn"), "gbm",
            "pollux-scaling,gavel-scaling,muri-scaling,sia-scaling",
            "Step time of a job on a configuration",
            "perfcast.predictor.scaling:ScalingPredictor", batched=True,
        ),
        TaskSpec(
            "interference", "interference", ("a_speed", "b_speed"), ("gbm", "fcn"), "gbm",
            "gavel-interference", "Speed of two jobs sharing one accelerator",
            "perfcast.predictor.interference:InterferencePredictor", batched=True,
        ),
        # runtime's question is mostly a GPU never measured: gbm-gnn generalizes best there
        # (leave one GPU out, docs/BENCHMARKS.md), at ~4x gbm's training time
        TaskSpec(
            "runtime", "graph", ("e2e_latency_ms",), ("gbm", "fcn", "rnn", "gnn", "gbm-gnn"),
            "gbm-gnn", "neusight-graphs",
            "Iteration latency from an operator graph (one answer per sample_id)",
            "perfcast.predictor.runtime:RuntimePredictor", per_sample=True,
        ),
        TaskSpec(
            "duration", "trace", ("duration_s",), ("gbm", "fcn"), "gbm", "pollux-philly",
            "Run time of a job of a cluster trace",
            "perfcast.predictor.duration:DurationPredictor",
        ),
        TaskSpec(
            "query", "plan", ("e2e_latency_ms",), ("gbm", "fcn", "rnn", "gnn"), "gbm",
            "decima-tpch-stages,measured-cpu-tpch-sweep",
            "Latency of a query from its plan (one answer per sample_id)",
            "perfcast.predictor.query:QueryPredictor", per_sample=True, own_router=True,
        ),
    )
}  # fmt: skip

TASKS: tuple[Task, ...] = tuple(TASK_SPECS)  # type: ignore[assignment]
