"""HyperSched (SoCC'19) as a Ray Tune `TrialScheduler`: the best model at a deadline.

    tuner = tune.Tuner(trainable, param_space=space, tune_config=tune.TuneConfig(
        metric="accuracy", mode="max", num_samples=48,
        scheduler=HyperSched(deadline_s=600, num_gpus=8, max_t=27,
                             backend=InProcessBackend(), job={"job": "resnet18-cifar10",
                             "gpu_type": "t4", "local_batch_size": 64})))

Decisions, all returned to Tune's controller (which acts on them):
- Rungs (ASHA): at `grace_period * eta**k` iterations a trial goes on only while it is in the
  top 1/eta of the trials that reached that rung; otherwise it pauses (keeping its checkpoint)
  and is promoted when later results rank it there.
- Starting trials: a new trial starts only while the time left exceeds
  `base iteration time * min(furthest rung * eta, max_t)`: a trial that cannot reach the rungs
  that matter by the deadline is not worth its GPUs.
- Resources: once no new trial is worth starting, GPUs nobody holds go to the most promising
  running trial, as many as perfcast's scaling predictions say get it furthest by the deadline
  after paying for the pause and restart (`ScalingAdvisor`); without a backend trials keep
  their size.
- Exploitation: GPUs that nothing else wants (no pending or promotable trial, no predicted
  growth of the most promising running trial) resume the next-best trial paused at a rung,
  which then trains to `max_t` without rung pauses; one after another while time is left.
- At the deadline every trial stops; the search ends earlier when nothing is left to run, or
  when the time left is shorter than a restart plus one iteration.
The deadline clock starts when the first trial process is running (or at `clock_start`): Ray
starting trial processes can take minutes on a busy machine, and a clock started when Tune
added the trials once ended a search before any trial had reported. For a hard wall-clock
limit from the moment `Tuner.fit()` starts, pass `clock_start=time.monotonic()` (and Tune's
`time_budget_s`). `num_gpus` is the search's GPU budget: the scheduler never has trials
holding more at once (pass logical GPUs on a CPU machine).
"""

from __future__ import annotations

import logging
import statistics
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ray.tune.execution.placement_groups import PlacementGroupFactory
from ray.tune.experiment import Trial
from ray.tune.schedulers import TrialScheduler

from perfcast.errors import PerfcastError
from perfcast.predictor.backend import PredictionBackend
from perfcast.scheduler.policies.rungs import Rungs
from perfcast.scheduler.tune.scaling import ScalingAdvisor

logger = logging.getLogger(__name__)


@dataclass
class _TrialState:
    gpus: int
    ran: bool = False  # has reported a result (a PENDING one is being resumed by Tune)
    # at the current size: wall seconds between results (Tune's overhead included) and the
    # trainable's own seconds per iteration, (wall, compute) pairs
    iterations: list[tuple[float, float]] = field(default_factory=list)
    last_seen: float | None = None  # clock at its last result while it keeps running
    waiting: bool = False  # paused at a rung, not promotable when paused
    exploit: bool = False  # resumed to train to max_t without rung pauses
    resize_to: int | None = None
    restart_from: float | None = None  # when its pause for a resize or resume began
    t: float = 0.0  # its time attribute at the last result


class HyperSched(TrialScheduler):
    def __init__(
        self,
        deadline_s: float,
        num_gpus: int,
        *,
        metric: str | None = None,
        mode: str | None = None,
        time_attr: str = "training_iteration",
        max_t: float = 27,
        grace_period: float = 1,
        reduction_factor: int = 3,
        backend: PredictionBackend | None = None,
        job: Mapping[str, Any] | None = None,
        max_gpus_per_trial: int | None = None,
        gpus_per_node: int = 8,
        restart_s: float = 2.0,
        clock: Callable[[], float] = time.monotonic,
        clock_start: float | None = None,
    ) -> None:
        super().__init__()
        if deadline_s <= 0:
            raise PerfcastError(f"deadline_s must be positive, got {deadline_s}")
        if num_gpus < 1:
            raise PerfcastError(f"num_gpus (the search's GPU budget) must be >= 1, got {num_gpus}")
        if mode not in (None, "max", "min"):
            raise PerfcastError(f"mode must be 'max' or 'min', got {mode!r}")
        if (backend is None) != (job is None):
            raise PerfcastError(
                "resizing needs both a prediction backend and the job row describing a trial"
            )
        self.deadline_s, self.num_gpus = deadline_s, num_gpus
        self._metric, self._mode = metric, mode
        self.time_attr, self.max_t = time_attr, max_t
        self.rungs = Rungs(grace_period, max_t, reduction_factor)
        self.advisor = (
            ScalingAdvisor(backend, job, gpus_per_node) if backend is not None and job else None
        )
        self.max_gpus_per_trial = max_gpus_per_trial or num_gpus
        self.restart_s = restart_s
        self._restarts: list[float] = []
        self._clock = clock
        self._start = clock_start  # None: set when the first trial process runs
        self._trials: dict[str, _TrialState] = {}
        # seconds per iteration at the base size: wall time between two results of a running
        # trial, and the trainable's own time (a lower bound, until wall times are known)
        self._base_iteration_s: list[float] = []
        self._base_compute_s: list[float] = []
        self._base_gpus: int | None = None
        self._over = False
        self._supports_buffered_results = False  # every result is a decision point

    # -- Tune's search properties ------------------------------------------------------------

    def set_search_properties(self, metric: str | None, mode: str | None, **spec: Any) -> bool:
        if (self._metric and metric) or (self._mode and mode):
            return False
        self._metric = self._metric or metric
        self._mode = self._mode or mode
        return True

    def _score(self, result: Mapping[str, Any]) -> float:
        if self._metric is None or self._mode is None:
            raise PerfcastError("HyperSched needs metric and mode (here or in TuneConfig)")
        if self._metric not in result:
            raise PerfcastError(f"trial result lacks the metric {self._metric!r}")
        value = float(result[self._metric])
        return value if self._mode == "max" else -value

    # -- clock ---------------------------------------------------------------------------------

    def time_left(self) -> float:
        if self._start is None:
            return self.deadline_s
        return self._start + self.deadline_s - self._clock()

    def _base_iteration(self) -> float | None:
        known = self._base_iteration_s or self._base_compute_s
        return statistics.median(known) if known else None

    def worth_starting(self) -> bool:
        """HyperSched's rule: a new trial must be able to reach the rungs that matter."""
        left = self.time_left()
        if self._over or left <= 0:
            return False
        base = self._base_iteration()
        if base is None:
            return True
        needed = base * min(self.rungs.furthest() * self.rungs.eta, self.max_t)
        return left >= needed

    # -- Tune hooks ------------------------------------------------------------------------------

    def on_trial_add(self, tune_controller: Any, trial: Trial) -> None:
        gpus = _gpus(trial)
        if self._base_gpus is None:
            self._base_gpus = gpus
        if gpus > self.num_gpus:
            raise PerfcastError(
                f"trial {trial} asks for {gpus} GPUs, more than the budget num_gpus={self.num_gpus}"
            )
        self._trials.setdefault(trial.trial_id, _TrialState(gpus))

    def on_trial_result(self, tune_controller: Any, trial: Trial, result: dict) -> str:
        state, now = self._trials[trial.trial_id], self._clock()
        self._start_clock()
        state.ran = True
        compute = float(result.get("time_this_iter_s", 0.0))
        if state.restart_from is not None:  # first result after a restart: measure it
            self._restarts.append(max(now - state.restart_from - compute, 0.0))
            state.restart_from = None
        if state.last_seen is not None or compute > 0:
            # what the deadline sees is wall time; the trainable's own time is a lower bound
            wall = max(now - state.last_seen if state.last_seen is not None else 0.0, compute)
            state.iterations.append((wall, compute))
            if state.gpus == self._base_gpus:
                self._base_compute_s.append(compute)
                if state.last_seen is not None:
                    self._base_iteration_s.append(wall)
        state.last_seen = now
        decision = self._decide(tune_controller, trial, result)
        if decision != TrialScheduler.CONTINUE:
            state.last_seen = None
            logger.debug(
                "%s at %s=%s: %s (%.0f s left, rungs %s)", trial, self.time_attr,
                result.get(self.time_attr), decision, self.time_left(),
                [len(x) for x in self.rungs.scores],
            )  # fmt: skip
        return decision

    def _decide(self, tune_controller: Any, trial: Trial, result: dict) -> str:
        state = self._trials[trial.trial_id]
        if self.time_left() <= 0:
            self._over = True
            return TrialScheduler.STOP
        t = state.t = float(result[self.time_attr])
        new_rungs = self.rungs.record(trial.trial_id, t, self._score(result))
        if t >= self.max_t:
            return TrialScheduler.STOP
        if new_rungs and not state.exploit and not self.rungs.promotable(trial.trial_id):
            state.waiting = True
            return TrialScheduler.PAUSE
        target = self._resize_target(tune_controller, trial, t)
        if target != state.gpus:
            state.resize_to, state.restart_from = target, self._clock()
            return TrialScheduler.PAUSE
        return TrialScheduler.CONTINUE

    def on_trial_complete(self, tune_controller: Any, trial: Trial, result: dict) -> None:
        self._trials.pop(trial.trial_id, None)

    def on_trial_error(self, tune_controller: Any, trial: Trial) -> None:
        self._trials.pop(trial.trial_id, None)

    def on_trial_remove(self, tune_controller: Any, trial: Trial) -> None:
        self._trials.pop(trial.trial_id, None)

    def choose_trial_to_run(self, tune_controller: Any) -> Trial | None:
        trials = [t for t in tune_controller.get_trials() if t.trial_id in self._trials]
        if any(t.status == Trial.RUNNING for t in trials):
            self._start_clock()
        if self.time_left() <= 0:
            self._over = True
        if self._over:
            self._stop(tune_controller, [t for t in trials if t.status in _WAITING])
            return None
        if not self.worth_starting():
            # Tune starts every PENDING trial it has room for; one that cannot matter any more
            # must be removed to be kept from starting
            fresh = [
                t for t in trials if t.status == Trial.PENDING and not self._trials[t.trial_id].ran
            ]
            self._stop(tune_controller, fresh)
            trials = [t for t in trials if t not in fresh]
        free = self.free_gpus(trials)
        paused = [t for t in trials if t.status == Trial.PAUSED]
        for trial in paused:  # resizes first: they were running a moment ago
            state = self._trials[trial.trial_id]
            if state.resize_to is not None and state.resize_to <= free:
                return self._apply_resize(trial, state)
        waiting = sorted(
            (t for t in paused if self._trials[t.trial_id].waiting), key=self._promise, reverse=True
        )
        for trial in waiting:
            if self.rungs.promotable(trial.trial_id) and self._trials[trial.trial_id].gpus <= free:
                return self._resume(trial, exploit=False)
        pending = [t for t in trials if t.status == Trial.PENDING]
        if pending:
            return pending[0]
        running = [t for t in trials if t.status == Trial.RUNNING]
        if (self._search_may_add(tune_controller) and self.worth_starting()) or (
            running and self._growth_wanted(tune_controller, running)
        ):
            return None  # the free GPUs go to new trials, or to growing the best trial
        if waiting and self._resume_pays():
            # capacity nobody else wants: the next-best paused trial trains on to max_t
            for trial in waiting:
                if self._trials[trial.trial_id].gpus <= free:
                    return self._resume(trial, exploit=True)
        if running or self._search_may_add(tune_controller):
            return None
        self._over = True  # nothing left worth running: the search ends before the deadline
        self._stop(tune_controller, paused)
        return None

    def debug_string(self) -> str:
        furthest = self.rungs.furthest()
        return (
            f"HyperSched: {max(self.time_left(), 0):.0f} s to the deadline, "
            f"furthest rung {furthest:g}, rungs {[len(s) for s in self.rungs.scores]}"
        )

    # -- decisions -------------------------------------------------------------------------------

    def free_gpus(self, trials: list[Trial]) -> int:
        """The budget minus what running trials and trials Tune is placing hold."""
        held = sum(
            self._trials[t.trial_id].gpus
            for t in trials
            if t.status == Trial.RUNNING
            or (t.status == Trial.PENDING and self._trials[t.trial_id].ran)
        )
        return self.num_gpus - held

    def _start_clock(self) -> None:
        if self._start is None:
            self._start = self._clock()

    def _restart_s(self) -> float:
        return statistics.mean(self._restarts) if self._restarts else self.restart_s

    def _resume_pays(self) -> bool:
        """Whether a restart and one iteration of a paused trial fit in the time left."""
        base = self._base_iteration() or 0.0
        return self.time_left() > self._restart_s() + base

    def _resume(self, trial: Trial, exploit: bool) -> Trial:
        state = self._trials[trial.trial_id]
        state.waiting, state.exploit = False, state.exploit or exploit
        state.restart_from = self._clock()
        return trial

    def _growth_wanted(self, tune_controller: Any, running: list[Trial]) -> bool:
        """Whether perfcast's predictions give free GPUs to the most promising running trial."""
        best = max(running, key=self._promise)
        state = self._trials[best.trial_id]
        return self._resize_target(tune_controller, best, state.t) > state.gpus

    def _promise(self, trial: Trial) -> tuple[int, float]:
        return self.rungs.rung_of(trial.trial_id), self.rungs.score_of(trial.trial_id)

    def _resize_target(self, tune_controller: Any, trial: Trial, t: float) -> int:
        state = self._trials[trial.trial_id]
        if self.advisor is None or not state.iterations:
            return state.gpus
        trials = [x for x in tune_controller.get_trials() if x.trial_id in self._trials]
        if self.worth_starting() and (
            any(x.status == Trial.PENDING and not self._trials[x.trial_id].ran for x in trials)
            or self._search_may_add(tune_controller)
        ):
            return state.gpus  # GPUs still go to new trials
        promotable = [
            x
            for x in trials
            if x.status == Trial.PAUSED
            and self._trials[x.trial_id].waiting
            and self.rungs.promotable(x.trial_id)
        ]
        free = self.free_gpus(trials) - sum(self._trials[x.trial_id].gpus for x in promotable)
        running = [x for x in trials if x.status == Trial.RUNNING]
        if free <= 0 or max(running, key=self._promise) is not trial:
            return state.gpus
        most = min(self.max_gpus_per_trial, state.gpus + free)
        restart = self._restart_s()
        return self.advisor.best_gpus(
            state.gpus,
            most,
            iteration_s=statistics.median(w for w, _ in state.iterations[-3:]),
            compute_s=statistics.median(c for _, c in state.iterations[-3:]),
            iterations_left=self.max_t - t,
            time_left_s=self.time_left(),
            restart_s=restart,
        )

    def _apply_resize(self, trial: Trial, state: _TrialState) -> Trial:
        bundle = dict(trial.placement_group_factory.bundles[0])
        cpu_per_gpu = bundle.get("CPU", 0) / max(state.gpus, 1)
        bundle.update({"GPU": state.resize_to, "CPU": cpu_per_gpu * state.resize_to})
        trial.placement_group_factory = None  # as ResourceChangingScheduler does
        trial.update_resources(PlacementGroupFactory([bundle]))
        state.gpus, state.resize_to, state.iterations = state.resize_to, None, []
        return trial

    def _search_may_add(self, tune_controller: Any) -> bool:
        search = getattr(tune_controller, "search_alg", None)
        return search is not None and not search.is_finished()

    def _stop(self, tune_controller: Any, trials: list[Trial]) -> None:
        for trial in trials:
            tune_controller.stop_trial(trial)


_WAITING = (Trial.PENDING, Trial.PAUSED)


def _gpus(trial: Trial) -> int:
    if trial.placement_group_factory is None:
        trial.create_placement_group_factory()
    return int(trial.placement_group_factory.required_resources.get("GPU", 0))
