"""The executor protocol: what carries out a round's decisions.

The simulator (`scheduler.sim.engine.SimulatedExecutor`) and the Ray executor
(`scheduler.live`) implement it. The loop has already updated its cluster and job state when it
calls `apply`, so an executor only acts (starts, checkpoints, moves, resizes jobs) and reports
back through the loop: `SchedulingLoop.report_progress(job_id, samples_done, now)` as mini-batches
complete and `SchedulingLoop.job_finished(job_id, now)` when a job is done.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

from perfcast.scheduler.core.decisions import Decision
from perfcast.scheduler.core.jobs import JobTable


@runtime_checkable
class Executor(Protocol):
    def apply(self, decisions: Sequence[Decision], jobs: JobTable, now: float) -> None:
        """Carry out `decisions` in order (suspensions come before the runs that reuse their
        GPUs). `jobs` holds each job's spec and its state after the decisions."""
        ...
