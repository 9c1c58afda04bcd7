"""Restarts of failed jobs: the failures in a row, and the jobs waiting out their backoff.

Failures count "in a row" while the job makes no new checkpoint: one that trains past a
checkpoint between two failures starts a new series. The counts live in the scheduler
process (a restarted scheduler starts them again).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from perfcast.scheduler.core.cluster import GpuSlot


@dataclass
class PendingRestart:
    """A failed job waiting out its backoff before it restarts on `gpus`."""

    due: float  # time.monotonic()
    gpus: tuple[GpuSlot, ...]
    global_batch: int


class RestartBackoff:
    def __init__(self) -> None:
        self._pending: dict[str, PendingRestart] = {}
        # per job: failures in a row, and the checkpoint iteration they restarted from
        self._failures: dict[str, tuple[int, int | None]] = {}

    def failure(self, job_id: str, checkpoint_iteration: int | None) -> int:
        """Count a failure of a job whose newest checkpoint is at `checkpoint_iteration`
        (None: none); the failures in a row, this one included."""
        count, before = self._failures.get(job_id, (0, None))
        count = count + 1 if checkpoint_iteration == before else 1
        self._failures[job_id] = (count, checkpoint_iteration)
        return count

    def schedule(
        self, job_id: str, delay_s: float, gpus: tuple[GpuSlot, ...], global_batch: int
    ) -> None:
        self._pending[job_id] = PendingRestart(time.monotonic() + delay_s, gpus, global_batch)

    def due(self) -> list[tuple[str, PendingRestart]]:
        """The restarts whose backoff is over, taken off the waiting list."""
        now = time.monotonic()
        ready = [(j, r) for j, r in self._pending.items() if now >= r.due]
        for job_id, _ in ready:
            del self._pending[job_id]
        return ready

    def redirect(self, job_id: str, gpus: tuple[GpuSlot, ...], global_batch: int) -> bool:
        """A job waiting to restart will restart on `gpus` at `global_batch` instead. False:
        it is not waiting."""
        pending = self._pending.get(job_id)
        if pending is None:
            return False
        pending.gpus, pending.global_batch = gpus, global_batch
        return True

    def waiting(self) -> dict[str, PendingRestart]:
        """The jobs waiting out their backoff, and where they will restart."""
        return dict(self._pending)

    def cancel(self, job_id: str) -> bool:
        """Call off a waiting restart. False: the job was not waiting."""
        return self._pending.pop(job_id, None) is not None
