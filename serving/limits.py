"""The work a request causes, counted before any of it is done, against the settings' limits.

Each count is the one the cost grows with: a recommendation's enumerated configurations, an
allocation's dynamic-program cells ((GPUs + 1) × the jobs' GPU-count choices) and predicted
configurations, a placement's predictions (pairs of one-GPU jobs × GPU types, and multi-GPU
jobs × GPU types × node counts), a query recommendation's plan rows × settings, the distinct
column names across rows (each one a column of the frame).
Over a limit -> `RequestLimitError`, answered 413 naming the setting.
"""

from __future__ import annotations

from perfcast.errors import PerfcastError
from perfcast.optimizer import candidates, elastic, placement
from perfcast.serving import schemas
from perfcast.serving.rows import distinct_columns
from perfcast.serving.settings import Settings


class RequestLimitError(PerfcastError):
    """A request would cause more work than a limit of the settings allows."""

    def __init__(self, limit: str, value: int, allowed: int, what: str, advice: str) -> None:
        self.limit, self.value, self.allowed = limit, value, allowed
        super().__init__(
            f"{what} is {value}, over the limit of {allowed} (PERFCAST_{limit.upper()}); {advice}"
        )


def _check(limit: str, value: int, settings: Settings, what: str, advice: str) -> None:
    allowed = getattr(settings, limit)
    if value > allowed:
        raise RequestLimitError(limit, value, allowed, what, advice)


def check_predict(rows: list[dict], settings: Settings) -> None:
    _check(
        "max_columns",
        distinct_columns(rows),
        settings,
        "the number of distinct column names across the rows",
        "send the contract's columns (docs/data-contract.md)",
    )


def check_recommend(req: schemas.RecommendRequest, settings: Settings) -> None:
    pools = [candidates.GpuPool(**p.model_dump()) for p in req.pools]
    _check(
        "max_candidates",
        candidates.candidate_count(pools, req.local_batch_sizes, req.gpu_counts),
        settings,
        "the number of configurations to score",
        "give fewer nodes, gpu_counts or local_batch_sizes",
    )


def check_allocate(req: schemas.AllocateRequest, settings: Settings) -> None:
    total, choices, predictions = req.total_gpus, [], 0
    for job in req.jobs:
        usable = elastic.gpu_counts(job.min_gpus, job.max_gpus, total)
        if job.throughput is not None:
            counts = len({p.num_gpus for p in job.throughput if p.num_gpus in usable})
        else:
            counts = len(usable)
            predictions += counts * len(set(job.local_batch_sizes or []))
        choices.append(counts + (job.min_gpus == 0))  # 0 GPUs is a choice too
    _check(
        "max_allocation_choices",
        sum(choices),
        settings,
        "the jobs' GPU-count choices (0 GPUs included)",
        "give max_gpus, fewer throughput points or fewer jobs",
    )
    _check(
        "max_allocation_predictions",
        predictions,
        settings,
        "the number of configurations to predict",
        "give max_gpus or fewer local_batch_sizes",
    )
    _check(
        "max_columns",
        distinct_columns(j.job for j in req.jobs if j.job is not None),
        settings,
        "the number of distinct column names across the jobs",
        "send the contract's columns (docs/data-contract.md)",
    )


def check_place(req: schemas.PlaceRequest, settings: Settings) -> None:
    jobs = [placement.PlacementJob(**j.model_dump()) for j in req.jobs]
    nodes = [placement.Node(**n.model_dump()) for n in req.nodes]
    _check(
        "max_placement_predictions",
        placement.prediction_rows(jobs, nodes),
        settings,
        "the number of predictions the placement makes (pairs of kinds of one-GPU jobs × GPU "
        "types, plus kinds of multi-GPU jobs × GPU types × node counts)",
        "place fewer kinds of jobs at once, or over fewer GPU types",
    )
    _check(
        "max_columns",
        distinct_columns(job.features for job in req.jobs),
        settings,
        "the number of distinct column names across the jobs' features",
        "send the contract's columns (docs/data-contract.md)",
    )


def check_query_recommend(rows: int, settings_tried: int, settings: Settings) -> None:
    _check(
        "max_query_rows",
        rows * settings_tried,
        settings,
        "the number of plan rows to predict (rows × parallelisms × memory limits)",
        "give fewer parallelisms or memory limits",
    )
