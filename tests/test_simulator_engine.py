"""The event-driven simulator: true progress, costs and accounting, on small synthetic job
types whose figures are chosen by hand so every expected number can be checked on paper."""

from __future__ import annotations

import pandas as pd
import pytest

from perfcast.scheduler.core import ClusterSpec, ClusterState
from perfcast.scheduler.core.predictions import JobPredictor
from perfcast.scheduler.oracle import OracleBackend
from perfcast.scheduler.policies import make_policy
from perfcast.scheduler.sim.catalog import InterferenceCatalog, ScalingCatalog
from perfcast.scheduler.sim.costs import Costs
from perfcast.scheduler.sim.engine import simulate
from perfcast.scheduler.sim.metrics import job_table, summarize
from perfcast.scheduler.sim.workload import Workload, build_workload

# synthetic job types: "fast" 1 s/step alone at local batch 32, scaling to 1.25 s on 2 GPUs
# and 1.5 s on 4; "slow" 2 s/step at every size (no scaling penalty).
SYNTHETIC_SCALING = pd.DataFrame(
    {
        "job": ["fast"] * 3 + ["slow"] * 3,
        "gpu_type": ["v100"] * 6,
        "num_nodes": [1] * 6,
        "num_gpus": [1, 2, 4] * 2,
        "local_batch_size": [32] * 6,
        "step_time_s": [1.0, 1.25, 1.5, 2.0, 2.0, 2.0],
    }
)
SYNTHETIC_PAIRS = pd.DataFrame(
    {
        "gpu_type": ["v100"],
        "a_job": ["fast"],
        "a_batch_size": [32],
        "b_job": ["slow"],
        "b_batch_size": [32],
        "a_speed": [0.8],
        "b_speed": [0.7],
        "a_mem_mb": [4000.0],
        "b_mem_mb": [5000.0],
    }
)


def synthetic_workload(rows: list[tuple[str, float, str, int, float]]) -> Workload:
    """Jobs (id, submit, type, gpus, duration alone at that size) on the synthetic types."""
    scaling = ScalingCatalog(SYNTHETIC_SCALING, gpus_per_node=4)
    trace = pd.DataFrame(rows, columns=["job_id", "submit_time_s", "job", "num_gpus", "duration_s"])
    cluster = ClusterState(ClusterSpec.parse("2x4:v100"))
    return build_workload(trace, cluster, scaling, InterferenceCatalog(SYNTHETIC_PAIRS))


def run(workload: Workload, spec: str, policy: str, **costs: float):
    spec_ = ClusterSpec.parse(spec)
    options = {"memory_mb": workload.interference.memory_mb} if policy == "gandiva" else {}
    predictor = JobPredictor(
        OracleBackend(workload.scaling, workload.interference, workload.jobs), gpus_per_node=4
    )
    return simulate(
        workload, spec_, make_policy(policy, **options), predictor=predictor, costs=Costs(**costs)
    )


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
