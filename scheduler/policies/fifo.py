"""First in, first out: jobs hold their requested GPUs in submission order until they finish;
a job that does not fit waits, and smaller jobs behind it may start (backfilling). Never
preempts."""

from __future__ import annotations

from perfcast.scheduler.core.loop import (
    RoundContext,
    Schedule,
    SchedulingPolicy,
    start_what_fits,
)
from perfcast.scheduler.policies import register


@register("fifo")
class FifoPolicy(SchedulingPolicy):
    needs_predictions = False
    idle_without_waiting = True

    def schedule(self, ctx: RoundContext) -> Schedule:
        """Start the waiting jobs in submission order (FIFO never preempts, so that is the
        order they started waiting), each one that fits in the GPUs still free
        (`start_what_fits`: a round costs the jobs it starts, not the queue)."""
        return start_what_fits(ctx)
