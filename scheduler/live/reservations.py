"""The GPUs a job holds, reserved in Ray: one placement group per attempt of a job.

The scheduler core decides which GPUs a job gets; a placement group tells Ray, so that
`ray status` and an autoscaler see the demand (a group Ray cannot place shows under "Pending
Demands"). Its bundles are the gang's, one `{"GPU": 1}` per GPU, each pinned to its core node
by the `ray.io/node-id` label; the strategy is `STRICT_PACK` when the gang is on one node,
else `SPREAD`.

The worker processes themselves ask Ray for no GPU: they are warm spares started before any
placement (an actor's resources are fixed at its creation, and removing a placement group
kills the actors in it), the core names the GPU index each one uses (Ray would pick one
itself), and time-slicing and packing put two jobs on one GPU, which Ray's GPU accounting
cannot express. A GPU shared that way is reserved by the job that took it first; the jobs
joining it reserve only the GPUs nobody holds.

Groups are detached and named `<namespace>/<job>/<attempt>/<GPUs reserved>`, so they outlive
a crashed scheduler, a restarted one adopts those of the jobs it reattaches, and
`remove_orphans` removes the rest of its own namespace's and no other scheduler's.
"""

from __future__ import annotations

import time
from collections.abc import Iterable

import ray
from ray.exceptions import GetTimeoutError
from ray.util import placement_group, placement_group_table, remove_placement_group
from ray.util.placement_group import PlacementGroup

from perfcast.scheduler.core.cluster import GpuSlot
from perfcast.scheduler.live.nodes import ExecutorError, NodeView

RESERVE_TIMEOUT_S = 60.0
_CHECK_NODES_S = 1.0  # while waiting for a reservation: how often to ask whether its nodes live


def strategy_for(gpus: Iterable[GpuSlot]) -> str:
    """`STRICT_PACK` for a gang on one node, `SPREAD` for one across nodes."""
    return "STRICT_PACK" if len({node for node, _ in gpus}) <= 1 else "SPREAD"


class GpuReservations:
    def __init__(self, nodes: NodeView, namespace: str) -> None:
        self.nodes, self.namespace = nodes, namespace
        self.reserve_timeout_s = RESERVE_TIMEOUT_S
        self._groups: dict[str, PlacementGroup] = {}  # job id -> its attempt's group
        self._holder: dict[GpuSlot, str] = {}  # GPU -> the job whose group reserves it

    def name(self, job_id: str, attempt: int, slots: Iterable[GpuSlot] = ()) -> str:
        return f"{self.namespace}/{job_id}/{attempt}/" + ",".join(f"{n}:{g}" for n, g in slots)

    def reserve(self, job_id: str, attempt: int, gpus: tuple[GpuSlot, ...]) -> None:
        """Reserve the GPUs of `gpus` that no other job holds, and wait until Ray has placed
        them. ExecutorError, with nothing reserved, when Ray cannot within the timeout."""
        self.release(job_id)
        free = [slot for slot in gpus if slot not in self._holder]
        if not free:
            return  # every GPU is shared with the jobs that hold them
        group = placement_group(
            [{"GPU": 1.0} for _ in free],
            strategy=strategy_for(free),
            name=self.name(job_id, attempt, free),
            lifetime="detached",  # outlives a crashed scheduler, like the workers
            bundle_label_selector=[{"ray.io/node-id": self.nodes.ray_id(n)} for n, _ in free],
        )
        ready, deadline = group.ready(), time.monotonic() + self.reserve_timeout_s
        while True:  # in short waits: a node that dies meanwhile ends the wait at once
            try:
                ray.get(ready, timeout=min(_CHECK_NODES_S, self.reserve_timeout_s))
                break
            except GetTimeoutError:
                gone = not self.nodes.all_alive({n for n, _ in free})
                if not gone and time.monotonic() < deadline:
                    continue
                remove_placement_group(group)
                if gone:
                    raise ExecutorError(
                        f"job {job_id}: GPUs {free} are on a node that left the cluster"
                    ) from None
                raise ExecutorError(
                    f"job {job_id}: Ray could not reserve GPUs {free} in "
                    f"{self.reserve_timeout_s:g} s (held outside this scheduler? "
                    "`ray status` shows the pending demand)"
                ) from None
        self._hold(job_id, group, free)

    def release(self, job_id: str) -> None:
        """Give the job's GPUs back to Ray (nothing if it holds none)."""
        group = self._groups.pop(job_id, None)
        if group is None:
            return
        for slot in [s for s, holder in self._holder.items() if holder == job_id]:
            del self._holder[slot]
        remove_placement_group(group)

    def held(self, job_id: str) -> tuple[GpuSlot, ...]:
        return tuple(sorted(s for s, holder in self._holder.items() if holder == job_id))

    def adopt(self, job_id: str, attempt: int) -> bool:
        """Take over the group a previous scheduler process created for this attempt (after a
        restart). False: there is none."""
        prefix = self.name(job_id, attempt)
        for group_id, entry in self._table().items():
            if entry["name"].startswith(prefix):
                held = entry["name"][len(prefix) :].split(",")
                slots = [(int(s.split(":")[0]), int(s.split(":")[1])) for s in held if s]
                group = PlacementGroup(ray.PlacementGroupID(bytes.fromhex(group_id)))
                self._hold(job_id, group, slots)
                return True
        return False

    def remove_orphans(self, keep: Iterable[str] = ()) -> int:
        """Remove this namespace's groups that no job here holds and whose name does not
        start with one of `keep` (the attempts a restarted scheduler may still adopt)."""
        ours = {group.id.hex() for group in self._groups.values()}
        kept = tuple(keep)
        orphans = [
            group_id
            for group_id, entry in self._table().items()
            if entry["name"].startswith(f"{self.namespace}/")
            and group_id not in ours
            and not any(entry["name"].startswith(k) for k in kept)
        ]
        for group_id in orphans:
            remove_placement_group(PlacementGroup(ray.PlacementGroupID(bytes.fromhex(group_id))))
        return len(orphans)

    def release_all(self) -> None:
        for job_id in list(self._groups):
            self.release(job_id)

    def _hold(self, job_id: str, group: PlacementGroup, slots: Iterable[GpuSlot]) -> None:
        self._groups[job_id] = group
        for slot in slots:
            self._holder[slot] = job_id

    @staticmethod
    def _table() -> dict[str, dict]:
        """Ray's live placement groups (removed ones left out), by hex id."""
        return {k: v for k, v in placement_group_table().items() if v["state"] != "REMOVED"}
