"""Shortest predicted remaining time first (QSSF-like, Helios SC'21; Salus's SRTF).

A job's remaining time is its predicted duration at its requested size (the `duration`
predictor) minus the time it has run. Preemptive: a new arrival that is predicted shorter than
a running job takes its GPUs. Ties go to the earlier submission.
"""

from __future__ import annotations

import numpy as np

from perfcast.errors import PerfcastError
from scheduler.core.loop import Allocation, RoundContext
from scheduler.policies import register
from scheduler.policies.common import greedy_fill


@register("srtf-predicted")
class SrtfPredictedPolicy:
    needs_predictions = True

    def schedule(self, ctx: RoundContext) -> list[Allocation]:
        if ctx.predictor is None:
            raise PerfcastError("srtf-predicted needs a prediction backend (--predictor)")
        states = list(ctx.jobs.active.values())
        if not states:
            return []
        predicted = ctx.predictor.durations([s.job for s in states])
        ran = np.array([s.run_time_at(ctx.now) for s in states])
        remaining = np.maximum(predicted - ran, 0.0)
        submit = np.array([s.job.submit_time_s for s in states])
        order = np.lexsort((submit, remaining))
        return greedy_fill((states[i] for i in order), ctx.cluster.total_gpus)
