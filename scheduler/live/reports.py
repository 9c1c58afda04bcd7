"""What the executor's `poll` tells the runner about each job."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Progress:
    job_id: str
    samples_done: int
    iteration: int
    last_step_time_s: float | None
    mean_step_time_s: float | None


@dataclass(frozen=True)
class Finished:
    job_id: str
    samples_done: int
    iteration: int
    restored_unix: float | None = None  # this attempt's start of training (rank 0)
    ended_unix: float | None = None


@dataclass(frozen=True)
class Lost:
    """A job whose workers died with their node: it needs GPUs elsewhere."""

    job_id: str


@dataclass(frozen=True)
class Failed:
    """A job that failed more than its spec's `max_restarts` times in a row: given up."""

    job_id: str
    error: str


Report = Progress | Finished | Lost | Failed
