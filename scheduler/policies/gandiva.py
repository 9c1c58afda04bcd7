"""Gandiva (OSDI'18): time-slicing, packing and migration.

- Jobs start first come first served on GPUs of their own (consolidated on one node when they
  fit one).
- When a waiting job finds no free GPUs, it shares the GPUs of a running job of the same size
  (at most two jobs per GPU): packed (both run at once) when the interference predictor says
  the pair's combined normalized throughput exceeds 1 and Salus's memory safety condition holds
  (sum of persistent memory + largest ephemeral memory <= GPU memory; with only total memory
  known, the total counts as persistent, which is stricter); time-sliced at mini-batch
  boundaries otherwise (each gets half, less Gandiva's 2% overhead). In the simulator the
  memory figures are measured where the data has them, else model-size estimates
  (scheduler/facts/memory.py). `pack=false` never packs (Gandiva without packing, to measure
  what packing gains); `stats` counts the packed and time-sliced starts.
- Migration: a time-sliced or packed job moves to GPUs of its own as soon as some free up, and
  a job that would be spread over nodes is made room for on one node by migrating small jobs
  off it (defragmentation).
"""

from __future__ import annotations

import bisect
import heapq
from collections import Counter
from collections.abc import Callable, Sequence
from operator import itemgetter
from typing import TYPE_CHECKING, Any, TypeVar

from perfcast.features.devices import DEVICES, canonical_device
from perfcast.scheduler.core.cluster import ClusterState, GpuSlot
from perfcast.scheduler.core.decisions import Migrate
from perfcast.scheduler.core.jobs import DONE, RUNNING, JobState, JobTable, Share
from perfcast.scheduler.core.loop import (
    Allocation,
    ConsolidatedPlacement,
    RoundContext,
    Schedule,
    SchedulingPolicy,
    start_what_fits,
)
from perfcast.scheduler.facts.memory import JobMemory, memory_model
from perfcast.scheduler.policies import register

if TYPE_CHECKING:
    from perfcast.scheduler.core.predictions import PairKey

HostClass = tuple[str, str, int]  # (gpu type, job type, local batch)
JobClass = tuple[str, int]  # (job type, local batch)
# (job type, local batch) -> its memory, a total in MB (counted as persistent), or None
MemoryOf = Callable[[str, int], JobMemory | float | None]


def gpu_memory_mb(gpu_type: str) -> float | None:
    """A GPU type's memory from the one device table (features/devices.py), None if unknown."""
    spec = DEVICES.get(canonical_device(gpu_type))
    return None if spec is None else spec.mem_gb * 1024


def salus_fits(persistent_mb: Sequence[float], ephemeral_mb: Sequence[float], cap: float) -> bool:
    """Salus's safety condition for jobs sharing one GPU of `cap` MB."""
    return sum(persistent_mb) + max(ephemeral_mb, default=0.0) <= cap


# a running job and its place in the running order (when it last started running)
Ranked = tuple[int, JobState]
_place_of = itemgetter(0)
K = TypeVar("K")


def pair_key(guest: JobClass, host: HostClass) -> PairKey:
    """The interference prediction's key for a guest of class `guest` on a host of `host`."""
    return host[0], guest[0], guest[1], host[1], host[2]


def job_class(state: JobState) -> JobClass:
    """A job's class as a guest: its type and local batch at its requested size."""
    return state.job.job_type, state.batch_size // state.job.num_gpus


class SharingIndex:
    """The running jobs that started on GPUs of their own (share "exclusive"), split by
    whether they are still alone there: the alone ones may host a waiting job (`hosts`, by
    size and class); the others (`crowded`, by size) move to free GPUs when some appear.
    Each list is in running order, the order of a walk over `JobTable.running()`, so the
    decisions made from the index are those of that walk. And the waiting jobs counted by
    size and class (`waiting`): the classes a round asks interference predictions for.

    The job table (`JobTable.watch`) and the cluster (`ClusterState.watch`) tell of the jobs
    that change; each is filed again at the next `refresh` (when the index is read, once the
    decisions have updated its state), so a round costs what changed, not the number of
    running jobs."""

    def __init__(self, jobs: JobTable, cluster: ClusterState) -> None:
        self.jobs, self.cluster = jobs, cluster
        # the GPU type a host started this round is taken to have
        self.main_type: str = Counter(cluster.node_type).most_common(1)[0][0]
        # size -> class -> hosts; a size or class is listed while it has hosts
        self.hosts: dict[int, dict[HostClass, list[Ranked]]] = {}
        self.crowded: dict[int, list[Ranked]] = {}  # size -> jobs
        self.waiting: dict[int, dict[JobClass, int]] = {}  # size -> class -> waiting jobs
        self._waits_as: dict[str, JobClass] = {}
        self._order: dict[str, int] = {}  # running job -> its place in the running order
        self._starts = 0
        self._filed: dict[str, tuple[int, int, HostClass | None]] = {}  # place, size, class
        self._dirty: dict[str, None] = {}
        for state in [*jobs.running(), *jobs.waiting()]:
            self._status(state)
        jobs.watch(self._status)
        cluster.watch(self._moved)

    def _status(self, state: JobState) -> None:
        job_id, status = state.job_id, state.status
        if (cls := self._waits_as.pop(job_id, None)) is not None:
            counts = self.waiting[state.job.num_gpus]
            counts[cls] -= 1
            if not counts[cls]:
                del counts[cls]
        if status is RUNNING:
            self._starts += 1
            self._order[job_id] = self._starts
            self._dirty[job_id] = None
            return
        self._order.pop(job_id, None)
        if job_id in self._filed:
            self._dirty[job_id] = None
        else:  # nothing to file or unfile: `_dirty` keeps to running and filed jobs
            self._dirty.pop(job_id, None)
        if status is not DONE:
            cls = self._waits_as[job_id] = job_class(state)
            if (counts := self.waiting.get(state.job.num_gpus)) is None:
                counts = self.waiting[state.job.num_gpus] = {}
            counts[cls] = counts.get(cls, 0) + 1

    def _moved(self, job_id: str, slots: tuple[GpuSlot, ...]) -> None:
        if job_id in self._order:  # a move; a start or stop is told by `_status`
            self._dirty[job_id] = None
        for node, gpu in slots:  # the jobs it left or joined there may be alone or not now
            for other in self.cluster.occupants[node][gpu]:
                self._dirty[other] = None

    def close(self) -> None:
        """Stop being told of changes (the policy made an index of another job table or
        cluster: the live runner makes a new cluster when nodes join or leave)."""
        self.jobs.unwatch(self._status)
        self.cluster.unwatch(self._moved)

    def refresh(self) -> SharingIndex:
        """File again the jobs that changed since the last refresh."""
        for job_id in self._dirty:
            self._unfile(job_id)
            state = self.jobs[job_id]
            if state.status is RUNNING and state.share == "exclusive":
                self._file(state)
        self._dirty.clear()
        return self

    def _file(self, state: JobState) -> None:
        place, size = self._order[state.job_id], state.num_gpus
        key: HostClass | None = None
        if self.cluster.alone(state.gpus):
            key = (self.cluster.node_type[state.gpus[0][0]], state.job.job_type)
            key += (state.batch_size // size,)
            ranked = self.hosts.setdefault(size, {}).setdefault(key, [])
        else:
            ranked = self.crowded.setdefault(size, [])
        bisect.insort(ranked, (place, state), key=_place_of)
        self._filed[state.job_id] = (place, size, key)

    def _unfile(self, job_id: str) -> None:
        filed = self._filed.pop(job_id, None)
        if filed is None:
            return
        place, size, key = filed
        if key is None:
            _remove(self.crowded, size, place)
        else:
            _remove(self.hosts[size], key, place)
            if not self.hosts[size]:
                del self.hosts[size]


def _remove(lists: dict[K, list[Ranked]], key: K, place: int) -> None:
    """Take the job at `place` out of `lists[key]`, and the list out if it empties."""
    ranked = lists[key]
    del ranked[bisect.bisect_left(ranked, place, key=_place_of)]
    if not ranked:
        del lists[key]


class RoundHosts:
    """The hosts of one class for one round, taken from the end as a list's `pop` would:
    the jobs started this round (`started`, last first), then the running ones from the
    index (latest started first; the index's list is read, never changed)."""

    def __init__(self, running: list[Ranked]) -> None:
        self.running, self.left = running, len(running)
        self.started: list[JobState] = []

    def __len__(self) -> int:
        return self.left + len(self.started)

    def first(self) -> JobState:
        return self.running[0][1] if self.left else self.started[0]

    def pop(self) -> JobState:
        if self.started:
            return self.started.pop()
        self.left -= 1
        return self.running[self.left][1]


class GandivaPlacement(ConsolidatedPlacement):
    """Consolidated placement that migrates small jobs to keep a job on one node, and moves
    sharing jobs to GPUs of their own when some are free. `sharing(ctx)` is the policy's
    index of who shares GPUs, brought up to date."""

    def __init__(self, sharing: Callable[[RoundContext], SharingIndex]) -> None:
        self.sharing = sharing

    def place(self, schedule: Sequence[Allocation], ctx: RoundContext) -> None:
        super().place(schedule, ctx)
        cluster = ctx.cluster
        if not cluster.sharing or not cluster.free_gpus:
            return  # every job is alone on its GPUs, or none is free to move to
        # each move takes free GPUs (and frees none: the GPUs it shared keep their other job),
        # so only the sizes that fit now can fit later in the round
        crowded = self.sharing(ctx).crowded
        fitting = [crowded[size] for size in crowded if size <= cluster.free_gpus]
        for _, state in heapq.merge(*fitting, key=_place_of):  # in running order
            if not cluster.free_gpus:
                break
            # it no longer fits, or an earlier move left it alone
            if (
                state.num_gpus > cluster.free_gpus
                or state.share != "exclusive"
                or cluster.alone(state.gpus)
            ):
                continue
            slots = cluster.find_free(state.num_gpus)
            if slots is not None:
                ctx.commit(Migrate(state.job_id, slots))

    def slots_for(self, alloc: Allocation, ctx: RoundContext) -> tuple[GpuSlot, ...] | None:
        slots = super().slots_for(alloc, ctx)
        if slots is None or alloc.share_with is not None or len({n for n, _ in slots}) == 1:
            return slots
        return self._defragment(alloc, ctx) or slots

    def _defragment(self, alloc: Allocation, ctx: RoundContext) -> tuple[GpuSlot, ...] | None:
        cluster = ctx.cluster
        nodes = [
            n
            for n in range(cluster.num_nodes)
            if cluster.node_size[n] >= alloc.num_gpus
            and (alloc.gpu_type is None or cluster.node_type[n] == alloc.gpu_type)
        ]
        if not nodes:
            return None
        node = max(nodes, key=lambda n: (cluster.free_per_node[n], -n))
        guests = {j for occ in cluster.occupants[node] for j in occ}
        # sorted by size, then id: set order varies between processes (hash seeds)
        movable = sorted((ctx.jobs[j] for j in guests), key=lambda s: (s.num_gpus, s.job_id))
        for state in movable:
            if cluster.free_per_node[node] >= alloc.num_gpus:
                break
            if state.share != "exclusive" or {n for n, _ in state.gpus} != {node}:
                continue
            target = cluster.find_free(state.num_gpus, cluster.node_type[node], exclude=node)
            if target is None or len({n for n, _ in target}) != 1:
                continue
            ctx.commit(Migrate(state.job_id, target))
        if cluster.free_per_node[node] >= alloc.num_gpus:
            return tuple(cluster.free_slots(node)[: alloc.num_gpus])
        return None


@register("gandiva")
class GandivaPolicy(SchedulingPolicy):
    needs_predictions = True
    prediction_tasks = ("interference",)

    def __init__(
        self, memory_mb: MemoryOf | None = None, timeslice: bool = True, pack: bool = True
    ) -> None:
        self.memory_mb = memory_mb
        self.timeslice, self.pack = timeslice, pack
        self.placement = GandivaPlacement(self.sharing)
        self._sharing: SharingIndex | None = None
        self._memory: dict[tuple[str, int], JobMemory | None] = {}
        self.stats: Counter[str] = Counter()  # shared starts: "packed", "timesliced"

    def configure(self, workload: Any) -> None:
        """Packing needs each job type's memory: unless given one, the workload's measured
        figures, else model-size estimates (scheduler/facts/memory.py)."""
        if self.memory_mb is None:
            self.memory_mb = memory_model(workload.interference)

    def sharing(self, ctx: RoundContext) -> SharingIndex:
        """Who shares GPUs in `ctx`, brought up to date (made on first use, and again for
        another job table or cluster)."""
        index = self._sharing
        if index is None or index.jobs is not ctx.jobs or index.cluster is not ctx.cluster:
            if index is not None:
                index.close()
            index = self._sharing = SharingIndex(ctx.jobs, ctx.cluster)
        return index.refresh()

    def _memory_of(self, state: JobState) -> JobMemory | None:
        key = (state.job.job_type, state.batch_size // max(state.job.num_gpus, 1))
        if key not in self._memory:
            value = self.memory_mb(*key) if self.memory_mb else None
            if isinstance(value, int | float):
                value = JobMemory(float(value), 0.0, measured=True)
            self._memory[key] = value
        return self._memory[key]

    def can_pack(self, a: JobState, b: JobState, gpu_type: str, speeds: tuple[float, float]):
        """Pack only when it pays (combined normalized throughput > 1) and memory is safe."""
        if not self.pack or not speeds[0] + speeds[1] > 1.0:  # NaN (unmeasured) never packs
            return False
        cap = gpu_memory_mb(gpu_type)
        mem_a, mem_b = self._memory_of(a), self._memory_of(b)
        if cap is None or mem_a is None or mem_b is None:
            return False
        return salus_fits(
            [mem_a.persistent_mb, mem_b.persistent_mb],
            [mem_a.ephemeral_mb, mem_b.ephemeral_mb],
            cap,
        )

    def schedule(self, ctx: RoundContext) -> Schedule:
        """The waiting jobs that fit on free GPUs start there (in waiting order); each other
        waiting job, in waiting order, shares a host of its size if some is left (packed with
        the class it packs best with, else time-sliced with the first class that has one).
        Only the sizes with both hosts and jobs waiting are looked at, and their queues only
        while hosts are left, so a round costs what it starts and the classes of hosts, not
        the running jobs or the queue."""
        jobs = ctx.jobs
        out = start_what_fits(ctx)
        if len(out) == jobs.num_waiting:
            return out
        sharing = self.sharing(ctx)
        started = [jobs[a.job_id] for a in out]
        queues = jobs.waiting_by_size()
        # hosts: jobs alone on their GPUs (running, or started this round, on the main GPU
        # type), by size, then by (gpu type, job type, local batch); the classes in the
        # running order of their first host, then those only started this round
        hosts: dict[int, dict[HostClass, RoundHosts]] = {}
        for size in {*sharing.hosts, *(state.job.num_gpus for state in started)}:
            if size in queues:
                classes = sorted(sharing.hosts.get(size, {}).items(), key=lambda c: c[1][0][0])
                hosts[size] = {key: RoundHosts(running) for key, running in classes}
        taken: dict[tuple[int, JobClass], int] = {}  # jobs starting, by size and class
        for state in started:
            size, cls = state.job.num_gpus, job_class(state)
            if size in hosts:
                hosts[size].setdefault((sharing.main_type, *cls), RoundHosts([]))
                hosts[size][sharing.main_type, *cls].started.append(state)
                taken[size, cls] = taken.get((size, cls), 0) + 1
        # the classes of the jobs left waiting, for the sizes with hosts
        left: dict[int, list[JobClass]] = {}
        for size in hosts:
            counts = sharing.waiting[size]
            left[size] = [c for c, n in counts.items() if n > taken.get((size, c), 0)]
        hosts = {size: classes for size, classes in hosts.items() if left[size]}
        if not hosts:
            return out
        speeds = self._class_speeds(left, hosts, ctx)
        starting = {state.job_id for state in started}
        shared: list[tuple[int, Allocation]] = []  # (place in the waiting order, allocation)
        for size, classes in hosts.items():
            hosts_left = sum(len(members) for members in classes.values())
            for job_id, place in queues[size].items():
                if not hosts_left:
                    break
                if job_id in starting:
                    continue
                state = jobs[job_id]
                chosen = self._host_for(state, classes, speeds)
                if chosen is None:
                    continue
                host, share = chosen
                hosts_left -= 1
                self.stats["packed" if share == "pack" else "timesliced"] += 1
                alloc = Allocation(job_id, size, state.batch_size, share, host.job_id)
                shared.append((place, alloc))
        out.extend(alloc for _, alloc in sorted(shared, key=_place_of))
        return out

    def _host_for(
        self,
        state: JobState,
        classes: dict[HostClass, RoundHosts],
        speeds: dict[PairKey, tuple[float, float]],
    ) -> tuple[JobState, Share] | None:
        """The host a waiting job shares with, taken from its class, and how."""
        mine = job_class(state)
        best, best_value = None, 1.0
        for key, members in classes.items():
            pair = speeds.get(pair_key(mine, key), (float("nan"),) * 2)
            packable = members and self.can_pack(state, members.first(), key[0], pair)
            if packable and sum(pair) > best_value:
                best, best_value = key, sum(pair)
        if best is not None:
            return classes[best].pop(), "pack"
        if self.timeslice and (members := next((m for m in classes.values() if m), None)):
            return members.pop(), "timeslice"
        return None

    def _class_speeds(
        self,
        waiting: dict[int, list[JobClass]],
        hosts: dict[int, dict[HostClass, RoundHosts]],
        ctx: RoundContext,
    ) -> dict[PairKey, tuple[float, float]]:
        """Predicted speeds of every (waiting job class, host class) pair of a size, in one
        batched call. Classes keep the call small however many jobs wait."""
        if ctx.predictor is None or self.memory_mb is None or not self.pack:
            return {}
        pairs = sorted({(w, h) for size in hosts for w in waiting[size] for h in hosts[size]})
        return ctx.predictor.pair_speeds([pair_key(w, h) for w, h in pairs])
