"""Shortest predicted remaining time first (QSSF-like, Helios SC'21; Salus's SRTF), trusting a
prediction only as far as its p10-p90 interval is narrow, else falling back to Tiresias.

A job's predicted remaining time is its predicted duration (the `duration` predictor's p50)
minus the time it has run; past its p50 it is counted against its p90, and past its p90 it is
in the tail the model did not foresee, so its remaining time is taken as the time it has run.

How far a prediction is trusted: a job's weight is `1 - width / spread`, clipped to [0, 1],
where `width` is its interval's log(p90 / p10) and `spread` the 10th-90th percentile range of
log durations over the population (an interval as wide as the whole population's range says
nothing about the job). Both are checked against outcomes once `min_finished` jobs have
finished: `spread` is then that of the finished jobs' run times, and every width is scaled up
by how much wider the finished jobs' actual errors (the 10th-90th percentile range of
log(run time / p50)) were than their predicted widths, and no width counts as narrower than
that error range. A model whose p50s do not rank the finished jobs better than chance
(Spearman's rank correlation, one-sided p < 0.01) gets weight 0 outright. Before `min_finished`
jobs have finished the model's own account stands (`spread` from its p50s).

Each job's priority is its rank among the active jobs under Tiresias's order (attained-service
queue, then submission) and under predicted remaining time, mixed by its weight: weight 0 is
Tiresias's order exactly (and its demotion rounds), weight 1 is SRTF's. Preemptive; ties go to
the earlier submission.
"""

from __future__ import annotations

from array import array
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy.stats import spearmanr

from perfcast.errors import PerfcastError
from perfcast.scheduler.core.jobs import JobState, JobStatus, JobTable
from perfcast.scheduler.core.loop import RoundContext, Schedule
from perfcast.scheduler.core.predictions import JobPredictor
from perfcast.scheduler.policies import register
from perfcast.scheduler.policies.common import priority_schedule
from perfcast.scheduler.policies.tiresias import DEFAULT_THRESHOLDS, TiresiasPolicy

_TINY = 1e-9
SIGNIFICANCE = 0.01


def log_range(values: np.ndarray) -> float:
    """The 10th-90th percentile range of `values` (0 when there are none)."""
    if len(values) == 0:
        return 0.0
    low, high = np.quantile(values, [0.1, 0.9])
    return float(high - low)


@dataclass(frozen=True)
class Calibration:
    """The population's spread of log durations; how much wider than claimed the intervals
    turned out (`scale`); the width no job's error is believed to be under (`floor`)."""

    spread: float
    scale: float = 1.0
    floor: float = 0.0


def ranks_better_than_chance(actual: np.ndarray, predicted: np.ndarray) -> bool:
    """Whether `predicted` orders `actual` better than chance: Spearman's rank correlation
    positive at one-sided p < 0.01 (a few dozen finished jobs can show 0.3 by luck)."""
    if np.ptp(predicted) <= 0 or np.ptp(actual) <= 0:
        return False
    return bool(spearmanr(actual, predicted, alternative="greater").pvalue < SIGNIFICANCE)


def trust_weights(widths: np.ndarray, calibration: Calibration) -> np.ndarray:
    """Per-job weight of the prediction in [0, 1]: 1 - calibrated width / population spread."""
    effective = np.maximum(widths * calibration.scale, calibration.floor)
    if calibration.spread <= _TINY:
        return np.where(effective <= _TINY, 1.0, 0.0)
    return np.clip(1.0 - effective / calibration.spread, 0.0, 1.0)


def predicted_remaining(intervals: np.ndarray, ran: np.ndarray) -> np.ndarray:
    """Remaining run time from (p10, p50, p90) rows and the time each job has run."""
    p50, p90 = intervals[:, 1], intervals[:, 2]
    return np.where(ran < p50, p50 - ran, np.where(ran < p90, p90 - ran, ran))


def blended_order(
    tiresias_keys: np.ndarray, remaining: np.ndarray, weights: np.ndarray, submit: np.ndarray
) -> np.ndarray:
    """Indices by each job's weight-mixed rank under Tiresias's order (`tiresias_keys`, one
    row per job: queue, submission) and under predicted remaining time."""
    n = len(submit)
    rank_t = np.empty(n)
    rank_t[np.lexsort((submit, tiresias_keys))] = np.arange(n)
    rank_s = np.empty(n)
    rank_s[np.lexsort((submit, remaining))] = np.arange(n)
    mixed = (1.0 - weights) * rank_t + weights * rank_s
    return np.lexsort((submit, mixed))


@register("srtf-predicted")
class SrtfPredictedPolicy(TiresiasPolicy):
    needs_predictions = True
    prediction_tasks = ("duration",)

    def __init__(
        self,
        thresholds: float | tuple[float, ...] = DEFAULT_THRESHOLDS,
        min_finished: int = 20,
    ) -> None:
        super().__init__(thresholds)
        if min_finished < 2:
            raise PerfcastError(f"srtf-predicted: min_finished must be >= 2, got {min_finished}")
        self.min_finished = int(min_finished)
        # jobs done since the last round, as the job table tells them (`_learn_from_finished`)
        self._done: list[JobState] = []
        # finished jobs, round by round, whose outcomes are not yet in `_outcomes`
        self._unrecorded: list[JobState] = []
        self._table: JobTable | None = None  # the table followed
        # per finished job: log run time, log p50, log(p90 / p10), as typed arrays (read
        # whole at each calibration: a list of tuples cost O(finished jobs) Python objects)
        self._outcomes = (array("d"), array("d"), array("d"))
        self._calibration: tuple[int, Calibration] | None = None  # (outcomes seen, result)

    def _learn_from_finished(self, ctx: RoundContext) -> None:
        """Queue the jobs that finished since the last round, in the order of their ids, for
        `_record_outcomes`. The table tells of each as it is done (`JobTable.watch`): a round
        does not compare the active jobs with the last round's (a copy of every active job
        each round)."""
        if self._table is not ctx.jobs:
            ctx.jobs.watch(self._on_status)
            self._table = ctx.jobs
        if self._done:
            self._unrecorded += sorted(self._done, key=_job_id)
            self._done = []

    def _record_outcomes(self, predictor: JobPredictor) -> None:
        """Add the queued finished jobs' outcomes, in the order they were queued. Only a
        ranking reads outcomes (`calibration`), so they are worked out when one is due, in one
        batch: a round where every waiting job fits pays nothing for the jobs that finished
        (a finished job's counters no longer change)."""
        gone, self._unrecorded = self._unrecorded, []
        if gone:
            p10, p50, p90 = predictor.duration_intervals([s.job for s in gone]).T
            # productive wall time: what the job's duration would be run alone
            ran = np.array(
                [s.run_time_s - s.overhead_gpu_s / max(s.job.num_gpus, 1) for s in gone], float
            )
            logs = (np.log(np.maximum(ran, _TINY)), np.log(np.maximum(p50, _TINY)))
            for column, values in zip(self._outcomes, (*logs, _log_width(p10, p90)), strict=True):
                column.extend(values.tolist())

    def _on_status(self, state: JobState) -> None:
        if state.status is JobStatus.DONE:
            self._done.append(state)

    def add_outcome(self, log_run_time: float, log_p50: float, log_width: float) -> None:
        """A finished job's log run time, the log of its predicted p50 and log(p90 / p10)."""
        for column, value in zip(self._outcomes, (log_run_time, log_p50, log_width), strict=True):
            column.append(float(value))

    def calibration(self, intervals: np.ndarray) -> Calibration:
        """How far to trust the predictions, from finished jobs (cached until another job
        finishes), or from the model's own p50s (`intervals`: the active jobs') before
        `min_finished` jobs have finished."""
        finished = len(self._outcomes[0])
        if finished < self.min_finished:
            return Calibration(log_range(np.log(np.maximum(intervals[:, 1], _TINY))))
        if self._calibration is None or self._calibration[0] != finished:
            ran, p50, width = (np.array(column, dtype=float) for column in self._outcomes)
            claimed, actual = float(np.median(width)), log_range(ran - p50)
            spread = log_range(ran)
            # a model that does not rank finished jobs better than chance says nothing
            floor = actual if ranks_better_than_chance(ran, p50) else max(actual, spread)
            scale = max(1.0, actual / max(claimed, _TINY))
            self._calibration = (finished, Calibration(spread, scale, floor))
        return self._calibration[1]

    def schedule(self, ctx: RoundContext) -> Schedule:
        predictor = ctx.predictor
        if predictor is None:
            raise PerfcastError("srtf-predicted needs a prediction backend (--predictor)")
        predictor.predict_durations([s.job for s in ctx.jobs.waiting()])  # arrivals, one call
        self._learn_from_finished(ctx)
        now = ctx.now

        def order(states: Sequence[JobState]) -> list[JobState]:
            self._record_outcomes(predictor)
            intervals = predictor.duration_intervals([s.job for s in states])
            ran = np.array([s.run_time_at(now) for s in states])
            submit = np.array([s.job.submit_time_s for s in states])
            queues = np.array([self.queue_of(s.attained_at(now)) for s in states])
            widths = _log_width(intervals[:, 0], intervals[:, 2])
            weights = trust_weights(widths, self.calibration(intervals))
            picked = blended_order(queues, predicted_remaining(intervals, ran), weights, submit)
            return [states[i] for i in picked]

        return priority_schedule(ctx, order)


def _job_id(state: JobState) -> str:
    return state.job_id


def _log_width(p10: np.ndarray | float, p90: np.ndarray | float) -> np.ndarray:
    return np.log(np.maximum(p90, _TINY)) - np.log(np.maximum(p10, _TINY))
