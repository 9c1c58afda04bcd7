"""Any trace terminates under every policy, and no job is preempted more than the minimum
quantum allows (issue 38): hypothesis over random small traces on the real measured catalogs,
with any job names (Pollux's applications, measured types, names nothing measured), GPU
counts, batch sizes, clusters and both progress models."""

from __future__ import annotations

import functools

import pandas as pd
import pytest
from conftest import requires_data
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from perfcast.scheduler.core import ClusterSpec, ClusterState, JobStatus
from perfcast.scheduler.core.predictions import JobPredictor
from perfcast.scheduler.facts.catalog import InterferenceCatalog, ScalingCatalog
from perfcast.scheduler.facts.oracle import OracleBackend
from perfcast.scheduler.policies import make_policy, policy_names
from perfcast.scheduler.sim import goodput
from perfcast.scheduler.sim.costs import Costs
from perfcast.scheduler.sim.engine import simulate
from perfcast.scheduler.sim.workload import build_workload, load_catalogs

MIN_RUN_S = 60.0
NAMES = [*goodput.APPLICATIONS, "resnet50", "vgg16", "bert", "no-such-model", None]


@functools.cache
def catalogs(gpus_per_node: int) -> tuple[ScalingCatalog, InterferenceCatalog]:
    return load_catalogs(gpus_per_node)


rows_strategy = st.lists(
    st.tuples(
        st.floats(0, 300, allow_nan=False).map(lambda t: round(t, 1)),  # submit
        st.sampled_from(NAMES),
        st.integers(1, 12),  # GPUs (more than the cluster has: dropped)
        st.floats(1, 3000, allow_nan=False).map(lambda d: round(d, 1)),  # traced duration
        st.one_of(st.none(), st.sampled_from([1, 8, 32, 128, 512])),  # per-GPU batch
    ),
    min_size=1,
    max_size=6,
)


class Runaway(AssertionError):
    """The simulation took far more steps than its events can need: it would not end."""


@requires_data
@pytest.mark.parametrize("policy", policy_names())
@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    rows=rows_strategy,
    spec=st.sampled_from(["1x8:v100", "2x4:t4", "1x4:v100", "2x8:v100", "3x2:k80"]),
    progress=st.sampled_from(["duration", "statistical"]),
    restart_s=st.sampled_from([0.0, 50.0]),
)
def test_every_trace_ends_and_preemptions_stay_within_the_quantum(
    policy: str, rows, spec: str, progress: str, restart_s: float
) -> None:
    cluster_spec = ClusterSpec.parse(spec)
    scaling, interference = catalogs(max(g.gpus_per_node for g in cluster_spec.groups))
    trace = pd.DataFrame(
        [(f"j{i}", *row) for i, row in enumerate(rows)],
        columns=["job_id", "submit_time_s", "job", "num_gpus", "duration_s", "batch_size"],
    ).astype({"batch_size": "Int64"})
    workload = build_workload(
        trace, ClusterState(cluster_spec), scaling, interference, progress=progress
    )
    if not workload.jobs:
        return  # every job asked for more GPUs than the cluster has
    predictor = JobPredictor(OracleBackend(scaling, interference, workload.jobs), 4)
    # an epoch boundary per statistical job and epoch, plus arrivals, completions and wake-ups
    budget = 200 * len(workload.jobs) * (1 + max(a[1] for a in goodput.APPLICATIONS.values()))
    steps = [0]

    def count(done: int, total: int) -> None:
        steps[0] += 1
        if steps[0] > budget:
            raise Runaway(f"{steps[0]} steps for {total} jobs ({done} done)")

    # a 100 GPU-s threshold demotes, and so preempts, within the traces' durations
    options = {"thresholds": (100.0,)} if policy in ("tiresias", "srtf-predicted") else {}
    result = simulate(
        workload,
        cluster_spec,
        make_policy(policy, **options),
        predictor=predictor,
        costs=Costs(restart_s=restart_s),
        on_progress=count,
        min_run_s=MIN_RUN_S,
    )
    acc = result.accounting
    for state in result.jobs.all.values():
        assert state.status is JobStatus.DONE
        if policy != "hypersched":  # it may stop trials early
            assert acc.samples.get(state.job_id, 0.0) >= state.job.total_samples * (1 - 1e-6)
        # each preemption ends a run of at least MIN_RUN_S held (without the quantum,
        # tiresias breaks this on five bert-squad jobs of 1-3 GPUs on 1x4)
        assert state.preemptions * MIN_RUN_S <= state.run_time_s + 1e-6
    held = sum(s.attained_gpu_s for s in result.jobs.all.values())
    productive = sum(acc.productive_gpu_s.values())
    overhead = sum(s.overhead_gpu_s for s in result.jobs.all.values())
    assert acc.placement_gpu_s == pytest.approx(held, rel=1e-6, abs=1e-6)
    assert acc.placement_gpu_s == pytest.approx(productive + overhead, rel=1e-6, abs=1e-6)
