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
from dataclasses import dataclass

import numpy as np
from scipy.special import stdtr

from perfcast.errors import PerfcastError
from perfcast.scheduler.core.jobs import DONE, RUNNING, JobState, JobTable
from perfcast.scheduler.core.loop import Allocation, RoundContext, Schedule, start_all_waiting
from perfcast.scheduler.core.predictions import JobPredictor
from perfcast.scheduler.policies import register
from perfcast.scheduler.policies.tiresias import DEFAULT_THRESHOLDS, TiresiasPolicy

_TINY = 1e-9
# jobs changed beyond the active ones before the columns are dropped (`_forget_stale_columns`)
_REBUILD_SLACK = 1024
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
    positive at one-sided p < 0.01 (a few dozen finished jobs can show 0.3 by luck).

    The statistic is `scipy.stats.spearmanr(actual, predicted, alternative="greater")`'s,
    worked out with the same average ranks, correlation and Student-t tail, without its
    per-call checks (a third of a calibration's cost, and one runs per completion)."""
    if np.ptp(predicted) <= 0 or np.ptp(actual) <= 0:
        return False
    rs = np.corrcoef(np.vstack((average_ranks(actual), average_ranks(predicted))))[1, 0]
    dof = len(actual) - 2
    with np.errstate(divide="ignore"):  # rs = 1 gives t = inf (p = 0), as in scipy
        t = rs * np.sqrt(np.maximum(dof / ((rs + 1.0) * (1.0 - rs)), 0.0))
    return bool(stdtr(dof, -t) < SIGNIFICANCE)


def average_ranks(values: np.ndarray) -> np.ndarray:
    """1-based ranks of `values`, ties given the mean of their ranks (`scipy.stats.rankdata`'s
    `average` method)."""
    n = len(values)
    sorter = np.argsort(values)
    ordered = values[sorter]
    new = np.empty(n, bool)
    new[0] = True
    np.not_equal(ordered[1:], ordered[:-1], out=new[1:])
    dense = np.empty(n, np.intp)
    dense[sorter] = np.cumsum(new)
    count = np.append(np.flatnonzero(new), n)
    return 0.5 * (count[dense] + count[dense - 1] + 1)


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
        self._columns: ActiveColumns | None = None  # the followed table's active jobs

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
        if state.status is DONE:
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
            ran, p50, width = (np.frombuffer(column) for column in self._outcomes)
            claimed, actual = float(np.median(width)), log_range(ran - p50)
            spread = log_range(ran)
            # a model that does not rank finished jobs better than chance says nothing
            floor = actual if ranks_better_than_chance(ran, p50) else max(actual, spread)
            scale = max(1.0, actual / max(claimed, _TINY))
            self._calibration = (finished, Calibration(spread, scale, floor))
        return self._calibration[1]

    def schedule(self, ctx: RoundContext) -> Schedule:
        """Every active job ranked (`blended_order`) and GPUs filled greedily in that order at
        requested sizes (a job that does not fit is skipped); returned as the changes to the
        running jobs. When every waiting job fits in the free GPUs the round only starts them
        and ranks nothing (`start_all_waiting`)."""
        predictor = ctx.predictor
        if predictor is None:
            raise PerfcastError("srtf-predicted needs a prediction backend (--predictor)")
        self._learn_from_finished(ctx)
        start = start_all_waiting(ctx)
        if start is not None:
            self._forget_stale_columns(ctx.jobs)
            return start
        columns = self.columns(ctx.jobs)
        columns.refresh(predictor)  # the new jobs' predictions, in one call
        self._record_outcomes(predictor)
        now = ctx.now
        slots, ran, attained = columns.at(now)
        intervals = columns.intervals[slots]
        submit = columns.submit[slots]
        queues = np.searchsorted(self.thresholds, attained, side="right")
        widths = _log_width(intervals[:, 0], intervals[:, 2])
        weights = trust_weights(widths, self.calibration(intervals))
        picked = blended_order(queues, predicted_remaining(intervals, ran), weights, submit)
        return columns.fill(slots[picked], ctx.cluster.total_gpus)

    def columns(self, jobs: JobTable) -> ActiveColumns:
        """The active jobs of `jobs` as columns: made at the first ranking round (and again
        after `_forget_stale_columns`), followed from then on."""
        if self._columns is not None and self._columns.jobs is not jobs:
            self._columns.close()
            self._columns = None
        if self._columns is None:
            self._columns = ActiveColumns(jobs)
        return self._columns

    def _forget_stale_columns(self, jobs: JobTable) -> None:
        """Stop following the table when more jobs changed since the last ranking round than
        are active: making the columns again from the active jobs at the next ranking round
        then costs less than catching up. A lightly loaded cluster, where every round starts
        all the waiting jobs, never ranks: it then pays nothing per job for the columns (a
        million-job trace on 10,000 GPUs followed 3M status changes, and held a row and a
        dict entry per job, for no ranking at all)."""
        columns = self._columns
        if columns is not None and columns.backlog > len(jobs.active) + _REBUILD_SLACK:
            columns.close()
            self._columns = None


class ActiveColumns:
    """A job table's active jobs as columns (submit time, requested GPUs, duration interval,
    and the run time and attained GPU-seconds of the ones waiting), one row per job in the
    order it was added (the order of `JobTable.active`), kept up to date as the table reports
    changes (`JobTable.watch`), so a round reads per job only the running ones' counters, not
    a Python object per active job. Changes are applied at the next `refresh`, after the
    executor has brought the counters of the jobs that changed up to date."""

    _COLUMNS = ("submit", "need", "intervals", "_ran", "_attained", "_alive")  # one row per slot

    def __init__(self, jobs: JobTable) -> None:
        self.jobs = jobs
        self._ids: list[str] = []
        self._slot: dict[str, int] = {}
        size = 1024
        self.submit = np.zeros(size)
        self.need = np.zeros(size, np.int64)
        self.intervals = np.zeros((size, 3))
        self._ran = np.zeros(size)
        self._attained = np.zeros(size)
        self._alive = np.zeros(size, bool)
        self._unpredicted: list[int] = []  # slots whose interval is not read yet
        self._dirty: dict[str, None] = {}
        # running jobs by slot, and each one's place in the table's running order
        self._running: dict[int, JobState] = {}
        self._since: dict[int, int] = {}
        self._started = 0
        for state in jobs.active.values():
            self._seen(state)
        for state in jobs.running():  # the table's running order
            self._started += 1
            self._since[self._slot[state.job_id]] = self._started
        jobs.watch(self._seen)

    def close(self) -> None:
        """Stop following the table."""
        self.jobs.unwatch(self._seen)

    @property
    def backlog(self) -> int:
        """The jobs changed since the last `refresh`."""
        return len(self._dirty)

    def _seen(self, state: JobState) -> None:
        job_id = state.job_id
        if job_id not in self._slot and state.status is not DONE:
            slot = len(self._ids)
            if slot == len(self.submit):
                self._grow()
            self._slot[job_id] = slot
            self._ids.append(job_id)
            self.submit[slot] = state.job.submit_time_s
            self.need[slot] = state.job.num_gpus
            self._alive[slot] = True
            self._unpredicted.append(slot)
        if state.status is RUNNING:
            self._started += 1
            self._since[self._slot[job_id]] = self._started
        self._dirty[job_id] = None

    def _grow(self) -> None:
        size = 2 * len(self.submit)
        for name in self._COLUMNS:
            old = getattr(self, name)
            new = np.zeros((size, *old.shape[1:]), old.dtype)
            new[: len(old)] = old
            setattr(self, name, new)

    def refresh(self, predictor: JobPredictor) -> None:
        """Apply the table's changes; read the new jobs' intervals (one gather)."""
        if self._unpredicted:
            fresh, self._unpredicted = self._unpredicted, []
            rows = predictor.duration_intervals([self.jobs.all[self._ids[i]].job for i in fresh])
            self.intervals[fresh] = rows
        for job_id in self._dirty:
            slot = self._slot.get(job_id)
            if slot is None:
                continue
            state = self.jobs.all[job_id]
            status = state.status
            if status is RUNNING:
                self._running[slot] = state
                continue
            self._running.pop(slot, None)
            self._since.pop(slot, None)
            if status is DONE:
                self._alive[slot] = False
                del self._slot[job_id]
            else:
                self._ran[slot] = state.run_time_s
                self._attained[slot] = state.attained_gpu_s
        self._dirty.clear()
        if len(self._ids) > 1024 and 2 * len(self._slot) < len(self._ids):
            self._compact()

    def _compact(self) -> None:
        """Drop the rows of finished jobs (the others keep their order)."""
        keep = np.flatnonzero(self._alive[: len(self._ids)])
        for name in self._COLUMNS:
            old = getattr(self, name)
            new = np.zeros_like(old)
            new[: len(keep)] = old[keep]
            setattr(self, name, new)
        renumber = {int(old): new for new, old in enumerate(keep.tolist())}
        self._ids = [self._ids[i] for i in renumber]
        self._slot = {job_id: i for i, job_id in enumerate(self._ids)}
        self._running = {renumber[i]: state for i, state in self._running.items()}
        self._since = {renumber[i]: order for i, order in self._since.items()}

    def at(self, now: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The active jobs' slots (in the table's order), and each one's run time and
        attained GPU-seconds at `now`. Call `refresh` first."""
        n = len(self._ids)
        ran, attained = self._ran[:n].copy(), self._attained[:n].copy()
        if self._running:
            where = np.fromiter(self._running, np.int64, len(self._running))
            states = self._running.values()
            ran[where] = [s.run_time_at(now) for s in states]
            attained[where] = [s.attained_at(now) for s in states]
        slots = np.flatnonzero(self._alive[:n])
        return slots, ran[slots], attained[slots]

    def fill(self, ordered: np.ndarray, capacity: int) -> Schedule:
        """The greedy fill of `capacity` GPUs over the jobs at slots `ordered` (every active
        job, in priority order) at their requested sizes, a job that does not fit skipped;
        as changes: a 0-GPU allocation for each running job left out, in the order the jobs
        started running (the order the cluster suspends them in for a full list), then the
        waiting jobs that get GPUs, in priority order. Running jobs not listed keep theirs."""
        need = self.need[ordered]
        used = np.cumsum(need)
        cut = int(np.searchsorted(used, capacity, side="right"))  # all before it fit
        taken = list(ordered[:cut].tolist())
        left = capacity - (int(used[cut - 1]) if cut else 0)
        if left > 0 and cut < len(ordered):
            rest = np.flatnonzero(need[cut:] <= left) + cut
            for i in rest.tolist():
                size = int(need[i])
                if size <= left:
                    taken.append(int(ordered[i]))
                    left -= size
                    if left == 0:
                        break
        kept = set(taken)
        out = Schedule(keep_running=True)
        running, since = self._running, self._since
        dropped = sorted((slot for slot in running if slot not in kept), key=since.__getitem__)
        for slot in dropped:
            state = running[slot]
            out.append(Allocation(state.job_id, 0, state.batch_size))
        all_jobs, ids = self.jobs.all, self._ids
        for slot in taken:
            if slot not in running:
                state = all_jobs[ids[slot]]
                out.append(Allocation(state.job_id, state.job.num_gpus, state.batch_size))
        return out


def _job_id(state: JobState) -> str:
    return state.job_id


def _log_width(p10: np.ndarray | float, p90: np.ndarray | float) -> np.ndarray:
    return np.log(np.maximum(p90, _TINY)) - np.log(np.maximum(p10, _TINY))
