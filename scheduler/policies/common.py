"""Helpers shared by policies: fill GPUs in priority order."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

from perfcast.scheduler.core.jobs import JobState
from perfcast.scheduler.core.loop import Allocation, RoundContext, Schedule


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
    """A preemptive priority schedule at requested sizes. When every waiting job fits in the
    free GPUs, any priority order gives the same answer (everyone runs), so the round only
    starts the waiting jobs and skips ranking the running ones."""
    waiting = list(ctx.jobs.waiting())
    if sum(s.job.num_gpus for s in waiting) <= ctx.cluster.free_gpus:
        return Schedule(
            (Allocation(s.job_id, s.job.num_gpus, s.batch_size) for s in waiting),
            keep_running=True,
        )
    return Schedule(greedy_fill(order(list(ctx.jobs.active.values())), ctx.cluster.total_gpus))
