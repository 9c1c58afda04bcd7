"""The priority policies at scale: a generated 20,000-job trace on a 128-GPU cluster, dense
enough that a queue of hundreds of jobs builds up. The per-job JCTs and preemption counts of
`fifo`, `tiresias` and `srtf-predicted` must equal those of a from-scratch reference that ranks
every active job each round (`ReferencePriority`, `ReferenceSrtf`), and the first two's digest
must equal the one recorded from the simulator whose policies did that themselves (commit
17c11d9). Synthetic job types and trace
(a seeded draw): never reported as measured."""

from __future__ import annotations

import bisect
import functools
import hashlib
import math
from collections.abc import Callable

import numpy as np
import pandas as pd
import pytest

from perfcast.scheduler.core import ClusterSpec, ClusterState
from perfcast.scheduler.core.loop import (
    Allocation,
    RoundContext,
    Schedule,
    SchedulingPolicy,
    start_all_waiting,
)
from perfcast.scheduler.core.predictions import JobPredictor
from perfcast.scheduler.facts.catalog import InterferenceCatalog, ScalingCatalog
from perfcast.scheduler.policies import make_policy, srtf_predicted
from perfcast.scheduler.policies.pollux import PolluxPolicy
from perfcast.scheduler.policies.srtf_predicted import (
    SrtfPredictedPolicy,
    _log_width,
    blended_order,
    predicted_remaining,
    trust_weights,
)
from perfcast.scheduler.sim.engine import SimResult, simulate
from perfcast.scheduler.sim.workload import Workload, build_workload

CLUSTER = "16x8:v100"
NUM_JOBS = 20_000
SRTF_JOBS = 4_000  # its reference reads every active job in Python each round
SIZES = (1, 2, 4, 8, 16)
THRESHOLDS = (3600.0, 36000.0)  # Tiresias's default queues, GPU-seconds
# `digest` of each policy's run of `scale_workload()`, recorded from commit 17c11d9
RECORDED = {"fifo": "f6e26d47ccc8d4f7", "tiresias": "e0fd6dbad2e052de"}


def scale_workload(num_jobs: int = NUM_JOBS, seed: int = 38) -> Workload:
    """`num_jobs` jobs of two synthetic types asking for 1-16 GPUs, log-normal durations
    (median 10 min), Poisson arrivals in spells of 2,000 jobs at 0.6x and 1.6x the cluster's
    capacity (a queue of hundreds builds up and drains)."""
    rng = np.random.default_rng(seed)
    sizes = rng.choice(SIZES, size=num_jobs, p=[0.5, 0.15, 0.15, 0.14, 0.06])
    durations = np.round(np.exp(rng.normal(math.log(600.0), 1.3, size=num_jobs)), 1) + 10.0
    gpu_s = float((sizes * durations).mean())
    capacity = ClusterSpec.parse(CLUSTER).total_gpus
    spell = np.where((np.arange(num_jobs) // 2000) % 2 == 0, 0.6, 1.6)
    gaps = rng.exponential(gpu_s / (capacity * spell))
    trace = pd.DataFrame(
        {
            "job_id": [f"j{i:05d}" for i in range(num_jobs)],
            # whole seconds: many jobs share a submit time, so ties in the order are exercised
            "submit_time_s": np.floor(np.cumsum(gaps)),
            "job": np.where(rng.random(num_jobs) < 0.5, "fast", "slow"),
            "num_gpus": sizes,
            "duration_s": durations,
        }
    )
    scaling = ScalingCatalog(
        pd.DataFrame(
            {
                "job": ["fast"] * 5 + ["slow"] * 5,
                "gpu_type": ["v100"] * 10,
                "num_nodes": [1, 1, 1, 1, 2] * 2,
                "num_gpus": list(SIZES) * 2,
                "local_batch_size": [32] * 10,
                "step_time_s": [1.0, 1.1, 1.2, 1.3, 1.6, 2.0, 2.0, 2.1, 2.1, 2.3],
            }
        ),
        gpus_per_node=8,
    )
    interference = InterferenceCatalog(
        pd.DataFrame(
            columns=[
                "gpu_type",
                "a_job",
                "a_batch_size",
                "b_job",
                "b_batch_size",
                "a_speed",
                "b_speed",
                "a_mem_mb",
                "b_mem_mb",
            ]
        )
    )
    cluster = ClusterState(ClusterSpec.parse(CLUSTER))
    return build_workload(trace, cluster, scaling, interference, name="scale-synthetic")


class ReferencePriority(SchedulingPolicy):
    """Rank-everything reference: when the waiting jobs do not all fit in the free GPUs, every
    active job is sorted by `key` (stable: ties keep submission order) and GPUs are filled in
    that order at requested sizes, a job that does not fit skipped; else every waiting job
    starts and running jobs keep their GPUs. `fifo` ranks by submission and never preempts;
    `tiresias` ranks by (queue of attained GPU-seconds, submit time) and wakes up at the next
    threshold crossing while a job waits."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self.name = f"reference-{kind}"

    def key(self, state, now: float) -> tuple[int, float]:
        if self.kind == "fifo":
            return (0, state.job.submit_time_s)
        return (bisect.bisect_right(THRESHOLDS, state.attained_at(now)), state.job.submit_time_s)

    def schedule(self, ctx: RoundContext) -> list[Allocation]:
        waiting = list(ctx.jobs.waiting())
        if sum(s.job.num_gpus for s in waiting) <= ctx.cluster.free_gpus:
            allocations = [Allocation(s.job_id, s.job.num_gpus, s.batch_size) for s in waiting]
            return Schedule(allocations, keep_running=True)
        if self.kind == "fifo":  # FIFO never preempts: only free GPUs, in submission order
            free, start = ctx.cluster.free_gpus, Schedule(keep_running=True)
            for state in waiting:
                if state.job.num_gpus <= free:
                    start.append(Allocation(state.job_id, state.job.num_gpus, state.batch_size))
                    free -= state.job.num_gpus
            return start
        ranked = sorted(ctx.jobs.active.values(), key=lambda s: self.key(s, ctx.now))
        capacity, out = ctx.cluster.total_gpus, []
        for state in ranked:
            if state.job.num_gpus <= capacity:
                out.append(Allocation(state.job_id, state.job.num_gpus, state.batch_size))
                capacity -= state.job.num_gpus
        return out

    def next_wakeup(self, ctx: RoundContext) -> float | None:
        if self.kind == "fifo" or not ctx.jobs.num_waiting:
            return None
        times = []
        for state in ctx.jobs.running():
            attained = state.attained_at(ctx.now)
            queue = bisect.bisect_right(THRESHOLDS, attained)
            if queue < len(THRESHOLDS):
                times.append(ctx.now + (THRESHOLDS[queue] - attained) / state.num_gpus + 1e-6)
        return min(times, default=None)


class ReferenceSrtf(SrtfPredictedPolicy):
    """Rank-everything reference for `srtf-predicted`: when the waiting jobs do not all fit in
    the free GPUs, every active job is read from its state, ranked (`blended_order`) and GPUs
    are filled in that order at requested sizes, a job that does not fit skipped, as a full
    list of the jobs to hold GPUs."""

    name = "reference-srtf-predicted"

    def schedule(self, ctx: RoundContext) -> list[Allocation]:
        predictor = ctx.predictor
        assert predictor is not None
        predictor.predict_durations([s.job for s in ctx.jobs.waiting()])
        self._learn_from_finished(ctx)
        start = start_all_waiting(ctx)
        if start is not None:
            return start
        self._record_outcomes(predictor)
        states = list(ctx.jobs.active.values())
        intervals = predictor.duration_intervals([s.job for s in states])
        ran = np.array([s.run_time_at(ctx.now) for s in states])
        submit = np.array([s.job.submit_time_s for s in states])
        queues = np.array([self.queue_of(s.attained_at(ctx.now)) for s in states])
        widths = _log_width(intervals[:, 0], intervals[:, 2])
        weights = trust_weights(widths, self.calibration(intervals))
        picked = blended_order(queues, predicted_remaining(intervals, ran), weights, submit)
        capacity, out = ctx.cluster.total_gpus, []
        for i in picked:
            state = states[i]
            if state.job.num_gpus <= capacity:
                out.append(Allocation(state.job_id, state.job.num_gpus, state.batch_size))
                capacity -= state.job.num_gpus
        return out


class NoisyDurations:
    """Duration predictions for `scale_workload()`'s jobs: a p50 off the truth by a seeded
    log-normal factor, and p10/p90 intervals of seeded widths from nothing to wider than the
    population (so the trust weights spread over [0, 1]); `exact` gives the truth, p10 = p90."""

    def __init__(self, workload: Workload, exact: bool, seed: int = 7) -> None:
        truth = {j.job_id: float(j.duration_s) for j in workload.jobs}
        rng = np.random.default_rng(seed)
        n = len(truth)
        p50 = np.array(list(truth.values()))
        half = np.zeros(n)
        if not exact:
            p50 = p50 * np.exp(rng.normal(0.0, 0.5, n))
            half = rng.uniform(0.0, 2.5, n)
        bounds = zip(p50 / np.exp(half), p50, p50 * np.exp(half), strict=True)
        self.rows = dict(zip(truth, bounds, strict=True))

    def predict(self, task: str, rows: pd.DataFrame) -> pd.DataFrame:
        assert task == "duration"
        v = np.array([self.rows[j] for j in rows["job_id"]], dtype=float).reshape(-1, 3)
        return pd.DataFrame(
            {"duration_s_p10": v[:, 0], "duration_s": v[:, 1], "duration_s_p90": v[:, 2]}
        )


def outcome(result: SimResult) -> dict[str, tuple[float, int]]:
    """Per job: (JCT in seconds, preemptions)."""
    return {
        job_id: (state.finish_s - state.job.submit_time_s, state.preemptions)
        for job_id, state in result.jobs.all.items()
    }


def digest(result: SimResult) -> str:
    """A digest of every job's JCT (to the millisecond) and preemption count, in id order."""
    text = ";".join(
        f"{job_id}:{jct:.3f}:{preempted}"
        for job_id, (jct, preempted) in sorted(outcome(result).items())
    )
    return hashlib.sha256(text.encode()).hexdigest()[:16]


@pytest.fixture(scope="module")
def workload() -> Workload:
    return scale_workload()


@pytest.fixture(scope="module")
def ours(workload: Workload) -> Callable[[str], SimResult]:
    """Each policy's run of the workload, simulated once for the tests of both its answers
    (they only read it)."""
    return functools.cache(
        lambda policy: simulate(workload, ClusterSpec.parse(CLUSTER), make_policy(policy))
    )


@pytest.mark.parametrize("policy", ["fifo", "tiresias"])
def test_priority_policies_give_the_recorded_answers(workload, ours, policy):
    result = ours(policy)
    assert {j.num_gpus for j in workload.jobs} == set(SIZES)
    assert max(waiting for _, _, waiting in result.accounting.timeline) >= 250
    assert len(result.jobs.all) == NUM_JOBS
    assert digest(result) == RECORDED[policy]


@pytest.mark.slow
@pytest.mark.parametrize("policy", ["fifo", "tiresias"])
def test_priority_policies_match_the_rank_everything_reference(workload, ours, policy):
    jobs = outcome(ours(policy))
    reference = simulate(workload, ClusterSpec.parse(CLUSTER), ReferencePriority(policy))
    assert digest(reference) == RECORDED[policy]
    assert len(jobs) == NUM_JOBS
    assert jobs == outcome(reference)
    if policy == "tiresias":
        assert sum(preempted for _, preempted in jobs.values()) > 10_000  # demotions preempt


def srtf_run(workload: Workload, policy: SchedulingPolicy, exact: bool) -> SimResult:
    predictor = JobPredictor(NoisyDurations(workload, exact), gpus_per_node=8)
    # every duration asked for in one backend call, as `run_simulation` does (a job's
    # prediction depends only on what is known at its submission): asked job by job at
    # arrival, building the backend's frames was half of each run's CPU
    predictor.predict_durations(workload.jobs)
    return simulate(workload, ClusterSpec.parse(CLUSTER), policy, predictor=predictor)


@pytest.mark.slow
@pytest.mark.parametrize("exact", [True, False], ids=["exact", "noisy"])
def test_srtf_predicted_matches_the_rank_everything_reference(exact):
    workload = scale_workload(SRTF_JOBS)
    jobs = outcome(srtf_run(workload, make_policy("srtf-predicted"), exact))
    assert len(jobs) == SRTF_JOBS
    assert sum(preempted for _, preempted in jobs.values()) > 100
    assert jobs == outcome(srtf_run(workload, ReferenceSrtf(), exact))


@pytest.mark.slow
def test_srtf_predicted_columns_made_again_give_the_same_answers(monkeypatch):
    """With no slack, the active jobs' columns are dropped at each round that ranks nothing
    once more jobs changed than are active, and made again from the table at the next
    ranking round: the answers stay the reference's."""
    made = []

    class Counted(srtf_predicted.ActiveColumns):
        def __init__(self, jobs) -> None:
            made.append(len(jobs.active))
            super().__init__(jobs)

    monkeypatch.setattr(srtf_predicted, "_REBUILD_SLACK", 0)
    monkeypatch.setattr(srtf_predicted, "ActiveColumns", Counted)
    workload = scale_workload(SRTF_JOBS)
    jobs = outcome(srtf_run(workload, make_policy("srtf-predicted"), exact=False))
    assert len(made) > 3  # made again
    assert jobs == outcome(srtf_run(workload, ReferenceSrtf(), exact=False))


POLLUX_JOBS = 4_000  # its full answer ranks every active job each round


class FullPollux(PolluxPolicy):
    """`pollux` answering every round with its full schedule (every active job ranked, every
    running job placed again), as it does when some job progresses statistically."""

    def configure(self, workload: Workload) -> None:
        super().configure(workload)
        self._fixed_sizes = False


@pytest.mark.parametrize("min_run_s", [0.0, 600.0])
def test_pollux_with_fixed_sizes_answers_as_its_full_schedule(min_run_s):
    """With no statistical job, `pollux` keeps its ranking incrementally and lists only what
    changes (and the jobs on several nodes, which it may move onto fewer): every job ends when
    and as often preempted as under the full answer, its placements' moves included; also
    with a quantum that holds dropped jobs (they come first, in start order, either way)."""
    workload = scale_workload(POLLUX_JOBS)
    assert not workload.statistical_jobs
    spec = ClusterSpec.parse(CLUSTER)
    incremental, full = make_policy("pollux"), FullPollux()
    ours = simulate(workload, spec, incremental, min_run_s=min_run_s)
    reference = simulate(workload, spec, full, min_run_s=min_run_s)
    assert incremental._queues is not None and full._queues is None  # the two paths ran
    jobs = outcome(ours)
    assert len(jobs) == POLLUX_JOBS
    assert jobs == outcome(reference)
    preempted = sum(preempted for _, preempted in jobs.values())
    # its order preempts; the quantum holds some of those preemptions off
    assert preempted > 2000 if min_run_s == 0 else 100 < preempted < 2000
    moved = sum(s.resizes for s in reference.jobs.all.values())
    assert moved > 0 and moved == sum(s.resizes for s in ours.jobs.all.values())
