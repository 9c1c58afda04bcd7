"""Two raylets on this one machine, started the way `perfcast cluster up` starts them (a head
with its own token, a second raylet joined with `ray start --address`, other logical
resources): the second node is discovered live, its GPUs are reserved in Ray through
placement groups, a job spans both nodes, and a migration moves a job from one to the other.
One cluster for the module (it costs two `ray start`s)."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import ray
import torch
from ray._raylet import AuthenticationTokenLoader, Config
from ray.util import placement_group, placement_group_table, remove_placement_group

from perfcast.scheduler.live.checkpoint import latest_checkpoint, load_checkpoint
from perfcast.scheduler.live.executor import RayExecutor
from perfcast.scheduler.live.hook import TrainingHook
from perfcast.scheduler.live.local_cluster import LocalCluster, use_token, wait_for_nodes
from perfcast.scheduler.live.nodes import ExecutorError, WorkersStarting
from perfcast.scheduler.live.reports import Finished
from perfcast.scheduler.live.runner import LiveRunner
from perfcast.scheduler.live.spec import JobSpec
from perfcast.scheduler.live.store import JobStore
from perfcast.scheduler.live.training import train
from perfcast.scheduler.policies import make_policy

# steps of at least 80 ms: a job lasts seconds, long enough to be migrated mid-run
SPEC = JobSpec(name="t", iterations=100, width=64, batch_size=32, checkpoint_every=20,
               min_step_time_s=0.08, config={"lr_step_every": 25})  # fmt: skip
# steps of 250 ms (25 s a job): they still run while `ray status`, which takes seconds on a
# loaded machine and reads a view of the cluster that lags the GCS, is asked until it is current
WATCHED = SPEC.model_copy(update={"min_step_time_s": 0.25})
RESERVED_3 = "/4.0 GPU (0.0 used of 3.0 reserved in placement groups)"


@pytest.fixture(autouse=True)
def _one_torch_thread():
    """The reference runs in this process compute on one torch thread, as the executor's
    workers do: the thread count changes the order of float sums, so a run on two threads is
    not bit-identical to the workers' (it failed whenever no earlier test module had set one)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """A head node (2 logical GPUs); the test adds the second raylet itself."""
    saved = {k: os.environ.get(k) for k in ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN_PATH")}
    local = LocalCluster.start(tmp_path_factory.mktemp("cluster") / "token", 2, num_cpus=2)
    try:
        use_token(local.token_path)
        ray.init(address=local.address, namespace="perfcast-multinode", log_to_driver=False)
        yield local
    finally:
        ray.shutdown()
        local.stop()
        for key, value in saved.items():  # the next module's local cluster: Ray's defaults
            os.environ.pop(key, None) if value is None else os.environ.update({key: value})
        Config.initialize("")  # Ray re-reads the mode, as `use_token` made it do
        AuthenticationTokenLoader.instance().reset_cache()


@pytest.fixture(scope="module")
def executor(cluster, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("live")
    store = JobStore(tmp / "state.db")
    # the workers jobs give back stay idle on their node (two each) for the later launches: a
    # new worker costs a process start (~7 s of CPU, torch's imports). No spares: every
    # launch on a node without an idle worker still starts one there
    ex = RayExecutor(store, tmp / "ckpt", idle_per_node=2)
    yield ex
    ex.shutdown()
    store.close()


@pytest.fixture(scope="module")
def runner(cluster, executor):
    """A scheduler that started on the head alone; the second raylet joins after."""
    runner = LiveRunner(executor, executor.store, make_policy("fifo"), round_s=0.1)
    assert len(executor.nodes) == 1 and runner.loop.cluster.num_nodes == 1
    cluster.add_node(2, num_cpus=1, resources={"second_raylet": 1})
    wait_for_nodes(2)
    runner.step()  # discovers the new node
    executor.warm_spares(timeout_s=600)  # process start-up on a loaded host: minutes
    return runner


def run_once_up(ex: RayExecutor, job_id: str, gpus: tuple, batch: int) -> None:
    """`ex.run`, tried again while its workers are still starting, as the runner does: a
    launch whose processes are not up within its RPC wait keeps them as spares for the next
    (a loaded host starts a process in minutes)."""
    deadline = time.monotonic() + 600
    while True:
        try:
            return ex.run(job_id, gpus, batch, "exclusive")
        except WorkersStarting:
            if time.monotonic() > deadline:
                raise


def groups() -> dict[str, dict]:
    """Ray's placement groups by name (removed ones left out)."""
    return {v["name"]: v for v in placement_group_table().values() if v["state"] != "REMOVED"}


def worker_nodes(ex: RayExecutor, job_id: str) -> list[str]:
    return [ray.get(w.info.remote())["node_id"] for w in ex.live[job_id].workers]


@pytest.fixture(autouse=True)
def stop_leftovers(executor):
    """A test that fails mid-way stops its jobs, so the next one finds the GPUs free."""
    yield
    for job_id in list(executor.live):
        with contextlib.suppress(ExecutorError):  # its failure is the test's, reported already
            executor.stop(job_id, "the test ended")


def ray_status(address: str, until: str, while_busy: tuple[RayExecutor, str]) -> str:
    """What an operator (or an autoscaler) reads from `ray status`, asked again until it
    shows `until`, for as long as the job it describes still runs."""
    ex, job_id = while_busy
    cli = Path(sys.executable).parent / "ray"
    shown = ""
    while until not in shown and ex.status(job_id)["busy"]:
        shown = subprocess.run([cli, "status", "--address", address], capture_output=True,
                               text=True, timeout=120).stdout  # fmt: skip
    return shown


def wait_finished(ex: RayExecutor, job_ids: set[str], timeout_s: float = 120) -> None:
    done: set[str] = set()
    deadline = time.monotonic() + timeout_s
    while done != job_ids and time.monotonic() < deadline:
        done |= {r.job_id for r in ex.poll() if isinstance(r, Finished)}
        time.sleep(0.05)
    assert done == job_ids


def test_jobs_across_two_raylets_reserve_their_gpus_and_migrate(
    cluster, runner, executor, tmp_path
):
    # the raylet that joined is the core's node 1: the cluster grew, node 0 kept its index
    assert runner.loop.cluster.num_nodes == 2 and runner.loop.cluster.total_gpus == 4
    head, second = executor.nodes.node_ids
    assert "second_raylet" in next(n for n in ray.nodes() if n["NodeID"] == second)["Resources"]

    for job_id in ("wide", "solo"):
        executor.store.add_job(job_id, WATCHED.model_dump(), 0.0)
    run_once_up(executor, "wide", ((0, 0), (1, 0)), 32)  # one worker per raylet, gloo
    run_once_up(executor, "solo", ((1, 1),), 32)
    assert worker_nodes(executor, "wide") == [head, second]
    assert worker_nodes(executor, "solo") == [second]
    by_name = groups()
    wide = by_name[f"{executor.namespace}/wide/1/0:0,1:0"]
    solo = by_name[f"{executor.namespace}/solo/1/1:1"]
    assert wide["strategy"] == "SPREAD" and solo["strategy"] == "STRICT_PACK"
    assert list(wide["bundles_to_node_id"].values()) == [head, second]
    assert list(solo["bundles_to_node_id"].values()) == [second]
    assert ray.available_resources().get("GPU", 0) == 1  # Ray sees 3 of 4 GPUs reserved
    shown = ray_status(cluster.address, until=RESERVED_3, while_busy=(executor, "solo"))
    assert RESERVED_3 in shown, shown

    executor.wait_until("solo", 25)
    executor.relaunch("solo", ((0, 1),), 32, "migrate")  # second raylet -> head
    assert worker_nodes(executor, "solo") == [head]
    moved = groups()
    assert f"{executor.namespace}/solo/2/0:1" in moved
    assert f"{executor.namespace}/solo/1/1:1" not in moved  # the old GPU went back to Ray
    wait_finished(executor, {"wide", "solo"})
    assert not [n for n in groups() if n.startswith(executor.namespace)]  # all given back

    # the migrated run ends where an uninterrupted run ends, bit for bit (the padding of its
    # steps changes their time, not their arithmetic): the reference runs unpadded
    plain = SPEC.model_copy(update={"min_step_time_s": 0.0})
    train("ref", plain, TrainingHook("ref", plain, checkpoint_dir=tmp_path))
    ours = latest_checkpoint(executor.checkpoint_dir, "solo")
    ref = latest_checkpoint(tmp_path, "ref")
    a, b = load_checkpoint(ours.path, ours.sha256), load_checkpoint(ref.path, ref.sha256)
    assert a["iteration"] == b["iteration"] == SPEC.iterations
    assert all((a["model"][k] == b["model"][k]).all() for k in b["model"])


def test_gpus_held_outside_the_scheduler_are_refused_with_the_pending_demand_removed(
    runner, executor
):
    """A GPU Ray has given to someone else cannot be reserved: the launch fails with a clear
    error after the timeout instead of running on a GPU it does not hold."""
    on_second = [{"ray.io/node-id": executor.nodes.ray_id(1)}]
    outsider = placement_group([{"GPU": 2}], bundle_label_selector=on_second)
    ray.get(outsider.ready(), timeout=30)
    executor.reservations.reserve_timeout_s = 2.0
    executor.store.add_job("blocked", SPEC.model_dump(), 0.0)
    try:
        with pytest.raises(ExecutorError, match=r"could not reserve GPUs \[\(1, 0\)\]"):
            executor.run("blocked", ((1, 0),), 32, "exclusive")
        assert not [n for n in groups() if "/blocked/" in n]
        assert "blocked" not in executor.live
    finally:
        remove_placement_group(outsider)


def test_a_raylet_that_dies_leaves_the_cluster_and_its_job_restarts_elsewhere(
    cluster, runner, executor, tmp_path
):
    """A third raylet joins, a job is moved onto it, and the node dies (its raylet and workers
    SIGKILLed): the node keeps its index with no GPUs, the job is placed again on the nodes
    left and restarts from its newest checkpoint, ending where an uninterrupted run ends."""
    cluster.add_node(2, num_cpus=1, resources={"doomed_raylet": 1})
    wait_for_nodes(3)
    runner.step()
    assert runner.loop.cluster.num_nodes == 3 and runner.loop.cluster.total_gpus == 6
    doomed = executor.nodes.ray_id(2)
    # long enough that the job cannot end before Ray reports its node dead (seconds)
    spec = SPEC.model_copy(update={"iterations": 300, "min_step_time_s": 0.05})
    runner.submit("lost", spec)
    step_until(runner, lambda: executor.store.job("lost").status == "running")
    moved = executor.store.add_command("lost", "migrate", {"gpus": [[2, 0]]})
    step_until(runner, lambda: executor.store.command_outcome(moved) is not None)
    assert executor.store.command_outcome(moved).startswith("done")
    assert worker_nodes(executor, "lost") == [doomed]
    executor.wait_until("lost", 25)  # a checkpoint (20) written on the doomed node
    (raylet,) = [
        p for p in cluster.processes() if f"--node_id={doomed}" in " ".join(p.cmdline())
        and p.name() == "raylet"
    ]  # fmt: skip
    for process in [*raylet.children(recursive=True), raylet]:  # the node dies: all of it
        process.kill()
    step_until(runner, lambda: executor.store.job("lost").status == "done", limit=3000)
    assert executor.nodes.dead == {2}, executor.store.events("lost")
    assert runner.loop.cluster.node_size == [2, 2, 0] and runner.loop.cluster.total_gpus == 4
    # whichever sees it first: the runner (the node is gone: `node lost`) or the executor
    # (its workers died: `failure`, then `Lost` once Ray reports the node dead)
    kinds = [e["kind"] for e in executor.store.events("lost")]
    assert "node lost" in kinds or "failure" in kinds, kinds
    last = executor.store.events("lost", "launch")[-1]["detail"]
    assert "(2," not in last.split(" from ")[0] and int(last.split("from iteration ")[1]) >= 20
    plain = spec.model_copy(update={"min_step_time_s": 0.0})  # the same steps, not padded
    train("ref", plain, TrainingHook("ref", plain, checkpoint_dir=tmp_path))
    ours = latest_checkpoint(executor.checkpoint_dir, "lost")
    ref = latest_checkpoint(tmp_path, "ref")
    a, b = load_checkpoint(ours.path, ours.sha256), load_checkpoint(ref.path, ref.sha256)
    assert a["iteration"] == b["iteration"] == spec.iterations
    assert all(torch.equal(a["model"][k], b["model"][k]) for k in b["model"])


def step_until(runner: LiveRunner, condition, limit: int = 1200) -> None:
    for _ in range(limit):
        runner.step()
        if condition():
            return
        time.sleep(0.1)
    raise AssertionError(f"not reached; events: {runner.store.events()[-10:]}")
