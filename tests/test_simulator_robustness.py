"""No trace can hang the simulator (issue 38): a step-time source never answers NaN for a
placement it did not measure, and the engine refuses a non-finite rate where it is made, with
an error naming the job and its placement (exit 2 on the command line)."""

from __future__ import annotations

import math
import time

import pandas as pd
import pytest
from conftest import requires_data
from scheduler_synthetic import SYNTHETIC_PAIRS, synthetic_workload

from perfcast.errors import PerfcastError
from perfcast.scheduler.core import ClusterSpec, ClusterState
from perfcast.scheduler.core.jobs import Job
from perfcast.scheduler.facts.catalog import InterferenceCatalog, ScalingCatalog
from perfcast.scheduler.facts.oracle import OracleBackend
from perfcast.scheduler.policies import make_policy
from perfcast.scheduler.sim import goodput
from perfcast.scheduler.sim.engine import RateError, simulate
from perfcast.scheduler.sim.run import prepare_workload
from perfcast.scheduler.sim.workload import Workload, build_workload

NAN_TRACE = (
    "job_id,submit_time_s,num_gpus,duration_s,job,batch_size\nA,0,8,1000,resnet18-cifar10,32\n"
)


@requires_data
@pytest.mark.parametrize("job_type", sorted(goodput.APPLICATIONS))
def test_unmeasured_placements_get_finite_step_times_that_scale_sub_linearly(job_type: str):
    # Pollux's T4 nodes held 4 GPUs: 8 on one node, or 8 on each of 2 nodes, were never measured
    app = goodput.application(job_type)
    atomic = app.min_local
    for unmeasured, measured in (((8,), (4,)), ((8, 8), (4, 4)), ((6,), (4,))):
        step, sync = app.step_and_sync(unmeasured, atomic)
        near_step, _ = app.step_and_sync(measured, atomic)
        assert math.isfinite(step) and 0 <= sync < step
        # more GPUs cost at least as long a step (the ring's sync grows), so per-GPU throughput
        # is at most the nearest measured placement's: sub-linear
        assert step >= near_step * (1 - 1e-9)


@requires_data
def test_a_pollux_named_job_on_eight_gpus_of_one_node_ends_within_a_second(tmp_path):
    # issue 38's case: it used to spin for ever with the clock at NaN
    trace = tmp_path / "nan.csv"
    trace.write_text(NAN_TRACE)
    spec = ClusterSpec.parse("1x8:v100")
    workload = prepare_workload(str(trace), spec)
    goodput.application("resnet18-cifar10").model  # noqa: B018 - the one-off fit, not timed
    steps = [0]

    def bounded(done: int, total: int) -> None:  # a spinning engine fails here, not hangs
        steps[0] += 1
        assert steps[0] < 10_000, f"{steps[0]} steps for one job"

    started = time.process_time()
    result = simulate(workload, spec, make_policy("fifo"), on_progress=bounded)
    assert time.process_time() - started < 1.0
    state = result.jobs["A"]
    assert math.isfinite(result.makespan_s) and result.makespan_s > 0
    assert math.isfinite(state.finish_s) and state.samples_done == state.job.total_samples


def test_a_nan_step_time_is_refused_naming_the_job_and_its_placement():
    # a scaling table whose only 2-GPU figure is NaN: the rate there is NaN
    table = pd.DataFrame(
        {
            "job": ["odd", "odd"],
            "gpu_type": ["v100", "v100"],
            "num_nodes": [1, 1],
            "num_gpus": [1, 2],
            "local_batch_size": [32, 32],
            "step_time_s": [1.0, math.nan],
        }
    )
    scaling = ScalingCatalog(table, gpus_per_node=4)
    jobs = [Job("j1", 0.0, "odd", 1, 32, 320.0), Job("j2", 0.0, "odd", 2, 64, 640.0)]
    workload = Workload("nan", jobs, scaling, InterferenceCatalog(SYNTHETIC_PAIRS))
    where = r"job j2 \(odd, batch 64\) on 2 v100 GPU\(s\), placement \(2,\) GPUs per node"
    with pytest.raises(RateError, match=where):
        simulate(workload, ClusterSpec.parse("1x4:v100"), make_policy("fifo"))
    assert issubclass(RateError, PerfcastError)  # the command line's exit 2


TRACE_HEAD = "job_id,submit_time_s,num_gpus,duration_s,job,global_batch_size\n"


@requires_data
def test_a_trace_s_duration_is_the_truth_unless_the_run_opts_into_statistical_progress(tmp_path):
    # a resnet50-imagenet row on V100s: by default it runs its traced 600 s; opted in, it trains
    # for ImageNet's 90 epochs at Pollux's T4 speeds, and the oracle is told that run time
    trace = tmp_path / "other-cluster.csv"
    trace.write_text(TRACE_HEAD + "a,0,4,600,resnet50-imagenet,800\n")
    spec = ClusterSpec.parse("2x4:v100")
    plain = prepare_workload(str(trace), spec)
    assert plain.progress == "duration" and not plain.statistical_jobs
    assert not plain.jobs[0].statistical and plain.jobs[0].duration_s == 600.0
    result = simulate(plain, spec, make_policy("fifo"))
    assert result.jobs["a"].finish_s == pytest.approx(600.0)

    opted = prepare_workload(str(trace), spec, progress="statistical")
    job = opted.jobs[0]
    assert opted.statistical_jobs == {"resnet50-imagenet": 1} and job.statistical
    app = goodput.application("resnet50-imagenet")
    assert job.duration_s == pytest.approx(app.run_time((4,), 800))
    assert job.duration_s > 10 * 600.0  # nothing like the trace's 600 s
    oracle = OracleBackend(opted.scaling, opted.interference, opted.jobs)
    told = oracle.predict("duration", pd.DataFrame({"job_id": ["a"]}))["duration_s"].iloc[0]
    ran = simulate(opted, spec, make_policy("fifo")).jobs["a"].finish_s
    assert told == pytest.approx(ran, rel=1e-6)  # alone at its requested size: what it ran


@requires_data
def test_pollux_workloads_opt_in_by_name_and_report_every_match():
    workload = prepare_workload(
        "pollux-workloads:workloads/workload-1", ClusterSpec.parse("16x4:t4")
    )
    assert workload.progress == "statistical"
    assert sum(workload.statistical_jobs.values()) == len(workload.jobs) == 160
    assert set(workload.statistical_jobs) <= set(goodput.APPLICATIONS)


def test_an_unknown_progress_model_is_a_clear_error():
    workload = synthetic_workload([("a", 0.0, "fast", 1, 10.0)])
    trace = pd.DataFrame(
        [("a", 0.0, "fast", 1, 10.0)],
        columns=["job_id", "submit_time_s", "job", "num_gpus", "duration_s"],
    )
    cluster = ClusterState(ClusterSpec.parse("1x1:v100"))
    with pytest.raises(
        PerfcastError, match="progress 'epochs': choose one of duration, statistical"
    ):
        build_workload(trace, cluster, workload.scaling, workload.interference, progress="epochs")


@requires_data
def test_the_command_line_reports_statistical_matches_and_refuses_an_unknown_progress(tmp_path):
    from typer.testing import CliRunner

    from perfcast.cli import app as cli

    trace = tmp_path / "t.csv"
    trace.write_text(TRACE_HEAD + "a,0,1,100,resnet18-cifar10,128\n")
    base = ["simulate", "--trace", str(trace), "--cluster", "1x4:v100", "--policy", "fifo"]
    runner = CliRunner()
    opted = runner.invoke(cli, [*base, "--progress", "statistical"])
    assert opted.exit_code == 0, opted.output
    assert "statistical progress" in opted.output and "resnet18-cifar10 x1" in opted.output
    plain = runner.invoke(cli, base)
    assert plain.exit_code == 0 and "statistical progress" not in plain.output
    bad = runner.invoke(cli, [*base, "--progress", "epochs"])
    assert bad.exit_code == 2 and "choose auto, duration or statistical" in bad.output
