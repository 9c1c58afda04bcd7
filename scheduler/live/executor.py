"""The scheduler core's `Executor` on a Ray cluster.

Ray gives the nodes and processes (`nodes`, `pool`); GPU accounting is the scheduler core's;
workers are pinned to their node and told which GPU index to use. Each job's workers form a
`WorkerGang`. How each decision is carried out, always at a mini-batch boundary:
- `Run`: start workers from the job's latest checkpoint (or from scratch), or resume the job's
  workers in place when it was suspended on those same GPUs. With `share="timeslice"` the jobs
  on those GPUs take turns (`TimeSlicer`).
- `Suspend`: workers stop at the next boundary and wait, state in memory (host memory on CUDA).
- `Migrate` / `Resize`: workers checkpoint and exit at the next boundary; new workers restore
  the checkpoint on the new GPUs, at the new size and batch.
`poll` reports progress and completions, and restarts a job whose worker died from its last
checkpoint (in place if its node is alive; otherwise it reports the job lost, and the runner
hands it back to the policy).
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

import ray
from ray.exceptions import GetTimeoutError, RayActorError, RayTaskError

from perfcast.scheduler.core.cluster import GpuSlot
from perfcast.scheduler.core.decisions import Decision, Migrate, Resize, Run, Suspend
from perfcast.scheduler.core.jobs import JobTable
from perfcast.scheduler.live.checkpoint import CheckpointError, CheckpointRef, latest_checkpoint
from perfcast.scheduler.live.gang import RPC_TIMEOUT_S, WorkerGang
from perfcast.scheduler.live.nodes import ExecutorError, NodeView, WorkersStarting
from perfcast.scheduler.live.pool import ORPHAN_ANSWER_S, OrphanWorkers, WorkerPool
from perfcast.scheduler.live.reports import Failed, Finished, Lost, Progress, Report
from perfcast.scheduler.live.reservations import GpuReservations
from perfcast.scheduler.live.restarts import RestartBackoff
from perfcast.scheduler.live.slicer import TimeSlicer
from perfcast.scheduler.live.spec import JobSpec
from perfcast.scheduler.live.store import JobStore
from perfcast.scheduler.live.worker import Assignment

_NAMESPACE_KEY = "ray_namespace"


def worker_namespace(store: JobStore) -> str:
    """The Ray namespace of this scheduler state's workers, chosen once and kept in the store,
    so a restarted scheduler finds its workers and never touches another scheduler's."""
    namespace = store.get_meta(_NAMESPACE_KEY)
    if namespace is None:
        namespace = f"perfcast-{uuid.uuid4().hex[:12]}"
        store.set_meta(_NAMESPACE_KEY, namespace)
    return namespace


class RayExecutor:
    def __init__(
        self,
        store: JobStore,
        checkpoint_dir: str | Path,
        *,
        slice_s: float = 0.2,
        spares_per_node: int = 0,
        idle_per_node: int | None = None,
        worker_threads: int = 1,
        handoff: bool = True,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.store = store
        self.clock = clock  # the run's clock, for finish times
        # a migration hands the state over through Ray's object store (False: through the
        # checkpoint file, e.g. where the object store is too small for it)
        self.handoff = handoff
        self.checkpoint_dir = Path(checkpoint_dir)
        self.namespace = worker_namespace(store)
        self.nodes = NodeView(store)
        self.reservations = GpuReservations(self.nodes, self.namespace)
        self.pool = WorkerPool(
            self.nodes, self.namespace, spares_per_node, worker_threads, idle_per_node
        )
        self.live: dict[str, WorkerGang] = {}
        self._reports: list[Report] = []  # found outside `poll`, returned by the next one
        self.restarts = RestartBackoff()  # failed jobs: failures in a row, backoffs
        self._corrupt_logged: set[str] = set()
        self.lock = threading.RLock()  # one decision, poll or time-slice switch at a time
        self.slicer = TimeSlicer(self.live, self.lock, slice_s)

    # ---- the core's Executor protocol ------------------------------------------------------
    def apply(self, decisions: Sequence[Decision], jobs: JobTable, now: float) -> None:
        self._start_workers_ahead(decisions)
        for decision in decisions:
            state = jobs[decision.job_id]
            if isinstance(decision, Run):
                self.run(decision.job_id, decision.gpus, decision.batch_size, decision.share)
            elif isinstance(decision, Suspend):
                self.suspend(decision.job_id)
            elif isinstance(decision, Migrate):
                self.relaunch(decision.job_id, decision.gpus, state.batch_size, "migrate")
            elif isinstance(decision, Resize):
                self.relaunch(decision.job_id, decision.gpus, decision.batch_size, "resize")
            self.store.update_job(decision.job_id, first_start_s=state.first_start_s)

    def _start_workers_ahead(self, decisions: Sequence[Decision]) -> None:
        """Start at once the worker processes of this round's new launches, as spares on
        their nodes: each launch below waits for its own workers in turn, and a process
        start takes seconds (minutes on a loaded host), so a round that launches several
        jobs would otherwise start their processes one job after the other."""
        needed: dict[int, int] = {}
        waiting = self.restarts.waiting()
        for decision in decisions:
            if isinstance(decision, Run) and decision.job_id not in self.live:
                if decision.job_id in waiting:  # restarts later, where its backoff says
                    continue
                for node, _ in decision.gpus:
                    needed[node] = needed.get(node, 0) + 1
        if sum(needed.values()) > 1:  # one launch alone gains nothing
            self.pool.start_ahead(needed)

    # ---- actions ---------------------------------------------------------------------------
    def run(self, job_id: str, gpus: tuple[GpuSlot, ...], batch: int, share: str) -> None:
        with self.lock:
            if self._reschedule_restart(job_id, gpus, batch):
                self.store.update_job(job_id, share=share)
                return
            gang = self.live.get(job_id)
            if gang and gang.suspended and gang.gpus == gpus and gang.global_batch == batch:
                self.reservations.reserve(job_id, gang.attempt, gpus)
                gang.resume()
                self.store.update_job(job_id, status="running", share=share)
                self.store.log(job_id, "resume")
            elif gang:
                self.relaunch(job_id, gpus, batch, "run elsewhere")
            else:
                self._launch(job_id, gpus, batch, self._restore_point(job_id))
            self.store.update_job(job_id, share=share)
            if share == "timeslice":  # take turns with the jobs already on those GPUs
                for other in list(self.live.values()):
                    if other.job_id != job_id and other.gpus == gpus and not other.suspended:
                        self.slicer.add(other.job_id, gpus)
                if not self.slicer.add(job_id, gpus):
                    self.store.log(job_id, "timeslice", "too late: the job had finished")

    def suspend(self, job_id: str) -> float:
        """Suspend at the next boundary; returns the latency (request to suspended), s."""
        with self.lock:
            if self.restarts.cancel(job_id):  # in its backoff: it just stays down
                self.store.update_job(job_id, status="suspended", gpus=())
                self.store.log(job_id, "suspend", "restart called off")
                return 0.0
            self.slicer.remove(job_id)
            gang = self._gang(job_id)
            start = time.perf_counter()
            if not gang.suspended and not gang.suspend():  # it finished first: `poll` says so
                self.store.log(job_id, "suspend", "too late: the job had finished")
                return time.perf_counter() - start
            self.reservations.release(job_id)  # its GPUs go to other jobs
            self.store.update_job(job_id, status="suspended")
            self.store.log(job_id, "suspend")
            return time.perf_counter() - start

    def resume(self, job_id: str) -> float:
        """Resume a suspended job on its GPUs; returns the latency of the call, s."""
        with self.lock:
            gang = self._gang(job_id)
            start = time.perf_counter()
            self.reservations.reserve(job_id, gang.attempt, gang.gpus)
            gang.resume()
            self.store.update_job(job_id, status="running", gpus=gang.gpus)
            self.store.log(job_id, "resume")
            return time.perf_counter() - start

    def relaunch(self, job_id: str, gpus: tuple[GpuSlot, ...], batch: int, why: str) -> float:
        """Checkpoint at the next boundary and continue on `gpus` at global `batch` (migrate,
        resize). Returns the latency from the request to the new workers' start, s. When the
        new GPUs are not the old ones, the new workers start at once and build their model
        while the old ones reach the boundary and checkpoint (Gandiva-style migration)."""
        with self.lock:
            if self._reschedule_restart(job_id, gpus, batch):
                return 0.0
            self.slicer.remove(job_id)
            start = time.perf_counter()
            gang = self._gang(job_id)
            ahead, handed = None, None
            if not set(gpus) & set(gang.gpus):
                gang.call("request_exit", why, handoff=self.handoff)
                ahead = self._launch(job_id, gpus, batch, None, pending=True)
                # the state in memory, through the object store; once every new worker has
                # fetched it, the old rank 0 writes the durable checkpoint
                handed = ray.get(gang.workers[0].handoff.remote(), timeout=RPC_TIMEOUT_S)
                if handed:
                    try:
                        ahead.call("hand_over", None, state=handed)
                    finally:
                        gang.workers[0].handoff_taken.remote()
            try:
                outcomes = self._stop(gang, why)
            except ExecutorError as err:
                if not handed:
                    if ahead:
                        self._call_off(ahead)
                    raise
                # the new workers already run from the state handed over: only the durable
                # checkpoint of this boundary is missing
                self.store.log(job_id, "failure", f"checkpoint at the move: {err}")
                outcomes = [{"status": "exited"}]
            if outcomes[0]["status"] == "finished":  # it finished first: nothing to move
                if ahead:
                    self._call_off(ahead)
                self._reports.append(self._record_finished(gang, outcomes[0]))
                return time.perf_counter() - start
            ckpt = outcomes[0].get("last_checkpoint")
            ref = CheckpointRef(**ckpt) if ckpt else self._restore_point(job_id)
            if ref is not None:
                self.store.record_checkpoint(job_id, ref)
            if ahead:
                if not handed:
                    ahead.call("hand_over", asdict(ref) if ref else None)
                self._log_launch(ahead, ref, "state handed over in memory" if handed else "")
            else:
                self._launch(job_id, gpus, batch, ref)
            self.store.log(job_id, why, f"to {list(gpus)} batch {batch}")
            return time.perf_counter() - start

    def stop(self, job_id: str, why: str = "stopped") -> dict[str, Any]:
        """Checkpoint at the next boundary and end the job's workers; a later `Run` continues
        from that checkpoint. Returns rank 0's outcome."""
        with self.lock:
            self.slicer.remove(job_id)
            outcome = self._stop(self._gang(job_id), why)[0]
            self.reservations.release(job_id)
            if outcome.get("last_checkpoint"):
                self.store.record_checkpoint(job_id, CheckpointRef(**outcome["last_checkpoint"]))
            self.store.update_job(job_id, status="suspended", workers=())
            self.store.log(job_id, "stop", why)
            return outcome

    def status(self, job_id: str) -> dict[str, Any]:
        gang = self._gang(job_id)
        return ray.get(gang.workers[0].status.remote(), timeout=RPC_TIMEOUT_S)

    def wait_until(self, job_id: str, iteration: int, timeout_s: float = 120.0) -> dict[str, Any]:
        """Block until the job has reached `iteration` (or ended); its rank 0 status."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            status = self.status(job_id)
            if status["iteration"] >= iteration or not status["busy"]:
                return status
            time.sleep(0.005)
        raise ExecutorError(f"job {job_id} did not reach iteration {iteration} in {timeout_s}s")

    # ---- monitoring ------------------------------------------------------------------------
    def poll(self) -> list[Report]:
        """Progress of every live job, completions, and restarts of jobs whose worker died."""
        with self.lock:
            reports: list[Report | None] = list(self._reports)
            self._reports.clear()
            self.pool.top_up()
            for job_id, restart in self.restarts.due():
                nodes = {node for node, _ in restart.gpus}
                try:
                    if self.nodes.all_alive(nodes):
                        ref = self._restore_point(job_id)
                        self._launch(job_id, restart.gpus, restart.global_batch, ref)
                        continue
                except ExecutorError:
                    if self.nodes.all_alive(nodes):
                        raise  # not a lost node: the round fails, and is reconciled
                # its node left while it waited (or while it launched): placed again
                self.store.update_job(job_id, status="suspended", gpus=(), workers=())
                self.store.log(job_id, "restart", "called off: its node left the cluster")
                reports.append(Lost(job_id))
            for gang in list(self.live.values()):
                ready, _ = ray.wait(gang.joins, num_returns=len(gang.joins), timeout=0)
                outcomes, failure, died = [], None, False
                for ref in ready:
                    try:
                        outcomes.append(ray.get(ref))
                    except (RayActorError, RayTaskError) as err:
                        failure, died = f"worker died: {type(err).__name__}", True
                failure = failure or next(
                    (o["reason"] for o in outcomes if o and o["status"] == "failed"), None
                )
                if failure:
                    # every rank's loop returned and no process died: on CPU the processes are
                    # sound and go back to the pool (a CUDA error can leave a context unusable)
                    reusable = not died and len(outcomes) == len(gang.joins)
                    reports.append(
                        self._recover_failed(gang, failure, reusable and gang.spec.device == "cpu")
                    )
                    continue
                if len(outcomes) == len(gang.joins) and outcomes[0]["status"] == "finished":
                    reports.append(self._finish(gang, outcomes[0]))
                    continue
                reports.append(self._progress(gang))
        return [r for r in reports if r is not None]

    def _progress(self, gang: WorkerGang) -> Progress | None:
        try:
            s = ray.get(gang.workers[0].status.remote(), timeout=10)
        except (RayActorError, GetTimeoutError):
            return None  # the next poll sees the failure through `join`
        if s.get("last_checkpoint"):
            self.store.record_checkpoint(gang.job_id, CheckpointRef(**s["last_checkpoint"]))
        self.store.update_job(
            gang.job_id,
            samples_done=s.get("samples_done", 0),
            iteration=s.get("iteration", 0),
            last_step_time_s=s.get("last_step_time_s"),
            mean_step_time_s=s.get("mean_step_time_s"),
            metrics=s.get("metrics"),
        )
        return Progress(
            gang.job_id,
            s.get("samples_done", 0),
            s.get("iteration", 0),
            s.get("last_step_time_s"),
            s.get("mean_step_time_s"),
        )

    def _finish(self, gang: WorkerGang, outcome: dict[str, Any]) -> Finished:
        # recorded before the workers go: a scheduler killed in between finds the job done,
        # not a running job without workers that it would run again
        finished = self._record_finished(gang, outcome)
        self.slicer.remove(gang.job_id)
        self.live.pop(gang.job_id)
        self.pool.give_back(gang)
        return finished

    def _record_finished(self, gang: WorkerGang, outcome: dict[str, Any]) -> Finished:
        """Record that `gang`'s attempt finished the job; the record keeps that attempt (a move
        launched ahead of it, then called off because it finished first, had counted one)."""
        self.reservations.release(gang.job_id)
        if outcome.get("last_checkpoint"):
            self.store.record_checkpoint(gang.job_id, CheckpointRef(**outcome["last_checkpoint"]))
        ended = outcome.get("ended_unix")  # when the loop ended: maybe while no scheduler ran
        finish_s = self.clock() - max(time.time() - ended, 0.0) if ended else self.clock()
        self.store.update_job(
            gang.job_id,
            status="done",
            finish_s=finish_s,  # in the same transaction: a crash cannot split them
            gpus=(),
            workers=(),
            attempt=gang.attempt,
            samples_done=outcome["samples_done"],
            iteration=outcome["iteration"],
            mean_step_time_s=outcome.get("mean_step_time_s"),
            metrics=outcome.get("metrics"),
            event=("finished", f"iteration {outcome['iteration']}"),  # a kill cannot split them
        )
        return Finished(
            gang.job_id,
            outcome["samples_done"],
            outcome["iteration"],
            outcome.get("restored_unix"),
            outcome.get("ended_unix"),
        )

    def _recover_failed(self, gang: WorkerGang, why: str, reusable: bool) -> Report | None:
        """End what is left of the attempt (its workers go back to the pool when `reusable`,
        else they are killed) and restart it from its last checkpoint after a
        backoff that doubles with each failure in a row: on the same GPUs if their nodes are
        alive, else report it lost so the policy places it again. More failures in a row than
        the spec's `max_restarts` (no newer checkpoint in between): the job has failed."""
        job_id, error = gang.job_id, why[-2000:]
        self.store.log(job_id, "failure", why[-500:])
        self.slicer.remove(job_id)
        self.live.pop(job_id)
        self.reservations.release(job_id)  # reserved again when it restarts
        if reusable:
            self.pool.give_back(gang)
        else:
            gang.kill()
        ref = self._restore_point(job_id)
        at = ref.iteration if ref else None
        count = self.restarts.failure(job_id, at)
        if count > gang.spec.max_restarts:
            self.store.update_job(
                job_id, status="failed", error=error, gpus=(), workers=(), finish_s=self.clock()
            )
            self.store.log(job_id, "failed", f"{count} failures in a row; last: {why[-300:]}")
            return Failed(job_id, error)
        if not self.nodes.all_alive({node for node, _ in gang.gpus}):
            self.store.update_job(job_id, status="suspended", gpus=(), workers=(), error=error)
            return Lost(job_id)
        delay = gang.spec.restart_backoff_s * 2 ** (count - 1)
        self.restarts.schedule(job_id, delay, gang.gpus, gang.global_batch)
        self.store.update_job(job_id, status="restarting", workers=(), error=error)
        where = f"iteration {at}" if ref else "scratch"
        self.store.log(job_id, "restart", f"failure {count} in a row; from {where} in {delay:g} s")
        return None

    def placements(self) -> dict[str, tuple[tuple[GpuSlot, ...], int]]:
        """Each job this executor runs, or will restart after its backoff: its GPUs and global
        batch. A job paused for its time slice runs; a suspended one does not."""
        with self.lock:
            sliced = {job for group in self.slicer.groups.values() for job in group}
            out = {
                job_id: (gang.gpus, gang.global_batch)
                for job_id, gang in self.live.items()
                if not gang.suspended or job_id in sliced
            }
            for job_id, restart in self.restarts.waiting().items():
                out[job_id] = (restart.gpus, restart.global_batch)
            return out

    def node_lost(self, job_id: str) -> None:
        """A node the job runs on has left the cluster: end what is left of its workers (and
        any restart it waits for) and give back its GPUs. The job is suspended: the policy
        places it again, and it restarts from its newest checkpoint."""
        with self.lock:
            self.restarts.cancel(job_id)
            self.slicer.remove(job_id)
            gang = self.live.pop(job_id, None)
            if gang:
                gang.kill()
            self.reservations.release(job_id)
            ref = self._restore_point(job_id)
            where = f"iteration {ref.iteration}" if ref else "scratch"
            self.store.update_job(
                job_id,
                status="suspended",
                gpus=(),
                workers=(),
                event=("node lost", f"its node left the cluster; it restarts from {where}"),
            )

    def _reschedule_restart(self, job_id: str, gpus: tuple[GpuSlot, ...], batch: int) -> bool:
        """A decision for a job in its restart backoff: it will restart on `gpus` at `batch`
        instead. False if the job is not waiting to restart."""
        if not self.restarts.redirect(job_id, gpus, batch):
            return False
        self.store.update_job(job_id, gpus=gpus, batch_size=batch)
        return True

    # ---- recovery after a scheduler restart ------------------------------------------------
    def reattach(self, job_id: str) -> bool:
        """Take over the workers a previous scheduler process started for `job_id`, if they
        are all alive and still running that attempt. False: they are gone (any survivor is
        killed) and the job must be started again from its checkpoint."""
        record = self.store.job(job_id)
        workers = []
        try:
            for name in record.workers:
                workers.append(self.pool.find(name))
            statuses = ray.get([w.status.remote() for w in workers], timeout=30)
        except (ValueError, RayActorError, GetTimeoutError):
            statuses = []
        # a worker kept idle after its loop left on a request (migrate, resize, stop) still
        # names the attempt: the scheduler died before recording the workers that followed
        left = [s for s in statuses if not s["busy"] and s["exit_reason"] not in (None, "finished")]
        same = (
            bool(workers)
            and not left
            and all(s["job_id"] == job_id and s["attempt"] == record.attempt for s in statuses)
        )
        if len(statuses) != len(record.workers) or not same:
            for w in workers:
                ray.kill(w, no_restart=True)
            return False
        spec = JobSpec.model_validate(record.spec)
        gang = WorkerGang(
            job_id,
            spec,
            record.gpus,
            record.batch_size or spec.batch_size,
            record.attempt,
            workers,
            list(record.workers),
            # the workers say: a job paused for its time slice is "running" in the store
            suspended=any(s["suspended"] for s in statuses),
        )
        gang.joins = gang.send("join")
        with self.lock:
            self.live[job_id] = gang
            self.reservations.adopt(job_id, record.attempt)
        self.store.log(job_id, "reattach", f"attempt {record.attempt}")
        return True

    def reclaim_orphans(self) -> OrphanWorkers:
        """Deal with this scheduler's workers that no job in the store refers to (left by a
        crash): the idle ones become spares of their node, the others are killed
        (`WorkerPool.reclaim_orphans`); one "orphan workers" event names those adopted and counts
        those killed. Remove its placement groups of attempts no job runs."""
        records = [r for r in self.store.jobs() if r.workers]
        adoptable = [self.reservations.name(r.job_id, r.attempt) for r in records]
        self.reservations.remove_orphans(adoptable)
        orphans = self.pool.reclaim_orphans(name for r in records for name in r.workers)
        if orphans.adopted or orphans.killed:
            adopted = f": {' '.join(orphans.adopted)}" if orphans.adopted else ""
            # why some were killed, each reason with the workers it names
            reasons = (
                (f"gave no answer in {ORPHAN_ANSWER_S:g} s", orphans.silent),
                ("running an attempt no job records", orphans.busy),
            )
            why = "".join(
                f" ({len(names)} {reason}: {' '.join(names)})" for reason, names in reasons if names
            )
            self.store.log(
                None,
                "orphan workers",
                f"{len(orphans.adopted)} idle adopted as spares{adopted}; "
                f"{len(orphans.killed)} killed{why}",
            )
        return orphans

    def warm_spares(self, timeout_s: float = RPC_TIMEOUT_S) -> None:
        """Start the spare workers and wait until they are up, so the next launches skip
        process start-up and imports."""
        with self.lock:
            self.pool.warm(timeout_s)

    def rejoin_timeslices(self, job_ids: Sequence[str]) -> None:
        """After reattaching the running jobs `job_ids`: put those time-sliced on the same GPUs
        back into turn-taking, the one running first, and resume any still paused for a slice
        whose partners are gone, so that none stays paused forever."""
        with self.lock:
            records = [self.store.job(j) for j in job_ids if j in self.live]
            sliced_gpus = {r.gpus for r in records if r.share == "timeslice"}
            for gpus in sliced_gpus:  # the host job of a group runs "exclusive": by GPUs
                members = [r.job_id for r in records if r.gpus == gpus]
                if len(members) > 1:
                    for job_id in sorted(members, key=lambda j: self.live[j].suspended):
                        self.slicer.add(job_id, gpus)
            sliced = {j for group in self.slicer.groups.values() for j in group}
            for record in records:
                gang = self.live[record.job_id]
                if gang.suspended and record.job_id not in sliced:
                    gang.resume()
                    self.store.log(record.job_id, "resume", "its time-slice partners are gone")

    def shutdown(self) -> None:
        """Stop every worker this executor holds (jobs stay recorded in the store)."""
        self.slicer.stop()
        with self.lock:
            for gang in self.live.values():
                gang.kill()
            self.live.clear()
            self.reservations.release_all()
            self.pool.shutdown()

    # ---- internals -------------------------------------------------------------------------
    def _gang(self, job_id: str) -> WorkerGang:
        if job_id not in self.live:
            raise ExecutorError(f"job {job_id} has no workers on the cluster")
        return self.live[job_id]

    def _restore_point(self, job_id: str) -> CheckpointRef | None:
        """The newest checkpoint that verifies; each corrupt one skipped is logged."""

        def log(err: CheckpointError) -> None:
            if str(err) not in self._corrupt_logged:  # once: every restore attempt skips it
                self._corrupt_logged.add(str(err))
                self.store.log(job_id, "corrupt checkpoint", str(err))

        return latest_checkpoint(self.checkpoint_dir, job_id, on_corrupt=log)

    def _launch(
        self,
        job_id: str,
        gpus: tuple[GpuSlot, ...],
        batch: int,
        ref: CheckpointRef | None,
        pending: bool = False,
    ) -> WorkerGang:
        """Start the job's workers on `gpus` from `ref`; with `pending`, they build their
        model and wait for `hand_over` to say what to restore."""
        record = self.store.job(job_id)
        spec = JobSpec.model_validate(record.spec)
        if not gpus:
            raise ExecutorError(f"job {job_id}: a run needs at least one GPU")
        if batch % len(gpus):
            raise ExecutorError(f"job {job_id}: batch {batch} not divisible by {len(gpus)} GPUs")
        attempt = record.attempt + 1
        self.reservations.reserve(job_id, attempt, gpus)  # Ray sees the demand
        pairs = [self.pool.take(node) for node, _ in gpus]
        workers, names = [w for w, _ in pairs], [n for _, n in pairs]
        gang = WorkerGang(job_id, spec, gpus, batch, attempt, workers, names)
        try:
            ray.get([w.info.remote() for w in workers], timeout=RPC_TIMEOUT_S)
        except GetTimeoutError:
            # still starting (a loaded host starts a process in minutes), not broken, and told
            # nothing yet: the next launches take them as spares, the furthest along, instead
            # of starting more processes beside them that would slow them down further
            self.reservations.release(job_id)
            self.pool.keep_starting(gang)
            raise WorkersStarting(
                f"job {job_id}: workers {names} not up after {RPC_TIMEOUT_S:g} s"
            ) from None
        try:
            self._start(gang, ref, pending)
        except Exception:
            # a worker may still carry the start out later: none may live on to run the job
            # beside the attempt the next round launches
            gang.kill()
            self.reservations.release(job_id)
            raise
        gang.joins = gang.send("join")
        self.live[job_id] = gang
        self.store.update_job(
            job_id, status="running", gpus=gpus, batch_size=batch, workers=names, attempt=attempt
        )
        if not pending:  # else logged at the hand-over, once the checkpoint is known
            self._log_launch(gang, ref)
        return gang

    def _start(self, gang: WorkerGang, ref: CheckpointRef | None, pending: bool) -> None:
        """Give each of the gang's workers (their processes up) its rank's assignment."""
        addr, port = ("", 0)
        if len(gang.workers) > 1:
            addr, port = ray.get(gang.workers[0].rendezvous.remote(), timeout=RPC_TIMEOUT_S)
        assignments = [
            Assignment(
                job_id=gang.job_id,
                attempt=gang.attempt,
                spec=gang.spec.model_dump(),
                rank=rank,
                world_size=len(gang.gpus),
                global_batch=gang.global_batch,
                master_addr=addr,
                master_port=port,
                gpu_index=gpu,
                checkpoint_dir=str(self.checkpoint_dir),
                restore_from=asdict(ref) if ref else None,
                restore_pending=pending,
            )
            for rank, (_, gpu) in enumerate(gang.gpus)
        ]
        starts = [w.start.remote(a) for w, a in zip(gang.workers, assignments, strict=True)]
        ray.get(starts, timeout=RPC_TIMEOUT_S)

    def _log_launch(self, gang: WorkerGang, ref: CheckpointRef | None, how: str = "") -> None:
        where = f"from iteration {ref.iteration}" if ref else "from scratch"
        detail = f"attempt {gang.attempt} on {list(gang.gpus)} {where}" + (
            f" ({how})" if how else ""
        )
        self.store.log(gang.job_id, "launch", detail)

    def _call_off(self, ahead: WorkerGang) -> None:
        """End the workers started ahead of a move that is not happening (the old workers
        finished or failed first); they have loaded nothing."""
        ahead.call("hand_over", None, cancel=True)
        ray.get(ahead.joins, timeout=RPC_TIMEOUT_S)
        if self.live.get(ahead.job_id) is ahead:
            self.live.pop(ahead.job_id)
        self.pool.give_back(ahead)

    def _stop(self, gang: WorkerGang, why: str) -> list[dict[str, Any]]:
        """Make the workers checkpoint and leave their loop; their outcomes, rank order."""
        outcomes = gang.stop(why)
        if self.live.get(gang.job_id) is gang:  # not when new workers were started ahead
            self.live.pop(gang.job_id)
        self.pool.give_back(gang)
        failed = [o for o in outcomes if o["status"] == "failed"]
        if failed:
            raise ExecutorError(f"job {gang.job_id} failed while stopping: {failed[0]['reason']}")
        return outcomes
