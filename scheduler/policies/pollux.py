"""Goodput-aware elastic scheduling after Pollux (OSDI'21): each round every job's GPU count
and batch size are chosen for goodput, throughput x statistical efficiency.

- Goodput of a job on n GPUs (packed 4 per node, as placement consolidates): the best over 50
  global batch sizes in geometric steps between the smallest that fills n GPUs and the largest
  validated (Pollux's `GoodputFunction.optimize`, gradient accumulation above the largest local
  batch), of samples/s at that batch times the statistical efficiency the job's gradient noise
  of its current epoch gives it. `model=fitted` (the default, as Pollux): step times come from
  a throughput model fitted to the step times each job reported in the configurations it ran
  (`facts/throughput.py`; `profile=type` pools the reports of every job of a type instead, knowledge
  Pollux does not have; in a GPU count already run, the model scaled to what was reported
  there; a job never run gets one GPU), and
  efficiency from the gradient noise it reported at its current batch, extrapolated to other
  batches with Pollux's formula. `model=oracle`: both read from the job's true model
  (`Workload.statistical_model`: the Pollux artifact's measured placements and validation
  runs at every batch size).
- Where a job has not run, its model assumes (`prior=scaling`, the default) the
  synchronization perfcast's scaling predictor gives a cluster it has not measured at scale
  (`facts/prior.py`), scaled from the job's own one-GPU report, and the job may take any number
  of GPUs; `prior=none` is Pollux's assumption, perfect scaling, and its cap: at most twice the
  GPUs the job has run on. On the artifact's 8 workloads (`benchmarks.scheduling --peer`) the
  prior takes per-job average JCT from 1.004x the artifact's Pollux (mean) to below it.
- Allocation: jobs in order of least attained service (Pollux's job order) get one GPU each
  while GPUs remain (jobs without a goodput model get their requested count); the GPUs left go
  one step at a time to the job whose goodput gains the most per added GPU (in log terms: the
  proportionally fair split), up to `max_gpus` per job.
- Restart penalty: a running job moved to another GPU count pays a restart, so its goodput
  there is discounted by Pollux's factor max(age - restarts x delay, 0) / (age + delay); its
  current count is not.
- Placement (`PackingPlacement`): every job is kept on the fewest nodes its GPU count needs,
  as the goodput estimates assume (shrinks keep the fullest nodes, grows extend onto the job's
  own nodes, a spread job moves onto fewer when the free GPUs allow).
- Batch size is re-chosen every round for the job's current epoch; on the same GPUs the
  simulator changes it without a restart (AdaptDL rescales in place).
- As in the artifact, NCF keeps its 32,768 batch on one GPU.
- A run where no job progresses statistically (a trace of durations: every job holds the GPUs
  it asked for) gets the same answers at the cost of what changes: the order is kept
  incrementally (Tiresias's `LasQueues`, with the service classes as its queues) and a round
  lists only the jobs it starts or stops and those on more than one node, instead of ranking
  and placing every active job again (`PolluxPolicy._fill`); a round where one job waits and
  fits, with no job spread, starts it without the ranking (the fill would list it alone).
"""

from __future__ import annotations

import heapq
import math
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from functools import partial
from typing import Any

import numpy as np

from perfcast.scheduler.core.decisions import Resize, Run, Suspend
from perfcast.scheduler.core.jobs import JobState, JobStatus
from perfcast.scheduler.core.loop import (
    Allocation,
    ConsolidatedPlacement,
    RoundContext,
    Schedule,
    SchedulingPolicy,
    start_all_waiting,
)
from perfcast.scheduler.facts.prior import held_out_prior
from perfcast.scheduler.facts.throughput import JobProfile
from perfcast.scheduler.policies import PolicyOptionError, register
from perfcast.scheduler.policies.tiresias import LasQueues

GPUS_PER_NODE = 4  # the artifact's T4 nodes; goodput is estimated for packed placements
FIXED = {"ncf-movielens": 32768}  # the artifact pins NCF's batch and gives it one GPU
MODELS = ("fitted", "oracle")  # where step times and gradient noise come from
# fitted: whose reports a job's throughput model learns from. `job` (default): its own, as
# Pollux; `type`: every job's of its type, finished ones included, knowledge Pollux lacks (a
# new job starts with a fitted model)
PROFILES = ("job", "type")
# fitted: what a job's model assumes where it has not run. `scaling` (default): perfcast's
# scaling predictor trained without the simulated cluster's multi-GPU measurements
# (`facts/prior.py`), and no cap on exploration; `none`: perfect scaling, and at most twice
# the GPUs the job has run on, as Pollux
PRIORS = ("scaling", "none")
# `service_class` as LasQueues thresholds (GPU-seconds): class k from 3600 x (2^k - 1); 40
# classes reach 2^40 GPU-hours, beyond any job
SERVICE_THRESHOLDS = tuple(3600.0 * (2.0**k - 1.0) for k in range(1, 41))


class PackingPlacement(ConsolidatedPlacement):
    """Placement that keeps every job on the fewest nodes its GPU count needs (the goodput
    estimates are for packed placements; a spread one can be several times slower: yolov3's
    step on 4 GPUs over 2 nodes is 3x its step on one node). Dropped jobs are suspended and
    shrinking jobs keep the GPUs on their fullest nodes first, freeing GPUs; then, largest
    first, growing jobs extend onto free GPUs of their own nodes, and a running job whose GPUs
    span more nodes than the free and its own GPUs would need moves onto as few as they allow
    (one restart, as any resize); waiting jobs start best fit (`find_free`)."""

    def __init__(self) -> None:
        # the running jobs it placed on more nodes than the largest nodes would need, in
        # placement order: the ones a round may move onto fewer (finished or suspended ones
        # are dropped when met)
        self.spread: dict[str, None] = {}

    def place(self, schedule: Sequence[Allocation], ctx: RoundContext) -> None:
        jobs = ctx.jobs
        if isinstance(schedule, Schedule) and schedule.keep_running:
            # only the listed jobs change: running ones at 0 GPUs are suspended, the others
            # are placed below (the policy lists every running job that may move)
            for alloc in schedule:
                state = jobs[alloc.job_id]
                if alloc.num_gpus < state.num_gpus and state.status is JobStatus.RUNNING:
                    self._shrink(state, alloc, ctx)
        else:
            wanted = {a.job_id: a for a in schedule}
            for state in list(jobs.running()):
                alloc = wanted.get(state.job_id, Allocation(state.job_id, 0, state.batch_size))
                if alloc.num_gpus < state.num_gpus:
                    self._shrink(state, alloc, ctx)
        for alloc in sorted(schedule, key=lambda a: -a.num_gpus):  # stable: priority order
            state = jobs[alloc.job_id]
            if alloc.num_gpus == 0:
                continue
            if state.status is JobStatus.RUNNING:
                self.grow(state, alloc, ctx)
                continue
            slots = ctx.cluster.find_free(alloc.num_gpus, alloc.gpu_type)
            if slots is not None:
                ctx.commit(Run(alloc.job_id, slots, alloc.batch_size, alloc.share))
                self._note(state, ctx)

    def _shrink(self, state: JobState, alloc: Allocation, ctx: RoundContext) -> None:
        if alloc.num_gpus == 0:
            ctx.commit(Suspend(state.job_id))
        else:
            kept = compact(state.gpus, alloc.num_gpus)
            ctx.commit(Resize(state.job_id, kept, alloc.batch_size))
        self._note(state, ctx)

    def _note(self, state: JobState, ctx: RoundContext) -> None:
        """Keep `spread` up to date after a decision on `state`. A job on k nodes, each of at
        most m GPUs, can move onto fewer only if k - 1 of them hold it: when its GPUs need
        k nodes of m (16 on two nodes of 8, say) `grow` would only ever keep it."""
        gpus = state.gpus
        if gpus and any(node != gpus[0][0] for node, _ in gpus):
            nodes = len({node for node, _ in gpus})
            if (nodes - 1) * ctx.cluster.largest_node >= len(gpus):
                self.spread[state.job_id] = None
                return
        self.spread.pop(state.job_id, None)

    def grow(self, state: JobState, alloc: Allocation, ctx: RoundContext) -> None:
        cluster, n = ctx.cluster, alloc.num_gpus
        first = state.gpus[0][0]
        if n == state.num_gpus and all(node == first for node, _ in state.gpus):
            self._keep(state, alloc, ctx)  # on one node at its size: it stays there
            return
        own = Counter(node for node, _ in state.gpus)
        if n == state.num_gpus:
            # it moves only if fewer nodes than it spans hold it: the largest rooms say whether
            # (its own nodes' and the freest others', as many as it spans less one)
            span = len(own) - 1
            rooms = [cluster.free_per_node[i] + own[i] for i in own]
            rooms += cluster.largest_free(span, alloc.gpu_type, exclude=own)
            if sum(sorted(rooms, reverse=True)[:span]) < n:
                self._keep(state, alloc, ctx)
                return
        # its own nodes and those with free GPUs (nodes with no room for it change nothing)
        usable = {*cluster.nodes_with_free_gpus(alloc.gpu_type), *own}
        room = {i: cluster.free_per_node[i] + own[i] for i in usable}
        if sum(room.values()) < n:
            return
        slots = list(state.gpus)
        for node in sorted(own, key=lambda i: (-own[i], i)):  # its own nodes first
            slots += cluster.free_slots(node)[: n - len(slots)]
        if len(slots) < n:  # then other nodes, the fewest (the free GPUs of its own are taken)
            others = {i: room[i] for i in room if not own[i]}
            slots += packed_slots(cluster, others, Counter(), (), n - len(slots))
        fewest = nodes_needed(sorted(room.values(), reverse=True), n)
        if len({node for node, _ in slots}) > fewest:  # move onto the fewest nodes
            slots = packed_slots(cluster, room, own, state.gpus, n)
        if len(set(slots)) != n:
            raise AssertionError(f"pollux placed {state.job_id} on {slots} for {n} GPUs")
        if set(slots) != set(state.gpus) or alloc.batch_size != state.batch_size:
            ctx.commit(Resize(state.job_id, tuple(slots), alloc.batch_size))
            self._note(state, ctx)

    @staticmethod
    def _keep(state: JobState, alloc: Allocation, ctx: RoundContext) -> None:
        """A job staying on its GPUs: only a new batch size to commit, if any."""
        if alloc.batch_size != state.batch_size:
            ctx.commit(Resize(state.job_id, state.gpus, alloc.batch_size))


def compact(gpus: tuple, n: int) -> tuple:
    """The `n` of a job's GPUs on its fullest nodes (a shrink that leaves it on few nodes)."""
    per_node = Counter(node for node, _ in gpus)
    return tuple(sorted(gpus, key=lambda slot: (-per_node[slot[0]], slot))[:n])


def nodes_needed(room: list[int], n: int) -> int:
    """The fewest nodes with `room` GPUs (largest first) that hold `n`."""
    total = 0
    for k, free in enumerate(room, start=1):
        total += free
        if total >= n:
            return k
    return len(room) + 1


def packed_slots(cluster: Any, room: dict[int, int], own: Counter, gpus: tuple, n: int) -> list:
    """`n` GPUs on the fewest nodes among a job's own and free ones: one node if any holds
    them (the fullest such, its own GPUs first), else the nodes with the most room."""
    fits = [i for i in room if room[i] >= n]
    if fits:
        chosen = [min(fits, key=lambda i: (room[i], -own[i], i))]
    else:
        chosen = sorted(room, key=lambda i: (-room[i], -own[i], i))
    slots: list = []
    for node in chosen:
        mine = [slot for slot in gpus if slot[0] == node]
        slots += (mine + list(cluster.free_slots(node)))[: n - len(slots)]
        if len(slots) == n:
            break
    return slots


@register("pollux")
class PolluxPolicy(SchedulingPolicy):
    def __init__(
        self,
        restart_s: float = 30.0,
        max_gpus: int = 64,
        model: str = "fitted",
        profile: str = "job",
        fairness: float = 0.0,
        prior: str = "scaling",
    ) -> None:
        if model not in MODELS:
            raise PolicyOptionError(f"pollux model={model!r}: choose one of {', '.join(MODELS)}")
        if profile not in PROFILES:
            raise PolicyOptionError(
                f"pollux profile={profile!r}: choose one of {', '.join(PROFILES)}"
            )
        self.restart_s, self.max_gpus, self.model, self.profile = (
            restart_s, max_gpus, model, profile
        )  # fmt: skip
        if prior not in PRIORS:
            raise PolicyOptionError(f"pollux prior={prior!r}: choose one of {', '.join(PRIORS)}")
        self.prior = prior
        if fairness > 0:
            raise PolicyOptionError(f"pollux fairness={fairness}: give 0 (log) or a negative power")
        self.fairness = fairness
        self.placement = PackingPlacement()
        self._model: Any = None
        self._best: dict[tuple, tuple[float, int]] = {}
        self.profiles: dict[str, JobProfile] = {}
        self._gpus: dict[str, tuple] = {}  # each job's GPUs at the last round
        self.restarts: Counter[str] = Counter()
        self._fixed_sizes = False  # set by `configure`: no job of the run is statistical
        self._queues: LasQueues | None = None

    def configure(self, workload: Any) -> None:
        self._model = workload.statistical_model
        # with no job progressing statistically every job holds the GPUs it asked for, and a
        # round is Tiresias's greedy fill in Pollux's order: kept incrementally (`_fill`)
        self._fixed_sizes = not workload.statistical_jobs

    @property
    def idle_without_waiting(self) -> bool:  # type: ignore[override]
        """With fixed sizes and no job on more nodes than it needs, a round with nobody
        waiting decides nothing (everyone runs, nobody may move): the simulator skips it."""
        return self._fixed_sizes and not self.placement.spread

    def goodput(self, state: JobState, num_gpus: int) -> tuple[float, int]:
        """(best goodput, its global batch) of a job on `num_gpus` GPUs in its current epoch."""
        app = self._model(state.job.job_type) if self._model else None
        if app is None or not state.job.statistical:
            return float(num_gpus), state.job.batch_size
        epoch = app.epoch_at(state.samples_done)
        if self.model == "oracle":
            key: tuple = (state.job.job_type, epoch, num_gpus)
        else:
            profile = self.profiles.get(self._profile_key(state))
            if profile is None or profile.params is None:  # never run: no model yet
                return float(num_gpus), FIXED.get(state.job.job_type, app.init_batch)
            key = (self._profile_key(state), epoch, num_gpus, profile.version, state.batch_size)
        if key not in self._best:
            self._best[key] = self._best_batch(app, state, epoch, num_gpus)
        return self._best[key]

    def _best_batch(self, app: Any, state: JobState, epoch: int, n: int) -> tuple[float, int]:
        fixed = FIXED.get(state.job.job_type)
        if fixed is not None:
            batches = [fixed]
        else:
            low, high = max(app.init_batch, app.min_local * n), int(app.batches[-1])
            if low > high:
                return 0.0, low
            batches = sorted({int(b) for b in np.geomspace(low, high, 50)})
        placement = placement_of(n)
        if self.model == "oracle":
            work = float(app.starts[epoch]) * app.init_batch
            rates = [app.rate(placement, b, work) for b in batches]
        else:
            profile = self.profiles[self._profile_key(state)]
            noise = app.noise(max(state.batch_size, app.init_batch), epoch)  # as reported
            splits = [app.split(b, n) for b in batches]
            steps = profile.step_time(
                len(placement), n, [s.atomic for s in splits], [s.accum for s in splits]
            )
            processed = [s.global_batch(n) for s in splits]
            rates = [
                b / t * app.efficiency(b, epoch, noise)
                for b, t in zip(processed, steps, strict=True)
            ]
        best = int(np.argmax(rates))
        return float(rates[best]), batches[best]

    def _profile_key(self, state: JobState) -> str:
        """Whose reports a job's model is fitted to: its own (`profile=job`, the default, as
        Pollux), or every job's of its type (`profile=type`: what earlier runs of the same
        model and dataset reported, the history a prediction service keeps; extra knowledge
        that real Pollux does not have)."""
        return state.job.job_type if self.profile == "type" else state.job_id

    def _report(self, ctx: RoundContext) -> None:
        """Each running statistical job reports the step time of the configuration it runs
        (the simulated job's true step and sync seconds there), as an AdaptDL job does."""
        for state in ctx.jobs.active.values():
            app = self._model(state.job.job_type) if self._model else None
            if app is None or not state.job.statistical or not state.gpus:
                continue
            per_node = Counter(node for node, _ in state.gpus)
            placement = tuple(per_node[node] for node in sorted(per_node))
            split = app.split(state.batch_size, state.num_gpus)
            step, sync = app.step_and_sync(placement, split.atomic)
            key = self._profile_key(state)
            profile = self.profiles.get(key)
            if profile is None:
                profile = self.profiles[key] = JobProfile(prior=self._prior_of(state))
            profile.report(len(placement), state.num_gpus, split.atomic, step - sync, step)

    def _prior_of(self, state: JobState) -> Callable[[int], Mapping[tuple[int, int], float]] | None:
        """The slowdowns a new profile of `state`'s job assumes where it has not run (`prior`),
        or None: Pollux's perfect scaling."""
        if self.prior == "none":
            return None
        job_type = state.job.job_type
        prior = held_out_prior(self._model(job_type).cluster, GPUS_PER_NODE)
        return partial(prior.slowdowns, job_type) if prior.knows(job_type) else None

    def _cap(self, state: JobState, total: int) -> int:
        app = self._model(state.job.job_type) if self._model else None
        if app is None or not state.job.statistical:
            return state.job.num_gpus
        if state.job.job_type in FIXED:
            return 1
        cap = max(1, min(self.max_gpus, total, int(app.batches[-1]) // app.min_local))
        if self.model == "fitted":
            profile = self.profiles.get(self._profile_key(state))
            if profile is None:
                cap = 1
            elif not profile.explores_freely:
                cap = min(cap, profile.max_replicas)
        return cap

    def _value(self, state: JobState, n: int, now: float) -> float:
        """Goodput on n GPUs, discounted by the restart it would cost a running job."""
        value = self.goodput(state, n)[0]
        if state.num_gpus and n != state.num_gpus:
            age = now - state.job.submit_time_s
            restarts = self.restarts[state.job_id]
            delay = self.restart_s
            value *= max(age - restarts * delay, 0.0) / (age + delay)
        return value

    def _utility(self, value: float, base: float) -> float:
        """What a job's goodput is worth to the allocation: its log (`fairness=0`, the
        proportionally fair split), or -(value/base)^p for a power p < 0 (the artifact's p=-1:
        the power mean of speedups over the job's goodput at its fair share, `base`; the more
        negative, the more the slowest jobs count)."""
        if self.fairness == 0.0:
            return math.log(value)
        return -((value / base) ** self.fairness)

    def _count_restarts(self, ctx: RoundContext) -> None:
        """A job restarted when it runs on other GPUs than at the last round after having run
        (the artifact's `num_restarts`, counted at every reallocation after the first). A new
        batch on the same GPUs continues in place: counting it as a resize, as the job's
        `resizes` does, discounted jobs whose batch moved with their noise as if each move
        had cost a restart."""
        for job_id, state in ctx.jobs.active.items():
            last = self._gpus.get(job_id)
            if state.gpus and last is not None and set(state.gpus) != set(last):
                self.restarts[job_id] += 1
            if state.gpus or last is not None:
                self._gpus[job_id] = state.gpus

    def schedule(self, ctx: RoundContext) -> list[Allocation]:
        if self._fixed_sizes:
            return self._fill(ctx)
        self._count_restarts(ctx)
        if self.model == "fitted":
            self._report(ctx)
        now, total = ctx.now, ctx.cluster.total_gpus
        states = sorted(
            ctx.jobs.active.values(),
            key=lambda s: (service_class(s.attained_at(now)), s.job.submit_time_s),
        )
        free, size = total, {}
        for state in states:
            need = 1 if state.job.statistical else state.job.num_gpus
            if need <= free:
                size[state.job_id] = need
                free -= need
            if free == 0:
                break
        by_id = {s.job_id: s for s in states}
        fair = max(1, math.ceil(total / max(len(states), 1)))
        heap: list[tuple[float, int, str, int]] = []

        def push(job_id: str) -> None:
            state, n = by_id[job_id], size[job_id]
            cap = self._cap(state, total)
            steps = [m for m in candidate_sizes(cap, state.num_gpus) if m > n]
            best = None
            here = self._value(state, n, now)
            base = self.goodput(state, min(fair, cap))[0] if self.fairness else 1.0
            for m in steps:
                if m - n > free:
                    break
                there = self._value(state, m, now)
                if here > 0 and there > here:
                    gain = (self._utility(there, base) - self._utility(here, base)) / (m - n)
                    if best is None or gain > best[0]:
                        best = (gain, m)
            if best is not None:
                heapq.heappush(heap, (-best[0], len(heap), job_id, best[1]))

        for job_id in size:
            if by_id[job_id].job.statistical:
                push(job_id)
        while heap and free > 0:
            _, _, job_id, m = heapq.heappop(heap)
            if m - size[job_id] > free:
                push(job_id)  # the step no longer fits: look for a smaller one
                continue
            free -= m - size[job_id]
            size[job_id] = m
            push(job_id)
        return [
            Allocation(job_id, n, self.goodput(by_id[job_id], n)[1]) for job_id, n in size.items()
        ]

    def _fill(self, ctx: RoundContext) -> Schedule:
        """`schedule`'s answer when every job holds its requested GPUs, as the changes to the
        running set, at the cost of what changes: the greedy fill of jobs in order of service
        class then submission (`LasQueues`), plus the running jobs on more than one node, which
        placement may move onto fewer. In priority order, so placement's stable sort by size
        places what the full answer's would and in the same order (the running jobs left out
        of this list would only be kept)."""
        if not self.placement.spread and ctx.jobs.num_waiting == 1:
            # one job waits and fits: the fill would start it alone and list nobody to move
            # (no job is spread); the ranking catches up at the next round that needs it
            start = start_all_waiting(ctx)
            if start is not None:
                return start
        if self._queues is None or self._queues.jobs is not ctx.jobs:
            self._queues = LasQueues(ctx.jobs, SERVICE_THRESHOLDS)
        queues = self._queues
        queues.refresh(ctx.now)
        changes = queues.fill(ctx.cluster.total_gpus)
        listed = {a.job_id for a in changes}
        spread = self.placement.spread
        jobs = ctx.jobs.all
        for job_id in list(spread):
            state = jobs[job_id]
            if state.status is not JobStatus.RUNNING:
                del spread[job_id]
            elif job_id not in listed:
                changes.append(Allocation(job_id, state.num_gpus, state.batch_size))
        stops = [a for a in changes if a.num_gpus == 0]
        places = sorted((a for a in changes if a.num_gpus), key=lambda a: queues.rank(a.job_id))
        return Schedule(stops + places, keep_running=True)


def service_class(attained_gpu_s: float) -> int:
    """Attained service in doubling classes of GPU-hours (0: under one): least attained service
    first, but first come first served inside a class, so jobs with nearly equal service do not
    take turns preempting each other every round (each turn costs a restart)."""
    return int(math.log2(1.0 + attained_gpu_s / 3600.0))


def placement_of(num_gpus: int) -> tuple[int, ...]:
    """GPUs per node when `num_gpus` are packed 4 per node."""
    full, rest = divmod(num_gpus, GPUS_PER_NODE)
    return (GPUS_PER_NODE,) * full + ((rest,) if rest else ())


def candidate_sizes(cap: int, current: int) -> list[int]:
    """GPU counts a job may step to: 1-4 on one node, whole nodes beyond, and its current."""
    sizes = {n for n in range(1, min(cap, GPUS_PER_NODE) + 1)}
    sizes |= set(range(2 * GPUS_PER_NODE, cap + 1, GPUS_PER_NODE))
    if 0 < current <= cap:
        sizes.add(current)
    return sorted(sizes)
