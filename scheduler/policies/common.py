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


def start_all_waiting(ctx: RoundContext) -> Schedule | None:
    """When every waiting job fits in the free GPUs, any priority order gives the same answer
    (everyone runs): a schedule that starts the waiting jobs (in the order they started
    waiting) and keeps the running ones. None when they do not all fit."""
    if ctx.jobs.waiting_gpus > ctx.cluster.free_gpus:
        return None
    return Schedule(
        (Allocation(s.job_id, s.job.num_gpus, s.batch_size) for s in ctx.jobs.waiting()),
        keep_running=True,
    )


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
