"""Typed prediction rows, generated from the data contract (`perfcast.datasets.contract`).

One TypedDict per task: each contract column of the task's table (targets left out) becomes a
field of its JSON type, required or optional as in the contract, with the contract's bounds
(`>= 1`, `> 0`, `0..100`, digits, one of ...; an upper bound is refused in the contract's words,
"num_gpus must be <= 65536") and, from `COLUMNS` below, a description, its unit and an
example; the OpenAPI schema shows them. Checks the contract runs on whole tables (lower case,
unique ids, `num_gpus >= num_nodes`, at most 64 GPUs per node, JSON lists) stay with the
contract. Further columns are allowed (feature pipelines use them) as strings, finite numbers,
booleans or null.

The contract coerces (a CSV is all text), so on its own it reads `4.5` GPUs as 4, `true` as 1
and `"4"` as 4. A JSON client says what it means: an integer column takes integers (a whole
`4.0` too, which is what pandas writes for a float column of whole numbers), a number column
numbers, a boolean column booleans, a text column strings; every row is checked here, before
any of it reaches pandas or joins a micro-batch.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Annotated, Any, Literal, NamedTuple, NotRequired, Required

from pydantic import (
    AfterValidator,
    BeforeValidator,
    ConfigDict,
    Field,
    PlainValidator,
    StrictBool,
    StrictInt,
    StrictStr,
    WithJsonSchema,
)
from pydantic_core import PydanticCustomError
from typing_extensions import TypedDict

from perfcast.datasets.contract import SCHEMAS, at_most_text
from perfcast.features.devices import DEVICES, canonical_device
from perfcast.predictor.backend import TASK_TABLES
from perfcast.suggest import did_you_mean


class Column(NamedTuple):
    description: str
    unit: str | None  # None: not a quantity (names, flags)
    example: object


# What each column means (targets too: the answers use them), in the words of
# docs/data-contract.md. A new contract column fails to import here until it is described.
COLUMNS: dict[str, Column] = {
    # scaling
    "job": Column("workload name", None, "resnet50"),
    "gpu_type": Column("accelerator, lower case (t4, v100, a100, h100, cpu, ...)", None, "v100"),
    "num_nodes": Column("nodes the job spans", "nodes", 1),
    "num_gpus": Column("accelerators in total (replicas for data parallelism)", "GPUs", 4),
    "placement": Column(
        "accelerators per node as digits, summing to num_gpus (e.g. 1122)", None, "4"
    ),
    "local_batch_size": Column("batch per replica", "samples", 64),
    "amp": Column("mixed precision on", None, False),
    "sync_time_s": Column(
        "part of the step spent synchronizing gradients, when measured", "s", 0.05
    ),
    "step_time_s": Column("seconds per training iteration", "s", 0.52),
    "source": Column("where the row came from (dataset name, or measured:<host>)", None, "mine"),
    "cluster": Column(
        "cluster whose documented links (features.devices.INTERCONNECTS) carry the gradients",
        None,
        "muri",
    ),
    "intra_node_bw_gbps": Column("bandwidth between GPUs of one node", "GB/s", 150.0),
    "inter_node_bw_gbps": Column("bandwidth between nodes", "GB/s", 12.5),
    "params_m": Column("model parameters (job feature, optional)", "millions", 11.7),
    "gflops_per_sample": Column(
        "forward pass compute per sample (job feature, optional)", "GFLOP", 1.8
    ),
    # interference: a_<column> and b_<column> for the two jobs sharing one accelerator
    "batch_size": Column("batch size", "samples", 32),
    "solo_throughput": Column("throughput when running alone", "iterations/s", 12.0),
    "gpu_util": Column("GPU utilization counter when alone", "%", 80.0),
    "mem_util": Column("memory-bandwidth utilization counter when alone", "%", 45.0),
    "mem_mb": Column("device memory used when alone", "MB", 4096.0),
    "speed": Column("throughput when co-located ÷ throughput alone", "ratio", 0.8),
    "sharing": Column(
        "how the pair shared the device: time-slice (two processes taking turns, no MPS), mps "
        "or mig",
        None,
        "time-slice",
    ),
    # trace
    "job_id": Column("job id, unique within the rows", None, "j1"),
    "duration_s": Column("run time when run as requested", "s", 3600.0),
    "submit_time_s": Column("submission time from the trace start", "s", 0.0),
    "user": Column("owner", None, "alice"),
    "vc": Column("virtual cluster", None, "vc1"),
    "status": Column("final state, when known", None, "finished"),
    "iterations": Column("training iterations, when known", "iterations", 10000),
    # graph (runtime): the sample's columns repeated on each of its operator nodes
    "sample_id": Column("the graph (or plan) this node belongs to", None, "s1"),
    "model": Column("model name", None, "gpt2"),
    "device": Column("device name", None, "A100"),
    "e2e_latency_ms": Column(
        "end-to-end latency (graph: one iteration; plan: the run)", "ms", 12.5
    ),
    "mem_gb": Column("device memory", "GB", 40.0),
    "mem_bw_gbps": Column("device memory bandwidth", "GB/s", 1555.0),
    "num_sm": Column("streaming multiprocessors", "SMs", 108),
    "peak_tflops_fp32": Column("peak FP32 compute", "TFLOP/s", 19.5),
    "l2_mb": Column("L2 cache", "MB", 40.0),
    "mode": Column("train or inference", None, "inference"),
    "seq_len": Column("sequence length, for sequence models", "tokens", 512),
    "node_id": Column("operator node id within the sample", None, 0),
    "op": Column("normalized operator kind (linear, bmm, conv2d, softmax, ...)", None, "linear"),
    "input_shapes": Column("input tensor shapes, a JSON list of lists", None, "[[4, 512, 768]]"),
    "output_shape": Column("output tensor shape, a JSON list", None, "[4, 512, 768]"),
    "flops": Column("floating-point operations of the node", "FLOP", 1.2e10),
    "bytes": Column("bytes the node reads and writes", "bytes", 2.4e7),
    "inputs": Column("ids of the node's input nodes, a JSON list", None, "[]"),
    "params": Column("parameters of the node", "parameters", 589824.0),
    "latency_ms": Column("the node's measured latency, when known", "ms", 0.2),
    # plan (query)
    "query": Column("query name", None, "q1"),
    "engine": Column("engine (duckdb, spark, ...)", None, "duckdb"),
    "scale_factor": Column("data scale factor (TPC-H SF)", "SF", 1.0),
    "threads": Column("threads (DuckDB) or executors (Spark)", "threads", 4),
    "memory_limit_mb": Column("memory limit; absent: the engine's default", "MB", 2048.0),
    "cardinality": Column("rows the operator outputs (estimated)", "rows", 6001215.0),
    "num_tasks": Column("tasks of a Spark stage", "tasks", 200),
    "task_ms": Column("time of one task of a Spark stage", "ms", 35.0),
}
# the extra job features a task's feature pipeline reads, typed and described like the contract's
FEATURES: dict[str, dict[str, str]] = {
    "scaling": {"params_m": "number", "gflops_per_sample": "number"}
}


def column(name: str) -> Column:
    """The description of a column; an interference side's column (a_job) shares its doc."""
    if name in COLUMNS:
        return COLUMNS[name]
    side, _, base = name.partition("_")
    if side in ("a", "b"):
        doc = COLUMNS[base]
        return doc._replace(description=f"job {side.upper()}: {doc.description}")
    raise KeyError(name)


def _scalar(value: object) -> object:
    """One error per bad value of a further column (a union would report one per member)."""
    if value is None or isinstance(value, str | bool | int):
        return value
    if isinstance(value, float) and math.isfinite(value):
        return value
    raise ValueError("a row value must be a string, a finite number, a boolean or null")


Scalar = Annotated[
    StrictStr | StrictBool | StrictInt | float | None,
    PlainValidator(_scalar),
    WithJsonSchema(
        {"anyOf": [{"type": t} for t in ("string", "number", "boolean", "null")]},
        mode="validation",
    ),
]


def at_most(column: str, bound: float) -> BeforeValidator:
    """Refuses a number over `bound` in the contract's words ("num_gpus must be <= 65536"),
    before pydantic's own `le` (which the field keeps for its JSON schema's maximum) would
    answer "Input should be less than or equal to 65536", naming no column."""

    def check(value: object) -> object:
        number = isinstance(value, int | float) and not isinstance(value, bool)
        if number and value > bound:  # type: ignore[operator]
            raise PydanticCustomError("less_than_equal", at_most_text(column, bound), {"le": bound})
        return value

    return BeforeValidator(check)


# the names a request may give a GPU: the datasheet's (features.devices.DEVICES; the models'
# features read its figures, so a name without them gets answers from nothing) and `cpu`
KNOWN_GPUS: frozenset[str] = frozenset({*DEVICES, "cpu"})
GPU_LIST = ", ".join(sorted(KNOWN_GPUS))


def gpu_type(value: str) -> str:
    """A GPU type as the contract writes it: lower case (`V100` is `v100`), and one perfcast
    knows, by its datasheet name or a longer one it maps there (`tesla_v100-pcie-32gb`). An
    unknown name (`v1oo`) is refused naming the nearest known one, not answered with a
    confident number and a flag."""
    if value in KNOWN_GPUS:  # the common case: one set lookup
        return value
    name = value.strip().lower()
    if name in KNOWN_GPUS or canonical_device(name) in DEVICES:
        return name
    # no known name has the letter o: in `v1oo` it is a zero typed as a letter
    hint = did_you_mean(name.replace("o", "0"), KNOWN_GPUS) or did_you_mean(name, KNOWN_GPUS)
    raise PydanticCustomError(
        "unknown_gpu_type",
        "gpu_type {name} is not a GPU type perfcast knows{hint}; known: {known}",
        {"name": repr(value), "hint": hint, "known": GPU_LIST},
    )


GpuName = AfterValidator(gpu_type)


def _whole(value: object) -> object:
    # pandas writes a float column of whole numbers as 4.0: that is 4 GPUs, 4.5 is not
    return int(value) if isinstance(value, float) and value.is_integer() else value


def _json_type(dtype: object) -> str:
    name = str(dtype).lower()
    if "int" in name:
        return "integer"
    if "bool" in name:
        return "boolean"
    return "number" if "float" in name else "string"


def _bounds(checks: Iterable[Any]) -> dict[str, object]:
    """The contract's checks that have a JSON-schema form, as pydantic Field arguments."""
    bounds: dict[str, object] = {}
    for check in checks:
        stats = check.statistics or {}
        if check.name == "greater_than_or_equal_to":
            bounds["ge"] = stats["min_value"]
        elif check.name == "greater_than":
            bounds["gt"] = stats["min_value"]
        elif check.name == "less_than_or_equal_to":  # `contract.at_most`: worded as there
            bounds["le"] = stats["max_value"]
        elif check.name == "in_range":
            bounds["ge"], bounds["le"] = stats["min_value"], stats["max_value"]
        elif check.name == "str_length" and stats.get("min_value") is not None:
            bounds["min_length"] = stats["min_value"]
        elif check.name in ("str_matches", "digits"):
            bounds["pattern"] = stats["pattern"]
    return bounds


def _value_type(name: str, json_type: str, bounds: dict[str, object]) -> object:
    # a bound's own words run first (the last BeforeValidator is the outermost)
    most = [at_most(name, bounds["le"])] if "le" in bounds else []  # type: ignore[arg-type]
    if json_type == "integer":
        value = Annotated[int, Field(strict=True, **bounds)]
        return Annotated[value, BeforeValidator(_whole), *most]
    if json_type == "number":
        return Annotated[float, Field(strict=True, allow_inf_nan=False, **bounds), *most]
    if json_type == "boolean":
        return StrictBool
    return Annotated[str, Field(strict=True, **bounds)]


def _field(name: str, json_type: str, bounds: dict, required: bool, choices: list | None):
    doc = column(name)
    value = _value_type(name, json_type, bounds)
    if choices:
        value = Literal[tuple(choices)]  # type: ignore[valid-type]
    if name == "gpu_type":
        value = Annotated[value, GpuName]
    unit = f" Unit: {doc.unit}." if doc.unit else ""
    described = Field(
        description=f"{doc.description[0].upper()}{doc.description[1:]}.{unit}",
        examples=[doc.example],
        json_schema_extra={"x-unit": doc.unit} if doc.unit else None,
    )
    if required:
        return Required[Annotated[value, described]]
    return NotRequired[Annotated[value | None, described]]  # null: missing, never zero


def _row_type(task: str, measured: bool = False) -> type:
    """The task's prediction row; `measured`: with its targets too, required as in the
    contract (the measured rows `POST /v1/observe` takes)."""
    kind, targets = TASK_TABLES[task]
    fields = {}
    for name, spec in SCHEMAS[kind].columns.items():
        if name in targets and not measured:
            continue
        choices = next(
            (c.statistics["allowed_values"] for c in spec.checks if c.name == "isin"), None
        )
        fields[name] = _field(
            name, _json_type(spec.dtype), _bounds(spec.checks), spec.required, choices
        )
    for name, json_type in FEATURES.get(task, {}).items():
        fields[name] = _field(name, json_type, {"ge": 0}, False, None)
    name = f"{task.capitalize()}{'Measured' if measured else ''}Row"
    row = TypedDict(name, fields, total=False, extra_items=Scalar)  # type: ignore[misc]
    what = "with" if measured else "without"
    row.__doc__ = (
        f"One {kind}-table row of the data contract, {what} the target "
        f"({', '.join(targets)}); further columns are passed to the model's features."
    )
    row.__pydantic_config__ = ConfigDict(extra="allow")  # type: ignore[attr-defined]
    return row


ROW_TYPES: dict[str, type] = {task: _row_type(task) for task in TASK_TABLES}
# measured scaling rows (their step_time_s too), for `POST /v1/observe`
MEASURED_SCALING_ROW: type = _row_type("scaling", measured=True)


def example_row(task: str, measured: bool = False) -> dict[str, object]:
    """A row of the task's required columns (`measured`: its targets too), each at its
    documented example."""
    kind, targets = TASK_TABLES[task]
    return {
        name: column(name).example
        for name, spec in SCHEMAS[kind].columns.items()
        if spec.required and (measured or name not in targets)
    }


def distinct_columns(rows: Iterable[Mapping[str, object]]) -> int:
    """Column names across all rows (pandas makes one column per distinct name)."""
    names: set[str] = set()
    for row in rows:
        names.update(row)
    return len(names)
