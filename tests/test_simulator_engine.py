"""The event-driven simulator: true progress, costs and accounting, on small synthetic job
types whose figures are chosen by hand so every expected number can be checked on paper."""

from __future__ import annotations

import pytest
from scheduler_synthetic import run, synthetic_workload

from perfcast.datasets.fetch import shared_data_available
from perfcast.scheduler.core import ClusterSpec
from perfcast.scheduler.policies import make_policy
from perfcast.scheduler.sim.costs import Costs
from perfcast.scheduler.sim.engine import simulate
from perfcast.scheduler.sim.metrics import job_table, summarize
from perfcast.scheduler.sim.run import prepare_workload


def test_a_job_alone_takes_its_traced_duration():
    workload = synthetic_workload([("a", 0.0, "fast", 2, 500.0), ("b", 100.0, "slow", 1, 40.0)])
    result = run(workload, "2x4:v100", "fifo")
    jobs = job_table(result).set_index("job_id")
    assert jobs.loc["a", "jct_s"] == pytest.approx(500.0)
    assert jobs.loc["b", "jct_s"] == pytest.approx(40.0)
    assert result.makespan_s == pytest.approx(500.0)


def test_fifo_queues_and_accounting_adds_up():
    workload = synthetic_workload(
        [("a", 0.0, "fast", 4, 100.0), ("b", 10.0, "slow", 4, 50.0), ("c", 20.0, "fast", 2, 30.0)]
    )
    result = run(workload, "1x4:v100", "fifo")
    jobs = job_table(result).set_index("job_id")
    assert jobs.loc["b", "start_s"] == pytest.approx(100.0)
    assert jobs.loc["c", "start_s"] == pytest.approx(150.0)  # FIFO: c waits behind b
    acc = result.accounting
    per_job = sum(s.attained_gpu_s for s in result.jobs.all.values())
    work = sum(acc.productive_gpu_s.values())
    overhead = sum(s.overhead_gpu_s for s in result.jobs.all.values())
    assert acc.placement_gpu_s == pytest.approx(per_job)
    assert acc.placement_gpu_s == pytest.approx(work + overhead)
    assert work == pytest.approx(4 * 100 + 4 * 50 + 2 * 30)
    summary = summarize(result)
    assert summary["utilization"] == pytest.approx((4 * 100 + 4 * 50 + 2 * 30) / (4 * 180))


def test_preemption_pays_the_restart_cost_and_accounting_still_adds_up():
    # one GPU, tiresias with a 100 GPU-s first queue: "long" is demoted at t=100 and "late"
    # (arrived at 50, waiting in the first queue) preempts it
    workload = synthetic_workload(
        [("long", 0.0, "slow", 1, 400.0), ("late", 50.0, "slow", 1, 60.0)]
    )
    policy = make_policy("tiresias", thresholds=(100.0,))
    spec = ClusterSpec.parse("1x1:v100")
    result = simulate(workload, spec, policy, costs=Costs(restart_s=20.0))
    jobs = job_table(result).set_index("job_id")
    # late waits in queue 0 behind long (also queue 0, earlier) until long is demoted at 100
    assert jobs.loc["late", "start_s"] == pytest.approx(100.0)
    assert jobs.loc["late", "finish_s"] == pytest.approx(160.0)
    # long resumes at 160, pays 20 s restart, then its remaining 300 s
    assert jobs.loc["long", "finish_s"] == pytest.approx(160.0 + 20.0 + 300.0)
    assert jobs.loc["long", "preemptions"] == 1
    acc = result.accounting
    overhead = sum(s.overhead_gpu_s for s in result.jobs.all.values())
    assert overhead == pytest.approx(20.0)
    assert acc.placement_gpu_s == pytest.approx(sum(acc.productive_gpu_s.values()) + overhead)


def test_packed_pair_runs_at_measured_interference_speeds():
    # one GPU; "a" (fast) runs, "b" (slow) arrives and gandiva packs them (0.8 + 0.7 > 1,
    # 4000 + 5000 MB fits 16 GB)
    workload = synthetic_workload([("a", 0.0, "fast", 1, 100.0), ("b", 0.0, "slow", 1, 100.0)])
    result = run(workload, "1x1:v100", "gandiva")
    jobs = job_table(result).set_index("job_id")
    # both run at reduced speed; the pair's sum of speeds > 1 makes the makespan < 200 s
    assert jobs.loc["a", "finish_s"] == pytest.approx(100.0 / 0.8)
    # b: 125 s at 0.7 (87.5 s of work done), then alone for the remaining 12.5 s
    assert jobs.loc["b", "finish_s"] == pytest.approx(125.0 + 12.5)
    assert result.makespan_s < 200.0


def test_fixed_rounds_delay_decisions_to_the_next_tick():
    workload = synthetic_workload([("a", 0.0, "fast", 1, 100.0), ("b", 10.0, "slow", 1, 50.0)])
    spec = ClusterSpec.parse("1x1:v100")
    result = simulate(workload, spec, make_policy("fifo"), round_s=360.0)
    jobs = job_table(result).set_index("job_id")
    assert jobs.loc["a", "start_s"] == pytest.approx(0.0)  # the first arrival is on a tick
    assert jobs.loc["b", "start_s"] == pytest.approx(360.0)  # a finished at 100, b waits
    assert jobs.loc["b", "finish_s"] == pytest.approx(410.0)


@pytest.mark.skipif(not shared_data_available(), reason="the public datasets are not available")
def test_pollux_workload_batch_is_the_global_batch():
    # pollux workloads/workload-1.csv: "cifar10-0,107,cifar10,6,2048": 2,048 over 6 GPUs, not
    # 2,048 per GPU (12,288 in all)
    spec = ClusterSpec.parse("16x4:t4")
    workload = prepare_workload("pollux-workloads:workloads/workload-1", spec)
    cifar = next(j for j in workload.jobs if j.job_id == "workloads/workload-1/cifar10-0")
    assert (cifar.num_gpus, cifar.batch_size) == (6, 2048)
