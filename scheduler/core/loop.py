"""The scheduling loop, split in three like Blox: admission (`AdmissionControl.accept`), policy
(`SchedulingPolicy.schedule`: who should hold GPUs, how many, at what batch size, in priority
order) and placement (`JobPlacement.place`: which GPUs, turned into decisions). The loop commits
each decision to its cluster and job state and hands the round's decisions to an `Executor`.
The same loop drives the simulator and the Ray cluster.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

from perfcast.scheduler.core.cluster import ClusterState, GpuSlot
from perfcast.scheduler.core.decisions import Decision, Migrate, Resize, Run, Suspend
from perfcast.scheduler.core.executor import Executor
from perfcast.scheduler.core.jobs import (
    DONE,
    RUNNING,
    SUSPENDED,
    Job,
    JobState,
    JobTable,
    Share,
)

if TYPE_CHECKING:
    from perfcast.scheduler.core.predictions import JobPredictor

log = logging.getLogger(__name__)
_QUANTUM_EPS = 1e-6  # a round at exactly the end of a quantum may preempt (float rounding)


class Allocation(NamedTuple):
    """A policy's wish for one job this round: `num_gpus` GPUs at global `batch_size`.
    `share_with` asks to put it on the GPUs of that job (Gandiva packing or time-slicing);
    `gpu_type` restricts the GPU type (None: any). An immutable record, a named tuple as the
    decisions are (`decisions.py`): one is built per job a round lists."""

    job_id: str
    num_gpus: int
    batch_size: int
    share: Share = "exclusive"
    share_with: str | None = None
    gpu_type: str | None = None


class Schedule(list[Allocation]):
    """A policy's answer. As a plain list it names every job that should hold GPUs (running
    jobs left out are suspended); with `keep_running` it lists only jobs to start or resize
    and every running job not listed keeps its GPUs, so a round costs only what changes."""

    __slots__ = ("keep_running",)  # one per round: no instance dict to build

    def __init__(self, allocations: Iterable[Allocation] = (), *, keep_running: bool = False):
        list.__init__(self, allocations)  # not super(): half the cost of a round's answer
        self.keep_running = keep_running


@dataclass(slots=True)
class RoundContext:
    """What a round sees. Placement commits decisions through `commit`, which keeps the
    cluster and job state in step and records the decision for the executor."""

    now: float
    cluster: ClusterState
    jobs: JobTable
    predictor: JobPredictor | None = None
    decisions: list[Decision] = field(default_factory=list)

    def commit(self, decision: Decision) -> None:
        apply_decision(decision, self.cluster, self.jobs, self.now)
        self.decisions.append(decision)


def start_all_waiting(ctx: RoundContext) -> Schedule | None:
    """When every waiting job fits in the free GPUs, any priority order gives the same answer
    (everyone runs): a schedule that starts the waiting jobs (in the order they started
    waiting) and keeps the running ones. None when they do not all fit."""
    if ctx.jobs.waiting_gpus > ctx.cluster.free_gpus:
        return None
    return Schedule(
        [Allocation(s.job_id, s.job.num_gpus, s.batch_size) for s in ctx.jobs.waiting()],
        keep_running=True,
    )


def start_what_fits(ctx: RoundContext) -> Schedule:
    """A walk of the waiting jobs in the order they started waiting that starts each one
    fitting in the GPUs still free (a job that does not fit is passed over, and smaller jobs
    behind it may start); running jobs are kept. Only the sizes that still fit are looked at:
    the earliest waiting job of each such size is the next to start, so a round costs the jobs
    it starts, not the queue. When every waiting job fits (a lightly loaded cluster's usual
    round) they are listed in waiting order without the walk."""
    everyone = start_all_waiting(ctx)
    if everyone is not None:
        return everyone
    free = ctx.cluster.free_gpus
    start = Schedule(keep_running=True)
    buckets = ctx.jobs.waiting_by_size()
    queues = {need: iter(jobs.items()) for need, jobs in buckets.items() if need <= free}
    heads = {need: next(queue) for need, queue in queues.items()}
    while heads:
        need = min(heads, key=lambda n: heads[n][1])  # the earliest in the waiting order
        state = ctx.jobs[heads[need][0]]
        start.append(Allocation(state.job_id, need, state.batch_size))
        free -= need
        following = next(queues[need], None)
        if following is None:
            del heads[need]
        else:
            heads[need] = following
        for size in [n for n in heads if n > free]:
            del heads[size]
    return start


def apply_decision(decision: Decision, cluster: ClusterState, jobs: JobTable, now: float) -> None:
    """The only place where decisions change cluster and job state."""
    state = jobs.all[decision.job_id]
    if isinstance(decision, Run):
        if state.status is RUNNING or state.status is DONE:
            raise ValueError(f"cannot run job {state.job_id}: it is {state.status.value}")
        cluster.allocate(state.job_id, decision.gpus)
        jobs.set_status(state, RUNNING)
        state.gpus = decision.gpus
        state.batch_size, state.share = decision.batch_size, decision.share
        if state.first_start_s is None:
            state.first_start_s = now
        state.last_start_s = now
        return
    if state.status is not RUNNING:
        action = type(decision).__name__.lower()
        raise ValueError(f"cannot {action} job {state.job_id}: not running")
    cluster.release(state.job_id, state.gpus)
    if isinstance(decision, Suspend):
        jobs.set_status(state, SUSPENDED)
        state.gpus, state.share = (), "exclusive"
        state.preemptions += 1
        return
    cluster.allocate(state.job_id, decision.gpus)
    state.share = "exclusive"  # a migrated or resized job runs on GPUs of its own
    if isinstance(decision, Migrate):
        state.migrations += 1
    else:  # Resize
        state.batch_size = decision.batch_size
        state.resizes += 1
    state.gpus = decision.gpus


class AdmissionControl(Protocol):
    def accept(self, new_jobs: Sequence[Job], ctx: RoundContext) -> list[Job]:
        """The jobs let in; the others are rejected (never scheduled)."""
        ...


class SchedulingPolicy:
    """The base of every policy (as Ray Tune's `TrialScheduler`): `schedule` decides, the loop
    and the executor act. The optional hooks are declared here with no-op defaults, so the
    loop and the simulator call them on any policy without looking them up."""

    name: str = ""
    needs_predictions: bool = False
    prediction_tasks: tuple[str, ...] = ()  # prediction tasks it asks for (`duration`, ...)
    placement: JobPlacement | None = None  # its own placement, else the loop's default
    # True when a round with no job waiting decides nothing (the policy only starts waiting
    # jobs or swaps them in, never resizes, migrates or stops running ones unprompted): the
    # simulator skips such rounds, and their wake-ups
    idle_without_waiting: bool = False

    def configure(self, workload: Any) -> None:
        """Adapt to what a run brings before it starts (the simulator passes its `Workload`:
        jobs and measured catalogs). Default: nothing to adapt."""

    def schedule(self, ctx: RoundContext) -> list[Allocation]:
        """The jobs that should hold GPUs after this round, highest priority first. Running jobs
        left out are suspended (unless the answer is a `Schedule` with `keep_running`); waiting
        jobs listed are started if placement finds GPUs."""
        raise NotImplementedError

    def next_wakeup(self, ctx: RoundContext) -> float | None:
        """When the policy wants a round although no job arrives or finishes (Tiresias's
        demotions), or None. Default: never."""
        return None

    def stopped(self, ctx: RoundContext) -> list[str]:
        """Jobs to end now, running or waiting, before their work is done (hypersched stops
        trials); called after each round. Default: none."""
        return []


class JobPlacement(Protocol):
    def place(self, schedule: Sequence[Allocation], ctx: RoundContext) -> None:
        """Turn the schedule into decisions, committing each through `ctx.commit`."""
        ...


class AcceptAll:
    """Admission that lets every job in."""

    def accept(self, new_jobs: Sequence[Job], ctx: RoundContext) -> list[Job]:
        return list(new_jobs)


class ConsolidatedPlacement:
    """Keep running jobs where they are; suspend the ones the policy dropped; resize the ones
    whose size changed; then start waiting jobs in priority order on the fewest nodes
    (a job that does not fit waits, and smaller jobs behind it may start: backfilling)."""

    def place(self, schedule: Sequence[Allocation], ctx: RoundContext) -> None:
        jobs = ctx.jobs.all
        running = RUNNING
        keep = isinstance(schedule, Schedule) and schedule.keep_running
        if not keep:
            wanted_ids = {a.job_id for a in schedule}
            for state in list(ctx.jobs.running()):
                if state.job_id not in wanted_ids:
                    ctx.commit(Suspend(state.job_id))
        listed = [(alloc, jobs[alloc.job_id]) for alloc in schedule]
        listed_running = [state for _, state in listed if state.status is running]
        if listed_running:  # a round that only starts jobs (the usual one) skips this
            wanted = {a.job_id: a for a in schedule}
            resizes = []
            for state in listed_running:
                alloc = wanted[state.job_id]
                if (alloc.num_gpus, alloc.batch_size) != (state.num_gpus, state.batch_size):
                    if alloc.num_gpus == 0:
                        ctx.commit(Suspend(state.job_id))
                    elif alloc.num_gpus < state.num_gpus:  # shrink in place first: frees GPUs
                        kept = state.gpus[: alloc.num_gpus]
                        ctx.commit(Resize(state.job_id, kept, alloc.batch_size))
                    else:
                        resizes.append(alloc)
            for alloc in resizes:
                self.grow(jobs[alloc.job_id], alloc, ctx)
        for alloc, state in listed:
            if state.status is running or alloc.num_gpus == 0:
                continue
            slots = self.slots_for(alloc, ctx)
            if slots is not None:
                ctx.commit(Run(alloc.job_id, slots, alloc.batch_size, alloc.share))

    def grow(self, state: JobState, alloc: Allocation, ctx: RoundContext) -> None:
        """Give a running job more GPUs (or a new batch on the same ones): keep the GPUs it
        holds and add free ones."""
        extra = ctx.cluster.find_free(alloc.num_gpus - state.num_gpus, alloc.gpu_type)
        if extra is not None:
            ctx.commit(Resize(state.job_id, state.gpus + extra, alloc.batch_size))

    def slots_for(self, alloc: Allocation, ctx: RoundContext) -> tuple[GpuSlot, ...] | None:
        if alloc.share_with is not None:
            host = ctx.jobs[alloc.share_with]
            if host.status is RUNNING and host.num_gpus == alloc.num_gpus:
                return host.gpus
            return None
        return ctx.cluster.find_free(alloc.num_gpus, alloc.gpu_type)


class SchedulingLoop:
    """Admission, policy and placement over one cluster, feeding an executor.

    `min_run_s` is a minimum quantum (as Gandiva's time slices): a job (re)started
    less than `min_run_s` ago keeps its GPUs even if the policy drops it, so no policy can
    preempt a job more than once per `min_run_s` it holds GPUs (preemptions x min_run_s <= time
    held). `held_until` is when the earliest job held this round may be dropped: a round is
    due then (the simulator wakes up for it)."""

    def __init__(
        self,
        cluster: ClusterState,
        policy: SchedulingPolicy,
        executor: Executor,
        *,
        predictor: JobPredictor | None = None,
        admission: AdmissionControl | None = None,
        placement: JobPlacement | None = None,
        min_run_s: float = 0.0,
    ) -> None:
        if not min_run_s >= 0:
            raise ValueError(f"min_run_s must be >= 0, got {min_run_s}")
        self.min_run_s = float(min_run_s)
        self.held_until: float | None = None
        self._recent: dict[str, float] = {}  # job -> its start, for starts within a quantum
        self.cluster, self.policy, self.executor = cluster, policy, executor
        self.predictor = predictor
        self.admission = admission or AcceptAll()
        self.placement = placement or policy.placement or ConsolidatedPlacement()
        self.jobs = JobTable()
        self.rejected: list[Job] = []

    def context(self, now: float) -> RoundContext:
        return RoundContext(now, self.cluster, self.jobs, self.predictor)

    def submit(self, new_jobs: Sequence[Job], now: float) -> list[JobState]:
        """Admit new jobs; they are scheduled from the next round on."""
        if type(self.admission) is AcceptAll:  # the usual case: no context to build
            accepted = list(new_jobs)
        else:
            accepted = self.admission.accept(new_jobs, self.context(now))
            ids = {j.job_id for j in accepted}
            self.rejected += [j for j in new_jobs if j.job_id not in ids]
        add = self.jobs.add
        return [add(job) for job in accepted]

    def round(self, now: float) -> list[Decision]:
        """One scheduling round: policy, placement, then the executor acts on the decisions."""
        ctx = self.context(now)
        schedule = self.hold_quantum(self.policy.schedule(ctx), ctx)
        self.placement.place(schedule, ctx)
        if self.min_run_s > 0:
            for decision in ctx.decisions:
                if isinstance(decision, Run):  # in start order: a restarted job moves last
                    self._recent.pop(decision.job_id, None)
                    self._recent[decision.job_id] = now
        if ctx.decisions:
            self.executor.apply(ctx.decisions, self.jobs, now)
        return ctx.decisions

    def hold_quantum(self, schedule: list[Allocation], ctx: RoundContext) -> list[Allocation]:
        """`schedule` with the running jobs it drops inside their quantum put back first, at
        the GPUs and batch they hold (what they displaced waits; placement starts only what
        fits). Sets `held_until`. Only the jobs started in the last `min_run_s` are looked at
        (`_recent`, in start order), and of a `keep_running` schedule only the jobs it drops,
        so a round does not pay for every running job."""
        self.held_until = None
        recent, now = self._recent, ctx.now
        while recent:
            job_id, started = next(iter(recent.items()))
            if started + self.min_run_s > now + _QUANTUM_EPS:
                break
            del recent[job_id]
        if not recent:
            return schedule
        keep = isinstance(schedule, Schedule) and schedule.keep_running
        if keep:  # only a listed 0-GPU allocation drops a running job
            stops = {a.job_id for a in schedule if a.num_gpus == 0}
            # in start order, as a plain list's: held jobs come first in what placement sees,
            # and a placement that moves running jobs (pollux) takes them in that order
            dropped = [job_id for job_id in recent if job_id in stops] if stops else []
        else:
            # a plain list names every job to hold GPUs: it drops the recent ones it leaves out
            listed = {a.job_id for a in schedule if a.num_gpus > 0}
            dropped = [job_id for job_id in recent if job_id not in listed]
        held = []
        for job_id in dropped:
            state, started = self.jobs.all[job_id], recent[job_id]
            if state.status is not RUNNING or state.last_start_s != started:
                continue  # suspended or finished since, or restarted outside the loop
            held.append(Allocation(job_id, state.num_gpus, state.batch_size, state.share))
            until = started + self.min_run_s
            self.held_until = until if self.held_until is None else min(self.held_until, until)
        if not held:
            return schedule
        ids = {a.job_id for a in held}
        return Schedule(held + [a for a in schedule if a.job_id not in ids], keep_running=keep)

    def report_progress(self, job_id: str, samples_done: float, now: float) -> None:
        """The executor's account of a job's progress (samples done so far). A report for a
        job the loop does not know (a worker of a job from before a restart, say) is logged and
        ignored: it must not bring the scheduler down."""
        state = self.jobs.all.get(job_id)
        if state is None:
            log.warning("progress report for unknown job %r ignored", job_id)
            return
        state.samples_done = samples_done

    def job_finished(self, job_id: str, now: float) -> JobState:
        """Release a finished job's GPUs and mark it done."""
        state = self.jobs.finish(job_id, now)
        if state.gpus:
            self.cluster.release(job_id, state.gpus)
            state.gpus = ()
        return state
