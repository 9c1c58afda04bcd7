"""From a shipped trace to simulator jobs whose performance comes from measured data.

Mapping rule (also in docs/scheduler.md):
- A trace row whose `job` names a measured job type (any scaling dataset) keeps it. Otherwise
  (Philly, ElasticFlow: no model name) its type is drawn from the measured types, deterministic
  per job (a hash of the job id and the seed), among the types measured at its GPU count or
  more (all types when none is).
- Batch: a trace `global_batch_size` (Pollux's workloads) is the job's global batch; else a
  trace `batch_size` is the per-GPU batch (Muri's convention, the trace contract's); without
  either, the type's most measured local batch. The global batch is then the local batch times
  the requested GPUs.
- Work: `total_samples` = traced duration x true throughput at the requested size, so a job
  run alone at its requested size takes exactly its traced duration: `duration_s` is the
  truth. Only where the run opts into statistical progress (`progress="statistical"`: the
  default for the traces in `STATISTICAL_TRACES`, Pollux's own workloads, or asked for
  explicitly) does a job the trace names as one of Pollux's applications train for that
  application's epochs instead, its progress counting statistical efficiency (`goodput.py`),
  as in the Pollux artifact's simulator; its `duration_s` is then the run time that model
  gives it alone at its requested size, packed (what the oracle hands policies), and the
  matches are counted in `Workload.statistical_jobs` (reported with the run). A name alone
  never switches a job's progress model.
- Jobs asking for 0 GPUs or more GPUs than the cluster has are dropped (and counted).
- Load: submit times divided by `load` (load 2 = arrivals twice as dense).
"""

from __future__ import annotations

import math
import zlib
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, TypeVar

import pandas as pd

from perfcast.datasets.contract import validate
from perfcast.datasets.io import read_table
from perfcast.datasets.registry import load, registry
from perfcast.errors import PerfcastError
from perfcast.scheduler.core.cluster import ClusterState
from perfcast.scheduler.core.jobs import Job
from perfcast.scheduler.facts.catalog import InterferenceCatalog, ScalingCatalog
from perfcast.scheduler.sim import goodput

SCALING_DATASETS = ("muri-scaling", "pollux-scaling", "gavel-scaling", "chronus-scaling")
INTERFERENCE_DATASETS = ("gavel-interference",)


PROGRESS = ("duration", "statistical")
# traces whose jobs are the Pollux artifact's applications (its job mixes): they opt into
# statistical progress by name; any other trace runs its `duration_s` unless told otherwise
STATISTICAL_TRACES = frozenset({"pollux-workloads"})

T = TypeVar("T")


class TraceError(PerfcastError):
    """A trace name or file that cannot be read as a trace."""


def default_progress(trace: str) -> str:
    """How a trace's jobs progress unless the run says: statistically for the traces that opt
    in (`STATISTICAL_TRACES`), else at their traced duration."""
    return "statistical" if trace.partition(":")[0] in STATISTICAL_TRACES else "duration"


def read_trace(spec: str) -> pd.DataFrame:
    """A trace table from `DATASET`, `DATASET:PART` (rows whose `trace` or `vc` column is PART,
    e.g. `muri-traces:testbed/cluster_trace`, `elasticflow-traces:cluster01`) or a CSV/Parquet
    file in the trace contract."""
    path = Path(spec)
    if path.suffix in {".csv", ".parquet"} and path.is_file():
        return validate(read_table(path), "trace", source=str(path))
    name, _, part = spec.partition(":")
    known = registry()
    if name not in known or known[name].kind != "trace":
        traces = ", ".join(n for n, d in known.items() if d.kind == "trace")
        raise TraceError(f"no trace {name!r}: give a trace file or one of: {traces}")
    table = load(name)
    if not part:
        return table
    column = "trace" if "trace" in table.columns else "vc"
    if column not in table.columns:
        raise TraceError(f"trace {name!r} has no parts (no 'trace' or 'vc' column)")
    rows = table[table[column].astype(str) == part]
    if rows.empty:
        parts = ", ".join(sorted(table[column].astype(str).unique())[:20])
        raise TraceError(f"trace {name!r} has no part {part!r}; parts: {parts}")
    return rows.reset_index(drop=True)


def _available(names: tuple[str, ...]) -> list[str]:
    known = registry()
    return [n for n in names if n in known]


def load_catalogs(gpus_per_node: int = 8) -> tuple[ScalingCatalog, InterferenceCatalog]:
    """Job types from every shipped scaling dataset; pair speeds from the interference ones."""
    scaling = [load(n) for n in _available(SCALING_DATASETS)]
    if not scaling:
        raise PerfcastError(f"none of the scaling datasets {SCALING_DATASETS} is registered")
    pairs = [load(n) for n in _available(INTERFERENCE_DATASETS)]
    inter = InterferenceCatalog(pd.concat(pairs, ignore_index=True) if pairs else None)
    return ScalingCatalog(pd.concat(scaling, ignore_index=True), gpus_per_node), inter


@dataclass
class Workload:
    name: str
    jobs: list[Job]  # by submit time
    scaling: ScalingCatalog
    interference: InterferenceCatalog
    dropped: Counter[str] = field(default_factory=Counter)
    drawn_types: int = 0  # jobs whose type was drawn (the trace named no measured model)
    origin_s: float = 0.0  # the trace's clock at simulated time 0 (fixed rounds align to it)
    progress: str = "duration"  # how named jobs progress: PROGRESS
    # jobs matched to a Pollux application model, by job type (statistical progress only)
    statistical_jobs: Counter[str] = field(default_factory=Counter)

    def statistical_model(self, job_type: str) -> goodput.Application | None:
        """The measured goodput model of a job type whose jobs progress at statistical
        efficiency (what those jobs report: step times by placement, gradient noise)."""
        return goodput.application(job_type)


def build_workload(
    trace: pd.DataFrame,
    cluster: ClusterState,
    scaling: ScalingCatalog,
    interference: InterferenceCatalog,
    *,
    name: str = "trace",
    seed: int = 0,
    load_factor: float = 1.0,
    max_jobs: int | None = None,
    progress: str = "duration",
) -> Workload:
    """Simulator jobs from a trace table (see the module docstring for the rules)."""
    if load_factor <= 0:
        raise PerfcastError(f"load must be > 0, got {load_factor}")
    if progress not in PROGRESS:
        raise PerfcastError(f"progress {progress!r}: choose one of {', '.join(PROGRESS)}")
    table = trace.sort_values("submit_time_s", kind="stable")
    if max_jobs is not None:
        table = table.head(max_jobs)
    dropped: Counter[str] = Counter()
    types = scaling.job_types()
    by_size = {
        n: [t for t in types if scaling.max_measured_gpus(t) >= n] or types
        for n in sorted(set(table["num_gpus"].astype(int)))
    }
    gpu_type = Counter(cluster.node_type).most_common(1)[0][0]
    start = float(table["submit_time_s"].min())
    # plain Python lists, read once: indexing pandas (Arrow strings) row by row costs more than
    # the rest of the loop on a million-job trace
    names = _optional(table, "job", lambda v: str(v).lower())
    batches = _optional(table, "batch_size", int)
    global_batches = _optional(table, "global_batch_size", int)
    users, vcs = _optional(table, "user", str), _optional(table, "vc", str)
    deadlines = _optional(table, "deadline_s", float)
    jobs, drawn, matched = [], 0, Counter[str]()
    crc32, throughput = zlib.crc32, scaling.throughput
    reference_batch = {t: scaling.reference_local_batch(t) for t in types}
    total_gpus = cluster.total_gpus
    # nodes of the main GPU type first, largest first: where a job's run time alone is counted
    node_sizes = [
        size
        for _, size in sorted(
            zip(cluster.node_type, cluster.node_size, strict=True),
            key=lambda node: (node[0] != gpu_type, -node[1]),
        )
    ]
    for i, (job_id, submit, gpus, duration) in enumerate(
        zip(
            table["job_id"].astype(str).tolist(),
            table["submit_time_s"].to_numpy(float).tolist(),
            table["num_gpus"].to_numpy(int).tolist(),
            table["duration_s"].to_numpy(float).tolist(),
            strict=True,
        )
    ):
        if gpus <= 0:
            dropped["asks for no GPU"] += 1
            continue
        if gpus > total_gpus:
            dropped["asks for more GPUs than the cluster has"] += 1
            continue
        trace_job = names[i] if names else None
        job_type = trace_job
        if job_type is None or not scaling.has(job_type):
            options = by_size[gpus]  # a draw fixed by the seed and the job's id
            job_type = options[crc32(f"{seed}:{job_id}".encode()) % len(options)]
            drawn += 1
        if global_batches and global_batches[i] is not None:
            batch = global_batches[i]
        else:
            local = batches[i] if batches else None
            batch = (local or reference_batch[job_type]) * gpus
        work = duration * throughput(job_type, gpu_type, gpus, batch)
        app = None
        if progress == "statistical" and trace_job == job_type:
            app = goodput.application(job_type)
        if app is not None:  # a Pollux job mix: trained for its epochs, at statistical speed
            work = app.total_work
            duration = app.run_time(packed(node_sizes, gpus), batch)
            matched[job_type] += 1
        if not (math.isfinite(work) and work > 0 and math.isfinite(duration)):
            raise TraceError(
                f"job {job_id} ({job_type}, {gpus} {gpu_type} GPU(s), batch {batch}): no finite "
                f"work to simulate (work {work} samples, duration {duration} s)"
            )
        submit_s = (submit - start) / load_factor
        deadline = None
        if deadlines and deadlines[i] is not None:
            deadline = submit_s + deadlines[i]
        most = 2 * gpus  # at least 2: gpus >= 1 here
        jobs.append(
            Job(  # positional, in `_JOB_FIELDS`'s order: see there
                job_id,
                submit_s,
                job_type,
                gpus,
                batch,
                work,
                duration,
                None,  # gpu_type
                users[i] if users else None,
                vcs[i] if vcs else None,
                trace_job,
                deadline,
                None,  # group
                1,  # min_gpus
                most if most < total_gpus else total_gpus,  # max_gpus
                None,  # score
                5.0,  # curve
                app is not None,  # statistical
            )
        )
    return Workload(
        name, jobs, scaling, interference, dropped, drawn, start / load_factor, progress, matched
    )


# `Job`'s fields in the order `build_workload` passes them: a million jobs built with keywords
# take twice as long as with positions (CPython matches each keyword against the parameter
# names), so the loop passes positions and this check keeps it honest if the fields move or
# the defaults it passes as constants change
_JOB_FIELDS = (
    *("job_id", "submit_time_s", "job_type", "num_gpus", "batch_size", "total_samples"),
    *("duration_s", "gpu_type", "user", "vc", "trace_job", "deadline_s", "group", "min_gpus"),
    *("max_gpus", "score", "curve", "statistical"),
)
_DEFAULTS_PASSED = {"gpu_type": None, "group": None, "min_gpus": 1, "score": None, "curve": 5.0}
if tuple(f.name for f in fields(Job)) != _JOB_FIELDS or any(
    f.default != _DEFAULTS_PASSED[f.name] for f in fields(Job) if f.name in _DEFAULTS_PASSED
):
    raise TypeError(
        f"Job's fields changed: update build_workload's call, {_JOB_FIELDS} and {_DEFAULTS_PASSED}"
    )


def _optional(table: pd.DataFrame, column: str, cast: Callable[[Any], T]) -> list[T | None]:
    """A column as a list with missing values as None (`cast` applied to the others); an
    empty list when the table has no such column."""
    if column not in table:
        return []
    values = table[column]
    missing = values.isna().tolist()  # one vectorized test, not pd.isna per row
    return [
        None if gone else cast(v)
        for v, gone in zip(values.astype(object).tolist(), missing, strict=True)
    ]


def packed(node_sizes: list[int], num_gpus: int) -> tuple[int, ...]:
    """GPUs per node of `num_gpus` on the fewest of nodes with `node_sizes` (largest first)."""
    placement, left = [], num_gpus
    for size in node_sizes:
        if left <= 0:
            break
        placement.append(min(size, left))
        left -= placement[-1]
    if left > 0:
        raise PerfcastError(f"{num_gpus} GPUs do not fit on nodes of {node_sizes} GPUs")
    return tuple(placement)
