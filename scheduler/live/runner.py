"""Drive the scheduler core's loop against the Ray cluster, in wall-clock time.

Each round: admit the jobs whose submit time has come, let the loop decide (the executor
carries the decisions out), then poll the executor and feed progress, measured step times
and completions back into the loop. All state lives in the `JobStore`; `recover` rebuilds the
loop from it after a restart: finished jobs stay finished, jobs whose workers survived are
reattached (not started again), the others resume from their last checkpoint.
"""

from __future__ import annotations

import logging
import math
import statistics
import threading
import time
import traceback
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from perfcast.errors import PerfcastError
from perfcast.scheduler.core.cluster import ClusterState
from perfcast.scheduler.core.decisions import Decision, Migrate, Resize, Run, Suspend
from perfcast.scheduler.core.jobs import Job, JobState, JobStatus
from perfcast.scheduler.core.loop import (
    Allocation,
    RoundContext,
    Schedule,
    SchedulingLoop,
    SchedulingPolicy,
    apply_decision,
)
from perfcast.scheduler.core.predictions import JobPredictor
from perfcast.scheduler.live.nodes import WorkersStarting
from perfcast.scheduler.live.predictions import needs_predictor
from perfcast.scheduler.live.reports import Failed, Finished, Lost, Progress
from perfcast.scheduler.live.spec import JobSpec, check_shards
from perfcast.scheduler.live.store import JobStore, clock_start

if TYPE_CHECKING:  # the executor loads torch: this module needs it only to annotate
    from perfcast.scheduler.live.executor import RayExecutor

log = logging.getLogger(__name__)


def core_job(job_id: str, spec: JobSpec) -> Job:
    """The scheduler core's view of a live job: its work counted in samples."""
    return Job(
        job_id=job_id,
        submit_time_s=spec.submit_time_s,
        job_type=spec.model,
        trace_job=spec.model,  # the duration predictors' job name (none was drawn)
        num_gpus=spec.num_gpus,
        batch_size=spec.batch_size,
        total_samples=float(spec.total_samples),
        min_gpus=spec.min_gpus or 1,
        max_gpus=spec.max_gpus,  # elastic policies size it within these
    )


def never_fit(states: Iterable[JobState], total_gpus: int) -> dict[str, str]:
    """Why each of these jobs cannot run on a cluster of `total_gpus` GPUs, by job: it asks
    for more GPUs than there are (an elastic policy may still run it at its `min_gpus` when
    they fit, so the line says so)."""
    lines = {}
    for state in states:
        job = state.job
        if job.num_gpus > total_gpus:
            smaller = (f"; an elastic policy may run it at {job.min_gpus}" if job.min_gpus
                       <= total_gpus else "")  # fmt: skip
            lines[job.job_id] = (
                f"{job.job_id} asks for {job.num_gpus} GPUs and the cluster has {total_gpus}: "
                f"it waits until nodes join (`perfcast cluster add-node`){smaller}"
            )
    return lines


class OperatorHolds:
    """A policy with the jobs an operator suspended (`perfcast job suspend`) left out of its
    schedule until `perfcast job resume`: under every policy a suspended job stays suspended
    (fifo, which places every waiting job, started it again in the same round). Everything
    else is the policy's own. `held` starts from the holds recorded in the store (`LiveRunner`
    reads them), so a restarted service keeps them."""

    def __init__(self, policy: SchedulingPolicy, held: Iterable[str] = ()) -> None:
        self.policy = policy
        self.held: set[str] = set(held)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.policy, name)

    def schedule(self, ctx: RoundContext) -> list[Allocation]:
        chosen = self.policy.schedule(ctx)
        if not self.held:
            return chosen
        kept = [a for a in chosen if a.job_id not in self.held]
        return Schedule(kept, keep_running=getattr(chosen, "keep_running", False))


class PredictionsNeeded(PerfcastError):
    """The policy cannot decide without predictions and the runner was given none."""


@dataclass(frozen=True)
class RunSummary:
    jobs: int
    finished: int
    failed: int
    avg_jct_s: float
    p99_jct_s: float
    makespan_s: float

    def as_dict(self) -> dict[str, float]:
        return {
            "jobs": self.jobs,
            "finished": self.finished,
            "failed": self.failed,
            "avg_jct_s": self.avg_jct_s,
            "p99_jct_s": self.p99_jct_s,
            "makespan_s": self.makespan_s,
        }


class LiveRunner:
    def __init__(
        self,
        executor: RayExecutor,
        store: JobStore,
        policy: SchedulingPolicy,
        *,
        round_s: float = 0.5,
        predictor: JobPredictor | None = None,
    ) -> None:
        name = getattr(policy, "name", type(policy).__name__)
        if needs_predictor(policy) and predictor is None:
            raise PredictionsNeeded(  # else every round would fail the same way
                f"policy {name!r} needs predictions; the live scheduler has none for it "
                "(the CLI: --predictor inprocess or http)"
            )
        self.executor, self.store, self.round_s = executor, store, round_s
        cluster = ClusterState(executor.nodes.cluster_spec())
        # policies that need predictions (elastic, gandiva's packing) decide with `predictor`
        # the operator's holds, from the store: they outlive a restart of the service
        self.holds = OperatorHolds(policy, (r.job_id for r in store.jobs() if r.held))
        self.loop = SchedulingLoop(cluster, self.holds, executor, predictor=predictor)  # type: ignore[arg-type]
        self.round_errors = 0  # rounds that raised: logged, and the service went on
        self._flagged: dict[str, int] = {}  # jobs too big, at the cluster size they were
        self.clock_start = clock_start(store)  # a restarted scheduler keeps the run's clock
        executor.clock = self.now

    def now(self) -> float:
        return time.time() - self.clock_start

    def submit(self, job_id: str, spec: JobSpec) -> None:
        self.store.add_job(job_id, spec.model_dump(), spec.submit_time_s)

    def recover(self) -> dict[str, int]:
        """Rebuild the loop's job and cluster state from the store (after a restart)."""
        counts = {"done": 0, "failed": 0, "reattached": 0, "restarted": 0, "pending": 0}
        reattached = []
        now = self.now()
        self.executor.reclaim_orphans()
        for record in self.store.jobs():
            if record.submit_time_s > now:
                continue
            (state,) = self.loop.submit([core_job(record.job_id, JobSpec(**record.spec))], now)
            state.samples_done = float(record.samples_done)
            state.first_start_s = record.first_start_s
            if record.status in ("done", "failed"):
                self.loop.jobs.finish(record.job_id, record.finish_s or now)
                counts[record.status] += 1
            elif record.status == "pending":
                counts["pending"] += 1
            elif self.executor.reattach(record.job_id) and record.status == "running":
                apply_decision(
                    Run(record.job_id, record.gpus, record.batch_size, record.share),
                    self.loop.cluster,
                    self.loop.jobs,
                    now,
                )
                counts["reattached"] += 1
                reattached.append(record.job_id)
            else:  # suspended, or its workers are gone: the policy runs it again
                state.status = JobStatus.SUSPENDED
                counts["restarted"] += 1
        self.executor.rejoin_timeslices(reattached)
        return counts

    def step(self) -> None:
        """One round: admissions, decisions, then the executor's reports. A round that raises
        (a policy's bug, a decision the cluster refused) is logged with its traceback in the
        event log and counted, and the next round goes on: one bad round must not stop the
        service and leave every job unscheduled. A launch whose workers are still starting is
        put off the same way, logged but not counted."""
        try:
            self._round()
            return
        except WorkersStarting as slow:  # not an error: a later round's launch takes them
            self.store.log(None, "launch put off", str(slow))
        except Exception:  # whatever it was: the service must survive it
            self.round_errors += 1
            log.exception("scheduling round failed")
            self.store.log(None, "round error", traceback.format_exc(limit=8))
        try:
            self._reconcile(self.now())
        except Exception:
            log.exception("reconciling after a failed round failed")
            self.store.log(None, "round error", traceback.format_exc(limit=8))

    def _reconcile(self, now: float) -> None:
        """After a failed round: the decisions committed in the core but not carried out (or
        the reverse) leave the two views apart. A job whose views differ (running in one and
        not the other, or on other GPUs or at another batch) is suspended in both, and the
        policy places it again from a state both agree on."""
        actual = self.executor.placements()
        for job_id, state in list(self.loop.jobs.all.items()):
            running = state.status is JobStatus.RUNNING
            placed = actual.get(job_id)
            core = (state.gpus, state.batch_size) if running else None
            if placed == core:
                continue
            if placed is None and self.store.job(job_id).status in ("done", "failed"):
                # ended, and the report of it was lost with the round: not to be run again
                self.loop.job_finished(job_id, self.store.job(job_id).finish_s or now)
                self.store.log(job_id, "reconciled", "ended on the cluster: ended in the core")
                continue
            if placed is not None:
                self.executor.suspend(job_id)
            if running:
                apply_decision(Suspend(job_id), self.loop.cluster, self.loop.jobs, now)
            self.store.log(
                job_id, "reconciled", f"core {core} vs cluster {placed}: suspended, placed again"
            )

    def _round(self) -> None:
        now = self.now()
        known = set(self.loop.jobs.all)
        arrived = [  # new submissions only: jobs the store already ran are `recover`'s
            core_job(r.job_id, JobSpec(**r.spec))
            for r in self.store.jobs()
            if r.job_id not in known and r.status == "pending" and r.submit_time_s <= now
        ]
        if arrived:
            self.loop.submit(arrived, now)
        if self.executor.nodes.refresh():
            self._nodes_changed(now)
        self._flag_never_fit()
        self._operator_commands(now)
        self.loop.round(now)
        for report in self.executor.poll():
            now = self.now()
            if report.job_id not in self.loop.jobs.all:  # another runner's job, on a shared
                self.store.log(report.job_id, "ignored report", type(report).__name__)
                continue  # executor: the loop has nothing to update
            if isinstance(report, Progress):
                self.loop.report_progress(report.job_id, report.samples_done, now)
                if report.mean_step_time_s:  # measured figures for the next decisions
                    state = self.loop.jobs[report.job_id]
                    state.extra["measured_step_time_s"] = report.mean_step_time_s
            elif isinstance(report, Finished):
                self.loop.report_progress(report.job_id, report.samples_done, now)
                self.loop.job_finished(report.job_id, self.store.job(report.job_id).finish_s)
            elif isinstance(report, Lost):
                # unless its node's departure has suspended it already
                if self.loop.jobs[report.job_id].status is JobStatus.RUNNING:
                    apply_decision(Suspend(report.job_id), self.loop.cluster, self.loop.jobs, now)
            elif isinstance(report, Failed):  # given up: its GPUs go back, it is not run again
                self.loop.job_finished(report.job_id, now)

    def _flag_never_fit(self) -> None:
        """An event, once per job and cluster size, for each waiting job too big for the
        cluster (it would otherwise wait in silence: `perfcast job show` gives the reason)."""
        total = self.loop.cluster.total_gpus
        waiting = [s for s in self.loop.jobs.waiting() if self._flagged.get(s.job_id) != total]
        for job_id, line in never_fit(waiting, total).items():
            self._flagged[job_id] = total
            self.store.log(job_id, "cannot fit", line)

    def _nodes_changed(self, now: float) -> None:
        """Nodes joined or left. The jobs on a node that left are stopped (what is left of
        their workers) and suspended: the policy places them again, from their newest
        checkpoint. Then the core's cluster is rebuilt: a new node gets the next index, one
        that left keeps its index with no GPUs, every other job keeps its GPUs."""
        dead = self.executor.nodes.dead
        for state in list(self.loop.jobs.running()):
            if any(node in dead for node, _ in state.gpus):
                self.executor.node_lost(state.job_id)
                apply_decision(Suspend(state.job_id), self.loop.cluster, self.loop.jobs, now)
        old = self.loop.cluster
        rebuilt = ClusterState(self.executor.nodes.cluster_spec())
        for node, gpus in enumerate(old.occupants):
            for gpu, occupants in enumerate(gpus):
                for job_id in occupants:
                    rebuilt.allocate(job_id, ((node, gpu),))
        self.loop.cluster = rebuilt
        alive = rebuilt.num_nodes - len(dead)
        self.store.log(None, "nodes", f"{alive} nodes alive, {len(dead)} gone")

    def _operator_commands(self, now: float) -> None:
        """Carry out `perfcast job ...` commands as decisions of this round. A suspended job
        stays so until `job resume` (`OperatorHolds`; the hold is recorded in the store with
        the command's outcome); the policy may undo the others (a migration, a resize) in a
        later round: they are one-off."""
        for command_id, job_id, kind, args in self.store.pending_commands():
            held = None  # a refused command leaves the hold as it was
            try:
                decision = self._command_decision(job_id, kind, args)
                ctx = self.loop.context(now)
                ctx.commit(decision)
                self.executor.apply(ctx.decisions, self.loop.jobs, now)
                outcome = f"done: {decision}"
                held = {"suspend": True, "resume": False}.get(kind)
            except (KeyError, ValueError, PerfcastError) as err:
                outcome = f"refused: {err}"
            self.store.finish_command(command_id, outcome, held=held)
            if held:
                self.holds.held.add(job_id)
            elif held is False:
                self.holds.held.discard(job_id)

    def _command_decision(self, job_id: str, kind: str, args: dict[str, Any]) -> Decision:
        state = self.loop.jobs[job_id]
        cluster = self.loop.cluster
        gpus = tuple(tuple(g) for g in args.get("gpus", ()))
        if kind == "suspend":
            return Suspend(job_id)
        if kind == "resume":
            slots = gpus or cluster.find_free(state.job.num_gpus)
            if not slots:
                raise ValueError(f"no {state.job.num_gpus} free GPUs to resume {job_id}")
            return Run(job_id, slots, state.batch_size)
        if kind == "migrate":
            if len(gpus) != state.num_gpus:
                raise ValueError(f"migrate {job_id}: give {state.num_gpus} GPUs, got {len(gpus)}")
            return Migrate(job_id, gpus)
        if kind == "resize":
            if not gpus:
                count = int(args["num_gpus"])
                kept = state.gpus[:count]
                extra = cluster.find_free(count - len(kept)) if count > len(kept) else ()
                if extra is None:
                    raise ValueError(f"no {count - len(kept)} free GPUs to grow {job_id}")
                gpus = kept + extra
            shards = self.store.job(job_id).spec.get("grad_shards")
            if shards:  # keeps the global batch: the run keeps its bits (shards.py)
                batch = int(args.get("batch_size") or state.batch_size)
                check_shards(shards, batch, len(gpus))
            else:  # keeps the per-worker batch
                per_worker = state.batch_size // state.num_gpus
                batch = int(args.get("batch_size") or per_worker * len(gpus))
            return Resize(job_id, gpus, batch)
        raise ValueError(f"unknown command {kind!r}")

    def unfinished(self) -> int:
        return sum(1 for r in self.store.jobs() if r.status not in ("done", "failed"))

    def run(
        self, timeout_s: float = 3600.0, on_round: Callable[[LiveRunner], None] | None = None
    ) -> RunSummary:
        """Run rounds until every submitted job is done or has failed."""
        deadline = time.monotonic() + timeout_s
        while self.unfinished():
            if time.monotonic() > deadline:
                raise TimeoutError(f"{self.unfinished()} jobs unfinished after {timeout_s}s")
            self.step()
            if on_round:
                on_round(self)
            time.sleep(self.round_s)
        return self.summary()

    def serve(self, stopping: threading.Event) -> None:
        """Run rounds until `stopping` is set, whatever the jobs: the scheduler service,
        which picks up every job `perfcast submit` adds to the store."""
        while not stopping.is_set():
            self.step()
            stopping.wait(self.round_s)

    def summary(self) -> RunSummary:
        records = self.store.jobs()
        jcts = sorted(
            r.finish_s - r.submit_time_s for r in records if r.status == "done" and r.finish_s
        )
        p99 = jcts[min(len(jcts) - 1, math.ceil(0.99 * len(jcts)) - 1)] if jcts else math.nan
        return RunSummary(
            jobs=len(records),
            finished=len(jcts),
            failed=sum(1 for r in records if r.status == "failed"),
            avg_jct_s=statistics.fmean(jcts) if jcts else math.nan,
            p99_jct_s=p99,
            makespan_s=max((r.finish_s or 0.0) for r in records) if jcts else math.nan,
        )
