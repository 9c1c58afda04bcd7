"""Synthetic hyper-parameter searches for `hypersched` (no shipped trace has search trials).

Named `synthetic-hpsearch`: each search is `trials` trials of one measured job type (so step
times are real), submitted together, all with the same deadline. Each trial's final metric
(`score`, uniform in 0.6-0.95) and learning-curve speed (`curve`, uniform in 2-8, so early
rungs can mislead) are drawn from a seeded generator: synthetic, never reported as measured.
"""

from __future__ import annotations

import numpy as np

from perfcast.scheduler.core.cluster import ClusterState
from perfcast.scheduler.core.jobs import Job
from perfcast.scheduler.facts.catalog import InterferenceCatalog, ScalingCatalog
from perfcast.scheduler.sim.workload import Workload

NAME = "synthetic-hpsearch"


def synthetic_hpsearch(
    cluster: ClusterState,
    scaling: ScalingCatalog,
    interference: InterferenceCatalog,
    *,
    searches: int = 4,
    trials: int = 27,
    trial_s: float = 3600.0,
    deadline_s: float = 7200.0,
    gap_s: float = 900.0,
    seed: int = 0,
) -> Workload:
    """`searches` searches of `trials` 1-GPU trials, each trial `trial_s` long alone, search i
    submitted at i x `gap_s` with its deadline `deadline_s` later."""
    rng = np.random.default_rng(seed)
    types = scaling.job_types()
    gpu_type = cluster.node_type[0]
    jobs = []
    for s in range(searches):
        job_type = types[s % len(types)]
        local = scaling.reference_local_batch(job_type)
        rate = scaling.throughput(job_type, gpu_type, 1, local)
        submit = s * gap_s
        for t in range(trials):
            jobs.append(
                Job(
                    job_id=f"search{s}/trial{t}",
                    submit_time_s=submit,
                    job_type=job_type,
                    num_gpus=1,
                    batch_size=local,
                    total_samples=trial_s * rate,
                    duration_s=trial_s,
                    deadline_s=submit + deadline_s,
                    group=f"search{s}",
                    max_gpus=4,
                    score=float(rng.uniform(0.6, 0.95)),
                    curve=float(rng.uniform(2.0, 8.0)),
                )
            )
    return Workload(NAME, jobs, scaling, interference)
