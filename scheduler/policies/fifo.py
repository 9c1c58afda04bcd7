"""First in, first out: jobs hold their requested GPUs in submission order until they finish;
a job that does not fit waits, and smaller jobs behind it may start (backfilling). Never
preempts."""

from __future__ import annotations

from perfcast.scheduler.core.loop import Allocation, RoundContext, Schedule, SchedulingPolicy
from perfcast.scheduler.policies import register


@register("fifo")
class FifoPolicy(SchedulingPolicy):
    needs_predictions = False

    def schedule(self, ctx: RoundContext) -> Schedule:
        free = ctx.cluster.free_gpus
        start = Schedule(keep_running=True)
        for state in ctx.jobs.waiting():  # submission order (FIFO never preempts)
            if free == 0:
                break
            need = state.job.num_gpus
            if need <= free:
                start.append(Allocation(state.job_id, need, state.batch_size))
                free -= need
        return start
