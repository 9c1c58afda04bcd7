"""Gandiva's time-slicing: jobs sharing GPUs with `share="timeslice"` take turns of `slice_s`
seconds, switched at mini-batch boundaries.

The slicer works on the executor's gangs under the lock the executor gives it, so a switch
never interleaves with a decision being carried out.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping

import ray

from perfcast.scheduler.core.cluster import GpuSlot
from perfcast.scheduler.live.gang import RPC_TIMEOUT_S, WorkerGang


class TimeSlicer:
    def __init__(
        self, gangs: Mapping[str, WorkerGang], lock: threading.RLock, slice_s: float
    ) -> None:
        self.gangs, self.lock, self.slice_s = gangs, lock, slice_s
        self.groups: dict[tuple[GpuSlot, ...], list[str]] = {}
        self.switches = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def add(self, job_id: str, gpus: tuple[GpuSlot, ...]) -> bool:
        """Put the job in the turn-taking on `gpus`; the first of a group runs, the others
        are suspended here. False: the job ended before it could be suspended."""
        with self.lock:
            group = self.groups.setdefault(gpus, [])
            if job_id in group:
                return True
            group.append(job_id)
            if len(group) > 1 and not self.gangs[job_id].suspend(release_device=False):
                group.remove(job_id)
                return False
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop, daemon=True)
                self._thread.start()
            return True

    def remove(self, job_id: str) -> None:
        """Take the job out of its group; if it held the GPUs, the next one resumes."""
        with self.lock:
            for gpus, group in list(self.groups.items()):
                if job_id not in group:
                    continue
                was_running = group[0] == job_id
                group.remove(job_id)
                if was_running and group:
                    gang = self.gangs.get(group[0])
                    if gang and gang.suspended:
                        gang.resume()
                if len(group) <= 1:
                    self.groups.pop(gpus)

    def stop(self) -> None:
        self._stop.set()

    def _loop(self) -> None:
        while not self._stop.wait(self.slice_s):
            with self.lock:
                for gpus, group in list(self.groups.items()):
                    self._rotate(gpus, group)

    def _rotate(self, gpus: tuple[GpuSlot, ...], group: list[str]) -> None:
        """Hand the GPUs to the next job. Suspend and resume are sent together: the next job
        starts while the current one finishes its mini-batch in flight, so at most one
        mini-batch overlaps and no time is lost to the round trips. Both stay in GPU memory."""
        group[:] = [j for j in group if j in self.gangs]  # jobs gone without `remove`
        if len(group) <= 1:
            self.groups.pop(gpus)
            if group and self.gangs[group[0]].suspended:
                self.gangs[group[0]].resume()
            return
        running, waiting = self.gangs[group[0]], self.gangs[group[1]]
        suspended = running.send("suspend", release_device=False)
        resumed = waiting.send("resume")
        ok = all(ray.get(suspended, timeout=RPC_TIMEOUT_S))
        ray.get(resumed, timeout=RPC_TIMEOUT_S)
        waiting.suspended = False
        if ok:
            running.suspended = True
            group.append(group.pop(0))
        else:  # it has just finished: the others go on without it
            group.pop(0)
            if len(group) <= 1:
                self.groups.pop(gpus)
        self.switches += 1
