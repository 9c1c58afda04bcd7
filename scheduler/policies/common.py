"""Helpers shared by policies: fill GPUs in priority order."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

from perfcast.scheduler.core.jobs import JobState
from perfcast.scheduler.core.loop import Allocation, RoundContext, Schedule, start_all_waiting


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


def priority_schedule(
    ctx: RoundContext, order: Callable[[Sequence[JobState]], Iterable[JobState]]
) -> Schedule:
    """A preemptive priority schedule at requested sizes: every active job ranked by `order`,
    GPUs filled greedily (`greedy_fill`). When every waiting job fits in the free GPUs the
    round only starts them and ranks nothing (`start_all_waiting`)."""
    start = start_all_waiting(ctx)
    if start is not None:
        return start
    return Schedule(greedy_fill(order(list(ctx.jobs.active.values())), ctx.cluster.total_gpus))
