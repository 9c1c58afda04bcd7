"""ASHA rungs with pausing and promotion, as HyperSched uses them: the one rule both the
`hypersched` policy (time = a trial's fraction of its GPU budget) and the Ray Tune scheduler
(`scheduler.tune.hypersched`, time = the trial's time attribute) follow.

Rung k sits at `grace_period * eta**k` units of the time attribute (below `max_t`). A trial
records its score the first time it reaches a rung; it may go past the rung only while it is in
the top `1/eta` of the scores recorded there (`len(scores) // eta` places, as in the ASHA
paper: the first trials to arrive wait until enough others have arrived). A trial that waits
can be promoted later, when more results have come in behind it.
"""

from __future__ import annotations

from collections.abc import Callable

from perfcast.errors import PerfcastError


class Rungs:
    def __init__(self, grace_period: float, max_t: float, eta: int) -> None:
        if eta < 2:
            raise PerfcastError(f"the reduction factor (eta) must be at least 2, got {eta}")
        if not 0 < grace_period < max_t:
            raise PerfcastError(
                f"grace_period must be > 0 and below max_t ({max_t}), got {grace_period}"
            )
        self.eta = eta
        self.milestones: list[float] = []
        m = float(grace_period)
        while m < max_t:
            self.milestones.append(m)
            m *= eta
        self.scores: list[dict[str, float]] = [{} for _ in self.milestones]

    def record(self, trial_id: str, t: float, score: float | Callable[[float], float]) -> list[int]:
        """Record `score` (higher is better; or a function giving the score at a milestone) at
        every rung `t` has reached for the first time; returns those rungs' indices."""
        new = []
        for k, milestone in enumerate(self.milestones):
            if t >= milestone and trial_id not in self.scores[k]:
                self.scores[k][trial_id] = score(milestone) if callable(score) else score
                new.append(k)
        return new

    def rung_of(self, trial_id: str) -> int:
        """The highest rung the trial has recorded a score at, or -1."""
        return max((k for k, s in enumerate(self.scores) if trial_id in s), default=-1)

    def score_of(self, trial_id: str) -> float:
        k = self.rung_of(trial_id)
        return self.scores[k][trial_id] if k >= 0 else float("-inf")

    def promotable(self, trial_id: str, rung: int | None = None) -> bool:
        """In the top 1/eta at `rung` (default: its highest; a trial at no rung is free to go
        on)."""
        k = self.rung_of(trial_id) if rung is None else rung
        if k < 0:
            return True
        scores = self.scores[k]
        places = len(scores) // self.eta
        ranked = sorted(scores, key=lambda j: -scores[j])
        return trial_id in ranked[:places]

    def furthest(self) -> float:
        """The highest milestone any trial has reached (0 when none has)."""
        reached = [m for m, s in zip(self.milestones, self.scores, strict=True) if s]
        return max(reached, default=0.0)

    def forget(self, trial_id: str) -> None:
        """Drop a trial that errored, so its scores do not rank others."""
        for scores in self.scores:
            scores.pop(trial_id, None)
