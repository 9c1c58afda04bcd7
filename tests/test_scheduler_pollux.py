"""The goodput-aware `pollux` policy on the Pollux artifact's own jobs (shared data)."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from perfcast.datasets.fetch import shared_data_available
from perfcast.scheduler.core import ClusterSpec, ClusterState, JobStatus
from perfcast.scheduler.core.decisions import Run
from perfcast.scheduler.core.jobs import JobTable
from perfcast.scheduler.core.loop import Allocation, RoundContext
from perfcast.scheduler.policies import PolicyOptionError, make_policy
from perfcast.scheduler.policies.pollux import PackingPlacement, placement_of
from perfcast.scheduler.sim.costs import Costs
from perfcast.scheduler.sim.engine import simulate
from perfcast.scheduler.sim.run import prepare_workload

pytestmark = pytest.mark.skipif(
    not shared_data_available(), reason="the public datasets are not available"
)
SPEC = ClusterSpec.parse("16x4:t4")
SHORT = ("ncf-movielens", "resnet18-cifar10", "bert-squad", "deepspeech2-arctic")


@pytest.fixture(scope="module")
def workload():
    return prepare_workload("pollux-workloads:workloads/workload-1", SPEC)


def first_round(workload, job_ids, model="oracle"):
    policy = make_policy("pollux", model=model)
    policy.configure(workload)
    jobs = JobTable()
    for job in workload.jobs:
        if job.job_id.rsplit("/", 1)[1] in job_ids:
            jobs.add(job)
    return policy, policy.schedule(RoundContext(0.0, ClusterState(SPEC), jobs))


def test_a_lone_job_gets_more_gpus_and_the_batch_with_the_best_goodput(workload):
    policy, plan = first_round(workload, {"cifar10-0"})
    (alloc,) = plan
    assert alloc.num_gpus > 1  # cifar10 scales: the idle cluster's GPUs go to it
    app = workload.statistical_model("resnet18-cifar10")
    assert app.init_batch <= alloc.batch_size <= app.batches[-1]
    state = JobTable().add(next(j for j in workload.jobs if j.job_id.endswith("/cifar10-0")))
    chosen = policy.goodput(state, alloc.num_gpus)[0]
    placement = placement_of(alloc.num_gpus)
    for batch in (app.init_batch, int(app.batches[-1])):  # at least as good as either end
        assert chosen >= app.rate(placement, batch, 0.0) - 1e-9


def test_ncf_keeps_the_artifacts_fixed_batch_on_one_gpu(workload):
    _, plan = first_round(workload, {"ncf-2"})
    assert [(a.num_gpus, a.batch_size) for a in plan] == [(1, 32768)]


@pytest.mark.parametrize(
    ("model", "fairness"), [("fitted", 0.0), ("oracle", 0.0), ("fitted", -1.0)]
)
def test_first_jobs_of_a_workload_all_finish_their_work(workload, model, fairness):
    workload = dataclasses.replace(workload, jobs=workload.jobs[:8])  # the fixture unchanged
    costs = Costs(restart_s=30.0, start_s=30.0, resize_s=30.0)
    policy = make_policy("pollux", model=model, fairness=fairness)
    result = simulate(workload, SPEC, policy, costs=costs, round_s=60.0)
    for state in result.jobs.all.values():
        assert state.status is JobStatus.DONE
        assert result.accounting.samples[state.job_id] >= state.job.total_samples * (1 - 1e-6)
    assert result.accounting.placement_gpu_s == pytest.approx(
        sum(s.attained_gpu_s for s in result.jobs.all.values()), rel=1e-6
    )


def test_only_a_move_to_other_gpus_counts_as_a_restart(workload):
    """The restart discount counts reallocations, as the artifact's `num_restarts`: a new batch
    on the same GPUs (a resize in the job's counters) continues in place."""
    policy = make_policy("pollux")
    policy.configure(workload)
    jobs, cluster = JobTable(), ClusterState(SPEC)
    state = jobs.add(next(j for j in workload.jobs if j.job_id.endswith("/cifar10-0")))

    def round_with(gpus, at):
        state.gpus = gpus
        policy._count_restarts(RoundContext(at, cluster, jobs))
        return policy.restarts[state.job_id]

    two, three = ((0, 0), (0, 1)), ((0, 0), (0, 1), (0, 2))
    assert round_with((), 0.0) == 0  # waiting
    assert round_with(two, 60.0) == 0  # first start
    state.batch_size, state.resizes = 2 * state.batch_size, state.resizes + 1
    assert round_with(two, 120.0) == 0  # a new batch in place
    assert round_with(three, 180.0) == 1  # resized
    assert round_with((), 240.0) == 1  # suspended
    assert round_with(three, 300.0) == 2  # resumed, on the same GPUs or not


def test_placement_keeps_jobs_on_the_fewest_nodes(workload):
    """Goodput is estimated for packed placements: a shrink keeps the job's fullest node, and
    a job spread over more nodes than it needs moves onto as few as the free GPUs allow."""
    placement, jobs = PackingPlacement(), JobTable()
    ctx = RoundContext(0.0, ClusterState(ClusterSpec.parse("3x4:t4")), jobs)
    a, b = (jobs.add(job) for job in workload.jobs[:2])
    ctx.commit(Run(a.job_id, ((0, 0), (1, 0), (1, 1), (1, 2)), a.job.batch_size))
    ctx.commit(Run(b.job_id, ((0, 1), (2, 0)), b.job.batch_size))
    placement.place(
        [Allocation(a.job_id, 3, a.batch_size), Allocation(b.job_id, 2, b.batch_size)], ctx
    )
    assert set(a.gpus) == {(1, 0), (1, 1), (1, 2)}
    assert b.num_gpus == 2 and len({node for node, _ in b.gpus}) == 1
    placement.place(  # a grows onto its own node first, then the fewest others
        [Allocation(a.job_id, 6, a.batch_size), Allocation(b.job_id, 2, b.batch_size)], ctx
    )
    assert a.num_gpus == 6 and len({node for node, _ in a.gpus}) == 2
    assert {(1, 0), (1, 1), (1, 2)} <= set(a.gpus)


def test_a_grow_past_its_own_node_takes_no_gpu_twice(workload):
    """The free GPUs of the job's own node, already taken, are not offered again for the
    rest (a job was once placed on 16 slots holding 12 GPUs: its step time was NaN)."""
    jobs = JobTable()
    ctx = RoundContext(0.0, ClusterState(ClusterSpec.parse("3x4:t4")), jobs)
    a, b = (jobs.add(job) for job in workload.jobs[:2])
    ctx.commit(Run(a.job_id, ((1, 0), (1, 1)), a.job.batch_size))
    ctx.commit(Run(b.job_id, ((0, 0), (0, 1), (0, 2), (0, 3)), b.job.batch_size))
    PackingPlacement().place(
        [Allocation(a.job_id, 5, a.batch_size), Allocation(b.job_id, 4, b.batch_size)], ctx
    )
    assert a.num_gpus == 5 and len(set(a.gpus)) == 5


def test_a_positive_fairness_power_is_refused():
    with pytest.raises(PolicyOptionError, match=r"fairness=0\.5"):
        make_policy("pollux", fairness=0.5)


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    picks=st.lists(st.integers(0, 152), min_size=2, max_size=5, unique=True),
    gaps=st.lists(st.floats(0, 3600).map(lambda t: round(t, 1)), min_size=5, max_size=5),
    spec=st.sampled_from(["1x4:t4", "2x4:t4"]),
    options=st.sampled_from(
        [{"model": "fitted"}, {"model": "oracle"}, {"model": "fitted", "fairness": -1.0}]
    ),
)
def test_statistical_jobs_under_pollux_do_their_work_and_accounting_adds_up(
    workload, picks, gaps, spec, options
):
    """The invariants of tests/test_simulator_invariants.py for jobs whose progress counts
    statistical efficiency, under every way `pollux` decides: random few of the artifact's
    jobs, submitted at random gaps, on a node or two. Every job finishes with its work run;
    each holds its GPUs at least its 30 s start; the GPU-seconds placed are those held, and
    those run plus the (re)allocation delays paid."""
    # the shorter applications: an ImageNet or YOLOv3 job alone runs for days on 4 T4s
    short = [j for j in workload.jobs if j.job_type in SHORT]
    chosen, submit = [], 0.0
    for i, gap in zip(picks, gaps, strict=False):
        submit += gap
        chosen.append(dataclasses.replace(short[i % len(short)], submit_time_s=submit))
    whole = dataclasses.replace(workload, jobs=chosen)  # the fixture unchanged
    costs = Costs(restart_s=30.0, start_s=30.0, resize_s=30.0, migrate_s=30.0)
    policy = make_policy("pollux", **options)
    result = simulate(whole, ClusterSpec.parse(spec), policy, costs=costs, round_s=60.0)
    acc, states = result.accounting, list(result.jobs.all.values())
    for state in states:
        assert state.status is JobStatus.DONE
        assert acc.samples[state.job_id] >= state.job.total_samples * (1 - 1e-6)
        assert state.finish_s - state.first_start_s >= costs.start_s
    held = sum(s.attained_gpu_s for s in states)
    paid = sum(s.overhead_gpu_s for s in states)
    assert acc.placement_gpu_s == pytest.approx(held, rel=1e-6)
    assert acc.placement_gpu_s == pytest.approx(sum(acc.productive_gpu_s.values()) + paid, rel=1e-6)
