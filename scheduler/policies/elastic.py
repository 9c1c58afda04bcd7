"""Elastic allocation (Saxena et al., MASCOTS'20): the optimizer's dynamic program chooses every
job's GPU count and batch size from predicted throughputs, re-run at each arrival and
completion.

- Options per job: GPU counts 1, 2, 4, ... from its `min_gpus` up to its `max_gpus` (and its
  requested count);
  global batch either the requested one or the requested per-GPU batch times the GPU count.
- Objective: total normalized throughput, each job's samples/s divided by its predicted
  samples/s at its requested size (raw samples/s would favour cheap models for ever).
- No back-and-forth: the full re-allocation is adopted only when its predicted value beats, by
  at least `min_gain` (5%), keeping running jobs as they are and giving the free GPUs to waiting
  jobs with the same dynamic program. Otherwise running jobs keep their size.
- GPU type: throughputs are predicted for the cluster's most common GPU type.

Most rounds of a large cluster's history find every job's own best option fitting beside the
others' (`OwnBests`, kept as jobs come, start, resize and go): the dynamic program would give
each job its own best, so the round starts the waiting jobs at theirs without building the
jobs' option tables, and costs the jobs that changed, not the jobs running.
"""

from __future__ import annotations

import heapq
from collections import Counter
from dataclasses import dataclass

from perfcast.errors import PerfcastError
from perfcast.optimizer.elastic import ElasticJob, OwnBest, allocate, own_best, own_best_margin
from perfcast.scheduler.core.cluster import ClusterState, GpuSlot
from perfcast.scheduler.core.jobs import DONE, RUNNING, JobState, JobTable
from perfcast.scheduler.core.loop import Allocation, RoundContext, Schedule, SchedulingPolicy
from perfcast.scheduler.core.predictions import ScalingKey
from perfcast.scheduler.policies import register

# what a job's options depend on: its type, requested GPUs and batch, GPU limits, the GPUs and
# batch it holds (0, 0 when waiting), the GPU type predicted for and the cluster's GPUs
ShapeKey = tuple[str, int, int, int, int | None, int, int, str, int]
_UNITS = 2**1074  # every float is a whole number of 2^-1074: sums of them kept exactly


def gpu_options(state: JobState, total_gpus: int) -> list[int]:
    top = min(state.job.max_gpus or state.job.num_gpus, total_gpus)
    counts = {state.job.num_gpus, state.num_gpus} - {0}
    n = 1
    while n <= top:
        counts.add(n)
        n *= 2
    return sorted(c for c in counts if state.job.min_gpus <= c <= total_gpus)


def shape_key(state: JobState, gpu_type: str, total_gpus: int) -> ShapeKey:
    """The key of a job's options: jobs with equal keys have equal options."""
    job, held = state.job, state.num_gpus
    batch = state.batch_size if held else 0
    return (job.job_type, job.num_gpus, job.batch_size, job.min_gpus, job.max_gpus, held, batch,
            gpu_type, total_gpus)  # fmt: skip


@dataclass(frozen=True, eq=False)
class Shape:
    """The options of every job with one `ShapeKey`: predicted samples/s per (GPUs, batch),
    the largest GPU count, the weight (1 / samples/s at the requested size) and its own best.
    One object per key (`ElasticPolicy.shapes`), so it is hashed by identity."""

    throughput: dict[tuple[int, int], float]
    max_gpus: int
    weight: float
    best: OwnBest
    best_units: int  # |best.value| in units of 2^-1074


def _units(x: float) -> int:
    numerator, denominator = abs(x).as_integer_ratio()
    return numerator * (_UNITS // denominator)


@register("elastic")
class ElasticPolicy(SchedulingPolicy):
    needs_predictions = True
    prediction_tasks = ("scaling",)

    def __init__(self, min_gain: float = 0.05) -> None:
        self.min_gain = min_gain
        self._shapes: dict[ShapeKey, Shape] = {}
        # each active job's options, for the rounds that re-allocate (its key, the job)
        self._elastic: dict[str, tuple[ShapeKey, ElasticJob]] = {}
        self._index: OwnBests | None = None
        # True after a round that left every job at its own best (none held off it): until a
        # job arrives, completions only lower the bests' sums, so a round would decide nothing
        # and the simulator skips it
        self.idle_without_waiting = False

    def own_bests(self, ctx: RoundContext) -> OwnBests:
        """The index of `ctx`'s jobs and cluster, brought up to date."""
        index = self._index
        if index is None or index.jobs is not ctx.jobs or index.cluster is not ctx.cluster:
            if index is not None:
                index.close()
            index = self._index = OwnBests(ctx.jobs, ctx.cluster)
        index.refresh(self, ctx)
        return index

    def schedule(self, ctx: RoundContext) -> list[Allocation]:
        if not ctx.jobs.active:
            return []
        index = self.own_bests(ctx)
        moves = index.moves(self.min_gain)
        self.idle_without_waiting = moves is not None and not index.off_best
        if moves is None:
            return self._reallocate(ctx, index.gpu_type)
        best = index.best
        return Schedule(
            [Allocation(job_id, best[job_id].gpus, best[job_id].batch) for job_id in moves],
            keep_running=True,
        )

    def _reallocate(self, ctx: RoundContext, gpu_type: str) -> list[Allocation]:
        """The re-allocation of every active job and the policy's rule between the plans:
        what a round costs where its jobs' own bests do not tell the answer."""
        states = list(ctx.jobs.active.values())
        total = ctx.cluster.total_gpus
        elastic = self._elastic_jobs(states, gpu_type, total, ctx)
        by_id = {e.job_id: e for e in elastic}
        full = allocate(elastic, total)
        running = [s for s in states if s.num_gpus]
        used = sum(s.num_gpus for s in running)
        waiting = [by_id[s.job_id] for s in states if not s.num_gpus]
        kept = {s.job_id: (s.num_gpus, s.batch_size) for s in running}
        incremental = kept | (allocate(waiting, total - used) if waiting else {})
        # (on a lightly loaded cluster the two plans are one: every job at its own best)
        if full == incremental or value(elastic, full) >= (1 + self.min_gain) * value(
            elastic, incremental
        ):
            plan = full
        else:
            plan = incremental
        return [
            Allocation(job_id, gpus, batch) for job_id, (gpus, batch) in plan.items() if gpus > 0
        ]

    def shapes(
        self, states: list[JobState], gpu_type: str, total: int, ctx: RoundContext
    ) -> list[tuple[ShapeKey, Shape]]:
        """Each job's `ShapeKey` and `Shape`, the shapes not seen before built in one batch of
        predictions."""
        known = self._shapes
        keys = [shape_key(s, gpu_type, total) for s in states]
        todo = {k: s for k, s in zip(keys, states, strict=True) if k not in known}
        if todo:
            self._build(todo, gpu_type, total, ctx)
        return [(key, known[key]) for key in keys]

    def _build(
        self, todo: dict[ShapeKey, JobState], gpu_type: str, total: int, ctx: RoundContext
    ) -> None:
        predictor = ctx.predictor
        if predictor is None:
            raise PerfcastError("elastic needs a prediction backend (--predictor)")
        options: list[list[tuple[int, int]]] = []
        scaling: list[ScalingKey] = []
        for state in todo.values():
            job = state.job
            local = max(1, job.batch_size // job.num_gpus)
            configs = {(job.num_gpus, job.batch_size)}
            if state.num_gpus:
                configs.add((state.num_gpus, state.batch_size))
            for n in gpu_options(state, total):
                configs |= {(n, job.batch_size), (n, local * n)}
            ordered = sorted((n, b) for n, b in configs if b >= n)
            options.append(ordered)
            scaling += [predictor.scaling_key(job.job_type, gpu_type, n, b) for n, b in ordered]
            scaling.append(
                predictor.scaling_key(job.job_type, gpu_type, job.num_gpus, job.batch_size)
            )
        rates = iter(predictor.throughputs(scaling) if scaling else [])
        for key, configs in zip(todo, options, strict=True):
            throughput = {c: float(next(rates)) for c in configs}
            weight = 1.0 / float(next(rates))
            max_gpus = max(n for n, _ in configs)
            # (the job's id is no part of its options: checked and read once per shape)
            best = own_best(
                ElasticJob("shape", throughput, max_gpus=max_gpus, weight=weight), total
            )
            self._shapes[key] = Shape(throughput, max_gpus, weight, best, _units(best.value))

    def _elastic_jobs(
        self, states: list[JobState], gpu_type: str, total: int, ctx: RoundContext
    ) -> list[ElasticJob]:
        shapes = self.shapes(states, gpu_type, total, ctx)
        cached, elastic = self._elastic, {}
        for state, (key, shape) in zip(states, shapes, strict=True):
            job_id = state.job_id
            entry = cached.get(job_id)
            if entry is None or entry[0] != key:
                job = ElasticJob(
                    job_id, shape.throughput, max_gpus=shape.max_gpus, weight=shape.weight
                )
                entry = (key, job)
            elastic[job_id] = entry
        self._elastic = elastic  # the jobs gone since are dropped
        return [job for _, job in elastic.values()]


class OwnBests:
    """Each active job's own best option (`own_best`), followed as the table's jobs come,
    start, stop and finish (`JobTable.watch`) and resize (`ClusterState.watch`), with what
    tells whether the optimizer would answer with every job's own best (`moves`): their GPUs
    summed, their values summed exactly, the smallest margin among them, the waiting jobs and
    the running jobs not at their own best."""

    def __init__(self, jobs: JobTable, cluster: ClusterState) -> None:
        self.jobs, self.cluster = jobs, cluster
        self.gpu_type: str = Counter(cluster.node_type).most_common(1)[0][0]
        self.best: dict[str, OwnBest] = {}
        self.waiting: dict[str, None] = {}
        self.off_best: dict[str, None] = {}  # running jobs at another size than their own best
        self._shape: dict[str, Shape] = {}
        self._place: dict[str, int] = {}  # active job -> its place in submission order
        self._arrived = 0
        self._count: dict[Shape, int] = {}  # active jobs of each shape
        # (margin, push number, shape) of the shapes with active jobs, a heap; entries of
        # shapes gone since are stale
        self._margins: list[tuple[float, int, Shape]] = []
        self._pushed = 0
        self._gpus = 0
        self._waiting_gpus = 0  # the waiting jobs' own bests
        self._units = 0
        self._dirty: dict[str, None] = {}
        for state in jobs.active.values():
            self._seen(state)
        jobs.watch(self._seen)
        cluster.watch(self._moved)

    def close(self) -> None:
        """Stop following the table and the cluster."""
        self.jobs.unwatch(self._seen)
        self.cluster.unwatch(self._moved)

    def _seen(self, state: JobState) -> None:
        job_id = state.job_id
        if job_id not in self._place and state.status is not DONE:
            self._arrived += 1
            self._place[job_id] = self._arrived
        self._dirty[job_id] = None

    def _moved(self, job_id: str, slots: tuple[GpuSlot, ...]) -> None:
        self._dirty[job_id] = None

    def refresh(self, policy: ElasticPolicy, ctx: RoundContext) -> None:
        """Apply the changes told since the last refresh: each changed job dropped, and the
        ones still active added again with their options (the new shapes built in one batch)."""
        dirty = self._dirty
        if not dirty:
            return
        waiting, entries, all_states = self.waiting, self._shape, self.jobs.all
        live: list[JobState] = []
        for job_id in dirty:
            state = all_states[job_id]
            status = state.status
            if status is RUNNING and job_id in waiting:
                best = entries[job_id].best
                if len(state.gpus) == best.gpus and state.batch_size == best.batch:
                    # started at its own best (the usual start): the options of a job holding
                    # its own best are those it had waiting (that option and its GPU count
                    # were among them), so its best, value and margin stay; only the waiting
                    # list changes, and its shape is not looked up again
                    del waiting[job_id]
                    self._waiting_gpus -= best.gpus
                    continue
            if job_id in entries:  # (an arrival has nothing to drop)
                self._drop(job_id)
            if status is DONE:
                self._place.pop(job_id, None)
            else:
                live.append(state)
        dirty.clear()
        if live:
            total = self.cluster.total_gpus
            for state, (_, shape) in zip(
                live, policy.shapes(live, self.gpu_type, total, ctx), strict=True
            ):
                self._add(state, shape)

    def _add(self, state: JobState, shape: Shape) -> None:
        job_id, best, count = state.job_id, shape.best, self._count
        self._shape[job_id], self.best[job_id] = shape, best
        jobs = count[shape] = count.get(shape, 0) + 1
        if jobs == 1:
            margin = best.margin if best.margin == best.margin else -float("inf")  # NaN: never
            margins = self._margins
            self._pushed += 1
            heapq.heappush(margins, (margin, self._pushed, shape))
            if len(margins) > 2 * len(count) + 32:  # mostly stale: rebuilt
                live = {e[2]: e for e in margins if e[2] in count}
                margins[:] = list(live.values())
                heapq.heapify(margins)
        self._gpus += best.gpus
        self._units += shape.best_units
        if state.status is RUNNING:
            if (state.num_gpus, state.batch_size) != (best.gpus, best.batch):
                self.off_best[job_id] = None
        else:
            self.waiting[job_id] = None
            self._waiting_gpus += best.gpus

    def _drop(self, job_id: str) -> None:
        shape = self._shape.pop(job_id)
        del self.best[job_id]
        count = self._count
        jobs = count[shape] - 1
        if jobs:
            count[shape] = jobs
        else:
            del count[shape]
        self._gpus -= shape.best.gpus
        self._units -= shape.best_units
        if job_id in self.waiting:
            del self.waiting[job_id]
            self._waiting_gpus -= shape.best.gpus
        self.off_best.pop(job_id, None)

    def moves(self, min_gain: float) -> list[str] | None:
        """The jobs to start or resize to their own best, in submission order, when the
        re-allocation gives every job its own best (they fit together and each beats its next
        option by more than `own_best_margin`) and the waiting ones fit in the free GPUs: the
        waiting ones, and the running ones not at their own best if that gains `min_gain` of
        the total value (the policy's rule). None when the policy must re-allocate."""
        if self._gpus > self.cluster.total_gpus or self._waiting_gpus > self.cluster.free_gpus:
            return None
        margins, count = self._margins, self._count
        while margins and margins[0][2] not in count:
            heapq.heappop(margins)
        total = self._units / _UNITS
        if margins and not margins[0][0] > own_best_margin(total):
            return None
        moves = [job_id for job_id in self.waiting if self.best[job_id].gpus]
        if self.off_best:
            gain = 0.0  # of every job at its own best over the running ones kept as they are
            for job_id in self.off_best:
                shape = self._shape[job_id]
                if not shape.best.gpus:  # it would be suspended, before any start
                    return None
                state = self.jobs.all[job_id]
                held = shape.throughput.get((state.num_gpus, state.batch_size), 0.0)
                gain += shape.best.value - shape.weight * held
            if total >= (1 + min_gain) * (total - gain):
                moves += self.off_best
        return sorted(moves, key=self._place.__getitem__)


def value(jobs: list[ElasticJob], plan: dict[str, tuple[int, int]]) -> float:
    """Total weighted predicted throughput of a plan."""
    total = 0.0
    for job in jobs:
        config = plan.get(job.job_id, (0, 0))
        if config[0]:
            total += job.weight * job.throughput.get(config, 0.0)
    return total
