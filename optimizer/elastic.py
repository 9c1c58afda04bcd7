"""Elastic allocation of GPUs and batch sizes to many jobs (Saxena et al., MASCOTS'20).

Each job says how fast it runs (predicted samples/s) for each (GPU count, global batch size)
it can use. `allocate` chooses every job's GPU count and batch size so that the total weighted
throughput is as large as possible without using more than the cluster's GPUs, honouring each
job's minimum and maximum GPU count.

It is an exact knapsack over GPUs: for each job the best batch size per GPU count is picked
first (it never affects other jobs), then a dynamic program over jobs × GPUs used combines
them. Each job's step is one vectorized max-plus update over the GPU counts the job can use,
so the work is (GPUs + 1) × the jobs' usable GPU counts (`dp_cells`, which bounds a request):
1,000 jobs on 512 GPUs solve in well under a second. `predicted_throughputs` fills the jobs'
tables from the scaling model. `allocate_greedy` (marginal gain per
GPU) is the baseline and `allocate_exhaustive` the brute-force checker for tiny cases.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
from numpy.lib.stride_tricks import sliding_window_view

from perfcast.datasets.placements import even_placement, fewest_nodes
from perfcast.errors import PerfcastError
from perfcast.predictor.backend import PredictionBackend

Allocation = dict[str, tuple[int, int]]
NOT_RUNNING = (0, 0)  # (num_gpus, batch_size) of a job that gets no GPU


class InfeasibleAllocationError(PerfcastError):
    """The jobs' minimum GPU counts cannot all be met on the cluster."""


@dataclass(frozen=True)
class ElasticJob:
    job_id: str
    throughput: dict[tuple[int, int], float]  # (num_gpus, global_batch_size) -> samples/s
    min_gpus: int = 0
    max_gpus: int | None = None
    weight: float = 1.0

    def __post_init__(self) -> None:
        where = f"elastic job {self.job_id!r}"
        if not self.job_id:
            raise PerfcastError("an elastic job needs a non-empty job_id")
        if self.min_gpus < 0:
            raise PerfcastError(f"{where}: min_gpus must be >= 0, got {self.min_gpus}")
        if self.max_gpus is not None and self.max_gpus < max(self.min_gpus, 1):
            raise PerfcastError(
                f"{where}: max_gpus={self.max_gpus} must be >= 1 and >= min_gpus={self.min_gpus}"
            )
        if not (math.isfinite(self.weight) and self.weight > 0):
            raise PerfcastError(f"{where}: weight must be a finite number > 0, got {self.weight}")
        for key, value in self.throughput.items():
            ok_key = (
                isinstance(key, tuple)
                and len(key) == 2
                and all(isinstance(k, int | np.integer) for k in key)
                and key[0] >= 1
                and key[1] >= 1
            )
            if not ok_key:
                raise PerfcastError(
                    f"{where}: throughput key {key!r} must be (num_gpus >= 1, batch_size >= 1)"
                )
            if not (math.isfinite(value) and value >= 0):
                raise PerfcastError(
                    f"{where}: throughput at {key} must be a finite number >= 0, got {value}"
                )


@dataclass(frozen=True)
class PredictedJob:
    """A job whose throughput the scaling model predicts: on `gpu_type` nodes of
    `gpus_per_node` GPUs, for each local batch size, at every GPU count it may use."""

    job_id: str
    features: Mapping[str, object]  # contract columns other than the configuration
    gpu_type: str
    local_batch_sizes: Sequence[int]
    gpus_per_node: int = 8
    min_gpus: int = 0
    max_gpus: int | None = None


def gpu_counts(min_gpus: int, max_gpus: int | None, total_gpus: int) -> range:
    """The GPU counts (>= 1) a job with these limits may get on `total_gpus`."""
    return range(max(min_gpus, 1), min(max_gpus or total_gpus, total_gpus) + 1)


def dp_cells(choices: Sequence[int], total_gpus: int) -> int:
    """Cells `allocate` computes: (total_gpus + 1) per usable GPU count (0 included) of each
    job; its time and memory grow with this number, which bounds a request."""
    return (total_gpus + 1) * sum(max(k, 1) for k in choices)


def predicted_throughputs(
    jobs: Sequence[PredictedJob], total_gpus: int, backend: PredictionBackend
) -> dict[str, dict[tuple[int, int], float]]:
    """Samples/s per (GPU count, global batch) of each job, in one backend call. GPUs go on
    as few nodes as possible, spread evenly."""
    frames, owners = [], []
    for job in jobs:
        counts = np.asarray(gpu_counts(job.min_gpus, job.max_gpus, total_gpus), dtype=np.int64)
        sizes = np.asarray(sorted(set(job.local_batch_sizes)), dtype=np.int64)
        if counts.size == 0 or sizes.size == 0:
            continue
        nodes = [fewest_nodes(int(g), job.gpus_per_node) for g in counts]
        spread = [even_placement(int(g), k) for g, k in zip(counts, nodes, strict=True)]
        frame = pd.DataFrame(
            {
                "gpu_type": job.gpu_type,
                "num_gpus": np.repeat(counts, sizes.size),
                "num_nodes": np.repeat(nodes, sizes.size),
                "placement": np.repeat(np.array(spread, dtype=object), sizes.size),
                "local_batch_size": np.tile(sizes, counts.size),
            }
        )
        for name, value in job.features.items():
            if name not in frame.columns:  # the configuration is the optimizer's to set
                frame[name] = value
        frames.append(frame)
        owners += [job.job_id] * len(frame)
    tables: dict[str, dict[tuple[int, int], float]] = {j.job_id: {} for j in jobs}
    if not frames:
        return tables
    frame = pd.concat(frames, ignore_index=True)
    step = backend.predict("scaling", frame)["step_time_s"].to_numpy(dtype=float)
    global_batch = (frame["num_gpus"] * frame["local_batch_size"]).to_numpy()
    with np.errstate(divide="ignore", invalid="ignore"):
        rate = global_batch / step
    gpus = frame["num_gpus"].to_numpy()
    for owner, g, batch, r in zip(owners, gpus, global_batch, rate, strict=True):
        if math.isfinite(r) and r >= 0:
            tables[owner][(int(g), int(batch))] = float(r)
    return tables


@dataclass(frozen=True)
class _Table:
    """Per job and GPU count: best weighted throughput (-inf where not allowed) and its batch."""

    value: np.ndarray  # (jobs, G + 1) float64
    batch: np.ndarray  # (jobs, G + 1) int64, 0 where value is -inf or g == 0


def _best_per_gpu_count(jobs: Sequence[ElasticJob], total_gpus: int) -> _Table:
    n, width = len(jobs), total_gpus + 1
    value = np.full((n, width), -np.inf)
    batch = np.zeros((n, width), dtype=np.int64)
    sizes = [len(job.throughput) for job in jobs]
    if sum(sizes):
        keys = np.concatenate(
            [np.asarray(list(j.throughput), dtype=np.int64).reshape(-1, 2) for j in jobs]
        )
        rates = np.concatenate([np.fromiter(j.throughput.values(), float) for j in jobs])
        owner = np.repeat(np.arange(n), sizes)
        gpus, sizes_b = keys[:, 0], keys[:, 1]
        weights = np.array([j.weight for j in jobs])
        lows = np.array([max(j.min_gpus, 1) for j in jobs])
        highs = np.array([min(j.max_gpus or total_gpus, total_gpus) for j in jobs])
        keep = (gpus >= lows[owner]) & (gpus <= highs[owner])
        owner, gpus, sizes_b, rates = owner[keep], gpus[keep], sizes_b[keep], rates[keep]
        # Sort so the best rate (ties: the smaller batch) of each (job, gpus) comes last in
        # its run, then keep only the last row of each run.
        order = np.lexsort((-sizes_b, rates, gpus, owner))
        owner, gpus, sizes_b, rates = owner[order], gpus[order], sizes_b[order], rates[order]
        last = np.ones(len(owner), dtype=bool)
        last[:-1] = (owner[1:] != owner[:-1]) | (gpus[1:] != gpus[:-1])
        owner, gpus = owner[last], gpus[last]
        value[owner, gpus] = rates[last] * weights[owner]
        batch[owner, gpus] = sizes_b[last]
    for i, job in enumerate(jobs):
        if job.min_gpus == 0:
            value[i, 0] = 0.0
    return _Table(value, batch)


def _check_minimums(jobs: Sequence[ElasticJob], table: _Table, total_gpus: int) -> None:
    ids = [j.job_id for j in jobs]
    if len(set(ids)) != len(ids):
        dup = next(i for i in ids if ids.count(i) > 1)
        raise PerfcastError(f"job_id {dup!r} appears more than once")
    if total_gpus < 0:
        raise PerfcastError(f"total_gpus must be >= 0, got {total_gpus}")
    finite = np.isfinite(table.value)
    cannot_run = [jobs[i].job_id for i in np.flatnonzero(~finite.any(axis=1))]
    if cannot_run:
        raise InfeasibleAllocationError(
            f"job(s) {', '.join(cannot_run[:5])} have min_gpus > 0 but no throughput for any "
            f"GPU count between their min_gpus and min(max_gpus, {total_gpus} GPUs)"
        )
    # The fewest GPUs each job can run on; their sum must fit.
    fewest = finite.argmax(axis=1)
    if fewest.sum() > total_gpus:
        needy = sorted(((int(g), jobs[i].job_id) for i, g in enumerate(fewest) if g), reverse=True)
        named = ", ".join(f"{job} ({g})" for g, job in needy[:5])
        raise InfeasibleAllocationError(
            f"the jobs need at least {int(fewest.sum())} GPUs in total but the cluster has "
            f"{total_gpus}; the largest minimums: {named}"
        )


def _result(jobs: Sequence[ElasticJob], table: _Table, gpus: Sequence[int]) -> Allocation:
    return {
        job.job_id: (int(g), int(table.batch[i, g])) if g else NOT_RUNNING
        for i, (job, g) in enumerate(zip(jobs, gpus, strict=True))
    }


def allocate(jobs: Sequence[ElasticJob], total_gpus: int) -> Allocation:
    """Each job's (num_gpus, batch_size) maximizing total weighted throughput on `total_gpus`.

    A job with `min_gpus == 0` may get `(0, 0)`: not running. Raises
    `InfeasibleAllocationError` when the minimums cannot all be met.
    """
    table = _best_per_gpu_count(jobs, total_gpus)
    _check_minimums(jobs, table, total_gpus)
    width = total_gpus + 1
    # best[c] = best total value of the jobs so far using exactly c GPUs.
    best = np.full(width, -np.inf)
    best[0] = 0.0
    choice = np.zeros((len(jobs), width), dtype=np.int32)
    # padded[width + c - g] = best[c - g] (-inf for c < g); window[c, t] = padded[c + t] is a
    # strided view, so window[c, width - g] = best[c - g] needs no copy of `best`.
    padded = np.full(2 * width, -np.inf)
    window = sliding_window_view(padded, width + 1)
    columns = np.arange(width)
    for i in range(len(jobs)):
        options = np.flatnonzero(np.isfinite(table.value[i]))  # the job's usable GPU counts
        padded[width:] = best
        # candidates[c, k] = best[c - g_k] + value of this job on g_k GPUs: one column per
        # usable count, so a job costs (GPUs + 1) × its choices (see `dp_cells`)
        lo, hi = int(options[0]), int(options[-1])
        if hi - lo + 1 == options.size:  # a contiguous range: a view, no gather
            shifted = window[:, width - hi : width - lo + 1][:, ::-1]
            candidates = shifted + table.value[i, lo : hi + 1]
        else:
            candidates = window[:, width - options] + table.value[i, options]
        pick = candidates.argmax(axis=1)  # first maximum: the fewest GPUs on ties
        best = candidates[columns, pick]
        choice[i] = options[pick]
    used = int(np.argmax(best))  # the fewest GPUs reaching the optimum
    if not np.isfinite(best[used]):
        raise InfeasibleAllocationError(
            f"no allocation meets every job's GPU limits on {total_gpus} GPUs"
        )
    gpus = np.zeros(len(jobs), dtype=np.int64)
    for i in range(len(jobs) - 1, -1, -1):
        gpus[i] = choice[i, used]
        used -= gpus[i]
    return _result(jobs, table, gpus)


def allocate_greedy(jobs: Sequence[ElasticJob], total_gpus: int) -> Allocation:
    """Marginal-gain greedy baseline: start every job at the fewest GPUs it can run on, then
    repeatedly grow the job whose next usable GPU count adds the most weighted throughput per
    extra GPU, while GPUs remain and the gain is positive. Not optimal; compare with `allocate`.
    """
    table = _best_per_gpu_count(jobs, total_gpus)
    _check_minimums(jobs, table, total_gpus)
    finite = np.isfinite(table.value)
    gpus = finite.argmax(axis=1)
    free = total_gpus - int(gpus.sum())
    while free > 0:
        gain, step = np.full(len(jobs), -np.inf), np.zeros(len(jobs), dtype=np.int64)
        for i, g in enumerate(gpus):
            larger = np.flatnonzero(finite[i, g + 1 : g + 1 + free])
            if larger.size:
                step[i] = larger[0] + 1
                gain[i] = (table.value[i, g + step[i]] - table.value[i, g]) / step[i]
        i = int(np.argmax(gain))
        if not gain[i] > 0:
            break
        gpus[i] += step[i]
        free -= int(step[i])
    return _result(jobs, table, gpus)


def allocate_exhaustive(jobs: Sequence[ElasticJob], total_gpus: int) -> Allocation:
    """Brute force over every combination of GPU counts; for checking `allocate` on tiny cases."""
    table = _best_per_gpu_count(jobs, total_gpus)
    _check_minimums(jobs, table, total_gpus)
    options = [np.flatnonzero(np.isfinite(row)).tolist() for row in table.value]
    best_value, best_gpus = -math.inf, None
    for combo in itertools.product(*options):
        if sum(combo) <= total_gpus:
            value = sum(table.value[i, g] for i, g in enumerate(combo))
            if value > best_value:
                best_value, best_gpus = value, combo
    if best_gpus is None:
        raise InfeasibleAllocationError(f"no allocation fits on {total_gpus} GPUs")
    return _result(jobs, table, best_gpus)


def total_throughput(jobs: Sequence[ElasticJob], allocation: Allocation) -> float:
    """Total weighted throughput of `allocation` (samples/s)."""
    return sum(
        job.weight * job.throughput[allocation[job.job_id]]
        for job in jobs
        if allocation[job.job_id][0] > 0
    )
