"""Helpers shared by policies: fill GPUs in priority order."""

from __future__ import annotations

from collections.abc import Iterable

from scheduler.core.jobs import JobState
from scheduler.core.loop import Allocation


def greedy_fill(ordered: Iterable[JobState], capacity: int) -> list[Allocation]:
    """Allocations for jobs in priority order at their requested size while GPUs remain
    (a job that does not fit is skipped, smaller ones behind it may still fit)."""
    out = []
    for state in ordered:
        need = state.job.num_gpus
        if need <= capacity:
            out.append(Allocation(state.job_id, need, state.batch_size))
            capacity -= need
            if capacity == 0:
                break
    return out
