"""A worker gang: the workers of one attempt of a job, in rank order, commanded together.

Every command goes to all ranks at once and is awaited with one deadline (`call`), so a gang
either carries a command out on every rank or the caller hears why not.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import ray

from perfcast.scheduler.core.cluster import GpuSlot
from perfcast.scheduler.live.spec import JobSpec

RPC_TIMEOUT_S = 120.0


@dataclass
class WorkerGang:
    """A job's current workers (rank order), the GPUs and global batch they run at."""

    job_id: str
    spec: JobSpec
    gpus: tuple[GpuSlot, ...]
    global_batch: int
    attempt: int
    workers: list[Any]  # ActorHandle, rank order
    names: list[str]
    joins: list[Any] = field(default_factory=list)  # ObjectRefs of `join`
    suspended: bool = False

    def send(self, method: str, *args: Any, **kwargs: Any) -> list[Any]:
        """Send `method` to every rank; the ObjectRefs of the answers, rank order."""
        return [getattr(w, method).remote(*args, **kwargs) for w in self.workers]

    def call(self, method: str, *args: Any, timeout_s: float = RPC_TIMEOUT_S, **kwargs: Any):
        """Send `method` to every rank and wait for all the answers (rank order)."""
        return ray.get(self.send(method, *args, **kwargs), timeout=timeout_s)

    def suspend(self, release_device: bool = True) -> bool:
        """Suspend every rank at the next boundary. False: the job ended first."""
        if not all(self.call("suspend", release_device=release_device)):
            return False
        self.suspended = True
        return True

    def resume(self) -> None:
        self.call("resume")
        self.suspended = False

    def stop(self, why: str) -> list[dict[str, Any]]:
        """Make every rank checkpoint and leave its loop; their outcomes, rank order."""
        self.call("request_exit", why)
        return ray.get(self.joins, timeout=RPC_TIMEOUT_S)

    def kill(self) -> None:
        for worker in self.workers:
            ray.kill(worker, no_restart=True)
