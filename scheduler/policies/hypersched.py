"""HyperSched (SoCC'19): deadline-aware hyper-parameter search on ASHA rungs.

Trials of one search share a `group` and its deadline. Resource is attained GPU-seconds:
rungs at r, r*eta, r*eta^2, ... below a trial's full budget R (its GPUs x traced duration).
- At a rung a trial records its metric (from its learning curve, the executor's introspection)
  and continues only if it is in the top 1/eta of the trials that reached that rung (ASHA,
  asynchronous); otherwise it pauses and may be promoted later.
- GPUs go first to promotable paused trials, then to new trials, but a new trial starts only
  while it can still beat the incumbent before the deadline: its predicted time to reach the
  furthest rung any trial of the search has reached must fit in the time left (HyperSched's
  rule, with the `duration` predictor for the time).
- GPUs nobody else can use go to the most promising running trial (data-parallel resize, up
  to its `max_gpus`).
- At the deadline, or when nothing is left to run, the search ends: remaining trials stop.
Jobs without a group are scheduled first come first served.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from perfcast.errors import PerfcastError
from perfcast.scheduler.core.jobs import JobState, JobStatus
from perfcast.scheduler.core.loop import Allocation, RoundContext, Schedule, SchedulingPolicy
from perfcast.scheduler.policies import register
from perfcast.scheduler.policies.rungs import Rungs


@dataclass
class _Search:
    rungs: Rungs  # milestones are fractions of a trial's GPU budget
    furthest: float = 0.0  # largest rung resource reached (GPU-s)
    over: bool = False
    members: set[str] = field(default_factory=set)


@register("hypersched")
class HyperSchedPolicy(SchedulingPolicy):
    needs_predictions = True
    prediction_tasks = ("duration",)

    def __init__(self, eta: int = 3, min_resource_frac: float = 1 / 27) -> None:
        self.eta, self.min_frac = eta, min_resource_frac
        Rungs(min_resource_frac, 1.0, eta)  # checks the options now, not at the first trial
        self.searches: dict[str, _Search] = defaultdict(
            lambda: _Search(Rungs(self.min_frac, 1 - 1e-9, self.eta))
        )
        self._paused: set[str] = set()  # waiting at a rung, not promotable now
        self._to_stop: list[str] = []

    def budget(self, state: JobState) -> float:
        return state.job.num_gpus * state.job.duration_s

    def _record_rungs(self, state: JobState, now: float) -> None:
        search, budget = self.searches[state.job.group or ""], self.budget(state)
        progress = (state.attained_at(now) + 1e-6) / budget
        for k in search.rungs.record(state.job_id, progress, state.job.metric_at):
            search.furthest = max(search.furthest, search.rungs.milestones[k] * budget)
            if not search.rungs.promotable(state.job_id, k):
                self._paused.add(state.job_id)

    def _rungs(self, state: JobState) -> Rungs:
        return self.searches[state.job.group or ""].rungs

    def schedule(self, ctx: RoundContext) -> Schedule:
        now, jobs = ctx.now, ctx.jobs
        for state in jobs.running():
            if state.job.group is not None:
                self._record_rungs(state, now)
        for job_id in list(self._paused):  # promotions as more results arrive
            state = jobs.all[job_id]
            if state.status is JobStatus.DONE or self._rungs(state).promotable(job_id):
                self._paused.discard(job_id)
        plan: list[Allocation] = []
        capacity = ctx.cluster.total_gpus
        # running trials that were not paused keep going
        keep = [s for s in jobs.running() if s.job_id not in self._paused]
        for s in keep:
            plan.append(Allocation(s.job_id, s.num_gpus, s.batch_size))
            capacity -= s.num_gpus
        waiting = sorted(
            (s for s in jobs.waiting() if s.job_id not in self._paused),
            key=lambda s: (s.status is not JobStatus.SUSPENDED, s.job.submit_time_s),
        )  # promoted trials first, then new ones in submission order
        new = [s.job for s in waiting if s.status is JobStatus.PENDING and s.job.group]
        if new and ctx.predictor is None:
            raise PerfcastError("hypersched needs a prediction backend (--predictor)")
        durations = ctx.predictor.durations(new) if new and ctx.predictor else []
        predicted = dict(zip((j.job_id for j in new), durations, strict=True))
        for state in waiting:
            need = state.job.num_gpus
            if need > capacity:
                continue
            is_new_trial = state.status is JobStatus.PENDING and state.job.group is not None
            if is_new_trial and not self._worth_starting(state, predicted[state.job_id], now):
                continue
            plan.append(Allocation(state.job_id, need, state.batch_size))
            capacity -= need
        capacity -= self._exploit_when_stuck(plan, ctx)
        if capacity > 0:
            plan = self._grow_most_promising(plan, capacity, ctx)
        return Schedule(plan)

    def _exploit_when_stuck(self, plan: list[Allocation], ctx: RoundContext) -> int:
        """A search with nothing running and nothing to start would end with every trial
        paused; resume its best trial at its highest rung instead (HyperSched's exploitation:
        the remaining time trains the most promising trial), until one trial has been trained in
        full. Returns the GPUs it took."""
        planned = {a.job_id for a in plan}
        active: dict[str, list[JobState]] = defaultdict(list)
        for state in ctx.jobs.active.values():
            if state.job.group is not None:
                active[state.job.group].append(state)
        taken = 0
        for group, states in active.items():
            search = self.searches[group]
            search.members.update(s.job_id for s in states)
            trained = any(
                ctx.jobs[j].status is JobStatus.DONE
                and ctx.jobs[j].samples_done >= ctx.jobs[j].job.total_samples
                for j in search.members
            )
            if trained or any(s.job_id in planned for s in states):
                continue
            paused = [s for s in states if s.job_id in self._paused]
            if not paused or len(paused) < len(states):
                continue
            rungs = self.searches[group].rungs
            best = max(paused, key=lambda s: (rungs.rung_of(s.job_id), rungs.score_of(s.job_id)))
            free = ctx.cluster.total_gpus - sum(a.num_gpus for a in plan) - taken
            if best.job.num_gpus <= free:
                self._paused.discard(best.job_id)
                plan.append(Allocation(best.job_id, best.job.num_gpus, best.batch_size))
                taken += best.job.num_gpus
        return taken

    def _worth_starting(self, state: JobState, predicted_s: float, now: float) -> bool:
        deadline = state.job.deadline_s
        if deadline is None:
            return True
        search = self.searches[state.job.group or ""]
        if search.over or now >= deadline:
            return False
        budget = self.budget(state)
        target = max(search.furthest, budget * self.min_frac) / budget
        return now + predicted_s * target <= deadline

    def _grow_most_promising(
        self, plan: list[Allocation], capacity: int, ctx: RoundContext
    ) -> list[Allocation]:
        def promise(a: Allocation) -> float:
            state = ctx.jobs[a.job_id]
            if state.job.group is None or not state.num_gpus:
                return -1.0
            rungs = self._rungs(state)
            return rungs.score_of(a.job_id) if rungs.rung_of(a.job_id) >= 0 else 0.0

        for i in sorted(range(len(plan)), key=lambda i: -promise(plan[i])):
            a, state = plan[i], ctx.jobs[plan[i].job_id]
            if promise(a) < 0:
                break
            top = state.job.max_gpus or a.num_gpus
            grow = min(top, a.num_gpus * 2) - a.num_gpus
            if 0 < grow <= capacity:
                local = a.batch_size // a.num_gpus
                plan[i] = Allocation(a.job_id, a.num_gpus + grow, local * (a.num_gpus + grow))
                capacity -= grow
        return plan

    def next_wakeup(self, ctx: RoundContext) -> float | None:
        """The next rung a running trial reaches, or the next deadline."""
        best = None
        for state in ctx.jobs.running():
            if state.job.group is None or not state.num_gpus:
                continue
            attained = state.attained_at(ctx.now)
            for r in (m * self.budget(state) for m in self._rungs(state).milestones):
                if r > attained + 1e-6:
                    when = ctx.now + (r - attained) / state.num_gpus + 1e-6
                    best = when if best is None else min(best, when)
                    break
        deadlines = [
            s.job.deadline_s
            for s in ctx.jobs.active.values()
            if s.job.group and s.job.deadline_s and s.job.deadline_s > ctx.now
        ]
        if deadlines:
            best = min(deadlines) if best is None else min(best, min(deadlines))
        return best

    def stopped(self, ctx: RoundContext) -> list[str]:
        """Trials of searches that are over: past the deadline, or nothing left to run."""
        by_group: dict[str, list[JobState]] = defaultdict(list)
        for state in ctx.jobs.active.values():
            if state.job.group is not None:
                by_group[state.job.group].append(state)
        out = []
        for group, states in by_group.items():
            deadline = states[0].job.deadline_s
            past = deadline is not None and ctx.now >= deadline
            idle = all(s.status is not JobStatus.RUNNING for s in states) and all(
                s.job_id in self._paused or s.status is JobStatus.PENDING for s in states
            )
            if idle and any(s.status is JobStatus.PENDING for s in states):
                idle = all(
                    not self._worth_starting(s, 0.0, ctx.now)
                    for s in states
                    if s.status is JobStatus.PENDING
                )
            if past or idle:
                self.searches[group].over = True
                out += [s.job_id for s in states]
        return out
