"""What a scheduling round decides. Policies and placement produce these; an executor (the
simulator or the Ray cluster) carries them out. All are plain immutable records, named tuples:
a round makes one per job it starts, and a named tuple is built in half the time of a frozen
dataclass (whose `__init__` sets each field through `object.__setattr__`)."""

from __future__ import annotations

from typing import NamedTuple

from perfcast.scheduler.core.cluster import GpuSlot
from perfcast.scheduler.core.jobs import Share


class Run(NamedTuple):
    """Start (or resume from its checkpoint) `job_id` on `gpus` with global `batch_size`.
    `share` says how it shares GPUs already holding another job: `pack` runs both at once
    (interference slows each), `timeslice` alternates them at mini-batch boundaries."""

    job_id: str
    gpus: tuple[GpuSlot, ...]
    batch_size: int
    share: Share = "exclusive"


class Suspend(NamedTuple):
    """Preempt `job_id`: checkpoint, release its GPUs, keep its progress."""

    job_id: str


class Migrate(NamedTuple):
    """Move running `job_id` to `gpus` of its own (same count and batch size): checkpoint and
    restore. Gandiva migrates to defragment and to end time-slicing when GPUs free up."""

    job_id: str
    gpus: tuple[GpuSlot, ...]


class Resize(NamedTuple):
    """Change running `job_id` to `gpus` and global `batch_size` (data-parallel workers added or
    removed), continuing from the same step."""

    job_id: str
    gpus: tuple[GpuSlot, ...]
    batch_size: int


Decision = Run | Suspend | Migrate | Resize
