"""The event-driven simulator: the scheduler core's `Executor` for traces.

Events are arrivals, completions and the policy's own wake-ups (for example Tiresias's
demotion thresholds); a scheduling round runs after the events of each instant, never on a
fixed small tick. Jobs advance at their TRUE rate (the measured step time of their type, GPU
count and batch, slowed by measured interference when packed or shared by time-slicing); the
policies decide from predictions, so prediction error shows in the results.

Progress is kept lazily: a job's counters are brought up to date only when something about it
changes (a decision, a neighbour on its GPUs changes, it finishes), and its completion event is
re-computed then (stale events are skipped by version), so a round costs only the jobs it
touches. Completion events carry a version unique over the whole run, so an event queued for
an earlier run of a job that was since suspended and resumed never matches its new record.

Self-check: `finish` refuses a completion whose work is not done (it never sets the work to
done), so any event that fires early is an error, not a silently short job. Rates, event times
and wake-ups must be finite: a NaN or infinite one is refused where it is made (`RateError`,
naming the job and its placement), never left to spin the clock.
"""

from __future__ import annotations

import gc
import heapq
import math
from array import array
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field

from threadpoolctl import threadpool_limits

from perfcast.errors import PerfcastError
from perfcast.scheduler.core.cluster import ClusterSpec, ClusterState, GpuSlot
from perfcast.scheduler.core.decisions import Decision, Resize, Run, Suspend
from perfcast.scheduler.core.jobs import JobState, JobTable
from perfcast.scheduler.core.loop import SchedulingLoop, SchedulingPolicy
from perfcast.scheduler.core.predictions import JobPredictor
from perfcast.scheduler.sim import goodput
from perfcast.scheduler.sim.costs import DEFAULT_MIN_RUN_S, Costs
from perfcast.scheduler.sim.workload import Workload

_EPS = 1e-9


@dataclass(slots=True)
class _Running:
    """What the simulator knows about a job holding GPUs."""

    slots: tuple[GpuSlot, ...]
    rate: float  # samples/s while productive
    busy_until: float  # overhead (restart, migration) paid until then
    version: int = 0  # of the latest completion event queued for it (unique in the run)


class Timeline:
    """(time, GPUs busy, jobs waiting) points, each stored in three typed arrays (24 bytes a
    point; a million-job run records millions); iterates as tuples."""

    def __init__(self) -> None:
        self.time_s, self.gpus_busy, self.jobs_waiting = array("d"), array("q"), array("q")

    def append(self, t: float, busy_gpus: int, waiting: int) -> None:
        self.time_s.append(t)
        self.gpus_busy.append(busy_gpus)
        self.jobs_waiting.append(waiting)

    def __len__(self) -> int:
        return len(self.time_s)

    def __getitem__(self, i: int) -> tuple[float, int, int]:
        return self.time_s[i], self.gpus_busy[i], self.jobs_waiting[i]

    def __iter__(self) -> Iterator[tuple[float, int, int]]:
        return zip(self.time_s, self.gpus_busy, self.jobs_waiting, strict=True)


@dataclass
class Accounting:
    """Cluster-side integrals, kept independently of the per-job counters to cross-check."""

    placement_gpu_s: float = 0.0  # integral of (job, GPU) pairs held
    busy_gpu_s: float = 0.0  # integral of GPUs holding at least one job
    productive_gpu_s: dict[str, float] = field(default_factory=dict)
    samples: dict[str, float] = field(default_factory=dict)  # samples run, never capped
    # (time, GPUs busy, jobs waiting) from each change on: a step function whose GPU integral
    # is busy_gpu_s, kept for the report's time series
    timeline: Timeline = field(default_factory=Timeline)

    def record(self, t: float, busy_gpus: int, waiting: int) -> None:
        """The cluster's state from `t` on; a point only where it changed."""
        line = self.timeline
        busy, queued = line.gpus_busy, line.jobs_waiting
        if not busy or busy[-1] != busy_gpus or queued[-1] != waiting:
            line.append(t, busy_gpus, waiting)


class SimulationError(RuntimeError):
    """The simulator broke one of its own invariants (a bug, not bad input)."""


class RateError(PerfcastError):
    """A job's true rate or an event time that is not a finite number: the step-time source
    has no answer for that configuration (input the simulator cannot run, not a bug of it)."""


class SimulatedExecutor:
    """Carries out decisions on the simulated cluster and keeps each job's true progress."""

    def __init__(self, workload: Workload, cluster: ClusterState, costs: Costs) -> None:
        self.workload, self.cluster, self.costs = workload, cluster, costs
        self.running: dict[str, _Running] = {}
        self.events: list[tuple[float, int, str, int]] = []  # (time, seq, job, version)
        self._seq = 0
        self.accounting = Accounting()
        self._gpu_type = dict(enumerate(cluster.node_type))
        self._after_release: set[str] = set()

    # --- the Executor protocol -------------------------------------------------------------
    def apply(self, decisions: Sequence[Decision], jobs: JobTable, now: float) -> None:
        if len(decisions) == 1 and self._start_alone(decisions[0], jobs, now):
            return
        touched: set[str] = set()
        slots: set[GpuSlot] = set()  # GPUs whose occupants changed
        states, running = jobs.all, self.running
        for decision in decisions:
            job_id = decision.job_id
            state = states[job_id]
            touched.add(job_id)
            record = running.get(job_id)
            if record is None:
                state.synced_s = now  # holds no GPUs: nothing to bring up to date
            else:
                self.sync(state, now)
                slots.update(record.slots)
            if isinstance(decision, Suspend):
                del running[job_id]
                continue
            slots.update(decision.gpus)
            if isinstance(decision, Run):
                running[job_id] = self._started(state, decision, now)
            elif record is not None:
                delay = self.costs.migrate_s
                if isinstance(decision, Resize):
                    # a new batch size on the same GPUs continues in place (AdaptDL does)
                    same = set(decision.gpus) == set(record.slots)
                    delay = 0.0 if same else self.costs.resize_s
                record.slots = decision.gpus
                record.busy_until = max(record.busy_until, now + delay)
        # neighbours on GPUs whose occupants changed run at a new rate too
        occupants = self.cluster.occupants
        for node, gpu in sorted(slots):  # a fixed order: event ties resolve the same way
            for other in occupants[node][gpu]:
                if other not in touched:
                    self.sync(states[other], now)
                    touched.add(other)
        for job_id in sorted(touched) if len(touched) > 1 else touched:
            record = running.get(job_id)
            if record is not None:
                state = states[job_id]
                record.rate = self.true_rate(state, jobs)
                self._schedule_completion(state, now, record)

    def _started(self, state: JobState, run: Run, now: float) -> _Running:
        """The record of a job (re)started by `run`: it pays the start or restart first."""
        resumed = state.preemptions > 0 or state.samples_done > 0
        delay = self.costs.restart_s if resumed else self.costs.start_s
        return _Running(run.gpus, 0.0, now + delay)

    def _start_alone(self, decision: Decision, jobs: JobTable, now: float) -> bool:
        """A round's only decision when it starts a job on GPUs no other job holds (the usual
        round), carried out without `apply`'s sets of touched jobs and GPUs: it has no
        neighbour to re-rate. False, doing nothing, for any other decision."""
        job_id = decision.job_id
        if not isinstance(decision, Run) or job_id in self.running:
            return False
        if not self.cluster.alone(decision.gpus):
            return False
        state = jobs.all[job_id]
        state.synced_s = now  # held no GPUs: nothing to bring up to date
        record = self.running[job_id] = self._started(state, decision, now)
        record.rate = self.true_rate(state, jobs)
        self._schedule_completion(state, now, record)
        return True

    # --- progress ---------------------------------------------------------------------------
    def sync(self, state: JobState, now: float) -> None:
        """Bring a job's counters up to `now` at the rate it ran with since the last sync."""
        job_id = state.job_id
        record = self.running.get(job_id)
        if record is None:
            state.synced_s = now
            return
        synced = state.synced_s
        elapsed = now - synced
        if elapsed > 0:
            overhead = record.busy_until - synced
            overhead = 0.0 if overhead < 0.0 else elapsed if overhead > elapsed else overhead
            productive = elapsed - overhead
            work = productive * record.rate
            total = state.job.total_samples
            done = state.samples_done + work
            state.samples_done = total if done > total else done  # NaN stays NaN
            gpus = len(record.slots)
            state.attained_gpu_s += elapsed * gpus
            state.overhead_gpu_s += overhead * gpus
            state.run_time_s += elapsed
            acc = self.accounting
            acc.productive_gpu_s[job_id] = acc.productive_gpu_s.get(job_id, 0.0) + productive * gpus
            acc.samples[job_id] = acc.samples.get(job_id, 0.0) + work
        state.synced_s = now

    def true_rate(self, state: JobState, jobs: JobTable) -> float:
        """Samples/s of a job on its GPUs: measured step time, slowed by sharing."""
        job, gpus = state.job, state.gpus
        n = len(gpus)
        gpu_type = self._gpu_type[gpus[0][0]]
        app = goodput.application(job.job_type) if job.statistical else None
        if app is not None:
            per_node = Counter(node for node, _ in gpus)
            placement = tuple(per_node[node] for node in sorted(per_node))
            solo = app.rate(placement, state.batch_size, state.samples_done)
        else:
            solo = self.workload.scaling.throughput(job.job_type, gpu_type, n, state.batch_size)
        factor, on_gpu = 1.0, self.cluster.occupants
        # a GPU of its own everywhere (the usual case) leaves the factor at 1
        for node, gpu in () if self.cluster.alone(gpus) else gpus:
            occupants = on_gpu[node][gpu]
            if len(occupants) == 1:
                continue
            share = (1.0 - self.costs.timeslice_overhead) / len(occupants)
            other = jobs[occupants[0] if occupants[1] == state.job_id else occupants[1]]
            if len(occupants) == 2 and "pack" in (state.share, other.share):
                pair = self.workload.interference.pair(
                    gpu_type,
                    job.job_type,
                    state.batch_size // n,
                    other.job.job_type,
                    other.batch_size // max(other.num_gpus, 1),
                )
                if pair is not None:
                    share = pair.a_speed
            factor = min(factor, share)
        rate = solo * factor
        if not (math.isfinite(rate) and rate >= 0):
            per_node = Counter(node for node, _ in state.gpus)
            placement = tuple(per_node[node] for node in sorted(per_node))
            raise RateError(
                f"job {job.job_id} ({job.job_type}, batch {state.batch_size}) on {n} {gpu_type} "
                f"GPU(s), placement {placement} GPUs per node: its step-time source gives a "
                f"rate of {rate} samples/s"
            )
        return rate

    def finish(self, state: JobState, now: float, jobs: JobTable) -> None:
        """A job completed: settle its counters; the jobs that shared its GPUs speed up."""
        self.sync(state, now)
        run = self.accounting.samples.get(state.job_id, 0.0)
        if not run >= state.job.total_samples * (1 - 1e-6) - 1e-6:  # NaN fails too
            raise SimulationError(
                f"job {state.job_id} completed at {now:.1f}s having run {run:.6g} of its "
                f"{state.job.total_samples:.6g} samples"
            )
        state.samples_done = state.job.total_samples  # float rounding only
        self._release(state, now, jobs)

    def stop(self, state: JobState, now: float, jobs: JobTable) -> None:
        """A job ended by the policy before its work was done."""
        if state.job_id not in self.running:
            return
        self.sync(state, now)
        self._release(state, now, jobs)

    def _release(self, state: JobState, now: float, jobs: JobTable) -> None:
        """Drop a job's record; its GPU neighbours are brought up to `now` and get new rates
        at the next `refresh`."""
        record = self.running.pop(state.job_id)
        if self.cluster.alone(record.slots):  # no neighbour on any of its GPUs
            return
        for node, gpu in record.slots:
            for other in self.cluster.occupants[node][gpu]:
                if other != state.job_id and other in self.running:
                    self.sync(jobs[other], now)
                    self._after_release.add(other)

    def refresh(self, jobs: JobTable, now: float) -> None:
        """New rates for the jobs whose GPU neighbours left (call after releasing GPUs)."""
        for job_id in sorted(self._after_release):
            record = self.running.get(job_id)
            if record is not None:
                record.rate = self.true_rate(jobs.all[job_id], jobs)
                self._schedule_completion(jobs.all[job_id], now, record)
        self._after_release.clear()

    def _schedule_completion(self, state: JobState, now: float, record: _Running) -> None:
        """Queue the job's next event (its completion, or the end of its epoch) at the rate of
        `record`, its entry in `running`."""
        self._seq += 1
        seq = record.version = self._seq  # older events of this job, from any run, are stale
        rate = record.rate
        if rate <= 0:
            return
        busy = record.busy_until
        start = busy if busy > now else now
        job = state.job
        target = job.total_samples
        app = goodput.application(job.job_type) if job.statistical else None
        if app is not None:  # the rate changes with the epoch: an event at its end
            target = min(target, app.next_boundary(state.samples_done))
        left = target - state.samples_done
        finish = start + (0.0 if left < 0.0 else left) / rate  # NaN stays NaN
        if not math.isfinite(finish):
            raise RateError(
                f"job {state.job_id} ({job.job_type}) on {state.num_gpus} GPU(s): its "
                f"completion time is {finish} (rate {rate} samples/s)"
            )
        heapq.heappush(self.events, (finish, seq, state.job_id, seq))

    def next_completion(self) -> float | None:
        events, running = self.events, self.running
        while events:
            when, _, job_id, version = events[0]
            record = running.get(job_id)
            if record is not None and record.version == version:
                return when
            heapq.heappop(events)
        return None

    def pop_completions(self, now: float, jobs: JobTable) -> list[str]:
        """The jobs whose work is done by `now`. Events of jobs that only reached the end of an
        epoch re-rate them (their statistical efficiency changes) and queue the next event."""
        done: list[str] = []
        events, due = self.events, now + _EPS
        if not events or events[0][0] > due:  # every event, stale or not, is later
            return done
        running, states, pop = self.running, jobs.all, heapq.heappop
        while events and events[0][0] <= due:
            _, _, job_id, version = pop(events)
            record = running.get(job_id)
            if record is None or record.version != version:
                continue  # stale: an event of an earlier rate or run
            state = states[job_id]
            if state.job.statistical and state.remaining_samples > _work_tolerance(state):
                self.sync(state, now)
                if state.remaining_samples > _work_tolerance(state):
                    record.rate = self.true_rate(state, jobs)
                    self._schedule_completion(state, now, record)
                    continue
            done.append(job_id)
        return done


def _work_tolerance(state: JobState) -> float:
    return state.job.total_samples * 1e-9 + 1e-9


@dataclass
class SimResult:
    workload: Workload
    cluster: ClusterState
    jobs: JobTable
    accounting: Accounting
    makespan_s: float
    rounds: int
    decisions: int
    policy: str
    policy_stats: dict[str, int] = field(default_factory=dict)  # the policy's own counts
    # arrivals, completions and wake-ups (an instant with neither) processed
    events: int = 0


ProgressCallback = Callable[[int, int], None]


@contextmanager
def no_cycle_collection() -> Iterator[None]:
    """Python's cycle collector off for the block (back on after, if it was on). A run builds
    millions of objects that live to its end (jobs, their states, the timeline) and makes no
    reference cycles, so each full collection walks them all for nothing (a tenth of a
    million-job run's CPU)."""
    was_on = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_on:
            gc.enable()


@contextmanager
def one_blas_thread() -> Iterator[None]:
    """numpy's and scipy's BLAS on one thread for the block. A run's numerics are tiny (Pollux's
    fits of a few parameters per job): a second BLAS thread computed nothing and spun, doubling
    the CPU of a run on two idle cores (Pollux's workload-5, 79 s of work: 153 s of CPU) and more
    on a busy machine."""
    with threadpool_limits(limits=1, user_api="blas"):
        yield


@no_cycle_collection()
@one_blas_thread()
def simulate(
    workload: Workload,
    spec: ClusterSpec,
    policy: SchedulingPolicy,
    *,
    predictor: JobPredictor | None = None,
    costs: Costs | None = None,
    on_progress: ProgressCallback | None = None,
    round_s: float | None = None,
    min_run_s: float = DEFAULT_MIN_RUN_S,
) -> SimResult:
    """Run `workload` on a cluster `spec` under `policy` until every job is done.

    `min_run_s`: the minimum quantum (`SchedulingLoop`): no job is preempted within that long
    of its (re)start, and a round is held when the earliest such protection ends.

    With `round_s`, decisions are taken only at multiples of `round_s` of the trace's clock
    (as in schedulers that run in fixed rounds, e.g. Muri's testbed every 360 s, the Pollux
    artifact every 60 s): events between two ticks wait for the next one. Without it a round
    follows every instant with events.

    `on_progress(finished, total)` is told each time the number of jobs done changes."""
    if round_s is not None and round_s <= 0:
        raise ValueError(f"round_s must be > 0, got {round_s}")

    def next_tick(t: float) -> float:
        """The first round at or after `t`: multiples of `round_s` in the trace's own clock."""
        assert round_s is not None
        origin = workload.origin_s
        return math.ceil((t + origin) / round_s - _EPS) * round_s - origin

    policy.configure(workload)
    cluster = ClusterState(spec)
    executor = SimulatedExecutor(workload, cluster, costs or Costs())
    loop = SchedulingLoop(cluster, policy, executor, predictor=predictor, min_run_s=min_run_s)
    jobs = sorted(workload.jobs, key=lambda j: j.submit_time_s)
    total, arrived, finished, rounds, decisions, events = len(jobs), 0, 0, 0, 0, 0
    acc = executor.accounting
    timer: float | None = None
    tick: float | None = None  # the next round when rounds are on a fixed grid
    now = jobs[0].submit_time_s if jobs else 0.0
    # the hooks a policy does not override answer "nothing": not asked each round
    stops = getattr(policy.stopped, "__func__", None) is not SchedulingPolicy.stopped
    wakes = getattr(policy.next_wakeup, "__func__", None) is not SchedulingPolicy.next_wakeup
    table = loop.jobs
    total_gpus, next_completion = cluster.total_gpus, executor.next_completion
    # the integrals and the timeline's last point kept in locals (stored in `acc` at the end):
    # `Accounting.record`'s test inline, with the same float additions in the same order
    placement_gpu_s, busy_gpu_s = acc.placement_gpu_s, acc.busy_gpu_s
    line = acc.timeline
    append_point = line.append
    last_busy = line.gpus_busy[-1] if len(line) else None
    last_waiting = line.jobs_waiting[-1] if len(line) else None
    reported = -1  # `finished` as last told to `on_progress` (told only when it changes)
    while finished < total:
        # the earliest of the next arrival, completion, wake-up and tick
        t = jobs[arrived].submit_time_s if arrived < total else None
        when = next_completion()
        if when is not None and (t is None or when < t):
            t = when
        if timer is not None and (t is None or timer < t):
            t = timer
        if tick is not None and (t is None or tick < t):
            t = tick
        if t is None:
            stuck = [s.job_id for s in table.active.values()][:5]
            raise RuntimeError(f"simulation stalled at {now:.0f}s with jobs waiting: {stuck}")
        if t < now:
            t = now
        busy = total_gpus - cluster.free_gpus
        waiting = table.num_waiting
        if busy != last_busy or waiting != last_waiting:
            append_point(now, busy, waiting)
            last_busy, last_waiting = busy, waiting
        placement_gpu_s += cluster.placements * (t - now)
        busy_gpu_s += busy * (t - now)
        now = t
        # `next_completion` left a current event at the head of the queue: none is due unless
        # it is (the usual instant, an arrival, asks the queue nothing more)
        completed = (
            executor.pop_completions(now, table) if when is not None and when <= now + _EPS else ()
        )
        for job_id in completed:
            executor.finish(table.all[job_id], now, table)
            loop.job_finished(job_id, now)
        finished += len(completed)
        if executor._after_release:
            executor.refresh(table, now)
        first = arrived
        while arrived < total and jobs[arrived].submit_time_s <= now:
            arrived += 1
        if arrived > first:
            batch = jobs[first:arrived]
            accepted = loop.submit(batch, now)
            for state in accepted:
                state.synced_s = now
            finished += len(batch) - len(accepted)
        events += (len(completed) + arrived - first) or 1
        if round_s is not None:
            on_grid = tick is not None and now >= tick - _EPS
            if not on_grid:
                nxt = next_tick(now)
                tick = nxt if tick is None else min(tick, nxt)
                if on_progress and finished != reported:
                    on_progress(finished, total)
                    reported = finished
                continue
            tick = None
        if policy.idle_without_waiting and not table.num_waiting:  # may change each round
            timer = None  # nothing to decide until a job arrives (an event of its own)
            if on_progress and finished != reported:
                on_progress(finished, total)
                reported = finished
            continue
        decisions += len(loop.round(now))
        rounds += 1
        if stops and (ended := policy.stopped(loop.context(now))):
            for job_id in ended:
                executor.stop(loop.jobs[job_id], now, loop.jobs)
                loop.job_finished(job_id, now)
                finished += 1
            executor.refresh(loop.jobs, now)
            decisions += len(loop.round(now))  # the freed GPUs go to others at once
        timer = policy.next_wakeup(loop.context(now)) if wakes else None
        if timer is not None and not math.isfinite(timer):
            raise SimulationError(f"policy {policy.name} asked for a round at {timer}")
        if loop.held_until is not None:  # a job kept by its quantum may be preempted then
            timer = loop.held_until if timer is None else min(timer, loop.held_until)
        if timer is not None and timer <= now:
            timer = None
        if timer is not None and round_s is not None:
            tick, timer = next_tick(timer), None
        if on_progress and finished != reported:
            on_progress(finished, total)
            reported = finished
    acc.placement_gpu_s, acc.busy_gpu_s = placement_gpu_s, busy_gpu_s
    acc.record(now, cluster.used_gpus(), loop.jobs.num_waiting)
    makespan = now - (jobs[0].submit_time_s if jobs else 0.0)
    stats = dict(getattr(policy, "stats", {}))  # e.g. Gandiva's packed and time-sliced starts
    return SimResult(
        workload, cluster, loop.jobs, acc, makespan, rounds, decisions, policy.name, stats, events
    )
