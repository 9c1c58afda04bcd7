"""Shortest predicted remaining time first (QSSF-like, Helios SC'21; Salus's SRTF).

A job's remaining time is its predicted duration at its requested size (the `duration`
predictor) minus the time it has run. Preemptive: a new arrival that is predicted shorter than
a running job takes its GPUs. Ties go to the earlier submission.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from perfcast.errors import PerfcastError
from scheduler.core.jobs import JobState
from scheduler.core.loop import RoundContext, Schedule
from scheduler.policies import register
from scheduler.policies.common import priority_schedule


@register("srtf-predicted")
class SrtfPredictedPolicy:
    needs_predictions = True
    prediction_tasks = ("duration",)

    def schedule(self, ctx: RoundContext) -> Schedule:
        predictor = ctx.predictor
        if predictor is None:
            raise PerfcastError("srtf-predicted needs a prediction backend (--predictor)")
        predictor.durations([s.job for s in ctx.jobs.waiting()])  # new arrivals, one call

        def order(states: Sequence[JobState]) -> list[JobState]:
            predicted = predictor.durations([s.job for s in states])
            ran = np.array([s.run_time_at(ctx.now) for s in states])
            remaining = np.maximum(predicted - ran, 0.0)
            submit = np.array([s.job.submit_time_s for s in states])
            return [states[i] for i in np.lexsort((submit, remaining))]

        return priority_schedule(ctx, order)
