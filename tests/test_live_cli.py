"""The live CLI's input handling and trace loading (no cluster needed)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from perfcast.scheduler.live.service import record_cluster
from perfcast.scheduler.live.spec import JobSpecError, load_job
from perfcast.scheduler.live.store import JobStore
from perfcast.scheduler.live.trace import load_trace

PERFCAST = str(Path(sys.executable).parent / "perfcast")


def perfcast(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "COLUMNS": "200"}  # rich tables: no truncated cells
    return subprocess.run([PERFCAST, *args], capture_output=True, text=True, timeout=120, env=env)


def test_submit_jobs_and_job_commands(tmp_path):
    state = str(tmp_path / "state")
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\niterations: 0\n")
    done = perfcast("submit", str(bad), "--state", state)
    assert done.returncode == 2 and "iterations" in done.stderr
    good = tmp_path / "job.yaml"
    good.write_text("name: demo\niterations: 10\nbatch_size: 8\nnum_gpus: 4\n")
    # bigger than the cluster `cluster up` started (2 logical GPUs): queued, with a word
    record_cluster(Path(state), {"address": "127.0.0.1:1", "local": {"nodes": [{"num_gpus": 2}]}})
    sent = perfcast("submit", str(good), "--id", "demo-1", "--state", state)
    assert sent.returncode == 0
    assert "demo-1 asks for 4 GPUs and the cluster has 2: it waits until nodes join" in sent.stdout
    again = perfcast("submit", str(good), "--id", "demo-1", "--state", state)
    assert again.returncode == 2 and "already exists" in again.stderr
    listing = perfcast("jobs", "--state", state)
    assert "demo-1" in listing.stdout and "pending" in listing.stdout
    unknown = perfcast("job", "suspend", "nope", "--state", state)
    assert unknown.returncode == 2 and "no job 'nope'" in unknown.stderr
    # a job that failed: its error in the table (last line) and in full in `job show`
    store = JobStore(Path(state) / "state.db")
    error = 'Traceback (most recent call last):\n  File "x.py"\nTypeError: bad entrypoint'
    store.update_job("demo-1", status="failed", error=error)
    store.log("demo-1", "failed", "4 failures in a row")
    listing = perfcast("jobs", "--state", state)
    assert "failed" in listing.stdout and "TypeError: bad entrypoint" in listing.stdout
    shown = perfcast("job", "show", "demo-1", "--state", state)
    assert shown.returncode == 0 and 'File "x.py"' in shown.stdout
    assert "4 failures in a row" in shown.stdout
    assert perfcast("job", "show", "nope", "--state", state).returncode == 2


def test_trace_rows_become_scaled_jobs(tmp_path):
    trace = tmp_path / "t.csv"
    pd.DataFrame(
        {"job_id": ["b", "a"], "submit_time_s": [200.0, 100.0], "num_gpus": [2, 0],
         "duration_s": [1000.0, 10.0]}
    ).to_csv(trace, index=False)  # fmt: skip
    jobs = load_trace(trace, time_scale=0.01, step_s=0.05)
    assert [j for j, _ in jobs] == ["a", "b"]
    a, b = (spec for _, spec in jobs)
    assert (a.submit_time_s, a.num_gpus, a.iterations) == (0.0, 1, 2)
    assert (b.submit_time_s, b.num_gpus, b.iterations, b.batch_size) == (1.0, 2, 200, 64)
    assert b.min_step_time_s == 0.05
    duplicate = tmp_path / "d.yaml"
    duplicate.write_text("- {id: x, name: x, iterations: 1}\n- {id: x, name: y, iterations: 1}\n")
    with pytest.raises(JobSpecError, match="duplicate id 'x'"):
        load_trace(duplicate, time_scale=1, step_s=1)


def test_the_live_examples_are_valid_jobs():
    root = Path(__file__).resolve().parents[1] / "examples"
    job = load_job(root / "live_job.yaml")
    assert job.device == "cpu" and job.config["lr_step_every"] == 500 and job.max_restarts == 3
    jobs = load_trace(root / "live_trace.yaml", time_scale=1, step_s=1)
    assert [j for j, _ in jobs] == ["a", "b", "c", "d", "e"]
    assert jobs[2][1].config == {"lr_step_every": 100}


def test_a_spec_bounds_its_size_for_elastic_policies():
    from perfcast.scheduler.live.runner import core_job
    from perfcast.scheduler.live.spec import parse_job

    spec = parse_job({"name": "e", "iterations": 5, "batch_size": 32, "num_gpus": 2,
                      "min_gpus": 1, "max_gpus": 4})  # fmt: skip
    job = core_job("e", spec)
    assert (job.num_gpus, job.min_gpus, job.max_gpus) == (2, 1, 4)
    plain = core_job("p", parse_job({"name": "p", "iterations": 5}))
    assert (plain.min_gpus, plain.max_gpus) == (1, None)  # elastic keeps its size
    with pytest.raises(JobSpecError, match="num_gpus 2 is not between min_gpus 1 and max_gpus 1"):
        parse_job({"name": "e", "iterations": 5, "num_gpus": 2, "max_gpus": 1, "batch_size": 2})
    with pytest.raises(JobSpecError, match="min_gpus"):
        parse_job({"name": "e", "iterations": 5, "min_gpus": 0})


def test_a_job_bigger_than_the_cluster_is_flagged_not_left_waiting_in_silence():
    from perfcast.scheduler.core.jobs import JobState
    from perfcast.scheduler.live.runner import core_job, never_fit
    from perfcast.scheduler.live.spec import parse_job

    def state(job_id, **fields):
        spec = parse_job({"name": job_id, "iterations": 5, "batch_size": 8, **fields})
        return JobState(core_job(job_id, spec))

    jobs = [state("big", num_gpus=8, min_gpus=8), state("fits", num_gpus=4),
            state("elastic", num_gpus=8, min_gpus=2)]  # fmt: skip
    lines = never_fit(jobs, 4)
    assert sorted(lines) == ["big", "elastic"]
    assert "big asks for 8 GPUs and the cluster has 4: it waits until nodes join" in lines["big"]
    assert "an elastic policy may run it at 2" in lines["elastic"]
    assert "elastic policy" not in lines["big"] and never_fit(jobs, 8) == {}


class NoExecutor:
    def apply(self, decisions, jobs, now):
        pass


class FlatBackend:
    """Made-up predictions (the same for every job): enough for any policy to decide."""

    def predict(self, task, rows):
        import pandas as pd

        n = len(rows)
        if task == "duration":
            return pd.DataFrame({c: [100.0] * n for c in
                                 ("duration_s", "duration_s_p10", "duration_s_p90")})  # fmt: skip
        if task == "scaling":
            step = [r.local_batch_size / 32 for r in rows.itertuples()]
            return pd.DataFrame({"step_time_s": step, "step_time_s_p10": step,
                                 "step_time_s_p90": step})  # fmt: skip
        return pd.DataFrame({"a_speed": [0.8] * n, "b_speed": [0.7] * n})


@pytest.mark.parametrize("name", ["fifo", "tiresias", "srtf-predicted", "gandiva", "elastic"])
def test_an_operator_suspend_holds_under_every_policy_until_resume(name):
    from perfcast.scheduler.core import ClusterSpec, ClusterState, Job, JobStatus, Run, Suspend
    from perfcast.scheduler.core.loop import SchedulingLoop, apply_decision
    from perfcast.scheduler.core.predictions import JobPredictor
    from perfcast.scheduler.live.runner import OperatorHolds
    from perfcast.scheduler.policies import make_policy

    holds = OperatorHolds(make_policy(name))
    predictor = JobPredictor(FlatBackend(), gpus_per_node=4)
    cluster = ClusterState(ClusterSpec.parse("1x4:v100"))
    loop = SchedulingLoop(cluster, holds, NoExecutor(), predictor=predictor)
    loop.submit([Job(j, 0.0, "t", 1, 32, 1e6, duration_s=100.0) for j in ("a", "b")], 0.0)
    loop.round(0.0)
    a = loop.jobs["a"]
    assert a.status is JobStatus.RUNNING  # 2 jobs, 4 GPUs: every policy runs both
    apply_decision(Suspend("a"), cluster, loop.jobs, 1.0)  # what `job suspend a` commits
    holds.held.add("a")
    for now in (1.0, 2.0, 30.0):
        loop.round(now)
        assert a.status is JobStatus.SUSPENDED and loop.jobs["b"].status is JobStatus.RUNNING
    holds.held.discard("a")  # `job resume a`: its GPUs are free
    apply_decision(Run("a", cluster.find_free(1), 32), cluster, loop.jobs, 31.0)
    loop.round(32.0)
    assert a.status is JobStatus.RUNNING


class OneNode:
    """A cluster of one node with 4 GPUs that no node joins or leaves."""

    def cluster_spec(self):
        from perfcast.scheduler.core import ClusterSpec

        return ClusterSpec.parse("1x4:v100")

    def refresh(self):
        return False


class StoreOnlyExecutor:
    """The executor's side of the runner without Ray: each decision written to the store as
    `RayExecutor` writes it, no worker that outlives the scheduler (`reattach` says False, so
    a restarted runner starts every unfinished job again)."""

    def __init__(self, store):
        self.store, self.nodes, self.clock = store, OneNode(), None

    def apply(self, decisions, jobs, now):
        from perfcast.scheduler.core import Run, Suspend

        for decision in decisions:
            if isinstance(decision, Run):
                self.store.update_job(decision.job_id, status="running", gpus=decision.gpus)
            elif isinstance(decision, Suspend):
                self.store.update_job(decision.job_id, status="suspended", gpus=())

    def poll(self):
        return []

    def reclaim_orphans(self):
        return 0

    def reattach(self, job_id):
        return False

    def rejoin_timeslices(self, job_ids):
        pass


def test_an_operator_hold_survives_a_restart_of_the_scheduler(tmp_path):
    from perfcast.scheduler.live.runner import LiveRunner
    from perfcast.scheduler.live.spec import parse_job
    from perfcast.scheduler.policies import make_policy

    path = tmp_path / "state.db"

    def start():  # a scheduler process on the state: fifo, which runs every job that fits
        store = JobStore(path)
        runner = LiveRunner(StoreOnlyExecutor(store), store, make_policy("fifo"))
        runner.recover()
        return store, runner

    def statuses(store, runner, rounds=3):
        for _ in range(rounds):
            runner.step()
        assert runner.round_errors == 0
        return {r.job_id: r.status for r in store.jobs()}

    store, runner = start()
    for job_id in ("a", "b"):
        runner.submit(job_id, parse_job({"name": job_id, "iterations": 100, "batch_size": 8}))
    assert statuses(store, runner) == {"a": "running", "b": "running"}
    store.add_command("a", "suspend")
    assert statuses(store, runner) == {"a": "suspended", "b": "running"}
    assert store.job("a").held and not store.job("b").held
    store.close()

    store, runner = start()  # restarted: b is started again, a stays held
    assert statuses(store, runner, rounds=5) == {"a": "suspended", "b": "running"}
    assert [e["detail"][:5] for e in store.events("a", "operator suspend")] == ["done:"]
    store.add_command("a", "resume")
    assert statuses(store, runner) == {"a": "running", "b": "running"}
    assert not store.job("a").held
    store.add_command("a", "suspend")  # held again; a refused command leaves the hold
    refused = store.add_command("a", "suspend")
    assert statuses(store, runner) == {"a": "suspended", "b": "running"}
    assert store.command_outcome(refused).startswith("refused") and store.job("a").held
    store.add_command("a", "resume")
    statuses(store, runner)
    store.close()

    store, runner = start()  # the resume cleared the hold: fifo runs a again
    assert statuses(store, runner) == {"a": "running", "b": "running"}
    store.close()


def test_spares_are_started_only_after_the_predecessors_idle_workers_are_adopted():
    """`run-trace` and `cluster serve` on a restarted state: the idle workers the killed
    scheduler left become spares before any new worker process is started for the spares (a
    new one would fill the node's idle cap, and the adoptable ones would be killed)."""
    from perfcast.scheduler.live.cli import _warm_spares

    calls = []

    class Recording:
        def reclaim_orphans(self):
            calls.append("adopt")

        def warm_spares(self):
            calls.append("start spares")

    _warm_spares(Recording())
    assert calls == ["adopt", "start spares"]
