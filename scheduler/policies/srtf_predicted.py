"""Shortest predicted remaining time first (QSSF-like, Helios SC'21; Salus's SRTF).

A job's remaining time is its predicted duration at its requested size (the `duration`
predictor's p50) minus the time it has run. A job that outlives its p50 is counted against its
p90, and one that outlives its p90 is in the tail the model did not foresee: its remaining time
is taken as the time it has run (in a heavy-tailed workload the expected remaining time grows
with age), so a long job mispredicted as short cannot hold the GPUs at top priority. Preemptive:
a new arrival that is predicted shorter than a running job takes its GPUs. Ties go to the
earlier submission.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from perfcast.errors import PerfcastError
from perfcast.scheduler.core.jobs import JobState
from perfcast.scheduler.core.loop import RoundContext, Schedule, SchedulingPolicy
from perfcast.scheduler.policies import register
from perfcast.scheduler.policies.common import priority_schedule


@register("srtf-predicted")
class SrtfPredictedPolicy(SchedulingPolicy):
    needs_predictions = True
    prediction_tasks = ("duration",)

    def schedule(self, ctx: RoundContext) -> Schedule:
        predictor = ctx.predictor
        if predictor is None:
            raise PerfcastError("srtf-predicted needs a prediction backend (--predictor)")
        predictor.durations([s.job for s in ctx.jobs.waiting()])  # new arrivals, one call

        def order(states: Sequence[JobState]) -> list[JobState]:
            _, p50, p90 = predictor.duration_intervals([s.job for s in states]).T
            ran = np.array([s.run_time_at(ctx.now) for s in states])
            remaining = np.where(ran < p50, p50 - ran, np.where(ran < p90, p90 - ran, ran))
            submit = np.array([s.job.submit_time_s for s in states])
            return [states[i] for i in np.lexsort((submit, remaining))]

        return priority_schedule(ctx, order)
