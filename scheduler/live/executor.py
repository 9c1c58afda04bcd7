"""The scheduler core's `Executor` on a Ray cluster.

Ray gives the nodes and processes: core node `i` is the i-th alive Ray node with GPU resources
(sorted by node id), with as many GPUs as its Ray `GPU` resource says (logical GPUs on a
machine without any, where jobs run on CPU). GPU accounting is the scheduler core's; workers
are pinned to their node and told which GPU index to use.

How each decision is carried out, always at a mini-batch boundary:
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
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import ray
from ray.exceptions import GetTimeoutError, RayActorError, RayTaskError
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from perfcast.errors import PerfcastError
from perfcast.scheduler.core.cluster import ClusterSpec, GpuSlot, NodeGroup
from perfcast.scheduler.core.decisions import Decision, Migrate, Resize, Run, Suspend
from perfcast.scheduler.core.jobs import JobTable
from perfcast.scheduler.live.checkpoint import CheckpointRef, latest_checkpoint
from perfcast.scheduler.live.spec import JobSpec
from perfcast.scheduler.live.store import JobStore
from perfcast.scheduler.live.worker import Assignment, TrainingWorker

NAMESPACE = "perfcast"
_RPC_TIMEOUT_S = 120.0


class ExecutorError(PerfcastError):
    """The Ray cluster cannot carry out a decision (no such node, job unknown)."""


@dataclass
class _LiveJob:
    """A job's current workers (rank order) and what they run."""

    job_id: str
    spec: JobSpec
    gpus: tuple[GpuSlot, ...]
    global_batch: int
    attempt: int
    workers: list[Any]  # ActorHandle, rank order
    names: list[str]
    joins: list[Any] = field(default_factory=list)  # ObjectRefs of `join`
    suspended: bool = False


@dataclass(frozen=True)
class Progress:
    job_id: str
    samples_done: int
    iteration: int
    last_step_time_s: float | None
    mean_step_time_s: float | None


@dataclass(frozen=True)
class Finished:
    job_id: str
    samples_done: int
    iteration: int
    restored_unix: float | None = None  # this attempt's start of training (rank 0)
    ended_unix: float | None = None


@dataclass(frozen=True)
class Lost:
    """A job whose workers died with their node: it needs GPUs elsewhere."""

    job_id: str


Report = Progress | Finished | Lost


def gpu_nodes() -> list[dict[str, Any]]:
    """Alive Ray nodes with GPU resources, in the order that gives core node indices."""
    nodes = [n for n in ray.nodes() if n["Alive"] and n["Resources"].get("GPU", 0) >= 1]
    return sorted(nodes, key=lambda n: n["NodeID"])


def cluster_spec_from_ray() -> ClusterSpec:
    """The Ray cluster as a core `ClusterSpec`: one group per node, in core node order."""
    groups = []
    for node in gpu_nodes():
        types = [k.split(":", 1)[1] for k in node["Resources"] if k.startswith("accelerator_type:")]
        gpu_type = types[0].lower() if types else "logical"
        groups.append(NodeGroup(1, int(node["Resources"]["GPU"]), gpu_type))
    if not groups:
        raise ExecutorError("the Ray cluster has no node with GPU resources (num_gpus)")
    return ClusterSpec(tuple(groups))


class RayExecutor:
    def __init__(
        self,
        store: JobStore,
        checkpoint_dir: str | Path,
        *,
        slice_s: float = 0.2,
        spares_per_node: int = 0,
        worker_threads: int = 1,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.store = store
        self.clock = clock  # the run's clock, for finish times
        self.checkpoint_dir = Path(checkpoint_dir)
        self.node_ids = [n["NodeID"] for n in gpu_nodes()]
        self.live: dict[str, _LiveJob] = {}
        self._reports: list[Report] = []  # found outside `poll`, returned by the next one
        self.spares_per_node = spares_per_node
        self.worker_threads = worker_threads
        self._spares: dict[str, list[tuple[Any, str]]] = {n: [] for n in self.node_ids}
        self._lock = threading.RLock()
        self.slicer = TimeSlicer(self, slice_s)

    # ---- the core's Executor protocol ------------------------------------------------------
    def apply(self, decisions: Sequence[Decision], jobs: JobTable, now: float) -> None:
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

    # ---- actions ---------------------------------------------------------------------------
    def run(self, job_id: str, gpus: tuple[GpuSlot, ...], batch: int, share: str) -> None:
        with self._lock:
            live = self.live.get(job_id)
            if live and live.suspended and live.gpus == gpus and live.global_batch == batch:
                ray.get([w.resume.remote() for w in live.workers], timeout=_RPC_TIMEOUT_S)
                live.suspended = False
                self.store.update_job(job_id, status="running", share=share)
                self.store.log(job_id, "resume")
            elif live:
                self.relaunch(job_id, gpus, batch, "run elsewhere")
            else:
                self._launch(job_id, gpus, batch, self._restore_point(job_id))
            self.store.update_job(job_id, share=share)
            if share == "timeslice":  # take turns with the jobs already on those GPUs
                for other in list(self.live.values()):
                    if other.job_id != job_id and other.gpus == gpus and not other.suspended:
                        self.slicer.add(other.job_id, gpus)
                self.slicer.add(job_id, gpus)

    def suspend(self, job_id: str) -> float:
        """Suspend at the next boundary; returns the latency (request to suspended), s."""
        with self._lock:
            self.slicer.remove(job_id)
            live = self._live(job_id)
            start = time.perf_counter()
            if not live.suspended:
                try:
                    self._suspend_workers(live)
                except ExecutorError:  # it finished first: `poll` reports it
                    self.store.log(job_id, "suspend", "too late: the job had finished")
                    return time.perf_counter() - start
            self.store.update_job(job_id, status="suspended")
            self.store.log(job_id, "suspend")
            return time.perf_counter() - start

    def resume(self, job_id: str) -> float:
        """Resume a suspended job on its GPUs; returns the latency of the call, s."""
        with self._lock:
            live = self._live(job_id)
            start = time.perf_counter()
            self._resume_workers(live)
            self.store.update_job(job_id, status="running", gpus=live.gpus)
            self.store.log(job_id, "resume")
            return time.perf_counter() - start

    def relaunch(self, job_id: str, gpus: tuple[GpuSlot, ...], batch: int, why: str) -> float:
        """Checkpoint at the next boundary and continue on `gpus` at global `batch` (migrate,
        resize). Returns the latency from the request to the new workers' start, s. When the
        new GPUs are not the old ones, the new workers start at once and build their model
        while the old ones reach the boundary and checkpoint (Gandiva-style migration)."""
        with self._lock:
            self.slicer.remove(job_id)
            start = time.perf_counter()
            live = self._live(job_id)
            ahead = None
            if not set(gpus) & set(live.gpus):
                ray.get([w.request_exit.remote(why) for w in live.workers], timeout=_RPC_TIMEOUT_S)
                ahead = self._launch(job_id, gpus, batch, None, pending=True)
            try:
                outcomes = self._stop_workers(live, why)
            except ExecutorError:
                if ahead:
                    self._call_off(ahead)
                raise
            if outcomes[0]["status"] == "finished":  # it finished first: nothing to move
                if ahead:
                    self._call_off(ahead)
                self._reports.append(self._record_finished(live, outcomes[0]))
                return time.perf_counter() - start
            ckpt = outcomes[0].get("last_checkpoint")
            ref = CheckpointRef(**ckpt) if ckpt else self._restore_point(job_id)
            if ref is not None:
                self.store.record_checkpoint(job_id, ref)
            if ahead:
                handed = asdict(ref) if ref else None
                ray.get([w.hand_over.remote(handed) for w in ahead.workers], timeout=_RPC_TIMEOUT_S)
                self._log_launch(ahead, ref)
            else:
                self._launch(job_id, gpus, batch, ref)
            self.store.log(job_id, why, f"to {list(gpus)} batch {batch}")
            return time.perf_counter() - start

    def _call_off(self, ahead: _LiveJob) -> None:
        """End the workers started ahead of a move that is not happening (the old workers
        finished or failed first); they have loaded nothing."""
        refs = [w.hand_over.remote(None, cancel=True) for w in ahead.workers]
        ray.get(refs, timeout=_RPC_TIMEOUT_S)
        ray.get(ahead.joins, timeout=_RPC_TIMEOUT_S)
        if self.live.get(ahead.job_id) is ahead:
            self.live.pop(ahead.job_id)
        self._release_workers(ahead)

    def stop(self, job_id: str, why: str = "stopped") -> dict[str, Any]:
        """Checkpoint at the next boundary and end the job's workers; a later `Run` continues
        from that checkpoint. Returns rank 0's outcome."""
        with self._lock:
            self.slicer.remove(job_id)
            outcome = self._stop_workers(self._live(job_id), why)[0]
            if outcome.get("last_checkpoint"):
                self.store.record_checkpoint(job_id, CheckpointRef(**outcome["last_checkpoint"]))
            self.store.update_job(job_id, status="suspended", workers=())
            self.store.log(job_id, "stop", why)
            return outcome

    def status(self, job_id: str) -> dict[str, Any]:
        live = self._live(job_id)
        return ray.get(live.workers[0].status.remote(), timeout=_RPC_TIMEOUT_S)

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
        with self._lock:
            reports: list[Report | None] = list(self._reports)
            self._reports.clear()
            self._top_up_spares()
            for live in list(self.live.values()):
                ready, _ = ray.wait(live.joins, num_returns=len(live.joins), timeout=0)
                outcomes, failure = [], None
                for ref in ready:
                    try:
                        outcomes.append(ray.get(ref))
                    except (RayActorError, RayTaskError) as err:
                        failure = f"worker died: {type(err).__name__}"
                failure = failure or next(
                    (o["reason"] for o in outcomes if o and o["status"] == "failed"), None
                )
                if failure:
                    reports.append(self._recover_failed(live, failure))
                    continue
                if len(outcomes) == len(live.joins) and outcomes[0]["status"] == "finished":
                    reports.append(self._finish(live, outcomes[0]))
                    continue
                reports.append(self._progress(live))
        return [r for r in reports if r is not None]

    def _progress(self, live: _LiveJob) -> Progress | None:
        try:
            s = ray.get(live.workers[0].status.remote(), timeout=10)
        except (RayActorError, GetTimeoutError):
            return None  # the next poll sees the failure through `join`
        if s.get("last_checkpoint"):
            self.store.record_checkpoint(live.job_id, CheckpointRef(**s["last_checkpoint"]))
        self.store.update_job(
            live.job_id,
            samples_done=s.get("samples_done", 0),
            iteration=s.get("iteration", 0),
            last_step_time_s=s.get("last_step_time_s"),
            mean_step_time_s=s.get("mean_step_time_s"),
        )
        return Progress(
            live.job_id,
            s.get("samples_done", 0),
            s.get("iteration", 0),
            s.get("last_step_time_s"),
            s.get("mean_step_time_s"),
        )

    def _finish(self, live: _LiveJob, outcome: dict[str, Any]) -> Finished:
        self.slicer.remove(live.job_id)
        self.live.pop(live.job_id)
        self._release_workers(live)
        return self._record_finished(live, outcome)

    def _record_finished(self, live: _LiveJob, outcome: dict[str, Any]) -> Finished:
        if outcome.get("last_checkpoint"):
            self.store.record_checkpoint(live.job_id, CheckpointRef(**outcome["last_checkpoint"]))
        self.store.update_job(
            live.job_id,
            status="done",
            finish_s=self.clock(),  # in the same transaction: a crash cannot split them
            gpus=(),
            workers=(),
            samples_done=outcome["samples_done"],
            iteration=outcome["iteration"],
            mean_step_time_s=outcome.get("mean_step_time_s"),
        )
        self.store.log(live.job_id, "finished", f"iteration {outcome['iteration']}")
        return Finished(
            live.job_id,
            outcome["samples_done"],
            outcome["iteration"],
            outcome.get("restored_unix"),
            outcome.get("ended_unix"),
        )

    def _recover_failed(self, live: _LiveJob, why: str) -> Report | None:
        """Kill what is left of the attempt and restart it from its last checkpoint: on the same
        GPUs if their nodes are alive, else report it lost so the policy places it again."""
        self.store.log(live.job_id, "failure", why[-500:])
        self.slicer.remove(live.job_id)
        self.live.pop(live.job_id)
        for worker in live.workers:
            ray.kill(worker, no_restart=True)
        alive = {n["NodeID"] for n in gpu_nodes()}
        if all(self.node_ids[node] in alive for node, _ in live.gpus):
            ref = self._restore_point(live.job_id)
            self._launch(live.job_id, live.gpus, live.global_batch, ref)
            return None
        self.store.update_job(live.job_id, status="suspended", gpus=(), workers=())
        return Lost(live.job_id)

    # ---- recovery after a scheduler restart ------------------------------------------------
    def reattach(self, job_id: str) -> bool:
        """Take over the workers a previous scheduler process started for `job_id`, if they
        are all alive and still running that attempt. False: they are gone (any survivor is
        killed) and the job must be started again from its checkpoint."""
        record = self.store.job(job_id)
        workers = []
        try:
            for name in record.workers:
                workers.append(ray.get_actor(name, namespace=NAMESPACE))
            statuses = ray.get([w.status.remote() for w in workers], timeout=30)
        except (ValueError, RayActorError, GetTimeoutError):
            statuses = []
        same = bool(workers) and all(
            s["job_id"] == job_id and s["attempt"] == record.attempt for s in statuses
        )
        if len(statuses) != len(record.workers) or not same:
            for w in workers:
                ray.kill(w, no_restart=True)
            return False
        live = _LiveJob(
            job_id,
            JobSpec.model_validate(record.spec),
            record.gpus,
            record.batch_size or JobSpec.model_validate(record.spec).batch_size,
            record.attempt,
            workers,
            list(record.workers),
            [w.join.remote() for w in workers],
            suspended=record.status == "suspended",
        )
        with self._lock:
            self.live[job_id] = live
        self.store.log(job_id, "reattach", f"attempt {record.attempt}")
        return True

    def kill_orphans(self) -> int:
        """Kill perfcast workers that no job in the store refers to (left by a crash)."""
        known = {name for r in self.store.jobs() for name in r.workers}
        known |= {name for spares in self._spares.values() for _, name in spares}
        orphans = [
            a["name"]
            for a in ray.util.list_named_actors(all_namespaces=True)
            if a["namespace"] == NAMESPACE and a["name"] not in known
        ]
        for name in orphans:
            try:
                ray.kill(ray.get_actor(name, namespace=NAMESPACE), no_restart=True)
            except ValueError:
                continue
        return len(orphans)

    def shutdown(self) -> None:
        """Stop every worker this executor holds (jobs stay recorded in the store)."""
        self.slicer.stop()
        with self._lock:
            for live in self.live.values():
                for worker in live.workers:
                    ray.kill(worker, no_restart=True)
            self.live.clear()
            for spares in self._spares.values():
                for worker, _ in spares:
                    ray.kill(worker, no_restart=True)
                spares.clear()

    # ---- internals -------------------------------------------------------------------------
    def _live(self, job_id: str) -> _LiveJob:
        if job_id not in self.live:
            raise ExecutorError(f"job {job_id} has no workers on the cluster")
        return self.live[job_id]

    def _restore_point(self, job_id: str) -> CheckpointRef | None:
        return latest_checkpoint(self.checkpoint_dir, job_id)

    def _worker_on(self, node: int) -> tuple[Any, str]:
        """A worker on core node `node`: a warm spare if there is one, else a new one. Spares
        used up are replaced by `poll`, off the critical path of the launch (a new worker
        process competes for the node's CPUs while it starts)."""
        if node >= len(self.node_ids):
            raise ExecutorError(f"no node {node}: the Ray cluster has {len(self.node_ids)}")
        spares = self._spares[self.node_ids[node]]
        return spares.pop(0) if spares else self._new_worker(node)

    def _top_up_spares(self) -> None:
        """Start (in the background) the spare workers needed to get back to
        `spares_per_node` on every node."""
        for index, node_id in enumerate(self.node_ids):
            while len(self._spares[node_id]) < self.spares_per_node:
                self._spares[node_id].append(self._new_worker(index))

    def _new_worker(self, node: int) -> tuple[Any, str]:
        name = f"worker-{uuid.uuid4().hex[:12]}"
        worker = TrainingWorker.options(
            name=name,
            namespace=NAMESPACE,
            lifetime="detached",  # outlives a crashed scheduler process
            scheduling_strategy=NodeAffinitySchedulingStrategy(self.node_ids[node], soft=False),
        ).remote(self.worker_threads)
        return worker, name

    def warm_spares(self) -> None:
        """Start `spares_per_node` spare workers per node and wait until they are up, so the
        next launches skip process start-up and imports."""
        with self._lock:
            self._top_up_spares()
            handles = [w for spares in self._spares.values() for w, _ in spares]
        ray.get([w.info.remote() for w in handles], timeout=_RPC_TIMEOUT_S)

    def _launch(
        self,
        job_id: str,
        gpus: tuple[GpuSlot, ...],
        batch: int,
        ref: CheckpointRef | None,
        pending: bool = False,
    ) -> _LiveJob:
        """Start the job's workers on `gpus` from `ref`; with `pending`, they build their
        model and wait for `hand_over` to say what to restore."""
        record = self.store.job(job_id)
        spec = JobSpec.model_validate(record.spec)
        if not gpus:
            raise ExecutorError(f"job {job_id}: a run needs at least one GPU")
        if batch % len(gpus):
            raise ExecutorError(f"job {job_id}: batch {batch} not divisible by {len(gpus)} GPUs")
        pairs = [self._worker_on(node) for node, _ in gpus]
        workers, names = [w for w, _ in pairs], [n for _, n in pairs]
        addr, port = ("", 0)
        if len(workers) > 1:
            addr, port = ray.get(workers[0].rendezvous.remote(), timeout=_RPC_TIMEOUT_S)
        attempt = record.attempt + 1
        assignments = [
            Assignment(
                job_id=job_id,
                attempt=attempt,
                spec=spec.model_dump(),
                rank=rank,
                world_size=len(gpus),
                global_batch=batch,
                master_addr=addr,
                master_port=port,
                gpu_index=gpu,
                checkpoint_dir=str(self.checkpoint_dir),
                restore_from=asdict(ref) if ref else None,
                restore_pending=pending,
            )
            for rank, (_, gpu) in enumerate(gpus)
        ]
        ray.get([w.start.remote(a) for w, a in zip(workers, assignments, strict=True)])
        live = _LiveJob(job_id, spec, gpus, batch, attempt, workers, names)
        live.joins = [w.join.remote() for w in workers]
        self.live[job_id] = live
        self.store.update_job(
            job_id, status="running", gpus=gpus, batch_size=batch, workers=names, attempt=attempt
        )
        if not pending:  # else logged at the hand-over, once the checkpoint is known
            self._log_launch(live, ref)
        return live

    def _log_launch(self, live: _LiveJob, ref: CheckpointRef | None) -> None:
        where = f"from iteration {ref.iteration}" if ref else "from scratch"
        detail = f"attempt {live.attempt} on {list(live.gpus)} {where}"
        self.store.log(live.job_id, "launch", detail)

    def _suspend_workers(self, live: _LiveJob, release_device: bool = True) -> None:
        refs = [w.suspend.remote(release_device=release_device) for w in live.workers]
        ok = ray.get(refs, timeout=_RPC_TIMEOUT_S)
        if not all(ok):
            raise ExecutorError(f"job {live.job_id} ended before it could be suspended")
        live.suspended = True

    def _resume_workers(self, live: _LiveJob) -> None:
        ray.get([w.resume.remote() for w in live.workers], timeout=_RPC_TIMEOUT_S)
        live.suspended = False

    def _stop_workers(self, live: _LiveJob, why: str) -> list[dict[str, Any]]:
        """Make the workers checkpoint and leave their loop; their outcomes, rank order."""
        ray.get([w.request_exit.remote(why) for w in live.workers], timeout=_RPC_TIMEOUT_S)
        outcomes = ray.get(live.joins, timeout=_RPC_TIMEOUT_S)
        if self.live.get(live.job_id) is live:  # not when new workers were started ahead
            self.live.pop(live.job_id)
        self._release_workers(live)
        failed = [o for o in outcomes if o["status"] == "failed"]
        if failed:
            raise ExecutorError(f"job {live.job_id} failed while stopping: {failed[0]['reason']}")
        return outcomes

    def _release_workers(self, live: _LiveJob) -> None:
        """Keep idle workers as warm spares on their node, up to `spares_per_node`."""
        for worker, name, (node, _) in zip(live.workers, live.names, live.gpus, strict=True):
            spares = self._spares[self.node_ids[node]]
            if len(spares) < self.spares_per_node:
                spares.append((worker, name))
            else:
                ray.kill(worker, no_restart=True)


class TimeSlicer:
    """Gandiva's time-slicing: jobs sharing GPUs with `share="timeslice"` take turns of
    `slice_s` seconds, switched at mini-batch boundaries (see `_rotate`)."""

    def __init__(self, executor: RayExecutor, slice_s: float) -> None:
        self.executor, self.slice_s = executor, slice_s
        self.groups: dict[tuple[GpuSlot, ...], list[str]] = {}
        self.switches = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def add(self, job_id: str, gpus: tuple[GpuSlot, ...]) -> None:
        group = self.groups.setdefault(gpus, [])
        if job_id in group:
            return
        group.append(job_id)
        if len(group) > 1:  # only the first of the group runs
            self.executor._suspend_workers(self.executor.live[job_id], release_device=False)
        if self._thread is None:
            self._thread = threading.Thread(target=self._loop, daemon=True)
            self._thread.start()

    def remove(self, job_id: str) -> None:
        for gpus, group in list(self.groups.items()):
            if job_id not in group:
                continue
            was_running = group[0] == job_id
            group.remove(job_id)
            if was_running and group:
                live = self.executor.live.get(group[0])
                if live and live.suspended:
                    self.executor._resume_workers(live)
            if len(group) <= 1:
                self.groups.pop(gpus)

    def stop(self) -> None:
        self._stop.set()

    def _loop(self) -> None:
        while not self._stop.wait(self.slice_s):
            with self.executor._lock:
                for gpus, group in list(self.groups.items()):
                    self._rotate(gpus, group)

    def _rotate(self, gpus: tuple[GpuSlot, ...], group: list[str]) -> None:
        """Hand the GPUs to the next job. Suspend and resume are sent together: the next job
        starts while the current one finishes its mini-batch in flight, so at most one
        mini-batch overlaps and no time is lost to the round trips. Both stay in GPU memory."""
        live = self.executor.live
        group[:] = [j for j in group if j in live]  # jobs gone without `remove`
        if len(group) <= 1:
            self.groups.pop(gpus)
            if group and live[group[0]].suspended:
                self.executor._resume_workers(live[group[0]])
            return
        running, waiting = live[group[0]], live[group[1]]
        suspended = [w.suspend.remote(release_device=False) for w in running.workers]
        resumed = [w.resume.remote() for w in waiting.workers]
        ok = all(ray.get(suspended, timeout=_RPC_TIMEOUT_S))
        ray.get(resumed, timeout=_RPC_TIMEOUT_S)
        waiting.suspended = False
        if ok:
            running.suspended = True
            group.append(group.pop(0))
        else:  # it has just finished: the others go on without it
            group.pop(0)
            if len(group) <= 1:
                self.groups.pop(gpus)
        self.switches += 1
