"""Memory figures of simulated job types (measured where the tables have them, else the
model-size estimate) and Gandiva's packing under Salus's condition with them."""

from __future__ import annotations

import pandas as pd
import pytest
from conftest import needs_data
from hypothesis import given
from hypothesis import strategies as st
from scheduler_synthetic import SYNTHETIC_PAIRS

from perfcast.features.model_sizes import params_m
from perfcast.scheduler.core import ClusterSpec, ClusterState, Job, Run
from perfcast.scheduler.core.jobs import JobTable
from perfcast.scheduler.core.loop import RoundContext, apply_decision
from perfcast.scheduler.core.predictions import JobPredictor
from perfcast.scheduler.facts.catalog import InterferenceCatalog
from perfcast.scheduler.facts.memory import (
    ACTIVATIONS,
    CONTEXT_MB,
    JobMemory,
    estimated_memory,
    memory_model,
)
from perfcast.scheduler.policies import make_policy
from perfcast.scheduler.sim.run import prepare_workload, run_simulation


@given(st.sampled_from(sorted(ACTIVATIONS)), st.integers(1, 512), st.integers(1, 512))
def test_estimate_persistent_is_model_size_and_ephemeral_grows_with_the_batch(job, b1, b2):
    small, large = estimated_memory(job, min(b1, b2)), estimated_memory(job, max(b1, b2))
    assert small is not None and large is not None and not small.measured
    size = params_m(job, rough=True)
    assert small.persistent_mb == pytest.approx(size * 1e6 * 16 / 2**20 + CONTEXT_MB)
    assert small.persistent_mb == large.persistent_mb
    assert large.ephemeral_mb == pytest.approx(small.ephemeral_mb * max(b1, b2) / min(b1, b2))


def test_measured_memory_is_preferred_to_the_estimate():
    memory = memory_model(InterferenceCatalog(SYNTHETIC_PAIRS))
    assert memory("fast", 32) == JobMemory(4000.0, 0.0, measured=True)  # the pair table's
    resnet = memory("resnet50-imagenet", 32)
    assert resnet is not None and not resnet.measured  # no measured figure: the estimate
    assert memory("no-such-model", 32) is None
    assert memory_model(InterferenceCatalog(None))("fast", 32) is None


def pack_round(host: JobMemory, guest: JobMemory) -> str:
    """The share Gandiva gives a waiting job when one GPU (32 GB V100) holds another job and
    the pair's predicted speeds (0.8 + 0.7) pay."""
    cluster = ClusterState(ClusterSpec.parse("1x1:v100"))
    jobs = JobTable()
    jobs.add(Job("host", 0.0, "slow", 1, 32, 1e6, duration_s=1e4))
    apply_decision(Run("host", ((0, 0),), 32), cluster, jobs, 0.0)
    jobs.add(Job("guest", 1.0, "fast", 1, 32, 1e6, duration_s=1e4))
    policy = make_policy("gandiva", memory_mb=lambda job, batch: host if job == "slow" else guest)

    class Pairs:
        def predict(self, task, rows):
            return pd.DataFrame({"a_speed": [0.8] * len(rows), "b_speed": [0.7] * len(rows)})

    ctx = RoundContext(1.0, cluster, jobs, JobPredictor(Pairs()))
    policy.placement.place(policy.schedule(ctx), ctx)
    return ctx.decisions[0].share


def test_gandiva_counts_ephemeral_memory_once():
    cap = 32 * 1024
    # totals 2 x 20,000 MB exceed the GPU, but only one mini-batch's activations live at once
    both = JobMemory(8000.0, 12000.0, measured=False)
    assert 2 * both.total_mb > cap >= 2 * 8000 + 12000
    assert pack_round(both, both) == "pack"
    heavy = JobMemory(14000.0, 6000.0, measured=False)  # 28,000 + 6,000 > 32,768
    assert pack_round(heavy, heavy) == "timeslice"


@needs_data
def test_gandiva_packs_real_job_mixes_and_not_with_packing_off():
    # ElasticFlow's first 300 jobs on 16 V100s: types drawn from the measured ones, Gavel's
    # among them with measured pair speeds; memory from the model-size estimates
    spec = ClusterSpec.parse("2x8:v100")
    workload = prepare_workload("elasticflow-traces:cluster01", spec, max_jobs=300)
    packing = run_simulation(workload, spec, "gandiva").summary
    plain = run_simulation(workload, spec, "gandiva", policy_options={"pack": False}).summary
    assert packing["packed"] > 0
    assert "packed" not in plain and plain["timesliced"] > 0
    assert packing["jobs"] == plain["jobs"] == len(workload.jobs)
