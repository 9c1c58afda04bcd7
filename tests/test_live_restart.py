"""Restarting the scheduler process mid-trace (its state in SQLite) loses no job and runs none
twice."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
import ray

from perfcast.scheduler.live.store import JobStore


@pytest.fixture(scope="module", autouse=True)
def ray_cluster():
    # "local": a cluster of our own, even when another user's `ray start` cluster is up
    # a V100 node: Gandiva packs only where it knows the GPU's memory
    ray.init(
        address="local", num_cpus=2, num_gpus=4, resources={"accelerator_type:V100": 1},
        include_dashboard=False, namespace="perfcast-tests",
    )  # fmt: skip
    yield
    ray.shutdown()


# finished jobs' workers kept for the next launches: a new worker costs seconds of CPU (torch's
# imports); those of the first scheduler the kill leaves idle, its successor adopts as spares
IDLE_WORKERS = 8


def _killed_while(policy: str, status: dict[str, str], store: JobStore) -> bool:
    """When to kill the first scheduler: fifo, once one job is done and another runs;
    gandiva, once jobs take turns on a GPU (one of them is paused for its slice)."""
    if policy == "fifo":
        return "done" in status.values() and "running" in status.values()
    return any(r.share == "timeslice" and r.status == "running" for r in store.jobs())


@pytest.mark.parametrize(("policy", "count", "gap_s"), [("fifo", 4, 1.5), ("gandiva", 6, 0.2)])
def test_restarted_scheduler_loses_no_job_and_runs_none_twice(tmp_path, policy, count, gap_s):
    """Kill the scheduler process (`perfcast run-trace`) mid-trace, start it again on the same
    state: every job finishes exactly once; jobs whose workers survived are taken over. Under
    gandiva six jobs share four GPUs: the scheduler is killed while a job is paused for its
    time slice, and the restarted one must not leave it paused."""
    jobs = [
        f"  - {{id: j{i}, name: j{i}, iterations: 60, min_step_time_s: 0.03, "
        f"checkpoint_every: 20, submit_time_s: {gap_s * i}}}"
        for i in range(count)
    ]
    trace = tmp_path / "jobs.yaml"
    trace.write_text("jobs:\n" + "\n".join(jobs) + "\n")
    address = ray.get_runtime_context().gcs_address
    cmd = [
        str(Path(sys.executable).parent / "perfcast"), "run-trace", str(trace), "--policy",
        policy, "--state", str(tmp_path / "state"), "--address", address, "--round-s", "0.2",
        "--spares", "0", "--idle-workers", str(IDLE_WORKERS), "--json",
    ]  # fmt: skip
    store = JobStore(tmp_path / "state" / "state.db")
    first = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + 600  # start-up on a loaded machine: minutes
    while time.monotonic() < deadline:
        status = {r.job_id: r.status for r in store.jobs()} if store.path.exists() else {}
        if _killed_while(policy, status, store):
            break
        time.sleep(0.1)
    first.kill()  # SIGKILL: no cleanup at all
    first.wait()
    idle = _idle_orphans(store)
    before = {r.job_id: r for r in store.jobs()}
    logged = {job_id: len(store.events(job_id)) for job_id in before}
    assert "running" in {r.status for r in before.values()}

    # a wait, not a speed check: a loaded host starts Ray worker processes in minutes
    second = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    assert second.returncode == 0, second.stdout[-2000:] + second.stderr[-2000:]
    assert "recovered" in second.stdout
    summary = json.loads(second.stdout.strip().splitlines()[-1])
    assert summary["finished"] == summary["jobs"] == count
    for job_id, old in before.items():
        if old.status == "running":  # kept running: a new attempt only for the policy's moves
            # (Gandiva moves a time-sliced job to GPUs of its own once some free up)
            after = store.events(job_id)[logged[job_id] :]
            moves = [e for e in after if e["kind"] in ("migrate", "resize")]
            assert store.job(job_id).attempt == old.attempt + len(moves), after
    _assert_recovered(store, before, logged)
    _assert_adopted(store, idle)


def _assert_recovered(store: JobStore, before: dict, logged: dict) -> None:
    """Every job finished exactly once; those done or running at the kill (`before`, when
    `logged` events each) were not started again: a running one was reattached before any
    launch (the policy may move or resize it later); no worker of this state is left."""
    for job_id, old in before.items():
        record = store.job(job_id)
        # in samples: elastic may have run it at another batch (more, smaller iterations);
        # a batch that does not divide what was left ends past it, by less than the last batch
        spec = record.spec
        needed = spec["iterations"] * spec["batch_size"]
        assert record.status == "done"
        assert needed <= record.samples_done < needed + record.batch_size
        assert len(store.events(job_id, "finished")) == 1
        if old.status == "done":  # not started again
            assert record.attempt == old.attempt
        if old.status == "running":  # taken over, not restarted
            assert len(store.events(job_id, "reattach")) == 1, store.events(job_id)
            after = [e["kind"] for e in store.events(job_id)[logged[job_id] :]]
            assert next(k for k in after if k in ("launch", "reattach")) == "reattach", after
    namespace = store.get_meta("ray_namespace")  # the workers of this scheduler state
    assert namespace and not [
        a for a in ray.util.list_named_actors(all_namespaces=True) if a["namespace"] == namespace
    ]


def _idle_orphans(store: JobStore) -> set[str]:
    """Once the first scheduler is killed: the workers of its state that no job names and that
    run nothing (the idle ones it kept for its next launches)."""
    namespace = store.get_meta("ray_namespace")
    named = {name for r in store.jobs() for name in r.workers}
    names = [
        a["name"]
        for a in ray.util.list_named_actors(all_namespaces=True)
        if a["namespace"] == namespace and a["name"] not in named
    ]
    refs = [ray.get_actor(name, namespace=namespace).status.remote() for name in names]
    ready, _ = ray.wait(refs, num_returns=len(refs), timeout=10) if refs else ([], [])
    answers = {name: ray.get(ref) for name, ref in zip(names, refs, strict=True) if ref in ready}
    return {name for name, status in answers.items() if not status["busy"]}


def _assert_adopted(store: JobStore, idle: set[str]) -> None:
    """The restarted scheduler kept the first one's idle workers (`idle`) as its spares, up to
    IDLE_WORKERS on the one node, instead of killing them and starting new processes."""
    details = [e["detail"] for e in store.events(kind="orphan workers")]
    adopted = {
        name for d in details for name in re.findall(r"worker-[0-9a-f]{12}", d.split(";")[0])
    }
    # killed, said in the event, and no failure of adoption: on a host busy enough that a worker
    # does not answer within the restart's wait; and one the first scheduler's last launch
    # reached after this test saw it idle (its start was sent, the store not yet written)
    killed = {
        name
        for d in details
        for part in ("no answer", "no job records")
        for name in re.findall(r"worker-[0-9a-f]{12}", d.partition(part)[2].split(")")[0])
    }
    answering = idle - killed
    if len(answering) <= IDLE_WORKERS:
        assert answering <= adopted, details
    else:
        assert len(adopted) == IDLE_WORKERS, details


def _packed_or_resized(policy: str, store: JobStore) -> bool:
    """When to kill the first scheduler: packed, once two running jobs share a GPU; elastic,
    once a running job has another worker count than it asked for (the policy resized it)."""
    records = store.jobs()
    if policy == "packed":
        return any(r.share == "pack" and r.status == "running" for r in records)
    return any(r.status == "running" and len(r.gpus) != r.spec["num_gpus"] for r in records)


@pytest.mark.parametrize(("policy", "count", "gap_s"), [("packed", 6, 0.2), ("elastic", 4, 1.0)])
def test_restart_under_packing_and_elastic_policies(tmp_path, policy, count, gap_s):
    """The same kill -9 and restart under the policies that need predictions (synthetic ones,
    tests/live_runner_main.py): Gandiva packing two jobs per GPU, and elastic, which resizes
    running jobs as others arrive."""
    jobs = [
        f"  - {{id: j{i}, name: j{i}, iterations: 60, num_gpus: 2, min_step_time_s: 0.03, "
        f"checkpoint_every: 20, submit_time_s: {gap_s * i}}}"
        for i in range(count)
    ]
    trace = tmp_path / "jobs.yaml"
    trace.write_text("jobs:\n" + "\n".join(jobs) + "\n")
    address = ray.get_runtime_context().gcs_address
    driver = Path(__file__).with_name("live_runner_main.py")
    cmd = [sys.executable, str(driver), policy, str(tmp_path / "state"), address, str(trace),
           str(IDLE_WORKERS)]  # fmt: skip
    store = JobStore(tmp_path / "state" / "state.db")
    first = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline and first.poll() is None:
        if store.path.exists() and _packed_or_resized(policy, store):
            break
        time.sleep(0.1)
    assert first.poll() is None, first.stdout.read()[-3000:]  # killed mid-run, not after
    first.kill()
    first.wait()
    idle = _idle_orphans(store)
    before = {r.job_id: r for r in store.jobs()}
    logged = {job_id: len(store.events(job_id)) for job_id in before}
    assert _packed_or_resized(policy, store)

    # a wait, not a speed check: a loaded host starts Ray worker processes in minutes
    second = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    assert second.returncode == 0, second.stdout[-2000:] + second.stderr[-3000:]
    assert "recovered" in second.stdout
    summary = json.loads(second.stdout.strip().splitlines()[-1])
    assert summary["finished"] == summary["jobs"] == count and summary["round_errors"] == 0
    _assert_recovered(store, before, logged)
    _assert_adopted(store, idle)
