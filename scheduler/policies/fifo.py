"""First in, first out: jobs hold their requested GPUs in submission order until they finish;
a job that does not fit waits, and smaller jobs behind it may start (backfilling). Never
preempts."""

from __future__ import annotations

from scheduler.core.loop import Allocation, RoundContext
from scheduler.policies import register


@register("fifo")
class FifoPolicy:
    needs_predictions = False

    def schedule(self, ctx: RoundContext) -> list[Allocation]:
        running = [
            Allocation(s.job_id, s.num_gpus, s.batch_size, s.share) for s in ctx.jobs.running()
        ]
        free = ctx.cluster.free_gpus
        waiting = []
        for state in ctx.jobs.waiting():  # submission order
            need = state.job.num_gpus
            if need <= free:
                waiting.append(Allocation(state.job_id, need, state.batch_size))
                free -= need
        return running + waiting
