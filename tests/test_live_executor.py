"""The Ray executor on logical GPUs (jobs run on CPU with gloo): no lost progress across
suspend/resume, migration, resize and a killed worker."""

from __future__ import annotations

import time

import pytest
import ray
import torch

from perfcast.scheduler.core.decisions import Migrate, Run
from perfcast.scheduler.core.jobs import JobTable
from perfcast.scheduler.live.checkpoint import latest_checkpoint, load_checkpoint
from perfcast.scheduler.live.executor import Finished, RayExecutor
from perfcast.scheduler.live.hook import TrainingHook
from perfcast.scheduler.live.runner import core_job
from perfcast.scheduler.live.spec import JobSpec
from perfcast.scheduler.live.store import JobStore
from perfcast.scheduler.live.training import train

torch.set_num_threads(1)
# wide enough that a step takes a few milliseconds, so commands land mid-run
SPEC = JobSpec(name="t", iterations=120, width=128, batch_size=32, checkpoint_every=20)


@pytest.fixture(scope="module", autouse=True)
def ray_cluster():
    ray.init(num_cpus=2, num_gpus=4, include_dashboard=False, namespace="perfcast-tests")
    yield
    ray.shutdown()


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """The uninterrupted run, in this process."""
    ckpt = tmp_path_factory.mktemp("ref")
    train("ref", SPEC, TrainingHook("ref", SPEC, checkpoint_dir=ckpt))
    ref = latest_checkpoint(ckpt, "ref")
    return load_checkpoint(ref.path, ref.sha256)


@pytest.fixture(scope="module")
def executor(tmp_path_factory):
    """One executor for the module (tests use distinct job ids), with warm spare workers so
    launches skip process start-up."""
    tmp = tmp_path_factory.mktemp("live")
    store = JobStore(tmp / "state.db")
    ex = RayExecutor(store, tmp / "ckpt", spares_per_node=2)
    ex.warm_spares()
    yield ex
    ex.shutdown()
    store.close()


def submit(ex: RayExecutor, job_id: str, spec: JobSpec = SPEC) -> None:
    ex.store.add_job(job_id, spec.model_dump(), 0.0)


def wait_all_finished(ex: RayExecutor, *job_ids: str, timeout_s: float = 90) -> dict:
    done: dict[str, Finished] = {}
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and len(done) < len(job_ids):
        for report in ex.poll():
            if isinstance(report, Finished) and report.job_id in job_ids:
                done[report.job_id] = report
        time.sleep(0.05)
    assert set(done) == set(job_ids), f"unfinished: {set(job_ids) - set(done)}"
    return done


def wait_finished(ex: RayExecutor, job_id: str) -> Finished:
    return wait_all_finished(ex, job_id)[job_id]


def final_state(ex: RayExecutor, job_id: str) -> dict:
    ref = latest_checkpoint(ex.checkpoint_dir, job_id)
    return load_checkpoint(ref.path, ref.sha256)


def assert_bit_identical(a: dict, b: dict) -> None:
    assert a["iteration"] == b["iteration"]
    for key in b["model"]:
        assert torch.equal(a["model"][key], b["model"][key]), key


def launches(ex: RayExecutor, job_id: str) -> list[str]:
    return [e["detail"] for e in ex.store.events(job_id, "launch")]


def test_suspend_resume_keeps_iteration_and_parameters(executor, reference):
    submit(executor, "a")
    executor.run("a", ((0, 0),), SPEC.batch_size, "exclusive")
    executor.wait_until("a", 10)
    executor.suspend("a")
    paused = executor.status("a")["iteration"]
    time.sleep(0.3)
    assert executor.status("a")["iteration"] == paused  # really stopped
    assert executor.store.job("a").status == "suspended"
    executor.resume("a")
    done = wait_finished(executor, "a")
    assert done.iteration == SPEC.iterations and 10 <= paused < SPEC.iterations
    assert_bit_identical(final_state(executor, "a"), reference)
    assert len(launches(executor, "a")) == 1  # resumed in place, never restarted


def test_migrate_continues_from_the_same_iteration(executor, reference):
    submit(executor, "m")
    jobs = JobTable()
    state = jobs.add(core_job("m", SPEC))
    executor.apply([Run("m", ((0, 0),), SPEC.batch_size)], jobs, 0.0)
    executor.wait_until("m", 30)
    state.gpus = ((0, 0),)
    executor.apply([Migrate("m", ((0, 2),))], jobs, 1.0)
    _, second = launches(executor, "m")
    moved_at = int(second.split("from iteration ")[1])
    assert "[(0, 2)]" in second and 30 <= moved_at < SPEC.iterations
    assert executor.store.job("m").gpus == ((0, 2),)
    wait_finished(executor, "m")
    assert_bit_identical(final_state(executor, "m"), reference)


def test_a_job_that_finishes_before_its_move_is_not_moved(executor):
    """Migration starts the new workers ahead; when the old ones finish at the boundary
    instead, the new ones are called off before loading anything and the job is done."""
    short = SPEC.model_copy(update={"iterations": 3, "min_step_time_s": 0.5})
    submit(executor, "f", short)
    executor.run("f", ((0, 0),), SPEC.batch_size, "exclusive")
    executor.wait_until("f", 2)  # the last step takes 0.5 s: the move request lands in it
    executor.relaunch("f", ((0, 3),), SPEC.batch_size, "migrate")
    assert "f" not in executor.live
    assert executor.store.job("f").status == "done"
    assert len(launches(executor, "f")) == 1  # the workers called off never launched it
    assert wait_finished(executor, "f").iteration == short.iterations


def test_resize_one_two_one_continues_from_the_same_step(executor):
    submit(executor, "r")
    executor.run("r", ((0, 0),), 32, "exclusive")
    executor.wait_until("r", 10)
    executor.relaunch("r", ((0, 0), (0, 1)), 64, "resize")
    every = SPEC.checkpoint_every
    resumed_at = int(launches(executor, "r")[-1].split("from iteration ")[1])
    next_checkpoint = (resumed_at // every + 1) * every
    executor.wait_until("r", next_checkpoint + 1)
    two_workers = final_state(executor, "r")  # written by the two-worker run
    assert two_workers["iteration"] == next_checkpoint
    # linear scaling rule: twice the global batch, twice the learning rate
    assert two_workers["optimizer"]["param_groups"][0]["lr"] == pytest.approx(2 * SPEC.lr)
    executor.relaunch("r", ((0, 1),), 32, "resize")
    done = wait_finished(executor, "r")
    starts = [int(d.split("from iteration ")[1]) for d in launches(executor, "r")[1:]]
    stops = [c.iteration for c in executor.store.checkpoints("r")]
    assert all(s in stops for s in starts) and starts[0] < starts[1]  # no step lost or redone
    assert done.samples_done >= SPEC.total_samples
    assert final_state(executor, "r")["optimizer"]["param_groups"][0]["lr"] == SPEC.lr


def test_killed_worker_restarts_from_last_checkpoint_and_finishes(executor, reference):
    # steps of 10 ms: the kill (asynchronous) lands within a few steps of `reached`
    submit(executor, "k", SPEC.model_copy(update={"min_step_time_s": 0.01}))
    executor.run("k", ((0, 3),), SPEC.batch_size, "exclusive")
    reached = executor.wait_until("k", 50)["iteration"]
    ray.kill(executor.live["k"].workers[0], no_restart=True)  # dies mid-step
    done = wait_finished(executor, "k")
    assert done.iteration == SPEC.iterations
    restart = launches(executor, "k")[1]
    resumed_at = int(restart.split("from iteration ")[1])
    assert reached - SPEC.checkpoint_every <= resumed_at <= reached + SPEC.checkpoint_every
    assert [e["kind"] for e in executor.store.events("k", "failure")] == ["failure"]
    assert_bit_identical(final_state(executor, "k"), reference)


def test_timesliced_jobs_take_turns_and_both_finish(executor):
    long = SPEC.model_copy(update={"iterations": 600, "min_step_time_s": 0.005})
    executor.slicer.slice_s = 0.1
    for job_id in ("s1", "s2"):
        submit(executor, job_id, long)
    executor.run("s1", ((0, 1),), SPEC.batch_size, "exclusive")
    executor.run("s2", ((0, 1),), SPEC.batch_size, "timeslice")
    assert executor.slicer.groups == {((0, 1),): ["s1", "s2"]}
    checks = 0
    while checks < 20 and all(j in executor.live for j in ("s1", "s2")):
        with executor._lock:  # no switch in progress: the bookkeeping matches the workers
            lives = [executor.live.get(j) for j in ("s1", "s2")]
            if None in lives:
                break
            statuses = ray.get([live.workers[0].status.remote() for live in lives])
            if not all(s["busy"] for s in statuses):
                break  # one has just finished; `poll` has not seen it yet
            assert [live.suspended for live in lives] in ([True, False], [False, True])
            assert [s["suspended"] for s in statuses] == [live.suspended for live in lives]
            checks += 1
        time.sleep(0.03)
    assert checks >= 5
    for done in wait_all_finished(executor, "s1", "s2").values():
        assert done.iteration == long.iterations
    assert executor.slicer.switches >= 2


def test_runner_carries_out_operator_commands_through_the_core_loop(executor):
    from perfcast.scheduler.live.runner import LiveRunner
    from perfcast.scheduler.policies import make_policy

    runner = LiveRunner(executor, executor.store, make_policy("fifo"), round_s=0.05)
    runner.submit("op", SPEC.model_copy(update={"iterations": 1000, "min_step_time_s": 0.005}))

    def step_until(condition, limit=400):
        for _ in range(limit):
            runner.step()
            if condition():
                return
            time.sleep(0.05)
        raise AssertionError("condition not reached")

    step_until(lambda: executor.store.job("op").status == "running")
    target = next(g for g in ((0, 2), (0, 3), (0, 1)) if g not in executor.store.job("op").gpus)
    command = executor.store.add_command("op", "migrate", {"gpus": [list(target)]})
    step_until(lambda: executor.store.command_outcome(command) is not None)
    assert executor.store.command_outcome(command).startswith("done")
    events = executor.store.events("op")
    assert runner.loop.jobs["op"].gpus == (target,), events
    assert runner.loop.jobs["op"].migrations == 1, events
    assert executor.store.job("op").gpus == (target,)
    refused = executor.store.add_command("op", "migrate", {"gpus": [[0, 0], [0, 1]]})
    step_until(lambda: executor.store.command_outcome(refused) is not None)
    assert executor.store.command_outcome(refused).startswith("refused")
    step_until(lambda: executor.store.job("op").status == "done", limit=2000)
    assert runner.loop.jobs["op"].samples_done == runner.loop.jobs["op"].job.total_samples
