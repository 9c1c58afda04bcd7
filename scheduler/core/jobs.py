"""Jobs: what was submitted (`Job`, never changed) and where it stands (`JobState`, mutable).

Work is counted in training samples, so a job's progress rate is its global batch size over its
step time, whatever GPUs and batch size it runs with; a resize changes the rate, not the work.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Literal

from perfcast.scheduler.core.cluster import GpuSlot

Share = Literal["exclusive", "pack", "timeslice"]


class JobStatus(enum.Enum):
    PENDING = "pending"  # submitted, never run
    RUNNING = "running"
    SUSPENDED = "suspended"  # ran, preempted, keeps its progress
    DONE = "done"


# JobStatus's members as module names for the hot paths (imported by the loop and the
# policies): in Python 3.11 reading an attribute of an enum class goes through
# EnumType.__getattr__'s slot (~130 ns; a global ~10 ns)
RUNNING, SUSPENDED, DONE = JobStatus.RUNNING, JobStatus.SUSPENDED, JobStatus.DONE


@dataclass(slots=True, unsafe_hash=True)
class Job:
    """One submitted job. Nothing assigns to a job once built (tests/test_simulator_records.py
    runs every policy on jobs that refuse assignment); it is not a frozen dataclass because a
    large trace builds a million of them, and a frozen `__init__` (each field set through
    `object.__setattr__`) takes three times as long. Hashed by its fields, as a frozen one.

    `job_type` names a measured model (the `job` column of the scaling tables), so its true step
    times, scaling and interference come from measured data. `num_gpus` and `batch_size` are what
    the user asked for; elastic policies may change them. `total_samples` is the work to do.
    `duration_s` is the traced run time at the requested size (what the oracle knows).
    `group` ties the trials of one hyper-parameter search (hypersched); `deadline_s` is absolute.
    `score`/`curve` give a trial's learning curve (synthetic searches only).
    """

    job_id: str
    submit_time_s: float
    job_type: str
    num_gpus: int
    batch_size: int
    total_samples: float
    duration_s: float = math.nan
    gpu_type: str | None = None
    user: str | None = None
    vc: str | None = None
    trace_job: str | None = None  # the model name the trace gave (None when the type was drawn)
    deadline_s: float | None = None
    group: str | None = None
    min_gpus: int = 1
    max_gpus: int | None = None
    # hyper-parameter trials: the trial's final validation metric and how fast its learning
    # curve rises (`metric_at`)
    score: float | None = None
    curve: float = 5.0
    # work counted in samples at the initial batch size, advanced at the statistical efficiency
    # of the batch run (Pollux's goodput; scheduler/sim/goodput.py), not in samples processed
    statistical: bool = False

    def metric_at(self, progress: float) -> float:
        """The trial's validation metric at `progress` (0..1) of its work: 0 without a score."""
        if self.score is None:
            return 0.0
        k = self.curve
        return self.score * (1 - math.exp(-k * min(progress, 1.0))) / (1 - math.exp(-k))


@dataclass(slots=True)
class JobState:
    """A job's progress and placement, updated by the loop (placement) and the executor
    (progress)."""

    job: Job
    status: JobStatus = JobStatus.PENDING
    gpus: tuple[GpuSlot, ...] = ()
    batch_size: int = 0
    share: Share = "exclusive"
    samples_done: float = 0.0
    attained_gpu_s: float = 0.0  # GPU-seconds held so far (Tiresias's attained service)
    run_time_s: float = 0.0  # wall seconds spent holding GPUs
    first_start_s: float | None = None
    last_start_s: float | None = None  # of its latest run (start or resume)
    finish_s: float | None = None
    preemptions: int = 0
    migrations: int = 0
    resizes: int = 0
    overhead_gpu_s: float = 0.0  # GPU-seconds lost to restarts and migrations
    synced_s: float = 0.0  # time up to which the executor brought the counters above
    # the job's id, kept beside it: read several times per event, a slot costs less than a
    # property
    job_id: str = field(init=False, repr=False, compare=False)
    # `extra`'s dict, made on first use: a million-job run would otherwise build (and free) a
    # million empty dicts, 64 MiB, that nothing writes to
    _extra: dict[str, float] | None = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        self.job_id = self.job.job_id
        if not self.batch_size:
            self.batch_size = self.job.batch_size

    @property
    def extra(self) -> dict[str, float]:
        """A policy's own per-job figures."""
        if self._extra is None:
            self._extra = {}
        return self._extra

    @property
    def num_gpus(self) -> int:
        return len(self.gpus)

    @property
    def remaining_samples(self) -> float:
        return max(self.job.total_samples - self.samples_done, 0.0)

    def attained_at(self, now: float) -> float:
        """GPU-seconds held up to `now` (counters are brought up to date lazily)."""
        if self.status is RUNNING:
            return self.attained_gpu_s + len(self.gpus) * (now - self.synced_s)
        return self.attained_gpu_s

    def run_time_at(self, now: float) -> float:
        """Wall seconds held up to `now`."""
        if self.status is RUNNING:
            return self.run_time_s + (now - self.synced_s)
        return self.run_time_s


class JobTable:
    """All jobs by id. The unfinished ones are also kept apart, split into running and waiting
    (pending or suspended), so a round touches only what it needs; the waiting ones are also
    bucketed by requested GPU count with their requested GPUs summed, so a policy can skip
    sizes that cannot fit without walking the queue. Status changes go through `set_status` to
    keep these right; `watch` registers a callback told of every job added or changing status
    (a policy's own index of the queue follows the table that way)."""

    def __init__(self) -> None:
        self.all: dict[str, JobState] = {}
        self.active: dict[str, JobState] = {}  # submitted and not done, in submission order
        self._running: dict[str, JobState] = {}
        self._waiting: dict[str, JobState] = {}  # in the order they started waiting
        # requested GPUs -> {waiting job: its place in the waiting order}, in that order
        self._by_size: dict[int, dict[str, int]] = {}
        self._waiting_gpus = 0
        self._entered = 0  # places handed out in the waiting order
        self._watchers: list[Callable[[JobState], None]] = []

    def watch(self, callback: Callable[[JobState], None]) -> None:
        """Call `callback(state)` after each job is added or changes status."""
        self._watchers.append(callback)

    def unwatch(self, callback: Callable[[JobState], None]) -> None:
        """Stop calling `callback` (registered by `watch`)."""
        self._watchers.remove(callback)

    def add(self, job: Job) -> JobState:
        job_id = job.job_id
        if job_id in self.all:
            raise ValueError(f"job {job_id!r} submitted twice")
        state = JobState(job)
        self.all[job_id] = state
        self.active[job_id] = state
        self._start_waiting(state)
        for callback in self._watchers:
            callback(state)
        return state

    def set_status(self, state: JobState, status: JobStatus) -> None:
        job_id = state.job_id
        self._running.pop(job_id, None)
        if self._waiting.pop(job_id, None) is not None:
            need = state.job.num_gpus
            bucket = self._by_size[need]
            del bucket[job_id]
            if not bucket:
                del self._by_size[need]
            self._waiting_gpus -= need
        state.status = status
        if status is RUNNING:
            self._running[job_id] = state
        elif status is DONE:
            self.active.pop(job_id, None)
        else:
            self._start_waiting(state)
        for callback in self._watchers:
            callback(state)

    def _start_waiting(self, state: JobState) -> None:
        self._waiting[state.job_id] = state
        self._entered += 1
        self._by_size.setdefault(state.job.num_gpus, {})[state.job_id] = self._entered
        self._waiting_gpus += state.job.num_gpus

    def finish(self, job_id: str, now: float) -> JobState:
        state = self.active[job_id]
        self.set_status(state, DONE)
        state.finish_s = now
        return state

    def __getitem__(self, job_id: str) -> JobState:
        return self.all[job_id]

    def __len__(self) -> int:
        return len(self.all)

    def running(self) -> Iterator[JobState]:
        return iter(self._running.values())

    def waiting(self) -> Iterator[JobState]:
        return iter(self._waiting.values())

    def waiting_by_size(self) -> Mapping[int, Mapping[str, int]]:
        """Requested GPU count -> {waiting job id: its place in the waiting order (increasing
        along `waiting()`)}, each bucket in that order. Read-only: a view of the table."""
        return self._by_size

    @property
    def num_running(self) -> int:
        return len(self._running)

    @property
    def num_waiting(self) -> int:
        return len(self._waiting)

    @property
    def waiting_gpus(self) -> int:
        """The GPUs the waiting jobs requested, summed."""
        return self._waiting_gpus
