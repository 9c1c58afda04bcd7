"""Request and response models of the HTTP API (and of the YAML files the CLI reads).

Field bounds keep each request's size finite (at most 10,000 rows per prediction); the work
it causes is bounded against the settings' limits in `limits.py`. Numbers are strict: an
integer field refuses 4.5, true and "4", and no number may be NaN or infinite.
"""

from __future__ import annotations

from typing import Annotated, Literal, NotRequired, Required

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StrictInt,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError
from typing_extensions import TypedDict

from perfcast.datasets.contract import (
    MAX_GPUS,
    MAX_GPUS_PER_NODE,
    MAX_LOCAL_BATCH_SIZE,
    MAX_NODES,
    at_most_text,
    upper_bounds,
)
from perfcast.predictor.backend import PER_SAMPLE_TASKS, TASK_TABLES
from perfcast.serving.rows import (
    MEASURED_SCALING_ROW,
    ROW_TYPES,
    GpuName,
    Scalar,
    at_most,
    column,
    example_row,
)
from perfcast.serving.settings import MAX_ROWS

# JSON numbers as sent: an integer field takes no 4.5, true or "4"; no float field takes NaN
Number = Annotated[float, Field(strict=True, allow_inf_nan=False)]


Row = dict[str, Scalar]
Name = Annotated[str, Field(min_length=1, max_length=200)]
# any case (`V100` is `v100`); a name perfcast does not know is a 422 with the nearest known one
GpuType = Annotated[str, Field(min_length=1, max_length=64), GpuName]
Positive = Annotated[Number, Field(gt=0)]
NonNegative = Annotated[Number, Field(ge=0)]
BatchSize = Annotated[StrictInt, Field(ge=1, le=2**20)]  # a global batch
# the scaling rows' physical bounds (datasets/contract.py), worded as the contract words them
LocalBatchSize = Annotated[
    StrictInt,
    Field(ge=1, le=MAX_LOCAL_BATCH_SIZE),
    at_most("local_batch_size", MAX_LOCAL_BATCH_SIZE),
]


def _gpus(name: str, least: int = 1) -> object:
    return Annotated[StrictInt, Field(ge=least, le=MAX_GPUS), at_most(name, MAX_GPUS)]


def _per_node(name: str) -> object:
    return Annotated[StrictInt, Field(ge=1, le=MAX_GPUS_PER_NODE), at_most(name, MAX_GPUS_PER_NODE)]


GpuCount = _gpus("num_gpus")


_SCALING_BOUNDS = upper_bounds("scaling")


def _within_bounds(row: Row) -> Row:
    """A job description's scaling columns within the contract's bounds (its link bandwidths,
    a local batch size): refused here, naming the column, not in a row the service makes."""
    for name, bound in _SCALING_BOUNDS.items():
        value = row.get(name)
        number = isinstance(value, int | float) and not isinstance(value, bool)
        if number and value > bound:  # type: ignore[operator]
            raise PydanticCustomError("less_than_equal", at_most_text(name, bound), {"le": bound})
    return row


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


# ---- predictions -------------------------------------------------------------------------


class ModelRef(_Model):
    task: str
    family: str
    version: str
    run_id: str


class PredictResponse(_Model):
    """The answer of every `POST /v1/predict/<task>`; each task's own model types the
    predictions (`ScalingPredictResponse`, ...)."""

    task: str
    model: ModelRef
    targets: list[str] = Field(description="the task's target columns, predicted per row")
    predictions: list[dict[str, float | str | list[str] | None]]


FLAGS = (
    "What the model had not seen for this row (e.g. `new_job`, `new_gpu_type`, "
    "`extrapolated_gpus`; the vocabulary is perfcast.predictor.base.FLAGS), empty when "
    "nothing; absent from models that do not flag."
)
_QUANTILES = (("", "the prediction (median)"), ("_p10", "10th percentile"),
              ("_p90", "90th percentile"))  # fmt: skip


def _prediction_type(task: str) -> type:
    fields: dict[str, object] = {}
    if task in PER_SAMPLE_TASKS:
        fields["sample_id"] = Required[Annotated[str, Field(description="The sample predicted.")]]
    for target in TASK_TABLES[task][1]:
        doc = column(target)
        for suffix, what in _QUANTILES:
            description = f"{doc.description[0].upper()}{doc.description[1:]}, {what}; null "
            fields[target + suffix] = Required[
                Annotated[
                    float | None,
                    Field(
                        description=f"{description}where no prediction exists. Unit: {doc.unit}.",
                        json_schema_extra={"x-unit": doc.unit},
                    ),
                ]
            ]
    fields["flags"] = NotRequired[Annotated[list[str], Field(description=FLAGS)]]
    prediction = TypedDict(f"{task.capitalize()}Prediction", fields, total=False)  # type: ignore[misc]
    prediction.__doc__ = (
        "One row's prediction" if task not in PER_SAMPLE_TASKS else "One sample's prediction"
    ) + " with its p10-p90 interval."
    return prediction


def _predict_models(task: str) -> tuple[type[_Model], type[PredictResponse]]:
    """The request and response models of `POST /v1/predict/<task>`."""
    name, kind = task.capitalize(), TASK_TABLES[task][0]
    per = "sample_id (one answer per sample)" if task in PER_SAMPLE_TASKS else "row"
    rows = Annotated[list[ROW_TYPES[task]], Field(min_length=1, max_length=MAX_ROWS)]
    request = type(
        f"{name}PredictRequest",
        (_Model,),
        {
            "__module__": __name__,
            "__doc__": f"Up to {MAX_ROWS:,} {kind}-table rows to predict, one answer per {per}.",
            "__annotations__": {"rows": rows},
            "rows": Field(description=f"{kind}-contract rows without the target columns"),
            "model_config": ConfigDict(
                extra="forbid", json_schema_extra={"examples": [{"rows": [example_row(task)]}]}
            ),
        },
    )
    response = type(
        f"{name}PredictResponse",
        (PredictResponse,),
        {
            "__module__": __name__,
            "__doc__": f"Predictions of {', '.join(TASK_TABLES[task][1])} with p10/p90.",
            "__annotations__": {"predictions": list[_prediction_type(task)]},
            "predictions": Field(description=f"one object per {per}, in the order sent"),
        },
    )
    return request, response


PREDICT_MODELS = {task: _predict_models(task) for task in TASK_TABLES}


# ---- measurements: observe ----------------------------------------------------------------


MeasuredRows = Annotated[
    list[MEASURED_SCALING_ROW],  # type: ignore[valid-type]
    Field(min_length=1, max_length=MAX_ROWS),
]


class ObserveRequest(_Model):
    """Measured scaling rows (with `step_time_s`) for the served scaling champion."""

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={"examples": [{"rows": [example_row("scaling", measured=True)]}]},
    )

    rows: MeasuredRows = Field(
        description="scaling-contract rows with their measured step_time_s (seconds, > 0)"
    )


class ObserveResponse(_Model):
    task: Literal["scaling"]
    observed: int = Field(description="rows this request added")
    observed_rows: int = Field(
        description="rows added to the served champion since it was loaded (this request's too)"
    )
    model: ModelRef = Field(description="the champion the rows were added to")


# ---- one job: recommend ----------------------------------------------------------------


class GpuPoolIn(_Model):
    gpu_type: GpuType
    gpus_per_node: _per_node("gpus_per_node")  # type: ignore[valid-type]
    nodes: Annotated[StrictInt, Field(ge=1, le=4096)]
    price_per_gpu_hour: NonNegative | None = Field(
        default=None,
        description="price of one GPU for one hour, in any currency; costs are in that currency",
        json_schema_extra={"x-unit": "currency/GPU-hour"},
    )

    @model_validator(mode="after")
    def _gpus(self) -> GpuPoolIn:
        if self.gpus_per_node * self.nodes > MAX_GPUS:  # its candidates' num_gpus
            text = at_most_text("gpus_per_node * nodes (num_gpus)", MAX_GPUS)
            raise PydanticCustomError("less_than_equal", text, {"le": MAX_GPUS})
        return self


class WorkIn(_Model):
    """The job's total work: exactly one of `samples` or `iterations`."""

    samples: Positive | None = None
    iterations: Positive | None = None

    @model_validator(mode="after")
    def _exactly_one(self) -> WorkIn:
        if (self.samples is None) == (self.iterations is None):
            raise ValueError("give exactly one of samples or iterations")
        return self


class RecommendRequest(_Model):
    job: Row = Field(
        description="The job's contract columns other than the configuration: at least `job` "
        "(workload name), plus e.g. `amp` and model features the predictor uses."
    )
    pools: Annotated[list[GpuPoolIn], Field(min_length=1, max_length=16)]
    local_batch_sizes: Annotated[list[LocalBatchSize], Field(min_length=1, max_length=64)]
    objective: Literal["min_time", "min_cost", "max_throughput_per_gpu"] = "min_time"
    work: WorkIn | None = None
    deadline_s: Positive | None = Field(
        default=None, description="the job must finish within this many seconds (at p90)"
    )
    max_cost: NonNegative | None = Field(
        default=None, description="most the job may cost, in the currency of price_per_gpu_hour"
    )
    gpu_counts: Annotated[list[GpuCount], Field(max_length=1024)] | None = Field(
        default=None, description="GPU counts to consider (default: every count)"
    )
    top_k: Annotated[StrictInt, Field(ge=1, le=50)] = 5

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "examples": [
                {
                    "job": {"job": "resnet50"},
                    "pools": [
                        {
                            "gpu_type": "v100",
                            "gpus_per_node": 8,
                            "nodes": 2,
                            "price_per_gpu_hour": 2.48,
                        }
                    ],
                    "local_batch_sizes": [32, 64],
                    "objective": "min_time",
                    "work": {"iterations": 10000},
                    "top_k": 3,
                }
            ]
        },
    )

    @field_validator("job")
    @classmethod
    def _job_bounds(cls, job: Row) -> Row:
        return _within_bounds(job)

    @model_validator(mode="after")
    def _valid(self) -> RecommendRequest:
        if "job" not in self.job or not isinstance(self.job["job"], str) or not self.job["job"]:
            raise ValueError("job needs a non-empty string 'job' (the workload name)")
        if len({p.gpu_type for p in self.pools}) != len(self.pools):
            raise ValueError("each gpu_type may appear in only one pool")
        return self


class Interval(_Model):
    """A predicted quantity (in the unit its field states) with its p10-p90 interval."""

    value: float | None
    p10: float | None
    p90: float | None


class ConfigOut(_Model):
    rank: int
    gpu_type: str
    num_nodes: int
    num_gpus: int
    placement: str | None = Field(description="GPUs per node as digits; null over 9 per node")
    local_batch_size: int
    global_batch_size: int
    step_time_s: Interval = Field(description="seconds per training iteration")
    throughput: Interval = Field(
        description="samples per second (global batch ÷ step time)",
        json_schema_extra={"x-unit": "samples/s"},
    )
    throughput_per_gpu: float | None = Field(
        description="samples per second per GPU", json_schema_extra={"x-unit": "samples/s/GPU"}
    )
    scaling_efficiency: float | None = Field(
        description="throughput per GPU ÷ the same job's throughput on one GPU (1.0: perfect)"
    )
    total_time_s: Interval = Field(description="seconds to do the request's work (null: no work)")
    cost: Interval = Field(
        description="price_per_gpu_hour × GPUs × total time in hours, in the pool's currency "
        "(null without a price or work)",
        json_schema_extra={"x-unit": "currency"},
    )
    reason: str
    flags: list[str] = Field(
        default_factory=list,
        description="what the scaling model had not seen for this configuration (e.g. "
        "new_job, extrapolated_gpus); empty when nothing, or when the model does not flag",
    )


class RecommendResponse(_Model):
    objective: str
    candidates: int
    unpredicted: int
    infeasible: int
    notes: list[str]
    model: ModelRef
    top: list[ConfigOut]


# ---- many jobs: allocate -------------------------------------------------------------------


class ThroughputPoint(_Model):
    num_gpus: GpuCount
    batch_size: BatchSize = Field(description="global batch size")
    samples_per_s: NonNegative


class AllocateJob(_Model):
    """A job's throughput either given (`throughput`) or predicted with the scaling model from
    `job` on `gpu_type` for each local batch size in `local_batch_sizes`."""

    job_id: Name
    min_gpus: _gpus("min_gpus", least=0) = 0  # type: ignore[valid-type]
    max_gpus: _gpus("max_gpus") | None = None  # type: ignore[valid-type]
    weight: Positive = 1.0
    throughput: (
        Annotated[list[ThroughputPoint], Field(min_length=1, max_length=10_000, fail_fast=True)]
        | None
    ) = None
    job: Row | None = None
    gpu_type: GpuType | None = None
    local_batch_sizes: (
        Annotated[list[LocalBatchSize], Field(min_length=1, max_length=64)] | None
    ) = None
    gpus_per_node: _per_node("gpus_per_node") = 8  # type: ignore[valid-type]

    @field_validator("job")
    @classmethod
    def _job_bounds(cls, job: Row | None) -> Row | None:
        return None if job is None else _within_bounds(job)

    @model_validator(mode="after")
    def _one_source(self) -> AllocateJob:
        if (self.throughput is None) == (self.job is None):
            raise ValueError("give exactly one of throughput (known) or job (to predict)")
        if self.job is not None:
            if not isinstance(self.job.get("job"), str) or not self.job["job"]:
                raise ValueError("job needs a non-empty string 'job' (the workload name)")
            if self.gpu_type is None or self.local_batch_sizes is None:
                raise ValueError("a predicted job needs gpu_type and local_batch_sizes")
        if self.max_gpus is not None and self.max_gpus < self.min_gpus:
            raise ValueError("max_gpus must be >= min_gpus")
        return self


class AllocateRequest(_Model):
    total_gpus: _gpus("total_gpus", least=0)  # type: ignore[valid-type]
    jobs: Annotated[list[AllocateJob], Field(min_length=1, max_length=10_000, fail_fast=True)]

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "examples": [
                {
                    "total_gpus": 8,
                    "jobs": [
                        {
                            "job_id": "a",
                            "throughput": [
                                {"num_gpus": 1, "batch_size": 64, "samples_per_s": 100},
                                {"num_gpus": 2, "batch_size": 128, "samples_per_s": 190},
                            ],
                        },
                        {
                            "job_id": "b",
                            "job": {"job": "resnet50"},
                            "gpu_type": "v100",
                            "local_batch_sizes": [32, 64],
                            "max_gpus": 8,
                        },
                    ],
                }
            ]
        },
    )

    @model_validator(mode="after")
    def _nodes(self) -> AllocateRequest:
        for job in self.jobs:  # a predicted job's GPUs go on as few nodes as hold them
            gpus = min(job.max_gpus or self.total_gpus, self.total_gpus)
            if job.job is not None and -(-gpus // job.gpus_per_node) > MAX_NODES:
                most = MAX_NODES * job.gpus_per_node
                raise PydanticCustomError(
                    "less_than_equal",
                    f"job {job.job_id!r}: {at_most_text('num_nodes', MAX_NODES)}; give it "
                    f"max_gpus <= {most} or more gpus_per_node",
                    {"le": MAX_NODES},
                )
        return self


class JobAllocation(_Model):
    job_id: str
    num_gpus: int
    batch_size: int = Field(description="global batch size; 0 when the job gets no GPU")
    samples_per_s: float | None = Field(description="its (predicted) throughput there")


class AllocateResponse(_Model):
    total_gpus: int
    used_gpus: int
    total_throughput: float = Field(description="sum of the jobs' samples/s")
    weighted_throughput: float = Field(description="sum of the jobs' samples/s × their weight")
    predicted_jobs: int = Field(description="jobs whose throughput came from the scaling model")
    exact: bool = Field(
        description="true: solved exactly (every job's own best fitting beside the others', "
        "or the dynamic program); false: the hull allocation (the problem had more than "
        "max_allocation_cells cells)"
    )
    optimality_gap: float = Field(
        description="at most this fraction of the optimal weighted throughput is lost: 0 when "
        "exact, else the hull allocation's proven bound"
    )
    allocations: list[JobAllocation]


# ---- placement ---------------------------------------------------------------------------


class NodeIn(_Model):
    name: Name
    gpu_type: GpuType
    gpus: _per_node("gpus")  # type: ignore[valid-type]
    gpu_memory_mb: Positive


class PlaceJobIn(_Model):
    job_id: Name
    features: Row = Field(description="contract columns: at least `job` and `local_batch_size`")
    num_gpus: Annotated[StrictInt, Field(ge=1, le=4096)]
    persistent_mem_mb: NonNegative = 0.0
    ephemeral_mem_mb: NonNegative = 0.0

    @field_validator("features")
    @classmethod
    def _features_bounds(cls, features: Row) -> Row:
        return _within_bounds(features)


class PlaceRequest(_Model):
    nodes: Annotated[list[NodeIn], Field(min_length=1, max_length=1024, fail_fast=True)]
    jobs: Annotated[list[PlaceJobIn], Field(min_length=1, max_length=1000, fail_fast=True)]
    spread_tolerance: Annotated[Number, Field(ge=0, le=10)] = 0.05
    allow_sharing: StrictBool = True

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "examples": [
                {
                    "nodes": [
                        {"name": "n0", "gpu_type": "v100", "gpus": 4, "gpu_memory_mb": 16384}
                    ],
                    "jobs": [
                        {
                            "job_id": "j1",
                            "num_gpus": 2,
                            "features": {"job": "resnet50", "local_batch_size": 64},
                        }
                    ],
                }
            ]
        },
    )


class GpuRef(_Model):
    node: str
    gpu: int


class AssignmentOut(_Model):
    job_id: str
    gpus: list[GpuRef]
    shares_with: str | None
    reason: str


class WaitingOut(_Model):
    job_id: str
    reason: str


class PlaceResponse(_Model):
    assignments: list[AssignmentOut]
    waiting: list[WaitingOut]


# ---- models and health -------------------------------------------------------------------


class ModelInfo(_Model):
    task: str
    loaded: bool
    family: str | None = None
    version: str | None = None
    run_id: str | None = None
    trained_at: str | None = None
    metrics: dict[str, float | None] = Field(
        default_factory=dict,
        description="first `by_source_*`: on sources it never saw (scaling: each cluster held "
        "out in turn), what a new cluster should expect (`by_source_mape`, "
        "`by_source_napkin_mape` perfect scaling's on the same rows, `by_source_coverage`, "
        "`by_source_width` the median p90/p10); then `mape`, `interval_coverage`, ... on a "
        "random held-out fifth of its training data, rows like the ones it learned from",
    )
    reason: str | None = Field(default=None, description="why no model is loaded")
    warning: str | None = Field(
        default=None,
        description="why the model served is not the registry's champion (a reload whose new "
        "champion could not be loaded keeps the one that was serving)",
    )
    observed_rows: int | None = Field(
        default=None,
        description="measured rows added by POST /v1/observe since the champion was loaded "
        "(in memory only; null for a task whose model takes none)",
    )


class ModelsResponse(_Model):
    models: list[ModelInfo]


class Health(_Model):
    status: Literal["ok"]


class Readiness(_Model):
    ready: bool
    loaded: list[str]
    missing: list[str]
    reason: str | None = Field(default=None, description="why not ready")
    trained_on: dict[str, str] = Field(
        default_factory=dict,
        description="each loaded task's training data, and where its tables came from",
    )
