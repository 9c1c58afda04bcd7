"""A job's throughput model as Pollux learns it (OSDI'21, section 3.2; adaptdl's
`goodput.py`): fitted from the step times the job reports in the configurations it has run,
not read from the truth the simulator advances it with.

    compute of one pass  T_c(atomic)       = alpha_c + beta_c * atomic
    gradient sync        T_s(nodes, r)     = alpha + beta * (r - 2) for r > 1 replicas, with
                                             (alpha_r, beta_r) on one node, (alpha_n, beta_n)
                                             across nodes (ring all-reduce); 0 for r = 1
    optimizer step       T_o               = (T_c^gamma + T_s^gamma)^(1 / gamma)
    a step with `accum` extra passes         = accum * T_c + T_o

Fitted by least squares on the log of both reported times, with Pollux's priors: parameters the
profile cannot identify are pinned (no multi-node run: alpha_n, beta_n; no multi-GPU run on one
node: alpha_r, beta_r; never more than two replicas: both betas; one local batch only: alpha_c
at half the pass time), a small pull of gamma toward 1 and of the betas toward 0 (an optimistic
model), and sync across nodes at least 1.1x sync on one node when no multi-node run was seen.
Without a prior, before a job has run on more than one GPU the model is perfect scaling, and
`max_replicas` lets the policy give it at most twice the GPUs it has run on.
`JobProfile.step_time` answers with the model where a (nodes, replicas) was never run, and with
the model scaled to the report where it was: the model is for extrapolating, not for
overruling an observation.

A profile with a `prior` (`facts/prior.py`: perfcast's scaling predictor) is fitted to its
reports plus, for each kind of placement the job has not run (several GPUs on one node,
several nodes), the predicted step there: its one-GPU report times the predicted slowdown.
Then the model assumes the predictor's synchronization where the job has not run, not perfect
scaling, and the policy need not cap its exploration (`explores_freely`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace

import numpy as np
from scipy.optimize import minimize

from perfcast.predictor.throughput import SyncLaw

TINY = 1e-8  # lower bound of every time parameter (a zero would break the logs)
MAX_GAMMA = 10.0
MAX_SECONDS = 1e5  # upper bound of every time parameter (its exp never overflows)


@dataclass(frozen=True)
class ThroughputParams:
    alpha_c: float
    beta_c: float
    alpha_n: float
    beta_n: float
    alpha_r: float
    beta_r: float
    gamma: float

    def pass_time(self, atomic: np.ndarray) -> np.ndarray:
        """Seconds of one forward/backward pass at `atomic` samples per GPU."""
        return np.maximum(self.alpha_c + self.beta_c * np.asarray(atomic, dtype=float), TINY)

    def sync_time(self, nodes: np.ndarray, replicas: np.ndarray) -> np.ndarray:
        nodes, replicas = np.asarray(nodes), np.asarray(replicas, dtype=float)
        alpha = np.where(nodes > 1, self.alpha_n, self.alpha_r)
        beta = np.where(nodes > 1, self.beta_n, self.beta_r)
        return np.where(replicas > 1, alpha + beta * np.maximum(replicas - 2, 0.0), 0.0)

    def optim_time(self, nodes, replicas, atomic) -> np.ndarray:
        """Seconds of a step that synchronizes: compute and sync overlapped per `gamma`."""
        # the predictor's overlap law: never below either term, exactly the pass on one GPU
        return SyncLaw(gamma=self.gamma).step_seconds(
            self.pass_time(atomic), self.sync_time(nodes, replicas)
        )

    def step_time(self, nodes, replicas, atomic, accum) -> np.ndarray:
        """Seconds of one global-batch step with `accum` extra passes before the sync."""
        return np.asarray(accum) * self.pass_time(atomic) + self.optim_time(nodes, replicas, atomic)


def _unpack(x: np.ndarray) -> ThroughputParams:
    """Parameters from the fit's variables: the logs of the six alphas and betas, then gamma."""
    return ThroughputParams(*map(float, np.exp(x[:6])), float(x[6]))


def _objective(x: np.ndarray, nodes, replicas, atomic, pass_s, optim_s) -> float:
    params = _unpack(x)
    pass_err = np.log(params.pass_time(atomic)) - np.log(pass_s)
    optim_err = np.log(params.optim_time(nodes, replicas, atomic)) - np.log(optim_s)
    rmse = np.sqrt(np.mean(pass_err**2)) + np.sqrt(np.mean(optim_err**2))
    prior = 1e-3 * (params.gamma - 1.0) ** 2  # easier to fit the alphas and betas near 1
    prior += 1e-2 * ((params.beta_n / params.alpha_n) ** 2 + (params.beta_r / params.alpha_r) ** 2)
    return float(rmse + prior)


def fit_throughput(
    nodes: np.ndarray,
    replicas: np.ndarray,
    atomic: np.ndarray,
    pass_s: np.ndarray,
    optim_s: np.ndarray,
) -> ThroughputParams:
    """The model fitted to a job's reports: per configuration, its nodes, replicas, samples
    per GPU per pass, seconds of a pass without sync and of a step with it.

    The alphas and betas are fitted as their logs: they span orders of magnitude (1e-8 to
    seconds), and in their own units L-BFGS-B's finite-difference steps stopped it far from
    the optimum, at a point that moved with the CPU's rounding (a model's own reports gave back
    0.0166 or 0.0873 of objective against its 0.0005 on two roundings of one machine)."""
    nodes, replicas = np.asarray(nodes), np.asarray(replicas)
    atomic, pass_s, optim_s = (np.asarray(a, dtype=float) for a in (atomic, pass_s, optim_s))
    if not len(nodes):
        raise ValueError("fitting a throughput model needs at least one reported step")
    start = np.array([np.log(1e-1), np.log(1e-2)] * 3 + [1.0 + 1e-3])
    lower = np.array([np.log(TINY)] * 6 + [1.0])
    upper = np.array([np.log(MAX_SECONDS)] * 6 + [MAX_GAMMA])

    def pin(index: int, value: float) -> None:
        start[index] = lower[index] = upper[index] = np.log(value)

    if len(np.unique(atomic)) == 1:  # one local batch: the pass time splits evenly
        pin(0, max(float(np.mean(pass_s)) / 2, TINY))
    if not np.any(nodes > 1):
        pin(2, TINY)
        pin(3, TINY)
    if not np.any((nodes == 1) & (replicas > 1)):
        pin(4, TINY)
        pin(5, TINY)
    if not np.any(replicas > 2):
        pin(3, TINY)
        pin(5, TINY)
    result = minimize(
        _objective,
        start,
        args=(nodes, replicas, atomic, pass_s, optim_s),
        method="L-BFGS-B",
        bounds=list(zip(lower, upper, strict=True)),
    )
    params = _unpack(np.clip(result.x, lower, upper))
    if not np.any(nodes > 1):  # never seen across nodes: no faster than on one node
        params = replace(
            params,
            alpha_n=max(params.alpha_n, 1.1 * params.alpha_r),
            beta_n=max(params.beta_n, 1.1 * params.beta_r),
        )
    return params


@dataclass
class JobProfile:
    """What one job reported: per (nodes, replicas, samples per GPU per pass), the seconds of
    a pass without sync and of a step with it (the latest report of each), and its model,
    refitted when a new configuration is reported."""

    reports: dict[tuple[int, int, int], tuple[float, float]] = field(default_factory=dict)
    # samples per GPU -> {(nodes, replicas): predicted step there / on one GPU}
    prior: Callable[[int], Mapping[tuple[int, int], float]] | None = None
    _params: ThroughputParams | None = None

    def report(self, nodes: int, replicas: int, atomic: int, pass_s: float, optim_s: float) -> None:
        key = (nodes, replicas, atomic)
        if key not in self.reports:
            self._params = None
        self.reports[key] = (pass_s, optim_s)

    @property
    def max_replicas(self) -> int:
        """Pollux's exploration cap: twice the most GPUs the job has run on (1 if never run)."""
        return max(2 * max((r for _, r, _ in self.reports), default=0), 1)

    @property
    def explores_freely(self) -> bool:
        """Whether the model has a prior where the job has not run (a prior and a one-GPU
        report to scale), so that `max_replicas` need not hold the job back."""
        return self.prior is not None and any(r == 1 for _, r, _ in self.reports)

    def _fitted_reports(self) -> dict[tuple[int, int, int], tuple[float, float]]:
        """The reports, plus the prior's steps on the kinds of placement the job has not run,
        each scaled from its one-GPU report at the same samples per GPU."""
        if self.prior is None:
            return self.reports
        one_node = any(n == 1 and r > 1 for n, r, _ in self.reports)
        spread = any(n > 1 for n, _, _ in self.reports)
        fitted = dict(self.reports)
        for (_, replicas, atomic), (pass_s, step_s) in self.reports.items():
            if replicas != 1:
                continue
            for (nodes, gpus), slowdown in self.prior(atomic).items():
                if not (one_node if nodes == 1 else spread):
                    fitted.setdefault((nodes, gpus, atomic), (pass_s, step_s * slowdown))
        return fitted

    @property
    def params(self) -> ThroughputParams | None:
        """The fitted model; None before the first report."""
        if self._params is None and self.reports:
            reports = self._fitted_reports()
            keys = np.array(list(reports), dtype=float)
            times = np.array(list(reports.values()), dtype=float)
            self._params = fit_throughput(keys[:, 0], keys[:, 1], keys[:, 2], *times.T)
        return self._params

    def step_time(self, nodes: int, replicas: int, atomic, accum) -> np.ndarray:
        """Seconds of a step, as the fitted model predicts it, corrected where the job has run
        this (nodes, replicas): the model's pass and step times there are scaled by what was
        reported at the nearest local batch. The model extrapolates to configurations not run;
        where one was run its report is an observation, and the seven-parameter model, fitted
        to every placement at once, can miss it by 2x (a measured placement slower than its
        neighbours, packed versus spread placements in one sync term)."""
        params = self.params
        atomic, accum = np.asarray(atomic, dtype=float), np.asarray(accum)
        pass_s = params.pass_time(atomic)
        optim_s = params.optim_time(nodes, replicas, atomic)
        seen = [(a, t) for (n, r, a), t in self.reports.items() if (n, r) == (nodes, replicas)]
        if seen:
            ran = np.array([a for a, _ in seen], dtype=float)
            times = np.array([t for _, t in seen], dtype=float)
            nearest = np.abs(np.log(atomic)[:, None] - np.log(ran)[None, :]).argmin(axis=1)
            pass_s = pass_s * times[nearest, 0] / params.pass_time(ran)[nearest]
            optim_s = optim_s * times[nearest, 1] / params.optim_time(nodes, replicas, ran)[nearest]
        return accum * pass_s + optim_s

    @property
    def version(self) -> int:
        """Changes whenever the model may have changed (the number of configurations)."""
        return len(self.reports)
