"""Synthetic job types for the simulator and policy tests (not test modules themselves): small
figures chosen by hand so every expected number can be checked on paper. Synthetic: never
reported as measured."""

from __future__ import annotations

import pandas as pd

from perfcast.scheduler.core import ClusterSpec, ClusterState
from perfcast.scheduler.core.predictions import JobPredictor
from perfcast.scheduler.facts.catalog import InterferenceCatalog, ScalingCatalog
from perfcast.scheduler.facts.oracle import OracleBackend
from perfcast.scheduler.policies import make_policy
from perfcast.scheduler.sim.costs import Costs
from perfcast.scheduler.sim.engine import SimResult, simulate
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


def run(
    workload: Workload,
    spec: str,
    policy: str,
    *,
    options: dict[str, object] | None = None,
    **costs: float,
) -> SimResult:
    """`policy` (built with `options`) on `workload`, deciding with oracle predictions."""
    spec_ = ClusterSpec.parse(spec)
    predictor = JobPredictor(
        OracleBackend(workload.scaling, workload.interference, workload.jobs), gpus_per_node=4
    )
    return simulate(
        workload,
        spec_,
        make_policy(policy, **(options or {})),
        predictor=predictor,
        costs=Costs(**costs),
    )
