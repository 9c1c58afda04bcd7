"""One data-parallel worker of a live job: a Ray actor running the job's loop in a thread.

The loop runs in a background thread so the actor keeps answering `status`, `suspend`,
`resume` and `request_exit` while it trains. Workers are generic: after a job leaves one
(migration, resize) it can run another, which is how the executor keeps warm spares.
Workers are named and detached, so they outlive a crashed scheduler process and a restarted
one reattaches to them instead of starting the job a second time. The training side (torch)
lives in `worker_loop`, which only the worker's own process imports.
"""

from __future__ import annotations

import datetime
import os
import socket
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import ray

from perfcast.scheduler.live.checkpoint import CheckpointRef

if TYPE_CHECKING:
    from perfcast.scheduler.live.hook import TrainingHook


@dataclass(frozen=True)
class Assignment:
    """One worker's share of one attempt of a job."""

    job_id: str
    attempt: int
    spec: dict[str, Any]
    rank: int
    world_size: int
    global_batch: int
    master_addr: str
    master_port: int
    gpu_index: int | None
    checkpoint_dir: str
    restore_from: dict[str, Any] | None = None
    restore_pending: bool = False  # wait for `hand_over` to say what to restore


@ray.remote(num_cpus=0, max_concurrency=8)
class TrainingWorker:
    def __init__(self, threads: int = 1) -> None:
        from perfcast.scheduler.live import worker_loop  # torch: this process only

        self._loop = worker_loop
        worker_loop.prepare(threads)
        self._hook: TrainingHook | None = None
        self._assignment: Assignment | None = None
        self._outcome: dict[str, Any] | None = None
        self._done = threading.Event()
        self._done.set()

    def info(self) -> dict[str, Any]:
        return {"node_id": ray.get_runtime_context().get_node_id(), "pid": os.getpid()}

    def rendezvous(self) -> tuple[str, int]:
        """An address and a free port on this worker's node, for rank 0 to listen on."""
        with socket.socket() as sock:
            sock.bind(("", 0))
            port = sock.getsockname()[1]
        return ray.util.get_node_ip_address(), port

    def start(self, assignment: Assignment) -> None:
        """Start running `assignment` in the background; `join` waits for the outcome."""
        if not self._done.is_set():
            raise RuntimeError(f"worker busy with job {self._assignment.job_id}")
        self._assignment, self._outcome, self._hook = assignment, None, None
        self._done.clear()
        threading.Thread(target=self._run, args=(assignment,), daemon=True).start()

    def join(self, timeout_s: float | None = None) -> dict[str, Any] | None:
        """The outcome of the current assignment once it ends (None on timeout)."""
        return self._outcome if self._done.wait(timeout_s) else None

    def status(self) -> dict[str, Any]:
        a = self._assignment
        hook_status = self._hook.status.as_dict() if self._hook else self._loop.idle_status()
        return {
            "job_id": a.job_id if a else None,
            "attempt": a.attempt if a else None,
            "busy": not self._done.is_set(),
            **hook_status,
        }

    def suspend(self, timeout_s: float = 60.0, release_device: bool = True) -> bool:
        hook = self._wait_for_hook()
        return hook.request_suspend(timeout_s, release_device) if hook else False

    def resume(self) -> None:
        if self._hook:
            self._hook.resume()

    def request_exit(self, reason: str, handoff: bool = False) -> None:
        hook = self._wait_for_hook()
        if hook:
            hook.request_exit(reason, handoff)

    def handoff(self, timeout_s: float = 120.0) -> list[Any] | None:
        """After `request_exit(handoff=True)`: rank 0's state at its exit boundary, as a list
        holding its ObjectRef (so Ray passes the reference, not the value); None if the loop
        ended without one. The reference lives as long as this worker does."""
        hook = self._wait_for_hook()
        return hook.handoff(timeout_s) if hook else None

    def handoff_taken(self) -> None:
        """The new workers have fetched the state `handoff` gave: the loop may go on to write
        its checkpoint and end."""
        if self._hook:
            self._hook.handoff_taken()

    def hand_over(
        self,
        restore_from: dict[str, Any] | None,
        cancel: bool = False,
        state: list[Any] | None = None,
    ) -> None:
        """Tell a worker started with `restore_pending` what to restore (or to give up): the
        state another worker published (fetched here, before this call returns, so that
        worker may go once every new one has answered), else a checkpoint file."""
        hook = self._wait_for_hook()
        if hook:
            ref = CheckpointRef(**restore_from) if restore_from else None
            hook.hand_over(ref, cancel, self._loop.unpack(ray.get(state[0])) if state else None)

    def _wait_for_hook(self, timeout_s: float = 60.0) -> TrainingHook | None:
        """The hook of the running loop (it exists once the process group is up)."""
        deadline = datetime.datetime.now() + datetime.timedelta(seconds=timeout_s)
        while self._hook is None and not self._done.is_set():
            if datetime.datetime.now() > deadline:
                return None
            self._done.wait(0.002)
        return self._hook

    def _run(self, a: Assignment) -> None:
        try:
            self._outcome = self._loop.run(a, self._set_hook)
        finally:
            self._done.set()

    def _set_hook(self, hook: TrainingHook) -> None:
        self._hook = hook
