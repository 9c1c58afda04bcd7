"""One simulation from names: trace, cluster spec, policy (and its options) and a prediction
backend factory. The CLI and the benchmark both go through `run_simulation`; which backend a
name means (in-process models, the HTTP service) is the command line's choice
(`scheduler/cli.py`), so this module depends on no layer above the scheduler."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from perfcast.atomic import atomic_write_text
from perfcast.datasets.io import write_table
from perfcast.predictor.backend import PredictionBackend
from perfcast.scheduler.core.cluster import ClusterSpec, ClusterState
from perfcast.scheduler.core.predictions import JobPredictor
from perfcast.scheduler.facts.oracle import OracleBackend
from perfcast.scheduler.policies import make_policy
from perfcast.scheduler.sim import hpsearch
from perfcast.scheduler.sim.costs import DEFAULT_MIN_RUN_S, Costs
from perfcast.scheduler.sim.engine import (
    ProgressCallback,
    SimResult,
    no_cycle_collection,
    simulate,
)
from perfcast.scheduler.sim.metrics import job_table, plot_jct_cdf, summarize
from perfcast.scheduler.sim.report import TIMELINE_COLUMNS, write_report
from perfcast.scheduler.sim.workload import (
    Workload,
    build_workload,
    default_progress,
    load_catalogs,
    read_trace,
)


@dataclass
class SimRun:
    result: SimResult
    summary: dict[str, float | int | str]
    jobs: pd.DataFrame


@no_cycle_collection()  # a million-job trace builds a million jobs: see its docstring
def prepare_workload(
    trace: str,
    spec: ClusterSpec,
    *,
    load: float = 1.0,
    max_jobs: int | None = None,
    seed: int = 0,
    progress: str | None = None,
) -> Workload:
    """The simulator's jobs from a trace name. `progress`: how jobs named as Pollux's
    applications progress (`statistical` or `duration`); default, statistical only for the
    traces that opt in (`workload.STATISTICAL_TRACES`)."""
    gpus_per_node = max(g.gpus_per_node for g in spec.groups)
    scaling, interference = load_catalogs(gpus_per_node)
    if trace == hpsearch.NAME:
        return hpsearch.synthetic_hpsearch(ClusterState(spec), scaling, interference, seed=seed)
    return build_workload(
        read_trace(trace),
        ClusterState(spec),
        scaling,
        interference,
        name=trace,
        seed=seed,
        load_factor=load,
        max_jobs=max_jobs,
        progress=progress or default_progress(trace),
    )


BackendFactory = Callable[[Workload], PredictionBackend]


def oracle_backend(workload: Workload) -> PredictionBackend:
    """True values: what perfect predictions would give."""
    return OracleBackend(workload.scaling, workload.interference, workload.jobs)


def run_simulation(
    workload: Workload,
    spec: ClusterSpec,
    policy_name: str,
    *,
    policy_options: dict[str, Any] | None = None,
    backend: BackendFactory = oracle_backend,
    predictor: str = "oracle",
    costs: Costs | None = None,
    on_progress: ProgressCallback | None = None,
    round_s: float | None = None,
    min_run_s: float = DEFAULT_MIN_RUN_S,
) -> SimRun:
    """Simulate `workload` under `policy_name` built with `policy_options`; a policy that
    needs predictions decides with `backend(workload)`, reported as `predictor`."""
    policy = make_policy(policy_name, **(policy_options or {}))
    job_predictor = None
    if policy.needs_predictions:
        gpus_per_node = max(g.gpus_per_node for g in spec.groups)
        job_predictor = JobPredictor(backend(workload), gpus_per_node)
        if "duration" in policy.prediction_tasks:
            # a job's duration prediction depends only on what is known at its submission, so
            # the simulator asks for all of them in one batch instead of one call per arrival
            job_predictor.predict_durations(workload.jobs)
    result = simulate(
        workload,
        spec,
        policy,
        predictor=job_predictor,
        costs=costs,
        on_progress=on_progress,
        round_s=round_s,
        min_run_s=min_run_s,
    )
    jobs = job_table(result)
    summary = summarize(result, jobs) | {"predictor": predictor if job_predictor else "none"}
    return SimRun(result, summary, jobs)


def write_outputs(run: SimRun, out: Path) -> list[Path]:
    """The run's metrics (JSON), per-job table and timeline (CSV), JCT CDF (PNG) and HTML report
    under `out`, each written atomically."""
    out.mkdir(parents=True, exist_ok=True)
    metrics = atomic_write_text(out / "metrics.json", json.dumps(run.summary, indent=2))
    jobs = write_table(run.jobs, out / "jobs.csv")
    timeline = write_table(
        pd.DataFrame(
            {name: getattr(run.result.accounting.timeline, name) for name in TIMELINE_COLUMNS}
        ),
        out / "timeline.csv",
    )
    title = f"{run.summary['trace']} - {run.summary['policy']}"
    plot = plot_jct_cdf({str(run.summary["policy"]): run.jobs}, out / "jct_cdf.png", title)
    # from the files above (one HTML file, no server needed)
    report = write_report([out], out / "report.html", total_gpus=run.result.cluster.total_gpus)
    return [metrics, jobs, timeline, plot, report]
