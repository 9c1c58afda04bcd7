"""What a scheduling round decides. Policies and placement produce these; an executor (the
simulator or the Ray cluster) carries them out. All are plain immutable records."""

from __future__ import annotations

from dataclasses import dataclass

from perfcast.scheduler.core.cluster import GpuSlot
from perfcast.scheduler.core.jobs import Share


@dataclass(frozen=True, slots=True)
class Run:
    """Start (or resume from its checkpoint) `job_id` on `gpus` with global `batch_size`.
    `share` says how it shares GPUs already holding another job: `pack` runs both at once
    (interference slows each), `timeslice` alternates them at mini-batch boundaries."""

    job_id: str
    gpus: tuple[GpuSlot, ...]
    batch_size: int
    share: Share = "exclusive"


@dataclass(frozen=True, slots=True)
class Suspend:
    """Preempt `job_id`: checkpoint, release its GPUs, keep its progress."""

    job_id: str


@dataclass(frozen=True, slots=True)
class Migrate:
    """Move running `job_id` to `gpus` of its own (same count and batch size): checkpoint and
    restore. Gandiva migrates to defragment and to end time-slicing when GPUs free up."""

    job_id: str
    gpus: tuple[GpuSlot, ...]


@dataclass(frozen=True, slots=True)
class Resize:
    """Change running `job_id` to `gpus` and global `batch_size` (data-parallel workers added or
    removed), continuing from the same step."""

    job_id: str
    gpus: tuple[GpuSlot, ...]
    batch_size: int


Decision = Run | Suspend | Migrate | Resize
