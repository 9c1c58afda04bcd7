"""The interference predictor on Gavel's measured pairs and, split by source, on the CPU pairs
measured here: on pairs with a workload it has never seen it beats "no interference" (1.0) by
a quarter in MAE, shrinking the learned slowdown by what counters and model families support,
and new workloads or devices route to the general model without crashing."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch
from conftest import requires_data
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from perfcast import datasets
from perfcast.datasets.splits import folds
from perfcast.features.interference import InterferenceFeatures
from perfcast.predictor import make_predictor

pytestmark = requires_data
torch.set_num_threads(1)


@pytest.fixture(scope="module")
def pairs() -> pd.DataFrame:
    return datasets.load("gavel-interference")


@pytest.fixture(scope="module")
def gavel_model(pairs: pd.DataFrame):
    """gbm on every Gavel pair: read by the tests split by source."""
    return make_predictor("interference", "gbm").fit(pairs)


def _speeds(rows: pd.DataFrame) -> np.ndarray:
    return rows[["a_speed", "b_speed"]].to_numpy(dtype=float)


def _mae_and_coverage(model, rows: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    out = model.predict_interval(rows.drop(columns=["a_speed", "b_speed"]))
    truth = _speeds(rows)
    errors = np.abs(truth - out[["a_speed", "b_speed"]].to_numpy()).ravel()
    lo = out[["a_speed_p10", "b_speed_p10"]].to_numpy()
    hi = out[["a_speed_p90", "b_speed_p90"]].to_numpy()
    return errors, ((lo <= truth) & (truth <= hi)).ravel()


def test_unseen_pairs_beat_no_interference_by_a_quarter(pairs: pd.DataFrame) -> None:
    """The issue's target on Gavel's own pairs of unseen workloads. Measured on the testbed of
    the training pairs (same source and GPU type), they get its learned slowdown in full, and
    so also beat the training mean (speed 0.6 for everyone), which the hedge toward 1.0 lost
    to (MAE 0.175 against 0.136)."""
    errors, covered, train_means = [], [], []
    for train, test in folds(pairs, "interference", "job"):
        model = make_predictor("interference", "gbm").fit(pairs.iloc[train])
        e, c = _mae_and_coverage(model, pairs.iloc[test])
        errors.append(e)
        covered.append(c)
        constant = np.abs(1.0 - _speeds(pairs.iloc[test])).mean()
        assert e.mean() <= constant, "never worse than no interference, fold by fold"
        train_means.append(np.abs(_speeds(pairs.iloc[train]).mean() - _speeds(pairs.iloc[test])))
    all_test = pairs.iloc[np.concatenate([t for _, t in folds(pairs, "interference", "job")])]
    assert np.concatenate(errors).mean() < 0.75 * np.abs(1.0 - _speeds(all_test)).mean()
    assert np.concatenate(errors).mean() < np.concatenate(train_means).mean()
    # p10-p90 should hold about 80% of unseen pairs, not the ~45% a random-row calibration gives
    assert 0.7 <= np.concatenate(covered).mean() <= 0.95


def test_trained_on_gavel_is_no_worse_than_no_interference_on_cpu_pairs(
    pairs: pd.DataFrame, gavel_model
) -> None:
    """Split by source: GPU pairs from Gavel in training, the CPU pairs measured here (every
    workload new, most model families new) as the test. Two one-thread jobs on two cores fit
    (their solo `cpu_util` sums to ~100%), so the contention rule leaves no slowdown; Gavel's
    slowdowns in full would be ~0.3 off (the train mean: 0.41)."""
    measured = datasets.load("measured-cpu-colocation")
    model = gavel_model
    errors, _ = _mae_and_coverage(model, measured)
    assert errors.mean() <= np.abs(1.0 - _speeds(measured)).mean() + 1e-9
    assert (
        errors.mean()
        < 0.5 * np.abs(pairs[["a_speed", "b_speed"]].to_numpy().mean() - _speeds(measured)).mean()
    )
    flags = model.predict_interval(measured.drop(columns=["a_speed", "b_speed"]))["flags"]
    assert flags.str.contains("new_workload").all()
    assert not flags.str.contains("new_model_family").any()  # the counters decided


def test_on_a_cpu_the_share_of_its_cores_is_the_busy_counter(pairs: pd.DataFrame) -> None:
    """A CPU pair's contention is read from each job's share of the machine's logical CPUs:
    two jobs that fit get no slowdown, two that each want every core get the learned one."""
    measured = datasets.load("measured-cpu-colocation").drop(columns=["a_speed", "b_speed"])
    features = InterferenceFeatures().fit(pairs)
    fit = measured.assign(a_cpu_util=50.0, b_cpu_util=40.0)
    full = measured.assign(a_cpu_util=100.0, b_cpu_util=100.0)
    share, from_counters = features.evidence(fit)
    assert from_counters.all() and (share == 0.0).all()
    share, from_counters = features.evidence(full)
    assert from_counters.all() and (share == 1.0).all()
    on_gpu = full.assign(gpu_type="v100")  # a GPU's host CPU use says nothing of the GPU
    assert not features.evidence(on_gpu)[1].any()


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    util=st.lists(st.floats(0, 100), min_size=4, max_size=4),
    more=st.floats(0, 100),
)
def test_new_workload_slowdown_grows_with_measured_contention(
    general_model, util: list[float], more: float
) -> None:
    """Counters measured for both jobs decide the shrinkage: more solo utilization never
    predicts a faster pair, and two jobs that fit in one device together (utilization
    summing to 100% or less) get speed 1.0."""
    rows = general_model[1].copy()
    rows[["a_gpu_util", "b_gpu_util", "a_mem_util", "b_mem_util"]] = util
    busier = rows.assign(a_gpu_util=min(100.0, util[0] + more))
    model = general_model[0]
    base, busy = model.predict_interval(rows), model.predict_interval(busier)
    assert (busy["a_speed"] <= base["a_speed"] + 1e-12).all()
    assert (busy["b_speed"] <= base["b_speed"] + 1e-12).all()
    if util[0] + util[1] <= 100 and util[2] + util[3] <= 100:
        assert np.allclose(base[["a_speed", "b_speed"]], 1.0)
        assert np.allclose(base[["a_speed_p90", "b_speed_p90"]], 1.0)


def test_a_new_workload_off_the_training_testbed_keeps_the_hedge(general_model) -> None:
    """Without counters, a new pair from another source (or naming none) is shrunk toward
    1.0; the same pair from the training pairs' testbed gets the learned slowdown in full."""
    model, rows = general_model
    on_testbed = model.predict_interval(rows)
    elsewhere = model.predict_interval(rows.assign(source="another-paper"))
    unnamed = model.predict_interval(rows.drop(columns="source"))
    assert (on_testbed["flags"] == "new_workload").all()
    for side in ("a_speed", "b_speed"):
        assert on_testbed[side].iloc[0] < elsewhere[side].iloc[0] <= 1.0
        assert elsewhere[side].iloc[0] == pytest.approx(unnamed[side].iloc[0])


@pytest.fixture(scope="module")
def general_model(pairs: pd.DataFrame):
    """A model and one pair of workloads it never saw (names and families new)."""
    model = make_predictor("interference", "gbm").fit(pairs.sample(400, random_state=2))
    rows = (
        pairs.head(1).drop(columns=["a_speed", "b_speed"]).assign(a_job="zzz-new", b_job="qqq-new")
    )
    return model, rows


def test_seen_pairs_use_the_detailed_model(pairs: pd.DataFrame) -> None:
    train = pairs.sample(frac=0.8, random_state=0)
    test = pairs.drop(train.index)
    test = test[test["a_job"].isin(train["a_job"]) & test["b_job"].isin(train["b_job"])]
    model = make_predictor("interference", "gbm").fit(train)
    mae = np.abs(_speeds(test) - model.predict(test)).mean()
    assert mae < 0.5 * np.abs(_speeds(test) - _speeds(train).mean()).mean()


@pytest.mark.parametrize("family", ["gbm", "fcn"])
def test_new_workload_and_device_do_not_crash(pairs: pd.DataFrame, family: str) -> None:
    # routing and finite answers, not accuracy: networks train 20 epochs
    model = make_predictor("interference", family, epochs=20)
    model.fit(pairs.sample(300, random_state=1))
    rows = pairs.head(4).drop(columns=["a_speed", "b_speed"]).copy()
    rows["a_job"] = ["vit-imagenet", "resnet18-cifar10", "vit-imagenet", "bert-squad"]
    rows["gpu_type"] = ["h100", "k80", "mystery-accelerator", "v100"]
    out = model.predict_interval(rows)
    assert np.isfinite(out.drop(columns="flags").to_numpy(dtype=float)).all()
    assert list(out["flags"] == "") == [False, True, False, False]  # row 2: both jobs known
    assert (out["a_speed_p10"] <= out["a_speed"]).all()
    assert (out["a_speed"] <= out["a_speed_p90"]).all()


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(util=st.lists(st.floats(0, 100), min_size=2, max_size=2), more=st.floats(0, 100))
def test_a_new_time_sliced_pair_follows_its_busy_fractions(
    general_model, util: list[float], more: float
) -> None:
    """Two processes taking turns on a GPU: a new pair's speed is 1 / (1 + the other job's
    solo busy fraction), inside its interval, never above 1; a busier partner never predicts
    a faster job; the flag says which rule answered. Without `sharing` the rule is unused."""
    model, rows = general_model
    rows = rows.assign(a_gpu_util=util[0], b_gpu_util=util[1], sharing="time-slice")
    out = model.predict_interval(rows)
    assert out["a_speed"].iloc[0] == pytest.approx(1 / (1 + util[1] / 100))
    assert out["b_speed"].iloc[0] == pytest.approx(1 / (1 + util[0] / 100))
    for side in ("a_speed", "b_speed"):
        assert out[f"{side}_p10"].iloc[0] <= out[side].iloc[0] <= out[f"{side}_p90"].iloc[0] <= 1
    assert out["flags"].iloc[0] == "new_workload,time_sliced"
    busier = model.predict_interval(rows.assign(b_gpu_util=min(100.0, util[1] + more)))
    assert busier["a_speed"].iloc[0] <= out["a_speed"].iloc[0]
    untold = model.predict_interval(rows.drop(columns="sharing"))
    assert "time_sliced" not in untold["flags"].iloc[0]


def test_time_slicing_on_the_h100_pairs_beats_the_training_mean(
    pairs: pd.DataFrame, gavel_model
) -> None:
    """Split by source on a real GPU: trained on Gavel's pairs, asked for the 10 pairs
    measured on an H100 without MPS (every workload new). The contention rule lost to the
    Gavel mean there (MAE 0.240 against 0.110); the time-slicing rule beats it and 1.0."""
    h100 = datasets.load("measured-h100-colocation")
    assert (h100["sharing"] == "time-slice").all()
    errors, covered = _mae_and_coverage(gavel_model, h100)
    assert errors.mean() < np.abs(_speeds(pairs).mean() - _speeds(h100)).mean()
    assert errors.mean() < 0.25 * np.abs(1.0 - _speeds(h100)).mean()
    assert covered.mean() >= 0.5
