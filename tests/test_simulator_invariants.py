"""Invariants of the simulator under every policy, over random small synthetic traces
(hypothesis): a job completes only once its work is done (plus the restarts it paid), and the
engine's accounting equals the integral of the placements, and its timeline integrates to the
busy GPU-seconds. The minimal stale-event case from
issue 12 is kept as a plain regression test."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from scheduler_synthetic import run, synthetic_workload

from perfcast.scheduler.core import ClusterSpec, JobStatus
from perfcast.scheduler.policies import make_policy, policy_names
from perfcast.scheduler.sim.costs import Costs
from perfcast.scheduler.sim.engine import SimResult, simulate
from perfcast.scheduler.sim.metrics import job_table

POLICIES = policy_names()

jobs_strategy = st.lists(
    st.tuples(
        st.floats(0, 500, allow_nan=False).map(lambda t: round(t, 1)),  # submit
        st.sampled_from(["fast", "slow"]),
        st.sampled_from([1, 2, 4]),  # GPUs
        st.floats(1, 2000, allow_nan=False).map(lambda d: round(d, 1)),  # duration alone
    ),
    min_size=1,
    max_size=6,
)


def fastest_run_s(result: SimResult, state, capacity: int) -> float:
    """The least time a job's work can take on this cluster: at the best throughput over every
    GPU count and the batch sizes elastic may choose (requested, or requested per-GPU batch x
    GPUs)."""
    job, scaling = state.job, result.workload.scaling
    local = job.batch_size // job.num_gpus
    best = max(
        scaling.throughput(job.job_type, "v100", n, batch)
        for n in range(1, capacity + 1)
        for batch in (job.batch_size, local * n)
        if batch >= n
    )
    return job.total_samples / best


def check_invariants(result: SimResult, costs: Costs, *, fixed_size: bool) -> None:
    acc = result.accounting
    states = list(result.jobs.all.values())
    capacity = result.cluster.total_gpus
    assert all(s.status is JobStatus.DONE for s in states)
    for s in states:
        # the work was run, independently of the capped per-job counter
        assert acc.samples.get(s.job_id, 0.0) >= s.job.total_samples * (1 - 1e-6)
        # it held GPUs for at least the time its work takes at its best rate (at its requested
        # size, where it runs at most at its solo rate: its traced duration), plus the delay of
        # its last (re)start, which it paid in full before completing
        least = s.job.duration_s if fixed_size else fastest_run_s(result, s, capacity)
        last_delay = costs.restart_s if s.preemptions else costs.start_s
        tolerance = 1e-6 * (1 + least)
        assert s.run_time_s >= least + last_delay - tolerance
        assert s.finish_s - s.first_start_s >= least + last_delay - tolerance
        if fixed_size:  # the delays it paid (GPU-s over its GPUs) come on top of its work
            assert s.run_time_s >= least + s.overhead_gpu_s / s.job.num_gpus - tolerance
    overhead = sum(s.overhead_gpu_s for s in states)
    held = sum(s.attained_gpu_s for s in states)
    productive = sum(acc.productive_gpu_s.values())
    assert acc.placement_gpu_s == pytest.approx(held, rel=1e-6, abs=1e-6)
    assert acc.placement_gpu_s == pytest.approx(productive + overhead, rel=1e-6, abs=1e-6)
    # the report's timeline is the same cluster: its GPU integral is the busy GPU-seconds, its
    # values stay within the cluster and the trace, and it ends empty
    times = [t for t, _, _ in acc.timeline]
    assert times == sorted(times)
    for _, gpus, waiting in acc.timeline:
        assert 0 <= gpus <= capacity and 0 <= waiting <= len(states)
    steps = itertools.pairwise(acc.timeline)
    integral = sum(gpus * (t1 - t0) for (t0, gpus, _), (t1, _, _) in steps)
    assert integral == pytest.approx(acc.busy_gpu_s, rel=1e-6, abs=1e-6)
    assert acc.timeline[-1][1:] == (0, 0)


@pytest.mark.parametrize("policy", POLICIES)
@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    rows=jobs_strategy,
    spec=st.sampled_from(["1x4:v100", "2x2:v100", "1x2:v100"]),
    restart_s=st.sampled_from([0.0, 20.0, 50.0]),
    start_s=st.sampled_from([0.0, 30.0]),
)
def test_every_job_completes_its_work_and_accounting_adds_up(
    policy: str, rows, spec: str, restart_s: float, start_s: float
) -> None:
    capacity = ClusterSpec.parse(spec).total_gpus
    trace = [
        (f"j{i}", submit, kind, min(gpus, capacity), duration)
        for i, (submit, kind, gpus, duration) in enumerate(rows)
    ]
    workload = synthetic_workload(trace)
    options = {"thresholds": (100.0,)} if policy == "tiresias" else None
    result = run(workload, spec, policy, options=options, restart_s=restart_s, start_s=start_s)
    costs = Costs(restart_s=restart_s, start_s=start_s)
    check_invariants(result, costs, fixed_size=policy != "elastic")


def test_a_resumed_job_does_not_finish_at_its_first_runs_completion_time():
    # issue 12's minimal case: 1 GPU, Tiresias with a 100 GPU-s threshold; A (1000 s) starts at
    # 0 and is demoted at 100; B (300 s) arrives at 200 and preempts it; B is demoted at 300 and
    # A (earlier submission, same queue) takes the GPU back, paying the 50 s restart. A's first
    # run had queued a completion event at 1000 s: it must not fire.
    workload = synthetic_workload([("A", 0.0, "slow", 1, 1000.0), ("B", 200.0, "slow", 1, 300.0)])
    result = simulate(
        workload,
        ClusterSpec.parse("1x1:v100"),
        make_policy("tiresias", thresholds=(100.0,)),
        costs=Costs(restart_s=50.0),
    )
    jobs = job_table(result).set_index("job_id")
    assert jobs.loc["A", "finish_s"] == pytest.approx(300.0 + 50.0 + 800.0)
    assert jobs.loc["B", "finish_s"] == pytest.approx(1150.0 + 50.0 + 200.0)
    check_invariants(result, Costs(restart_s=50.0), fixed_size=True)
