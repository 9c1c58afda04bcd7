"""HyperSched as a Ray Tune TrialScheduler: decisions on fake trial results, in the style of
Ray Tune's own scheduler tests (stub trials, a mock controller, results fed by hand)."""

from __future__ import annotations

import itertools
import pickle
import threading
from types import SimpleNamespace

import pandas as pd
import pytest
from hypothesis import given
from hypothesis import strategies as st
from ray.tune.execution.placement_groups import PlacementGroupFactory
from ray.tune.experiment import Trial
from ray.tune.schedulers import TrialScheduler

from perfcast.errors import PerfcastError
from perfcast.scheduler.policies.rungs import Rungs
from perfcast.scheduler.tune import HyperSched
from perfcast.scheduler.tune.scaling import ScalingAdvisor, progress_by_deadline

CONTINUE, PAUSE, STOP = TrialScheduler.CONTINUE, TrialScheduler.PAUSE, TrialScheduler.STOP


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class MockController:
    """What a scheduler may touch of Tune's controller: trials, stop_trial, search_alg."""

    def __init__(self, scheduler: HyperSched, search_finished: bool = True) -> None:
        self.scheduler, self.trials = scheduler, []
        self.search_alg = SimpleNamespace(is_finished=lambda: search_finished)

    def add(self, gpus: int = 1) -> Trial:
        trial = Trial(
            "__fake",
            stub=True,
            placement_group_factory=PlacementGroupFactory([{"CPU": 1, "GPU": gpus}]),
        )
        self.trials.append(trial)
        self.scheduler.on_trial_add(self, trial)
        return trial

    def get_trials(self) -> list[Trial]:
        return self.trials

    def stop_trial(self, trial: Trial) -> None:
        self.scheduler.on_trial_remove(self, trial)
        trial.set_status(Trial.TERMINATED)

    def report(self, trial: Trial, iteration: int, accuracy: float, seconds: float = 1.0) -> str:
        trial.set_status(Trial.RUNNING)
        result = {
            "training_iteration": iteration,
            "accuracy": accuracy,
            "time_this_iter_s": seconds,
        }
        decision = self.scheduler.on_trial_result(self, trial, result)
        if decision == PAUSE:
            trial.set_status(Trial.PAUSED)
        elif decision == STOP:
            self.scheduler.on_trial_complete(self, trial, result)
            trial.set_status(Trial.TERMINATED)
        return decision


class ScalingTable:
    """A prediction backend answering step times from a fixed table (synthetic numbers)."""

    def __init__(self, step_s: dict[int, float]) -> None:
        self.step_s, self.calls = step_s, 0

    def predict(self, task: str, rows: pd.DataFrame) -> pd.DataFrame:
        assert task == "scaling"
        self.calls += 1
        steps = [self.step_s[int(g)] for g in rows["num_gpus"]]
        return pd.DataFrame(
            {"step_time_s": steps, "step_time_s_p10": steps, "step_time_s_p90": steps}
        )


JOB = {"job": "resnet18-cifar10", "gpu_type": "t4", "local_batch_size": 64}


def hypersched(clock: Clock, **kw) -> HyperSched:
    args = {"deadline_s": 100.0, "num_gpus": 4, "metric": "accuracy", "mode": "max",
            "max_t": 9, "grace_period": 1, "reduction_factor": 3, "clock": clock}  # fmt: skip
    return HyperSched(**(args | kw))


def test_first_arrivals_at_a_rung_pause_and_the_best_is_promoted_when_enough_arrive() -> None:
    sched = hypersched(Clock())
    ctl = MockController(sched)
    a, b, c = ctl.add(), ctl.add(), ctl.add()
    assert ctl.report(a, 1, 0.50) == PAUSE  # 1 result: no place above the rung yet
    assert ctl.report(b, 1, 0.70) == PAUSE
    # c is third and best: one place (3 // 3), it goes on
    assert ctl.report(c, 1, 0.90) == CONTINUE
    assert ctl.report(c, 2, 0.91) == CONTINUE  # between rungs
    d = ctl.add()
    assert ctl.report(d, 1, 0.80) == PAUSE  # 4 results, 1 place, c holds it
    for x in (ctl.add(), ctl.add()):
        assert ctl.report(x, 1, 0.10) == PAUSE
    # 6 results: 2 places: c and d; d is paused and now promotable, before any new trial
    new = ctl.add()
    assert sched.choose_trial_to_run(ctl) is d
    assert new.status == Trial.PENDING


def test_minimizing_mode_ranks_lower_as_better() -> None:
    sched = hypersched(Clock(), metric="loss", mode="min")
    ctl = MockController(sched)
    trials = [ctl.add() for _ in range(3)]
    decisions = []
    for trial, loss in zip(trials, (0.9, 0.1, 0.5), strict=True):
        trial.set_status(Trial.RUNNING)
        decisions.append(sched.on_trial_result(ctl, trial, {"training_iteration": 1, "loss": loss}))
    assert decisions == [PAUSE, PAUSE, PAUSE]  # 0.5 arrives third but is not the lowest
    assert sched.rungs.promotable(trials[1].trial_id)


def test_past_the_deadline_every_trial_stops_and_nothing_starts() -> None:
    clock = Clock()
    sched = hypersched(clock)
    ctl = MockController(sched)
    running, paused, pending = ctl.add(), ctl.add(), ctl.add()
    ctl.report(paused, 1, 0.5)
    clock.now += 101
    assert ctl.report(running, 1, 0.9) == STOP
    assert sched.choose_trial_to_run(ctl) is None
    assert {t.status for t in (running, paused, pending)} == {Trial.TERMINATED}


def test_a_new_trial_starts_only_while_it_can_reach_the_rungs_that_matter() -> None:
    clock = Clock()
    sched = hypersched(clock, deadline_s=40.0, max_t=27)
    ctl = MockController(sched, search_finished=False)
    first = [ctl.add() for _ in range(3)]
    for trial, acc in zip(first, (0.2, 0.3, 0.9), strict=True):
        ctl.report(trial, 1, acc, seconds=1.0)
    for i in (2, 3):
        ctl.report(first[2], i, 0.95, seconds=1.0)  # furthest rung: 3 iterations
    late = ctl.add()
    # 1 s per iteration: a new trial needs min(3 * 3, 27) = 9 s
    clock.now += 30  # 10 s left
    assert sched.worth_starting()
    assert sched.choose_trial_to_run(ctl) is late
    clock.now += 2  # 8 s left
    assert not sched.worth_starting()
    # the GPUs go to the best paused trial (8 s: a 2 s restart and 1 s iterations fit)
    assert sched.choose_trial_to_run(ctl) is first[2]
    assert late.status == Trial.TERMINATED  # removed, so Tune cannot start it


def test_when_stuck_the_best_paused_trial_trains_to_max_t_without_rung_pauses() -> None:
    sched = hypersched(Clock())
    ctl = MockController(sched)
    a, b = ctl.add(), ctl.add()
    assert ctl.report(a, 1, 0.4) == PAUSE
    assert ctl.report(b, 1, 0.6) == PAUSE
    assert sched.choose_trial_to_run(ctl) is b  # nothing runs, nothing to start
    for i in range(2, 9):
        assert ctl.report(b, i, 0.7) == CONTINUE  # rung 3 passed alone
    assert ctl.report(b, 9, 0.8) == STOP  # max_t
    # time is left: the next-best paused trial trains on instead of the search ending
    assert sched.choose_trial_to_run(ctl) is a
    for i in range(2, 9):
        assert ctl.report(a, i, 0.5) == CONTINUE
    assert ctl.report(a, 9, 0.5) == STOP
    assert sched.choose_trial_to_run(ctl) is None  # nothing is left: the search ends
    assert not sched.worth_starting()


@pytest.mark.parametrize(("left", "resumed"), [(12.0, False), (20.0, True)])
def test_a_paused_trial_resumes_only_while_a_restart_and_an_iteration_fit(left, resumed) -> None:
    clock = Clock()
    sched = hypersched(clock)
    ctl = MockController(sched)
    a, b = ctl.add(), ctl.add()
    assert ctl.report(a, 1, 0.4, seconds=10.0) == PAUSE
    assert ctl.report(b, 1, 0.6, seconds=10.0) == PAUSE
    assert sched.choose_trial_to_run(ctl) is b
    clock.now += 15
    ctl.report(b, 2, 0.7, seconds=10.0)  # its restart took 15 - 10 = 5 s
    for i in range(3, 10):
        clock.now += 10  # 10 s per iteration
        ctl.report(b, i, 0.7, seconds=10.0)
    assert b.status == Trial.TERMINATED
    clock.now = sched._start + 100 - left  # a restart and an iteration need 15 s
    assert (sched.choose_trial_to_run(ctl) is a) == resumed
    assert (a.status == Trial.TERMINATED) != resumed  # the search ended, a removed


def test_the_deadline_clock_starts_when_the_first_trial_process_runs() -> None:
    clock = Clock()
    sched = hypersched(clock)  # 100 s
    ctl = MockController(sched)
    a, b = ctl.add(), ctl.add()
    clock.now += 500  # Ray starting the trial processes on a busy machine
    assert sched.choose_trial_to_run(ctl) is a  # nothing stopped before any trial ran
    assert sched.time_left() == 100
    a.set_status(Trial.RUNNING)
    assert sched.choose_trial_to_run(ctl) is b  # it sees a running: the clock starts
    clock.now += 99
    assert ctl.report(a, 1, 0.5) == PAUSE  # a rung pause, not the deadline's stop
    clock.now += 2
    assert sched.choose_trial_to_run(ctl) is None
    assert {a.status, b.status} == {Trial.TERMINATED}


def test_a_given_clock_start_is_a_hard_wall_clock_deadline() -> None:
    clock = Clock()
    sched = hypersched(clock, clock_start=clock.now)
    ctl = MockController(sched)
    trial = ctl.add()
    clock.now += 101  # no trial process ever ran
    assert sched.choose_trial_to_run(ctl) is None
    assert trial.status == Trial.TERMINATED


def test_free_gpus_resume_the_next_best_paused_trial_while_another_runs() -> None:
    sched = hypersched(Clock(), num_gpus=2)
    ctl = MockController(sched)
    a, b, c = ctl.add(), ctl.add(), ctl.add()
    assert [ctl.report(x, 1, acc) for x, acc in ((a, 0.3), (b, 0.6), (c, 0.9))] == [
        PAUSE,
        PAUSE,
        CONTINUE,
    ]
    assert sched.choose_trial_to_run(ctl) is b  # c holds 1 of 2 GPUs: b, not a, gets the other
    b.set_status(Trial.RUNNING)
    assert sched.choose_trial_to_run(ctl) is None  # no GPU is free; a waits, not stopped
    assert a.status == Trial.PAUSED
    for i in (2, 3):  # b trains on without pausing at rung 3, where it is alone
        assert ctl.report(b, i, 0.7) == CONTINUE


def promoted_alone(deadline_s: float, backend: ScalingTable) -> tuple[HyperSched, MockController]:
    """Three trials at rung 1 (10 s per iteration), the best promoted and running alone."""
    sched = hypersched(Clock(), backend=backend, job=JOB, deadline_s=deadline_s, restart_s=5.0)
    ctl = MockController(sched)
    trials = [ctl.add() for _ in range(3)]
    for trial, acc in zip(trials, (0.3, 0.6, 0.1), strict=True):
        assert ctl.report(trial, 1, acc, seconds=10.0) == PAUSE
    assert sched.choose_trial_to_run(ctl) is trials[1]
    return sched, ctl


def test_free_gpus_grow_the_most_promising_trial_where_the_predicted_speedup_pays() -> None:
    linear = ScalingTable({1: 1.0, 2: 1.0, 3: 1.0, 4: 1.0})  # synthetic: perfect scaling
    # 60 s left: 6 of its 7 iterations left fit at 1 GPU; all 7 at 2 GPUs after a 5 s restart
    # (5 s per iteration): 2 GPUs are enough, more would not get it further
    sched, ctl = promoted_alone(60.0, linear)
    strong = ctl.trials[1]
    assert ctl.report(strong, 2, 0.62, seconds=10.0) == PAUSE
    assert sched.choose_trial_to_run(ctl) is strong
    assert strong.placement_group_factory.required_resources["GPU"] == 2
    assert linear.calls == 1  # predictions are asked once per GPU count


@pytest.mark.parametrize(("step_s", "kept_for_growth"), [(1.0, True), (None, False)])
def test_free_gpus_wait_for_growth_only_where_the_predicted_speedup_pays(
    step_s, kept_for_growth
) -> None:
    # synthetic: perfect scaling, or none at all
    table = ScalingTable({g: step_s or float(g) for g in (1, 2, 3, 4)})
    sched, ctl = promoted_alone(60.0, table)
    weak, strong, weakest = ctl.trials
    strong.set_status(Trial.RUNNING)
    chosen = sched.choose_trial_to_run(ctl)
    assert chosen is (None if kept_for_growth else weak)  # next-best paused, else kept
    assert weakest.status == Trial.PAUSED


def test_no_growth_when_the_trial_finishes_by_the_deadline_anyway() -> None:
    linear = ScalingTable({1: 1.0, 2: 1.0, 3: 1.0, 4: 1.0})
    _, ctl = promoted_alone(1000.0, linear)
    assert ctl.report(ctl.trials[1], 2, 0.62, seconds=10.0) == CONTINUE


def test_no_growth_where_the_predicted_speedup_does_not_pay() -> None:
    flat = ScalingTable({1: 1.0, 2: 2.0, 3: 3.0, 4: 4.0})  # synthetic: no speed-up at all
    sched = hypersched(Clock(), backend=flat, job=JOB, deadline_s=60.0)
    ctl = MockController(sched)
    trial = ctl.add()
    assert ctl.report(trial, 1, 0.5, seconds=10.0) == PAUSE
    assert sched.choose_trial_to_run(ctl) is trial  # stuck: exploited
    assert ctl.report(trial, 2, 0.6, seconds=10.0) == CONTINUE
    assert trial.placement_group_factory.required_resources["GPU"] == 1


def test_no_growth_while_new_trials_are_worth_starting() -> None:
    linear = ScalingTable({1: 1.0, 2: 1.0, 3: 1.0, 4: 1.0})
    sched = hypersched(Clock(), backend=linear, job=JOB, deadline_s=60.0)
    ctl = MockController(sched, search_finished=False)
    trial = ctl.add()
    ctl.add()  # pending, can still reach the rungs
    assert ctl.report(trial, 1, 0.5, seconds=1.0) == PAUSE
    assert linear.calls == 0


@pytest.mark.parametrize(
    "kw",
    [{"deadline_s": 0}, {"num_gpus": 0}, {"mode": "best"}, {"reduction_factor": 1},
     {"grace_period": 9}, {"backend": ScalingTable({1: 1.0})}],
)  # fmt: skip
def test_bad_arguments_are_refused_with_what_is_wrong(kw: dict) -> None:
    with pytest.raises(PerfcastError):
        hypersched(Clock(), **kw)


def test_a_job_row_without_its_workload_is_refused() -> None:
    with pytest.raises(PerfcastError, match="local_batch_size"):
        ScalingAdvisor(ScalingTable({1: 1.0}), {"job": "x", "gpu_type": "t4"})


def test_a_result_without_the_metric_is_named() -> None:
    sched = hypersched(Clock())
    ctl = MockController(sched)
    trial = ctl.add()
    trial.set_status(Trial.RUNNING)
    with pytest.raises(PerfcastError, match="accuracy"):
        sched.on_trial_result(ctl, trial, {"training_iteration": 1, "loss": 0.3})


def test_a_trial_larger_than_the_budget_is_refused() -> None:
    sched = hypersched(Clock(), num_gpus=2)
    with pytest.raises(PerfcastError, match="budget"):
        MockController(sched).add(gpus=4)


@given(
    st.lists(st.floats(0, 1, allow_nan=False), min_size=1, max_size=40),
    st.integers(2, 5),
)
def test_exactly_the_top_floor_n_over_eta_at_a_rung_are_promotable(scores, eta) -> None:
    rungs = Rungs(1, 100, eta)
    for i, s in enumerate(scores):
        rungs.record(f"t{i}", 1, s)
    promotable = [i for i in range(len(scores)) if rungs.promotable(f"t{i}")]
    assert len(promotable) == len(scores) // eta
    if promotable:
        assert min(scores[i] for i in promotable) >= max(
            (scores[i] for i in range(len(scores)) if i not in promotable), default=-1
        )


@given(st.floats(0.1, 10), st.floats(1, 100), st.integers(2, 5))
def test_rungs_are_geometric_and_below_max_t(grace, max_t, eta) -> None:
    if grace >= max_t:
        return
    m = Rungs(grace, max_t, eta).milestones
    assert m[0] == grace and all(x < max_t for x in m) and m[-1] * eta >= max_t
    assert all(b == pytest.approx(a * eta) for a, b in itertools.pairwise(m))


@given(
    st.floats(0.01, 100), st.floats(0, 100), st.floats(0, 1000), st.floats(0, 50), st.floats(0, 100)
)
def test_progress_by_deadline_is_bounded_and_monotone(it_s, left, time_left, restart, more) -> None:
    p = progress_by_deadline(it_s, left, time_left, restart)
    assert 0 <= p <= left
    assert progress_by_deadline(it_s, left, time_left + more, restart) >= p
    assert progress_by_deadline(it_s, left, time_left, restart + more) <= p


def test_the_scheduler_pickles_as_tune_stores_it_without_its_backend() -> None:
    backend = ScalingTable({1: 1.0, 2: 1.0})
    sched = hypersched(Clock(), backend=backend, job=JOB, num_gpus=2)
    sched.advisor.step_times([1, 2])
    backend.lock = threading.Lock()  # like InProcessBackend: not picklable
    copy = pickle.loads(pickle.dumps(sched))
    assert copy.advisor.speedup(1, 2) == 2.0  # what it had asked is kept
    with pytest.raises(PerfcastError, match="backend"):
        copy.advisor.step_times([3])


def test_the_start_rule_counts_wall_time_between_results_not_only_the_trainables_time() -> None:
    clock = Clock()
    sched = hypersched(clock, deadline_s=100.0, max_t=27)
    ctl = MockController(sched, search_finished=False)
    trial = ctl.add()
    for i in range(1, 4):
        ctl.report(trial, i, 0.5, seconds=0.1)
        clock.now += 2.0  # Tune's overhead and a busy machine: 2 s per iteration
    ctl.add()
    # furthest rung 3 -> a new trial needs 9 iterations: 18 s of wall time, not 0.9 s
    clock.now = sched._start + 100 - 10
    assert not sched.worth_starting()
