"""First in, first out: jobs hold their requested GPUs in submission order until they finish;
a job that does not fit waits, and smaller jobs behind it may start (backfilling). Never
preempts."""

from __future__ import annotations

from perfcast.scheduler.core.loop import (
    Allocation,
    RoundContext,
    Schedule,
    SchedulingPolicy,
    start_all_waiting,
)
from perfcast.scheduler.policies import register


@register("fifo")
class FifoPolicy(SchedulingPolicy):
    needs_predictions = False
    idle_without_waiting = True

    def schedule(self, ctx: RoundContext) -> Schedule:
        """Walk the waiting jobs in submission order (FIFO never preempts, so that is the
        order they started waiting), starting each one that fits in the GPUs still free. Only
        the sizes that still fit are looked at: the earliest waiting job of each such size is
        the next to start, so a round costs the jobs it starts, not the queue. When every
        waiting job fits (a lightly loaded cluster's usual round) that walk starts them all,
        in the order they wait: they are listed without it."""
        everyone = start_all_waiting(ctx)
        if everyone is not None:
            return everyone
        free = ctx.cluster.free_gpus
        start = Schedule(keep_running=True)
        buckets = ctx.jobs.waiting_by_size()
        queues = {need: iter(jobs.items()) for need, jobs in buckets.items() if need <= free}
        heads = {need: next(queue) for need, queue in queues.items()}
        while heads:
            need = min(heads, key=lambda n: heads[n][1])  # the earliest in the waiting order
            state = ctx.jobs[heads[need][0]]
            start.append(Allocation(state.job_id, need, state.batch_size))
            free -= need
            following = next(queues[need], None)
            if following is None:
                del heads[need]
            else:
                heads[need] = following
            for size in [n for n in heads if n > free]:
                del heads[size]
        return start
