"""The records the simulator builds by the million stay unchanged without being frozen
dataclasses: `Job` is a plain slotted dataclass (a frozen `__init__` costs three times as much),
so every policy is run here on jobs that refuse assignment and must give the same results;
decisions and allocations are named tuples, immutable as such. Synthetic job types (never
reported as measured)."""

from __future__ import annotations

import dataclasses

import pytest
from scheduler_synthetic import run, synthetic_workload

from perfcast.scheduler.core.decisions import Migrate, Resize, Run, Suspend
from perfcast.scheduler.core.jobs import Job
from perfcast.scheduler.core.loop import Allocation
from perfcast.scheduler.sim.workload import Workload

POLICIES = ("fifo", "tiresias", "srtf-predicted", "gandiva", "elastic", "pollux")


class _ReadOnlyJob(Job):
    """A `Job` whose fields cannot be assigned once built."""

    __slots__ = ()

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"job {self.job_id}: {name} assigned after submission")


def read_only(job: Job) -> Job:
    copy = object.__new__(_ReadOnlyJob)
    for field in dataclasses.fields(Job):  # past the refusing __setattr__, as a frozen __init__
        object.__setattr__(copy, field.name, getattr(job, field.name))
    return copy


def contended() -> Workload:
    """Forty jobs of 1-4 GPUs arriving faster than 2x4 GPUs run them: queues, preemptions,
    resizes and shared GPUs."""
    rows = [
        (f"j{i:02d}", 30.0 * i, "fast" if i % 3 else "slow", (1, 2, 4, 1, 2)[i % 5], 300.0 + 97 * i)
        for i in range(40)
    ]
    return synthetic_workload(rows)


def outcome(workload: Workload, policy: str) -> list[tuple[str, float | None, int]]:
    result = run(workload, "2x4:v100", policy)
    return sorted((s.job_id, s.finish_s, s.preemptions) for s in result.jobs.all.values())


@pytest.mark.parametrize("policy", POLICIES)
def test_no_policy_assigns_to_a_job(policy: str) -> None:
    workload = contended()
    frozen = dataclasses.replace(workload, jobs=[read_only(j) for j in workload.jobs])
    assert outcome(frozen, policy) == outcome(workload, policy)


def test_read_only_jobs_refuse_assignment() -> None:
    job = read_only(contended().jobs[0])
    with pytest.raises(AttributeError, match="assigned after submission"):
        job.num_gpus = 8  # type: ignore[misc]


def test_jobs_hash_and_compare_by_their_fields() -> None:
    a, b = contended().jobs[0], contended().jobs[0]
    assert a == b and hash(a) == hash(b) and a is not b
    assert dataclasses.replace(a, num_gpus=a.num_gpus + 1) != a


@pytest.mark.parametrize(
    "record",
    [
        Run("j", ((0, 0),), 32),
        Suspend("j"),
        Migrate("j", ((0, 1),)),
        Resize("j", ((0, 0), (0, 1)), 64),
        Allocation("j", 2, 64),
    ],
)
def test_decisions_and_allocations_are_immutable(record: object) -> None:
    with pytest.raises(AttributeError):
        record.job_id = "other"  # type: ignore[attr-defined]
    assert record == type(record)(*record)  # type: ignore[call-arg, misc]
