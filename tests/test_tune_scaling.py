"""Resize decisions from real scaling predictions: a perfcast ScalingPredictor fitted on
Pollux's measured ResNet-18/CIFAR-10 step times, asked through the PredictionBackend shape."""

from __future__ import annotations

import pandas as pd
import pytest
from conftest import requires_data

from perfcast.datasets.registry import load
from perfcast.predictor.scaling import ScalingPredictor
from perfcast.scheduler.tune.scaling import ScalingAdvisor

JOB = {"job": "resnet18-cifar10", "gpu_type": "t4", "local_batch_size": 64}


class FittedBackend:
    """What InProcessBackend does with a champion, with a model fitted here instead."""

    def __init__(self, model: ScalingPredictor) -> None:
        self.model = model

    def predict(self, task: str, rows: pd.DataFrame) -> pd.DataFrame:
        assert task == "scaling"
        return self.model.predict_interval(rows)


@pytest.fixture(scope="module")
def measured() -> pd.DataFrame:
    rows = load("pollux-scaling")
    return rows[rows["job"] == JOB["job"]]


@requires_data
def test_predicted_speedup_at_an_unseen_batch_size_matches_the_measured_one(measured) -> None:
    train = measured[measured["local_batch_size"] != JOB["local_batch_size"]]
    advisor = ScalingAdvisor(FittedBackend(ScalingPredictor("gbm").fit(train)), JOB)
    held_out = measured[
        (measured["local_batch_size"] == JOB["local_batch_size"]) & (measured["num_nodes"] == 1)
    ]
    step = held_out.groupby("num_gpus")["step_time_s"].median()
    for g in (2, 4):
        truth = (g / step[g]) / (1 / step[1])
        assert advisor.speedup(1, g) == pytest.approx(truth, rel=0.15)


@requires_data
def test_a_resize_is_chosen_only_when_the_predicted_speedup_gets_the_trial_further(
    measured,
) -> None:
    advisor = ScalingAdvisor(FittedBackend(ScalingPredictor("gbm").fit(measured)), JOB)
    tight = {"iteration_s": 10.0, "compute_s": 10.0, "iterations_left": 7, "restart_s": 5.0}
    # 60 s left: 6 of 7 iterations at 1 GPU; ~1.8x at 2 GPUs gets all 7 done
    assert advisor.best_gpus(1, 4, time_left_s=60.0, **tight) == 2
    # plenty of time: no resize pays
    assert advisor.best_gpus(1, 4, time_left_s=1000.0, **tight) == 1
    # overhead-bound iterations (1 s of 10 s scales): no speed-up worth a restart
    bound = tight | {"compute_s": 1.0}
    assert advisor.best_gpus(1, 4, time_left_s=60.0, **bound) == 1
