"""Tiresias (NSDI'19) discretized two-dimensional least attained service (2D-LAS).

A job's attained service is GPUs x time held. Jobs sit in queues by attained service
(thresholds in GPU-seconds); a lower queue always runs first, first come first served inside a
queue, and a job is demoted when it crosses a threshold, which may let a waiting job preempt it.
Needs no prediction. Rounds run at arrivals, completions and threshold crossings
(`next_wakeup`). Tiresias's starvation guard (promotion after long waits) is not modelled.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence

from perfcast.scheduler.core.jobs import JobState
from perfcast.scheduler.core.loop import RoundContext, Schedule, SchedulingPolicy
from perfcast.scheduler.policies import register
from perfcast.scheduler.policies.common import priority_schedule

# Queue limits in GPU-seconds: 1 GPU-hour and 10 GPU-hours.
DEFAULT_THRESHOLDS = (3600.0, 36000.0)


@register("tiresias")
class TiresiasPolicy(SchedulingPolicy):
    needs_predictions = False

    def __init__(self, thresholds: float | tuple[float, ...] = DEFAULT_THRESHOLDS) -> None:
        # one number is one threshold (two queues), as the Pollux artifact's 16 GPU-hours
        values = (thresholds,) if isinstance(thresholds, int | float) else thresholds
        self.thresholds = tuple(sorted(float(t) for t in values))

    def queue_of(self, attained_gpu_s: float) -> int:
        return bisect.bisect_right(self.thresholds, attained_gpu_s)

    def schedule(self, ctx: RoundContext) -> Schedule:
        now = ctx.now

        def order(states: Sequence[JobState]) -> list[JobState]:
            return sorted(
                states, key=lambda s: (self.queue_of(s.attained_at(now)), s.job.submit_time_s)
            )

        return priority_schedule(ctx, order)

    def next_wakeup(self, ctx: RoundContext) -> float | None:
        """The next time a running job crosses into a lower-priority queue, if any job waits
        (with nobody waiting a demotion changes nothing)."""
        if not ctx.jobs.num_waiting:
            return None
        best = None
        for state in ctx.jobs.running():
            attained = state.attained_at(ctx.now)
            queue = self.queue_of(attained)
            if queue < len(self.thresholds) and state.num_gpus:
                when = ctx.now + (self.thresholds[queue] - attained) / state.num_gpus + 1e-6
                best = when if best is None else min(best, when)
        return best
