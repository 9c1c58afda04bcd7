"""srtf-predicted trusts a prediction only as far as its interval is narrow and finished jobs
bear it out: with useless predictions it is Tiresias (attained-service ordering) exactly."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from scheduler_synthetic import synthetic_workload
from scipy.stats import rankdata, spearmanr

from perfcast.scheduler.core import ClusterSpec
from perfcast.scheduler.core.predictions import JobPredictor
from perfcast.scheduler.policies import make_policy
from perfcast.scheduler.policies.srtf_predicted import (
    Calibration,
    SrtfPredictedPolicy,
    average_ranks,
    blended_order,
    ranks_better_than_chance,
    trust_weights,
)
from perfcast.scheduler.sim.engine import simulate
from perfcast.scheduler.sim.metrics import job_table


class IntervalBackend:
    """Duration predictions from a fixed table of (p10, p50, p90) per job id (not the truth)."""

    def __init__(self, intervals: dict[str, tuple[float, float, float]]) -> None:
        self.intervals = intervals

    def predict(self, task: str, rows: pd.DataFrame) -> pd.DataFrame:
        assert task == "duration"
        v = np.array([self.intervals[j] for j in rows["job_id"]], dtype=float).reshape(-1, 3)
        return pd.DataFrame(
            {"duration_s_p10": v[:, 0], "duration_s": v[:, 1], "duration_s_p90": v[:, 2]}
        )


def simulate_jobs(rows, policy: str, backend=None, spec="1x2:v100", **options) -> pd.DataFrame:
    workload = synthetic_workload(rows)
    predictor = JobPredictor(backend, gpus_per_node=4) if backend else None
    result = simulate(
        workload, ClusterSpec.parse(spec), make_policy(policy, **options), predictor=predictor
    )
    return job_table(result).set_index("job_id").sort_index()


traces = st.lists(
    st.tuples(
        st.floats(0, 3000, allow_nan=False).map(lambda t: round(t, 1)),  # submit
        st.sampled_from(["fast", "slow"]),
        st.sampled_from([1, 2]),  # GPUs
        st.floats(10, 5000, allow_nan=False).map(lambda d: round(d, 1)),  # duration alone
        st.floats(1.0, 1e4, allow_nan=False),  # a random p50, unrelated to the duration
    ),
    min_size=2,
    max_size=12,
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(traces)
def test_useless_wide_predictions_schedule_exactly_as_tiresias(jobs):
    # random p50s with intervals wider than the whole population's range: no information
    rows = [(f"j{i}", t, kind, g, d) for i, (t, kind, g, d, _) in enumerate(jobs)]
    wide = {f"j{i}": (p / 1e3, p, p * 1e3) for i, (*_, p) in enumerate(jobs)}
    ours = simulate_jobs(rows, "srtf-predicted", IntervalBackend(wide), thresholds=600.0)
    tiresias = simulate_jobs(rows, "tiresias", thresholds=600.0)
    columns = ["start_s", "finish_s", "preemptions"]
    pd.testing.assert_frame_equal(ours[columns], tiresias[columns])


def test_exact_predictions_run_shortest_first_not_tiresias():
    # one GPU, three jobs at once: exact predictions (zero width) order by predicted duration
    rows = [
        ("a", 0.0, "slow", 1, 900.0),
        ("b", 0.0, "slow", 1, 100.0),
        ("c", 0.0, "slow", 1, 300.0),
    ]
    exact = {j: (d, d, d) for j, _, _, _, d in rows}
    ours = simulate_jobs(rows, "srtf-predicted", IntervalBackend(exact), spec="1x1:v100")
    assert list(ours["start_s"].sort_values().index) == ["b", "c", "a"]
    fifo_like = simulate_jobs(rows, "tiresias", spec="1x1:v100")
    assert ours["jct_s"].mean() < fifo_like["jct_s"].mean()


def add_outcomes(
    policy: SrtfPredictedPolicy, actual: np.ndarray, p50: np.ndarray, width: float
) -> None:
    for a, p in zip(actual, p50, strict=True):
        policy.add_outcome(float(np.log(a)), float(np.log(p)), width)


def test_overconfident_useless_model_gets_no_weight_once_jobs_finish():
    rng = np.random.default_rng(0)
    actual = np.exp(rng.uniform(3, 10, 200))
    policy = SrtfPredictedPolicy()
    add_outcomes(policy, actual, np.exp(rng.uniform(3, 10, 200)), width=0.1)
    active = np.array([[90.0, 100.0, 110.0], [900.0, 1000.0, 1100.0]])
    # the model's own claim (narrow intervals, spread-out p50s) would be trusted ...
    assert trust_weights(np.log([1.1 / 0.9] * 2), Calibration(np.log(10.0))).min() > 0.9
    # ... but the finished jobs show its p50s rank no better than chance
    calibration = policy.calibration(active)
    assert calibration.floor >= calibration.spread
    assert np.all(trust_weights(np.full(2, 0.1), calibration) == 0.0)


def test_informative_model_is_trusted_and_its_understated_widths_are_widened():
    rng = np.random.default_rng(1)
    actual = np.exp(rng.uniform(3, 10, 200))
    noisy = actual * np.exp(rng.normal(0, 0.3, 200))  # 10-90% error range ~0.77 in log
    policy = SrtfPredictedPolicy()
    add_outcomes(policy, actual, noisy, width=0.2)  # claims 0.2: understated
    calibration = policy.calibration(np.ones((1, 3)))
    assert calibration.scale == pytest.approx(0.77 / 0.2, rel=0.2)
    assert 0.8 < trust_weights(np.array([0.2]), calibration)[0] < 0.95


def test_blended_order_is_tiresias_at_weight_zero_and_srtf_at_one():
    queues = np.array([0, 1, 0, 1])
    remaining = np.array([50.0, 1.0, 500.0, 10.0])
    submit = np.array([0.0, 1.0, 2.0, 3.0])
    tiresias = blended_order(queues, remaining, np.zeros(4), submit)
    assert list(tiresias) == [0, 2, 1, 3]
    assert list(blended_order(queues, remaining, np.ones(4), submit)) == [1, 3, 0, 2]


@settings(max_examples=200, deadline=None)
@given(
    st.integers(3, 200),
    st.floats(-1.0, 1.0),
    st.sampled_from([None, 0, 1]),
    st.integers(0, 2**32 - 1),
)
def test_rank_test_is_scipys_spearman(n, slope, rounding, seed):
    """The calibration's significance test decides as `scipy.stats.spearmanr` one-sided
    p < 0.01 does (ties included: rounded values), with scipy's average ranks."""
    rng = np.random.default_rng(seed)
    actual = rng.normal(size=n)
    predicted = slope * actual + rng.normal(size=n) * (1.0 - abs(slope))
    if rounding is not None:
        actual, predicted = np.round(actual, rounding), np.round(predicted, rounding)
    assert np.array_equal(average_ranks(actual), rankdata(actual))
    varied = np.ptp(actual) > 0 and np.ptp(predicted) > 0
    expected = varied and spearmanr(actual, predicted, alternative="greater").pvalue < 0.01
    assert ranks_better_than_chance(actual, predicted) == expected
