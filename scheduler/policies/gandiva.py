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

from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

from perfcast.features.devices import DEVICES, canonical_device
from perfcast.scheduler.core.cluster import GpuSlot
from perfcast.scheduler.core.decisions import Migrate
from perfcast.scheduler.core.jobs import JobState, JobStatus
from perfcast.scheduler.core.loop import (
    Allocation,
    ConsolidatedPlacement,
    RoundContext,
    Schedule,
    SchedulingPolicy,
)
from perfcast.scheduler.facts.memory import JobMemory, memory_model
from perfcast.scheduler.policies import register

HostClass = tuple[str, str, int]  # (gpu type, job type, local batch)
# (job type, local batch) -> its memory, a total in MB (counted as persistent), or None
MemoryOf = Callable[[str, int], JobMemory | float | None]


def gpu_memory_mb(gpu_type: str) -> float | None:
    """A GPU type's memory from the one device table (features/devices.py), None if unknown."""
    spec = DEVICES.get(canonical_device(gpu_type))
    return None if spec is None else spec.mem_gb * 1024


def salus_fits(persistent_mb: Sequence[float], ephemeral_mb: Sequence[float], cap: float) -> bool:
    """Salus's safety condition for jobs sharing one GPU of `cap` MB."""
    return sum(persistent_mb) + max(ephemeral_mb, default=0.0) <= cap


class GandivaPlacement(ConsolidatedPlacement):
    """Consolidated placement that migrates small jobs to keep a job on one node, and moves
    sharing jobs to GPUs of their own when some are free."""

    def place(self, schedule: Sequence[Allocation], ctx: RoundContext) -> None:
        super().place(schedule, ctx)
        if not ctx.cluster.sharing:
            return  # every job is alone on its GPUs
        for state in list(ctx.jobs.running()):
            if state.share != "exclusive" or ctx.cluster.alone(state.gpus):
                continue
            slots = ctx.cluster.find_free(state.num_gpus)
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
        self.placement = GandivaPlacement()
        self._memory: dict[tuple[str, int], JobMemory | None] = {}
        self.stats: Counter[str] = Counter()  # shared starts: "packed", "timesliced"

    def configure(self, workload: Any) -> None:
        """Packing needs each job type's memory: unless given one, the workload's measured
        figures, else model-size estimates (scheduler/facts/memory.py)."""
        if self.memory_mb is None:
            self.memory_mb = memory_model(workload.interference)

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
        cluster, jobs = ctx.cluster, ctx.jobs
        out = Schedule(keep_running=True)
        free = cluster.free_gpus
        waiting = []
        for state in jobs.waiting():
            need = state.job.num_gpus
            if need <= free:
                out.append(Allocation(state.job_id, need, state.batch_size))
                free -= need
            else:
                waiting.append(state)
        if not waiting:
            return out
        # hosts: jobs alone on their GPUs (running, or started this round on the main GPU
        # type), by size, then by (gpu type, job type, local batch)
        main_type = Counter(cluster.node_type).most_common(1)[0][0]
        candidates = [(s, cluster.node_type[s.gpus[0][0]]) for s in jobs.running()]
        candidates += [(jobs[a.job_id], main_type) for a in out]
        hosts: dict[int, dict[HostClass, list[JobState]]] = {}
        for s, gpu_type in candidates:
            running = s.status is JobStatus.RUNNING
            if running and (s.share != "exclusive" or not cluster.alone(s.gpus)):
                continue
            size = s.num_gpus or s.job.num_gpus
            key = (gpu_type, s.job.job_type, s.batch_size // size)
            hosts.setdefault(size, {}).setdefault(key, []).append(s)
        waiting = [s for s in waiting if hosts.get(s.job.num_gpus)]
        speeds = self._class_speeds(waiting, hosts, ctx)
        for state in waiting:
            classes = hosts.get(state.job.num_gpus, {})
            mine = (state.job.job_type, state.batch_size // state.job.num_gpus)
            best, best_value = None, 1.0
            for key, members in classes.items():
                pair = speeds.get((mine, key), (float("nan"),) * 2)
                packable = members and self.can_pack(state, members[0], key[0], pair)
                if packable and sum(pair) > best_value:
                    best, best_value = key, sum(pair)
            if best is not None:
                host = classes[best].pop()
                share = "pack"
            elif self.timeslice and (left := [m for m in classes.values() if m]):
                host = left[0].pop()
                share = "timeslice"
            else:
                continue
            self.stats["packed" if share == "pack" else "timesliced"] += 1
            out.append(
                Allocation(state.job_id, state.job.num_gpus, state.batch_size, share, host.job_id)
            )
        return out

    def _class_speeds(
        self,
        waiting: list[JobState],
        hosts: dict[int, dict[HostClass, list[JobState]]],
        ctx: RoundContext,
    ) -> dict[tuple[tuple[str, int], HostClass], tuple[float, float]]:
        """Predicted speeds of every (waiting job class, host class) pair, in one batched call.
        Classes (job type, local batch) keep the call small however many jobs wait."""
        if ctx.predictor is None or self.memory_mb is None or not self.pack:
            return {}
        wanted = {
            ((s.job.job_type, s.batch_size // s.job.num_gpus), key)
            for s in waiting
            for key in hosts.get(s.job.num_gpus, {})
        }
        pairs = sorted(wanted)
        keys = [(h[0], w[0], w[1], h[1], h[2]) for w, h in pairs]
        values = ctx.predictor.pair_speeds(keys)
        return {p: (float(v[0]), float(v[1])) for p, v in zip(pairs, values, strict=True)}
