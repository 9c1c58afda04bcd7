"""The Ray executor on logical GPUs (jobs run on CPU with gloo): no lost progress across
suspend/resume, migration, resize and a killed worker."""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import pytest
import ray
import torch

from perfcast.scheduler.core.decisions import Migrate, Run
from perfcast.scheduler.core.jobs import JobTable
from perfcast.scheduler.live.checkpoint import latest_checkpoint, load_checkpoint
from perfcast.scheduler.live.executor import RayExecutor
from perfcast.scheduler.live.hook import TrainingHook
from perfcast.scheduler.live.nodes import NodeView, RayNode, WorkersStarting
from perfcast.scheduler.live.pool import WorkerPool
from perfcast.scheduler.live.reports import Failed, Finished
from perfcast.scheduler.live.runner import core_job
from perfcast.scheduler.live.spec import JobSpec
from perfcast.scheduler.live.store import JobStore
from perfcast.scheduler.live.training import train

torch.set_num_threads(1)
# wide enough that a step takes a few milliseconds, so commands land mid-run
# StepLR halves the LR every 25 iterations; the shuffling loader goes through its 1024 samples
# in 32 batches, so a run of 120 crosses LR steps and epochs
SPEC = JobSpec(
    name="t", iterations=120, width=128, batch_size=32, checkpoint_every=20,
    config={"lr_step_every": 25, "lr_gamma": 0.5},
)  # fmt: skip


@pytest.fixture(scope="module", autouse=True)
def ray_cluster():
    # "local": a cluster of our own, even when another user's `ray start` cluster is up
    ray.init(
        address="local", num_cpus=2, num_gpus=4, include_dashboard=False, namespace="perfcast-tests"
    )
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
    launches skip process start-up, and the workers jobs give back kept for the next tests'
    launches (a new process costs seconds of CPU: torch's imports)."""
    tmp = tmp_path_factory.mktemp("live")
    store = JobStore(tmp / "state.db")
    ex = RayExecutor(store, tmp / "ckpt", spares_per_node=2, idle_per_node=6)
    ex.warm_spares(timeout_s=600)  # process start-up on a loaded host: minutes
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
    """Same iteration, parameters, LR schedule, counters and RNG state as the reference."""
    assert a["iteration"] == b["iteration"]
    for key in b["model"]:
        assert torch.equal(a["model"][key], b["model"][key]), key
    assert a["optimizer"]["param_groups"][0]["lr"] == b["optimizer"]["param_groups"][0]["lr"]
    assert a["objects"]["lr_scheduler"] == b["objects"]["lr_scheduler"]
    assert a["objects"]["counters"] == b["objects"]["counters"]
    assert torch.equal(a["objects"]["rng"]["torch"], b["objects"]["rng"]["torch"])


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
    moved_at = int(second.split("from iteration ")[1].split()[0])
    assert "[(0, 2)]" in second and 30 <= moved_at < SPEC.iterations
    assert "state handed over in memory" in second  # not read back from the file
    # the durable checkpoint of that boundary is written too (for crashes)
    assert moved_at in [c.iteration for c in executor.store.checkpoints("m")]
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
    assert executor.store.job("f").attempt == 1  # nor count as an attempt of it
    assert wait_finished(executor, "f").iteration == short.iterations


def test_resize_one_two_one_continues_from_the_same_step(executor, reference):
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
    # linear scaling rule: twice the global batch, twice the learning rate, which StepLR
    # goes on halving every 25 iterations (a restore scales the LR, never resets it)
    halvings = next_checkpoint // 25
    assert two_workers["optimizer"]["param_groups"][0]["lr"] == 2 * SPEC.lr * 0.5**halvings
    executor.relaunch("r", ((0, 1),), 32, "resize")
    done = wait_finished(executor, "r")
    starts = [int(d.split("from iteration ")[1]) for d in launches(executor, "r")[1:]]
    stops = [c.iteration for c in executor.store.checkpoints("r")]
    assert all(s in stops for s in starts) and starts[0] < starts[1]  # no step lost or redone
    assert done.samples_done >= SPEC.total_samples
    final = final_state(executor, "r")
    # back at one worker at the spec's LR scale: StepLR went on from where it was (it counts
    # iterations, and the two-worker ones were double-sized), never reset
    stepped = final["objects"]["lr_scheduler"]["last_epoch"]
    assert stepped == final["iteration"] < SPEC.iterations
    assert final["optimizer"]["param_groups"][0]["lr"] == SPEC.lr * 0.5 ** (stepped // 25)
    assert final["samples_done"] == reference["samples_done"]


# grad_shards: the global batch of 64 is two micro-shards of 32 whose gradients are added in
# shard order, so the run is the same bits at one worker or two
BUSY_S = 600  # seconds: the waits of the sharded resize test (a CI run beside two burners
# timed out at the defaults)
SHARDED = JobSpec(
    name="sh", iterations=120, width=128, batch_size=64, num_gpus=2, grad_shards=2,
    checkpoint_every=20, min_step_time_s=0.005, config={"lr_step_every": 25, "lr_gamma": 0.5},
)  # fmt: skip


def run_when_up(executor: RayExecutor, job_id: str, *args, timeout_s: float = BUSY_S) -> None:
    """`executor.run`, asked again while its workers are still starting (`WorkersStarting`:
    on a loaded host a process can take minutes), as the runner's next round asks: the next
    launch takes the workers put off, so no more processes start beside them."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return executor.run(job_id, *args)
        except WorkersStarting:
            if time.monotonic() > deadline:
                raise


def test_resize_two_one_two_keeping_the_batch_is_bit_identical_to_a_plain_run(executor, tmp_path):
    # the plain two-worker run and, on the other GPUs at the same time, the resized one; four
    # workers and two relaunches on a shared 2-core machine: deadlines for progress, not speed
    submit(executor, "plain2", SHARDED)
    submit(executor, "rs", SHARDED)
    run_when_up(executor, "plain2", ((0, 2), (0, 3)), 64, "exclusive")
    run_when_up(executor, "rs", ((0, 0), (0, 1)), 64, "exclusive")
    executor.wait_until("rs", 10, timeout_s=BUSY_S)
    executor.relaunch("rs", ((0, 0),), 64, "resize")  # 2 -> 1 worker, global batch kept
    one_from = int(launches(executor, "rs")[-1].split("from iteration ")[1])
    checkpointed = (one_from // 20 + 1) * 20 + 1  # a checkpoint at one worker
    executor.wait_until("rs", checkpointed, timeout_s=BUSY_S)
    executor.relaunch("rs", ((0, 0), (0, 1)), 64, "resize")  # and back to 2
    two_from = int(launches(executor, "rs")[-1].split("from iteration ")[1])
    assert 10 <= one_from < two_from < SHARDED.iterations
    wait_all_finished(executor, "plain2", "rs", timeout_s=BUSY_S)
    plain, resized = final_state(executor, "plain2"), final_state(executor, "rs")
    assert_bit_identical(resized, plain)
    # and both are the one-worker run's bits: the gradient does not depend on the world size
    train("one", SHARDED, TrainingHook("one", SHARDED, global_batch=64, checkpoint_dir=tmp_path))
    one = latest_checkpoint(tmp_path, "one")
    assert_bit_identical(plain, load_checkpoint(one.path, one.sha256))


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


def test_corrupt_newest_checkpoint_is_logged_and_skipped_after_a_kill(executor, reference):
    submit(executor, "c", SPEC.model_copy(update={"min_step_time_s": 0.01}))
    executor.run("c", ((0, 3),), SPEC.batch_size, "exclusive")
    executor.wait_until("c", 50)
    executor.suspend("c")  # no checkpoint is written while we damage the newest
    newest = latest_checkpoint(executor.checkpoint_dir, "c")
    raw = bytearray(Path(newest.path).read_bytes())
    raw[-3] ^= 0xFF
    Path(newest.path).write_bytes(bytes(raw))
    ray.kill(executor.live["c"].workers[0], no_restart=True)
    assert wait_finished(executor, "c").iteration == SPEC.iterations
    (corrupt,) = executor.store.events("c", "corrupt checkpoint")
    assert newest.path in corrupt["detail"] and "sha256" in corrupt["detail"]
    restart = launches(executor, "c")[1]
    assert f"from iteration {newest.iteration - SPEC.checkpoint_every}" in restart
    assert_bit_identical(final_state(executor, "c"), reference)


def test_a_crash_looping_job_backs_off_then_fails_with_its_error(executor):
    broken = SPEC.model_copy(
        update={"entrypoint": "json:loads", "max_restarts": 2, "restart_backoff_s": 0.3}
    )  # json.loads(job_id, spec, hook) raises TypeError: a broken entrypoint
    submit(executor, "x", broken)
    executor.run("x", ((0, 2),), SPEC.batch_size, "exclusive")
    reports, deadline = [], time.monotonic() + 90
    while time.monotonic() < deadline and not any(isinstance(r, Failed) for r in reports):
        reports += [r for r in executor.poll() if r.job_id == "x"]
        time.sleep(0.05)
    (failed,) = [r for r in reports if isinstance(r, Failed)]
    record = executor.store.job("x")
    assert record.status == "failed" and record.error == failed.error
    assert "TypeError" in record.error
    assert record.workers == () and "x" not in executor.live
    assert len(executor.store.events("x", "failure")) == 3  # the first run and two restarts
    waits = [e["detail"].split(" in ")[-1] for e in executor.store.events("x", "restart")]
    assert waits == ["0.3 s", "0.6 s"]  # backoff doubles
    starts = [e["at"] for e in executor.store.events("x", "launch")]
    assert len(starts) == 3 and starts[2] - starts[1] >= 0.6 and starts[1] - starts[0] >= 0.3


def test_finish_time_is_when_the_job_ended_not_when_it_was_seen(executor):
    submit(executor, "late", SPEC.model_copy(update={"iterations": 5}))
    executor.run("late", ((0, 0),), SPEC.batch_size, "exclusive")
    while executor.status("late")["busy"]:
        time.sleep(0.05)
    ended = executor.status("late")["ended_unix"]
    time.sleep(1.0)  # nobody polls: a scheduler that is down, or busy
    done = wait_finished(executor, "late")
    assert done.ended_unix == ended
    assert executor.store.job("late").finish_s == pytest.approx(ended, abs=0.2)


def test_timesliced_jobs_take_turns_and_both_finish(executor):
    long = SPEC.model_copy(update={"iterations": 300, "min_step_time_s": 0.005})
    executor.slicer.slice_s = 0.1
    for job_id in ("s1", "s2"):
        submit(executor, job_id, long)
    # s2 must join while s1 still runs: its worker is a spare whose process is already up,
    # not one still starting (on a loaded machine, a start outlasts s1's 1.5 s of work)
    executor.warm_spares(timeout_s=600)
    executor.run("s1", ((0, 1),), SPEC.batch_size, "exclusive")
    executor.run("s2", ((0, 1),), SPEC.batch_size, "timeslice")
    assert executor.slicer.groups == {((0, 1),): ["s1", "s2"]}
    assert executor.status("s1")["busy"], "s1 finished before s2 joined it"
    checks = 0
    while checks < 20 and all(j in executor.live for j in ("s1", "s2")):
        with executor.lock:  # no switch in progress: the bookkeeping matches the workers
            gangs = [executor.live.get(j) for j in ("s1", "s2")]
            if None in gangs:
                break
            statuses = ray.get([gang.workers[0].status.remote() for gang in gangs])
            if not all(s["busy"] for s in statuses):
                break  # one has just finished; `poll` has not seen it yet
            assert [gang.suspended for gang in gangs] in ([True, False], [False, True])
            assert [s["suspended"] for s in statuses] == [gang.suspended for gang in gangs]
            checks += 1
        time.sleep(0.03)
    assert checks >= 5
    for done in wait_all_finished(executor, "s1", "s2", timeout_s=300).values():
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
    held = executor.store.add_command("op", "suspend", {})
    step_until(lambda: executor.store.command_outcome(held) is not None)
    for _ in range(5):  # fifo started it again in the same round: the hold keeps it suspended
        runner.step()
    assert runner.loop.jobs["op"].status.value == "suspended", executor.store.events("op")
    resumed = executor.store.add_command("op", "resume", {})
    step_until(lambda: executor.store.command_outcome(resumed) is not None)
    assert executor.store.command_outcome(resumed).startswith("done")
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


def test_a_round_that_raises_is_logged_and_the_next_rounds_go_on(executor):
    from perfcast.scheduler.live.runner import LiveRunner
    from perfcast.scheduler.policies import make_policy

    fifo = make_policy("fifo")

    class RaisesOnce:  # fifo, whose first round with a job raises
        def __init__(self):
            self.raised = False

        def schedule(self, ctx):
            if ctx.jobs.waiting() and not self.raised:
                self.raised = True
                raise ZeroDivisionError("policy bug in round one")
            return fifo.schedule(ctx)

        def __getattr__(self, name):
            return getattr(fifo, name)

    runner = LiveRunner(executor, executor.store, RaisesOnce(), round_s=0.05)
    runner.submit("oops", SPEC.model_copy(update={"iterations": 20}))
    for _ in range(600):
        runner.step()
        if executor.store.job("oops").status == "done":
            break
        time.sleep(0.05)
    assert executor.store.job("oops").status == "done"
    assert runner.round_errors == 1
    (error,) = executor.store.events(None, "round error")
    assert "ZeroDivisionError: policy bug in round one" in error["detail"]
    assert "Traceback" in error["detail"] and "schedule" in error["detail"]


def test_a_policy_that_cannot_decide_without_predictions_is_refused_at_start(executor):
    from perfcast.scheduler.live.runner import LiveRunner, PredictionsNeeded
    from perfcast.scheduler.policies import make_policy

    with pytest.raises(PredictionsNeeded, match="'elastic' needs predictions"):
        LiveRunner(executor, executor.store, make_policy("elastic"))
    LiveRunner(executor, executor.store, make_policy("gandiva"))  # time-slices without them


def test_operator_resize_of_a_sharded_job_keeps_its_global_batch(executor):
    from perfcast.scheduler.live.runner import LiveRunner
    from perfcast.scheduler.policies import make_policy

    runner = LiveRunner(executor, executor.store, make_policy("fifo"), round_s=0.05)
    runner.submit("shr", SHARDED.model_copy(update={"iterations": 400, "min_step_time_s": 0.01}))

    def outcome_of(kind: str, args: dict) -> str:
        command = executor.store.add_command("shr", kind, args)
        for _ in range(600):
            runner.step()
            if (outcome := executor.store.command_outcome(command)) is not None:
                return outcome
            time.sleep(0.05)
        raise AssertionError("command not carried out")

    for _ in range(600):
        runner.step()
        if executor.store.job("shr").status == "running":
            break
        time.sleep(0.05)
    assert outcome_of("resize", {"num_gpus": 1}).startswith("done")
    record = executor.store.job("shr")
    assert len(record.gpus) == 1 and record.batch_size == 64  # per-worker batch doubled
    refused = outcome_of("resize", {"num_gpus": 3})
    assert refused.startswith("refused") and "cannot be split over 3 workers" in refused
    assert executor.store.job("shr").batch_size == 64


def test_a_decision_that_failed_is_undone_in_the_core_and_the_job_placed_again(
    executor, monkeypatch
):
    """The executor refuses a launch the core has already committed: without reconciling,
    the core would hold the job as running for ever with no worker (and never finish it)."""
    from perfcast.scheduler.live.nodes import ExecutorError
    from perfcast.scheduler.live.runner import LiveRunner
    from perfcast.scheduler.policies import make_policy

    real_run, refused = executor.run, []

    def run_refusing_once(job_id, *args):
        if not refused:
            refused.append(job_id)
            raise ExecutorError(f"could not reserve GPUs for {job_id} (injected)")
        return real_run(job_id, *args)

    monkeypatch.setattr(executor, "run", run_refusing_once)
    runner = LiveRunner(executor, executor.store, make_policy("fifo"), round_s=0.05)
    runner.submit("rec", SPEC.model_copy(update={"iterations": 20}))
    for _ in range(600):
        runner.step()
        if executor.store.job("rec").status == "done":
            break
        time.sleep(0.05)
    assert refused == ["rec"] and runner.round_errors == 1
    (fixed,) = executor.store.events("rec", "reconciled")
    assert "vs cluster None" in fixed["detail"]
    assert executor.store.job("rec").status == "done"
    assert runner.loop.jobs["rec"].status.value == "done"


def _named_workers(ex: RayExecutor) -> set[str]:
    return {
        a["name"]
        for a in ray.util.list_named_actors(all_namespaces=True)
        if a["namespace"] == ex.namespace
    }


def test_a_launch_whose_workers_are_slow_or_fail_leaves_none_behind(tmp_path, monkeypatch):
    """On a loaded host new worker processes can start slower than a launch waits. Workers not
    up yet (told nothing) are put off as spares that the next launch takes, so no more
    processes start beside them; workers that may have been told to start are killed when the
    launch fails, so none runs the job beside the next attempt. Either way no GPU stays
    reserved and the job is not running."""
    import perfcast.scheduler.live.executor as executor_module

    store = JobStore(tmp_path / "state.db")
    ex = RayExecutor(store, tmp_path / "ckpt", spares_per_node=0)
    try:
        spec = SPEC.model_copy(update={"iterations": 20})
        submit(ex, "slow", spec)
        submit(ex, "bad", spec)
        monkeypatch.setattr(executor_module, "RPC_TIMEOUT_S", 0.0)  # not up in time
        with pytest.raises(WorkersStarting, match="not up after"):
            ex.run("slow", ((0, 0), (0, 1)), 32, "exclusive")
        kept = _named_workers(ex)
        assert len(kept) == 2 and not ex.reservations.held("slow")
        assert "slow" not in ex.placements()
        monkeypatch.undo()

        run_when_up(ex, "slow", ((0, 0), (0, 1)), 32, "exclusive")
        assert set(store.job("slow").workers) == kept  # took the two put off, started none
        wait_finished(ex, "slow")

        def broken(**fields):
            raise RuntimeError("assignment refused (injected)")

        monkeypatch.setattr(executor_module, "Assignment", broken)
        monkeypatch.setattr(executor_module, "RPC_TIMEOUT_S", 600.0)  # a new worker: up first
        with pytest.raises(RuntimeError, match="injected"):
            ex.run("bad", ((0, 2),), 32, "exclusive")
        deadline = time.monotonic() + 60  # ray.kill is asynchronous
        while _named_workers(ex) - kept and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not _named_workers(ex) - kept  # its new worker was killed
        assert not ex.reservations.held("bad") and "bad" not in ex.placements()
        assert store.job("bad").status == "pending" and not store.events("bad", "launch")
    finally:
        ex.shutdown()
        store.close()


def test_orphans_idle_on_a_live_node_are_adopted_as_spares_the_rest_killed():
    """The workers a killed scheduler left that no job names: the idle ones on a live node
    become its successor's spares, up to `idle_per_node`; one running an attempt, one on a
    node that left, one that does not answer in time (said as such), and idle ones beyond the
    cap are killed; a worker a job names is left alone. Stand-ins answer as the workers would
    (no torch in their processes)."""

    @ray.remote(num_cpus=0)
    class Orphan:
        def __init__(self, busy: bool, node_id: str | None, stuck: bool = False) -> None:
            self.busy, self.node_id = busy, node_id or ray.get_runtime_context().get_node_id()
            self.stuck = stuck

        def status(self) -> dict:
            if self.stuck:  # a worker that cannot answer in time (a host starving it)
                time.sleep(60)
            return {"busy": self.busy}

        def info(self) -> dict:
            return {"node_id": self.node_id}

    nodes = NodeView()
    gone = RayNode("f" * 56, 4, "logical", alive=False)
    nodes.nodes.append(gone)  # a node that left: its workers' processes are not to be kept
    namespace = f"orphans-{uuid.uuid4().hex[:8]}"
    orphans = {
        name: Orphan.options(name=name, namespace=namespace, lifetime="detached").remote(*how)
        for name, how in {
            "idle-1": (False, None),
            "idle-2": (False, None),
            "busy": (True, None),
            "gone-node": (False, gone.node_id),
            "stuck": (False, None, True),
            "a-jobs": (True, None),
        }.items()
    }
    pool = WorkerPool(nodes, namespace, idle_per_node=1)
    try:
        # up before they are asked: a process start on a loaded host outlasts the 10 s wait
        ray.get([orphan.info.remote() for orphan in orphans.values()], timeout=600)
        outcome = pool.reclaim_orphans(["a-jobs"], timeout_s=5)
        assert outcome.silent == ["stuck"] and outcome.busy == ["busy"]
        assert len(outcome.adopted) == 1 and outcome.adopted[0] in ("idle-1", "idle-2")
        assert sorted(outcome.killed) == sorted(
            {"idle-1", "idle-2", "busy", "gone-node", "stuck"} - set(outcome.adopted)
        )
        assert pool.take(0)[1] == outcome.adopted[0]  # a launch takes it, no new process
        deadline = time.monotonic() + 60  # ray.kill is asynchronous
        left = set(orphans)
        while left != {*outcome.adopted, "a-jobs"} and time.monotonic() < deadline:
            left = {
                a["name"]
                for a in ray.util.list_named_actors(all_namespaces=True)
                if a["namespace"] == namespace
            }
            time.sleep(0.1)
        assert left == {*outcome.adopted, "a-jobs"}
    finally:
        for worker in orphans.values():
            ray.kill(worker, no_restart=True)
