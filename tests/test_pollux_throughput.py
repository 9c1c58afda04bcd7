"""Pollux's throughput model as the `pollux` policy fits it from what jobs report
(scheduler/facts/throughput.py): the fit recovers a model from its own times, the
model's step time never falls as a step does more, and a job the policy has never seen run
gets one GPU, then at most twice the GPUs it has run on (Pollux's perfect scaling, `prior=none`)
or what the scaling predictor's prior makes worth it (the default)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from perfcast.datasets.fetch import shared_data_available
from perfcast.scheduler.core import ClusterSpec, ClusterState
from perfcast.scheduler.core.decisions import Run
from perfcast.scheduler.core.jobs import JobTable
from perfcast.scheduler.core.loop import RoundContext, apply_decision
from perfcast.scheduler.facts.throughput import (
    JobProfile,
    ThroughputParams,
    fit_throughput,
)
from perfcast.scheduler.policies import PolicyOptionError, make_policy

TRUE = ThroughputParams(
    alpha_c=0.05, beta_c=0.002, alpha_n=0.2, beta_n=0.02, alpha_r=0.03, beta_r=0.004, gamma=1.5
)
CONFIGS = [  # (nodes, replicas, samples per GPU per pass): one node and across nodes
    (1, 1, 32), (1, 1, 64), (1, 2, 32), (1, 4, 64), (1, 4, 16), (2, 8, 32), (4, 16, 64),
    (3, 12, 16), (2, 6, 64),
]  # fmt: skip


def test_the_fit_recovers_step_times_from_the_models_own_reports() -> None:
    nodes, replicas, atomic = (np.array(c) for c in zip(*CONFIGS, strict=True))
    fitted = fit_throughput(
        nodes, replicas, atomic, TRUE.pass_time(atomic), TRUE.optim_time(nodes, replicas, atomic)
    )
    for model in (TRUE, fitted):  # and configurations never reported
        assert model.pass_time(128) > 0
    asked = [(1, 3, 48), (2, 8, 128), (8, 32, 32), (1, 1, 8)]
    n, r, a = (np.array(c) for c in zip(*asked, strict=True))
    for accum in (0, 2):
        truth, got = TRUE.step_time(n, r, a, accum), fitted.step_time(n, r, a, accum)
        np.testing.assert_allclose(got, truth, rtol=0.01)


def test_reports_from_one_gpu_only_predict_perfect_scaling() -> None:
    profile = JobProfile()
    profile.report(1, 1, 64, 0.2, 0.2)
    params = profile.params
    one = float(params.step_time(1, 1, 64, 0))
    for nodes, replicas in ((1, 2), (1, 4), (2, 8)):  # no sync model yet: optimistic
        assert float(params.step_time(nodes, replicas, 64, 0)) == pytest.approx(one, rel=1e-3)
    assert profile.max_replicas == 2


def true_slowdowns(atomic: int) -> dict[tuple[int, int], float]:
    """A prior that knows TRUE's synchronization: its step on each placement over one GPU's."""
    one = float(TRUE.optim_time(1, 1, atomic))
    placements = [(1, 2), (1, 3), (1, 4), (2, 8), (4, 16)]
    return {(n, r): float(TRUE.optim_time(n, r, atomic)) / one for n, r in placements}


def test_with_a_prior_one_gpu_reports_predict_the_priors_sync_not_perfect_scaling() -> None:
    profile = JobProfile(prior=true_slowdowns)
    assert not profile.explores_freely  # nothing reported yet: nothing to scale
    for atomic in (16, 64):
        profile.report(1, 1, atomic, float(TRUE.pass_time(atomic)), float(TRUE.pass_time(atomic)))
    assert profile.explores_freely
    asked = [(1, 2, 32), (1, 4, 64), (2, 8, 16), (4, 16, 64), (3, 12, 32)]
    n, r, a = (np.array(c) for c in zip(*asked, strict=True))
    np.testing.assert_allclose(
        profile.params.step_time(n, r, a, 0), TRUE.step_time(n, r, a, 0), rtol=0.02
    )
    assert profile.max_replicas == 2  # Pollux's cap, which the policy no longer needs to apply


def test_a_reported_placement_replaces_the_prior_for_its_kind_only() -> None:
    # the prior says one node costs nothing and spreading 3x; the job then reports one node at
    # twice its one-GPU step: one node follows the report, across nodes still the prior
    def prior(atomic: int) -> dict[tuple[int, int], float]:
        return {(1, 2): 1.0, (1, 4): 1.0, (2, 8): 3.0, (4, 16): 3.0}

    profile = JobProfile(prior=prior)
    profile.report(1, 1, 32, 0.1, 0.1)
    assert float(profile.params.step_time(1, 4, 32, 0)) == pytest.approx(0.1, rel=0.05)
    assert float(profile.params.step_time(2, 8, 32, 0)) == pytest.approx(0.3, rel=0.1)
    profile.report(1, 4, 32, 0.1, 0.2)
    assert float(profile.params.step_time(1, 3, 32, 0)) > 0.15  # the report, not the prior
    assert float(profile.params.step_time(2, 8, 32, 0)) == pytest.approx(0.3, rel=0.15)


def test_never_faster_across_nodes_than_on_one_when_never_seen_across_nodes() -> None:
    profile = JobProfile()
    for replicas, sync in ((1, 0.0), (2, 0.05), (4, 0.08)):
        step = 0.2 + sync
        profile.report(1, replicas, 32, 0.2, step)
    params = profile.params
    assert float(params.sync_time(2, 8)) >= float(params.sync_time(1, 8))
    assert profile.max_replicas == 8


time_param = st.floats(1e-4, 2.0)


@settings(max_examples=100, deadline=None)
@given(
    params=st.builds(
        ThroughputParams,
        time_param,
        time_param,
        time_param,
        time_param,
        time_param,
        time_param,
        st.floats(1.0, 10.0),
    ),
    nodes=st.integers(1, 16),
    replicas=st.integers(1, 64),
    atomic=st.integers(1, 1024),
    accum=st.integers(0, 8),
)
# one GPU: nothing synchronized, and (1515^g + 0^g)^(1/g) rounded to a few ulps below 1515
@example(
    params=ThroughputParams(1.0, 2.0, 1.0, 1.0, 1.0, 1.0, 1.6649223972569107),
    nodes=1, replicas=1, atomic=757, accum=0,
)  # fmt: skip
def test_a_step_that_does_more_never_takes_less_time(params, nodes, replicas, atomic, accum):
    nodes = min(nodes, replicas)
    base = float(params.step_time(nodes, replicas, atomic, accum))
    assert float(params.step_time(nodes, replicas, atomic + 1, accum)) >= base
    assert float(params.step_time(nodes, replicas, atomic, accum + 1)) >= base
    same_spread = 1 if nodes == 1 else max(nodes, 2)
    more = float(params.step_time(same_spread, replicas + 1, atomic, accum))
    assert more >= float(params.step_time(same_spread, replicas, atomic, accum)) - 1e-12
    compute, sync = params.pass_time(atomic), params.sync_time(nodes, replicas)
    assert float(params.optim_time(nodes, replicas, atomic)) >= max(compute, sync) - 1e-12


def test_an_unknown_model_or_prior_option_is_refused_by_name() -> None:
    with pytest.raises(PolicyOptionError, match="model='magic'"):
        make_policy("pollux", model="magic")
    with pytest.raises(PolicyOptionError, match=r"prior='oracle'.*scaling, none"):
        make_policy("pollux", prior="oracle")


SPEC = ClusterSpec.parse("16x4:t4")


def cifar10_after_an_hour_on_one_gpu(**options):
    """Workload-1's first cifar10 job under `pollux` with `options`, alone on the cluster: its
    allocation at its first round, and at a round an hour later, having run on one GPU.
    Returns (policy, job, its application, first allocation, second allocation)."""
    from perfcast.scheduler.sim.run import prepare_workload

    workload = prepare_workload("pollux-workloads:workloads/workload-1", SPEC)
    policy = make_policy("pollux", **options)
    policy.configure(workload)
    jobs, cluster = JobTable(), ClusterState(SPEC)
    job = next(j for j in workload.jobs if j.job_id.endswith("/cifar10-0"))
    jobs.add(job)
    (first,) = policy.schedule(RoundContext(0.0, cluster, jobs))
    slots = cluster.find_free(1, None)
    apply_decision(Run(job.job_id, slots, first.batch_size), cluster, jobs, 0.0)
    (second,) = policy.schedule(RoundContext(3600.0, cluster, jobs))
    return policy, job, workload.statistical_model(job.job_type), first, second


@pytest.mark.skipif(not shared_data_available(), reason="the public datasets are not available")
def test_a_job_gets_one_gpu_then_at_most_twice_the_gpus_it_ran_on() -> None:
    # fitted, assuming perfect scaling
    policy, job, app, first, alloc = cifar10_after_an_hour_on_one_gpu(prior="none")
    assert (first.num_gpus, first.batch_size) == (1, app.init_batch)  # nothing reported yet
    assert alloc.num_gpus <= 2  # cifar10 scales, but it has run on one GPU only
    profile = policy.profiles[job.job_id]  # profile=job, the default: its own reports
    assert list(profile.reports) == [(1, 1, app.init_batch)]
    step, sync = app.step_and_sync((1,), app.init_batch)
    assert profile.reports[(1, 1, app.init_batch)] == pytest.approx((step - sync, step))


@pytest.mark.skipif(not shared_data_available(), reason="the public datasets are not available")
def test_with_the_scaling_prior_a_job_that_ran_on_one_gpu_may_take_more_than_twice() -> None:
    # the default prior: perfcast's scaling predictor, trained without the T4 cluster's
    # multi-GPU measurements, says what synchronizing costs where the job has not run, so
    # Pollux's cap (twice the GPUs run on) is not needed
    policy, job, app, first, alloc = cifar10_after_an_hour_on_one_gpu()
    assert first.num_gpus == 1  # nothing reported yet: nothing to scale the prior from
    profile = policy.profiles[job.job_id]
    assert profile.explores_freely and alloc.num_gpus > 2
    slowdowns = profile.prior(app.init_batch)
    assert min(slowdowns.values()) > 1.0  # synchronizing is never free
    assert slowdowns[(4, 16)] > slowdowns[(1, 4)]  # nor spreading over nodes


@pytest.mark.skipif(not shared_data_available(), reason="the public datasets are not available")
@pytest.mark.parametrize("profile", ["job", "type"])
def test_a_new_job_learns_from_others_of_its_type_only_when_pooling_is_asked(profile) -> None:
    # real Pollux fits each job from its own reports: a second cifar10 job starts at one GPU
    # and its own first report, however much the first one reported; pooling (profile=type)
    # is extra knowledge, with which the newcomer starts from the type's model and cap
    from perfcast.scheduler.sim.run import prepare_workload

    workload = prepare_workload("pollux-workloads:workloads/workload-1", SPEC)
    policy = make_policy("pollux", profile=profile)
    policy.configure(workload)
    jobs, cluster = JobTable(), ClusterState(SPEC)
    first, second = [j for j in workload.jobs if j.job_type == "resnet18-cifar10"][:2]
    jobs.add(first)
    policy.schedule(RoundContext(0.0, cluster, jobs))
    apply_decision(Run(first.job_id, cluster.find_free(4, None), 512), cluster, jobs, 0.0)
    policy.schedule(RoundContext(600.0, cluster, jobs))  # the first job reports 4 GPUs
    jobs.add(second)
    allocs = {a.job_id: a for a in policy.schedule(RoundContext(1200.0, cluster, jobs))}
    if profile == "job":
        assert second.job_id not in policy.profiles and allocs[second.job_id].num_gpus == 1
    else:
        assert policy.profiles[second.job_type].max_replicas == 8
        assert allocs[second.job_id].num_gpus > 1  # the pooled model says cifar10 scales


def test_a_configuration_run_predicts_what_it_reported_and_others_what_the_model_does() -> None:
    profile = JobProfile()
    for nodes, replicas, atomic in CONFIGS:
        profile.report(
            nodes,
            replicas,
            atomic,
            float(TRUE.pass_time(atomic)),
            float(TRUE.optim_time(nodes, replicas, atomic)),
        )
    slow = 2.0 * float(TRUE.optim_time(1, 2, 32))  # one placement slower than any model says
    profile.report(1, 2, 32, float(TRUE.pass_time(32)), slow)
    params = profile.params
    for accum in (0, 3):
        expected = accum * float(TRUE.pass_time(32)) + slow
        assert float(profile.step_time(1, 2, [32], [accum])[0]) == pytest.approx(expected)
    # another local batch on the same GPUs: the model scaled by the ratio reported nearest
    ratio = slow / float(params.optim_time(1, 2, 32))
    got = float(profile.step_time(1, 2, [48], [0])[0])
    assert got == pytest.approx(ratio * float(params.optim_time(1, 2, 48)))
    # never run on 3 GPUs of one node: the fitted model alone
    never = float(profile.step_time(1, 3, [48], [1])[0])
    assert never == pytest.approx(float(params.step_time(1, 3, 48, 1)))
