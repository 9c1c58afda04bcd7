"""Tiresias (NSDI'19) discretized two-dimensional least attained service (2D-LAS).

A job's attained service is GPUs x time held. Jobs sit in queues by attained service
(thresholds in GPU-seconds); a lower queue always runs first, first come first served inside a
queue, and a job is demoted when it crosses a threshold, which may let a waiting job preempt it.
Needs no prediction. Rounds run at arrivals, completions and threshold crossings
(`next_wakeup`). Tiresias's starvation guard (promotion after long waits) is not modelled.

The ranking is kept incrementally (`LasQueues`): a waiting job's place (its queue, then its
submission) does not change while it waits and a running job's changes only when it crosses a
threshold, so a round costs the jobs it starts, preempts or demotes, not the length of the
queue or the number of running jobs.
"""

from __future__ import annotations

import bisect
import heapq
from collections.abc import Sequence

from perfcast.scheduler.core.jobs import DONE, RUNNING, JobState, JobTable
from perfcast.scheduler.core.loop import (
    Allocation,
    RoundContext,
    Schedule,
    SchedulingPolicy,
    start_all_waiting,
)
from perfcast.scheduler.policies import register

# Queue limits in GPU-seconds: 1 GPU-hour and 10 GPU-hours.
DEFAULT_THRESHOLDS = (3600.0, 36000.0)
# A threshold crossing is re-checked exactly from this long before its predicted time: the
# prediction, made when the job started, differs from the exact figure only by float rounding.
_CROSSING_SLACK_S = 1e-3


class _PrefixSums:
    """A Fenwick tree: non-negative integers at positions 0, 1, ..., growing on demand, with
    prefix sums and the longest prefix within a budget in O(log n)."""

    def __init__(self) -> None:
        self.values: list[int] = []
        self.tree = [0]  # 1-based; its length - 1 is a power of two
        self.size = 0

    def add(self, position: int, delta: int) -> None:
        if position >= self.size:
            self._grow(position + 1)
        self.values[position] += delta
        i, tree, size = position + 1, self.tree, self.size
        while i <= size:
            tree[i] += delta
            i += i & -i

    def _grow(self, needed: int) -> None:
        size = max(self.size, 1024)
        while size < needed:
            size *= 2
        self.values += [0] * (size - len(self.values))
        tree = [0, *self.values]
        for i in range(1, size + 1):
            parent = i + (i & -i)
            if parent <= size:
                tree[parent] += tree[i]
        self.tree, self.size = tree, size

    def longest_prefix(self, budget: int) -> tuple[int, int]:
        """(n, sum of positions 0..n-1) for the largest n whose prefix sum is <= `budget`."""
        position, total, tree = 0, 0, self.tree
        step = self.size
        while step:
            nxt = position + step
            if nxt <= self.size and total + tree[nxt] <= budget:
                position, total = nxt, total + tree[nxt]
            step >>= 1
        return position, total


class LasQueues:
    """A job table's active jobs in Tiresias's order, kept up to date as jobs come, start,
    stop and cross thresholds, so that the greedy fill of a round (jobs in order at their
    requested GPUs, a job that does not fit skipped) needs only the jobs it changes.

    Order: queue (by attained GPU-seconds, `thresholds`), then submit time, then arrival (the
    order of a stable sort of the table's active jobs). Each job has a fixed slot in submission
    order; per queue, a Fenwick tree of requested GPUs by slot finds where the GPUs run out,
    and sorted slot lists (waiting, running, and per requested size) give the jobs around that
    point. A waiting job's queue is fixed; a running job's changes only when it crosses a
    threshold, predicted per job in a heap and re-checked exactly. Slots are numbered again
    (the same order) when finished jobs' outnumber the active ones' four to one, so memory
    follows the active jobs, not the trace. Changes reported by the
    table (`JobTable.watch`) are applied at the next `refresh`, after the executor has brought
    the counters of the jobs that changed up to date."""

    def __init__(self, jobs: JobTable, thresholds: Sequence[float]) -> None:
        self.jobs, self.thresholds = jobs, tuple(thresholds)
        self._dirty: dict[str, None] = {}
        self._reslot = False
        self._reset()
        for state in jobs.active.values():
            self._seen(state)
        jobs.watch(self._seen)

    def _reset(self) -> None:
        levels = len(self.thresholds) + 1
        self._slot: dict[str, int] = {}
        self._job_at: list[str | None] = []
        self._last_submit = float("-inf")
        self._where: dict[str, tuple[int, bool]] = {}  # job -> (queue, running)
        self._sums = [_PrefixSums() for _ in range(levels)]
        self._totals = [0] * levels
        self._waiting: list[list[int]] = [[] for _ in range(levels)]
        self._running: list[list[int]] = [[] for _ in range(levels)]
        self._by_size: list[dict[int, list[int]]] = [{} for _ in range(levels)]
        self._sizes: list[list[int]] = [[] for _ in range(levels)]  # keys of _by_size, sorted
        self._crossings: list[tuple[float, int, int]] = []  # (predicted time, slot, token)
        self._token: dict[str, int] = {}  # a running job's current crossing entry
        self._tokens = 0

    def queue_of(self, attained_gpu_s: float) -> int:
        return bisect.bisect_right(self.thresholds, attained_gpu_s)

    def rank(self, job_id: str) -> tuple[int, int]:
        """An active job's place in the order, (queue, slot): smaller first. Call `refresh`
        first."""
        return self._where[job_id][0], self._slot[job_id]

    # --- following the table ------------------------------------------------------------------
    def _seen(self, state: JobState) -> None:
        job_id = state.job_id
        if job_id not in self._slot and state.status is not DONE:
            submit = state.job.submit_time_s
            if submit < self._last_submit:  # out of submission order: slots are redone
                self._reslot = True
            self._last_submit = max(self._last_submit, submit)
            self._slot[job_id] = len(self._job_at)
            self._job_at.append(job_id)
            if len(self._job_at) > 4 * len(self._slot) + 4096:
                # mostly slots of finished jobs: numbered again, so that the trees and lists
                # stay the size of the active jobs, not of every job ever seen
                self._reslot = True
        self._dirty[job_id] = None

    def refresh(self, now: float) -> None:
        """Apply the table's changes and the threshold crossings due by `now`."""
        if self._reslot:
            self._reslot = False
            self._reset()
            ordered = sorted(self.jobs.active.values(), key=lambda s: s.job.submit_time_s)
            self._dirty = {}
            for state in ordered:
                self._seen(state)
        for job_id in self._dirty:
            self._remove(job_id)
            state = self.jobs.all[job_id]
            if state.status is DONE:
                slot = self._slot.pop(job_id, None)
                if slot is not None:
                    self._job_at[slot] = None
                continue
            running = state.status is RUNNING
            self._insert(state, self.queue_of(state.attained_at(now)), running)
            if running:
                self._tokens += 1
                self._token[job_id] = self._tokens
                self._predict_crossing(state, now)
        self._dirty.clear()
        due = []
        while self._crossings and self._crossings[0][0] <= now + _CROSSING_SLACK_S:
            entry = heapq.heappop(self._crossings)
            if self._current(entry):
                due.append(self._state(entry[1]))
        for state in due:
            queue = self.queue_of(state.attained_at(now))
            if queue != self._where[state.job_id][0]:
                self._remove(state.job_id, keep_token=True)
                self._insert(state, queue, True)
            self._predict_crossing(state, now)

    def _predict_crossing(self, state: JobState, now: float) -> None:
        attained = state.attained_at(now)
        queue = self.queue_of(attained)
        if queue < len(self.thresholds) and state.num_gpus:
            when = now + (self.thresholds[queue] - attained) / state.num_gpus
            entry = (when, self._slot[state.job_id], self._token[state.job_id])
            heapq.heappush(self._crossings, entry)

    def _insert(self, state: JobState, queue: int, running: bool) -> None:
        slot, need = self._slot[state.job_id], state.job.num_gpus
        self._sums[queue].add(slot, need)
        self._totals[queue] += need
        bisect.insort((self._running if running else self._waiting)[queue], slot)
        sized = self._by_size[queue].get(need)
        if sized is None:
            sized = self._by_size[queue][need] = []
            bisect.insort(self._sizes[queue], need)
        bisect.insort(sized, slot)
        self._where[state.job_id] = (queue, running)

    def _remove(self, job_id: str, *, keep_token: bool = False) -> None:
        where = self._where.pop(job_id, None)
        if where is None:
            return
        queue, running = where
        slot, need = self._slot[job_id], self.jobs.all[job_id].job.num_gpus
        self._sums[queue].add(slot, -need)
        self._totals[queue] -= need
        _discard((self._running if running else self._waiting)[queue], slot)
        sized = self._by_size[queue][need]
        _discard(sized, slot)
        if not sized:
            del self._by_size[queue][need]
            _discard(self._sizes[queue], need)
        if running and not keep_token:
            del self._token[job_id]

    # --- a round ------------------------------------------------------------------------------
    def fill(self, capacity: int) -> Schedule:
        """The greedy fill of `capacity` GPUs over all active jobs in order, as the changes it
        makes to the running set: a 0-GPU allocation for each running job left out (they come
        first), then the waiting jobs that get GPUs, in order. Running jobs not listed keep
        their GPUs (`keep_running`). Call `refresh` first."""
        totals = self._totals
        used = [queue for queue, total in enumerate(totals) if total]  # the queues with jobs
        # every job before the cut (queue, slot) fits; the job at the cut does not
        cut_queue, cut_slot, left = len(totals), 0, capacity
        for queue in used:
            if totals[queue] <= left:
                left -= totals[queue]
                continue
            cut_slot, taken = self._sums[queue].longest_prefix(left)
            cut_queue, left = queue, left - taken
            break
        past = [queue for queue in used if queue >= cut_queue]
        # past the cut only jobs that fit in what is left: the first such job of any size
        picked: list[int] = []  # slots, in order
        for queue in past:
            after = cut_slot if queue == cut_queue else 0
            while left > 0:
                best: tuple[int, int] | None = None  # (slot, requested GPUs)
                for need in self._sizes[queue]:
                    if need > left:
                        break
                    slots = self._by_size[queue][need]
                    i = bisect.bisect_left(slots, after)
                    if i < len(slots) and (best is None or slots[i] < best[0]):
                        best = (slots[i], need)
                if best is None:
                    break
                picked.append(best[0])
                left -= best[1]
                after = best[0] + 1
        out = Schedule(keep_running=True)
        for queue in past:
            running = self._running[queue]
            first = bisect.bisect_left(running, cut_slot) if queue == cut_queue else 0
            for slot in running[first:]:
                if slot not in picked:
                    state = self._state(slot)
                    out.append(Allocation(state.job_id, 0, state.batch_size))
        for queue in used:
            if queue > cut_queue:
                break
            waiting = self._waiting[queue]
            end = bisect.bisect_left(waiting, cut_slot) if queue == cut_queue else len(waiting)
            out.extend(self._start(self._state(slot)) for slot in waiting[:end])
        for slot in picked:
            state = self._state(slot)
            if state.status is not RUNNING:
                out.append(self._start(state))
        return out

    def _state(self, slot: int) -> JobState:
        job_id = self._job_at[slot]
        assert job_id is not None, f"slot {slot} holds no active job"
        return self.jobs.all[job_id]

    @staticmethod
    def _start(state: JobState) -> Allocation:
        return Allocation(state.job_id, state.job.num_gpus, state.batch_size)

    def next_crossing(self, now: float) -> float | None:
        """The earliest time a running job crosses into a lower-priority queue (plus 1 us, so
        that the round at it sees the job demoted), computed exactly at `now`; None if no
        running job can cross. Call `refresh` first."""
        heap = self._crossings
        near: list[tuple[float, int, int]] = []
        best: float | None = None
        limit: float | None = None  # predictions this close to the first one are checked
        while heap and (limit is None or heap[0][0] <= limit):
            entry = heapq.heappop(heap)
            if not self._current(entry):
                continue
            near.append(entry)
            state = self._state(entry[1])
            attained = state.attained_at(now)
            queue = self.queue_of(attained)
            if queue < len(self.thresholds) and state.num_gpus:
                when = now + (self.thresholds[queue] - attained) / state.num_gpus + 1e-6
                best = when if best is None else min(best, when)
                if limit is None:
                    limit = entry[0] + 2 * _CROSSING_SLACK_S
        for entry in near:
            heapq.heappush(heap, entry)
        return best

    def _current(self, entry: tuple[float, int, int]) -> bool:
        """Whether a crossing entry is its job's latest (older ones, and those of jobs that
        stopped running, are left in the heap and skipped)."""
        job_id = self._job_at[entry[1]]
        return job_id is not None and self._token.get(job_id) == entry[2]


def _discard(slots: list[int], slot: int) -> None:
    i = bisect.bisect_left(slots, slot)
    if i < len(slots) and slots[i] == slot:
        del slots[i]


@register("tiresias")
class TiresiasPolicy(SchedulingPolicy):
    needs_predictions = False
    idle_without_waiting = True

    def __init__(self, thresholds: float | tuple[float, ...] = DEFAULT_THRESHOLDS) -> None:
        # one number is one threshold (two queues), as the Pollux artifact's 16 GPU-hours
        values = (thresholds,) if isinstance(thresholds, int | float) else thresholds
        self.thresholds = tuple(sorted(float(t) for t in values))
        self._queues: LasQueues | None = None

    def queue_of(self, attained_gpu_s: float) -> int:
        return bisect.bisect_right(self.thresholds, attained_gpu_s)

    def queues(self, ctx: RoundContext) -> LasQueues:
        """The ranking of `ctx`'s job table, brought up to `ctx.now` (made on first use, and
        again for another table)."""
        if self._queues is None or self._queues.jobs is not ctx.jobs:
            self._queues = LasQueues(ctx.jobs, self.thresholds)
        self._queues.refresh(ctx.now)
        return self._queues

    def schedule(self, ctx: RoundContext) -> Schedule:
        """Every active job in Tiresias's order at its requested GPUs, filled greedily (a job
        that does not fit is skipped); returned as the changes to the running jobs."""
        start = start_all_waiting(ctx)
        if start is not None:
            return start
        return self.queues(ctx).fill(ctx.cluster.total_gpus)

    def next_wakeup(self, ctx: RoundContext) -> float | None:
        """The next time a running job crosses into a lower-priority queue, if any job waits
        (with nobody waiting a demotion changes nothing)."""
        if not ctx.jobs.num_waiting:
            return None
        return self.queues(ctx).next_crossing(ctx.now)
