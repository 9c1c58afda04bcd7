"""Every predictor family on real data: it fits, its intervals are ordered, unseen categories
do not crash, and the physical structure moves predictions the right way."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch
from conftest import requires_data

from perfcast import datasets
from perfcast.errors import ContractError
from perfcast.predictor import FAMILIES, make_predictor

pytestmark = requires_data
torch.set_num_threads(1)


@pytest.fixture(scope="module")
def gavel_scaling() -> pd.DataFrame:
    return datasets.load("gavel-scaling")


@pytest.fixture(scope="module")
def graphs() -> pd.DataFrame:
    return datasets.load("neusight-graphs")


def _check_intervals(frame: pd.DataFrame, target: str) -> None:
    assert frame[target].notna().all() and (frame[target] > 0).all()
    assert (frame[f"{target}_p10"] <= frame[target]).all()
    assert (frame[target] <= frame[f"{target}_p90"]).all()


@pytest.mark.parametrize("family", FAMILIES["scaling"])
def test_scaling_families_fit_and_predict(gavel_scaling: pd.DataFrame, family: str) -> None:
    rows = gavel_scaling.sample(frac=1.0, random_state=0)
    train, test = rows.iloc[:300], rows.iloc[300:]
    model = make_predictor("scaling", family).fit(train)
    out = model.predict_interval(test.drop(columns=["step_time_s"]))
    _check_intervals(out, "step_time_s")
    error = np.abs(out["step_time_s"] / test["step_time_s"] - 1)
    assert np.median(error) < 0.5  # far better than a guess across 100x range of step times


def test_scaling_follows_the_new_gpus_one_gpu_time(gavel_scaling: pd.DataFrame) -> None:
    """A GPU seen only on one GPU: doubling its one-GPU times must roughly double the
    predicted multi-GPU times (the structure is what carries the prediction)."""
    new = gavel_scaling["gpu_type"] == "k80"
    single = gavel_scaling[new & (gavel_scaling["num_gpus"] == 1)]
    multi = gavel_scaling[new & (gavel_scaling["num_gpus"] > 1)]
    others = gavel_scaling[~new]
    base = make_predictor("scaling", "gbm").fit(pd.concat([others, single]))
    slow = make_predictor("scaling", "gbm").fit(
        pd.concat([others, single.assign(step_time_s=single["step_time_s"] * 2)])
    )
    ratio = slow.predict(multi) / base.predict(multi)
    assert 1.6 < np.median(ratio) < 2.4


def test_only_a_new_gpus_scaling_gets_the_new_gpu_margin(gavel_scaling: pd.DataFrame) -> None:
    """Gavel's k80 known from one-GPU rows only: its multi-GPU rows get the wide new-GPU
    interval. Muri's jobs, measured at several GPUs but at one batch size each (so no same-GPU
    overhead from another batch), are charted and must not get it: they once did."""
    muri = datasets.load("muri-scaling")
    new = gavel_scaling["gpu_type"] == "k80"
    train = pd.concat([gavel_scaling[~new | (gavel_scaling["num_gpus"] == 1)], muri])
    model = make_predictor("scaling", "gbm").fit(train)

    def median_width(rows: pd.DataFrame) -> float:
        out = model.predict_interval(rows[rows["num_gpus"] > 1].drop(columns=["step_time_s"]))
        return float(np.median(np.log(out["step_time_s_p90"] / out["step_time_s_p10"])))

    assert median_width(gavel_scaling[new]) > 1.5 * median_width(muri)


def test_unknown_job_and_gpu_do_not_crash(gavel_scaling: pd.DataFrame) -> None:
    model = make_predictor("scaling", "gbm").fit(gavel_scaling)
    row = gavel_scaling.iloc[:1].assign(job="never-seen-job", gpu_type="b200")
    out = model.predict_interval(row.drop(columns=["step_time_s"]))
    _check_intervals(out, "step_time_s")


def test_bad_prediction_rows_are_refused(gavel_scaling: pd.DataFrame) -> None:
    model = make_predictor("scaling", "gbm").fit(gavel_scaling.iloc[:200])
    bad = gavel_scaling.iloc[:2].drop(columns=["step_time_s"]).assign(num_gpus=[1, np.nan])
    with pytest.raises(ContractError) as err:
        model.predict_interval(bad)
    assert err.value.column == "num_gpus"


@pytest.mark.parametrize("family", FAMILIES["interference"])
def test_interference_predicts_both_sides(family: str) -> None:
    rows = datasets.load("gavel-interference")
    train, test = rows.iloc[:700], rows.iloc[700:]
    model = make_predictor("interference", family).fit(train)
    out = model.predict_interval(test)
    for side in ("a_speed", "b_speed"):
        _check_intervals(out, side)
    # swapping the jobs swaps the predictions: one model serves both sides
    swap = {c: {"a": "b", "b": "a"}[c[0]] + c[1:] for c in test.columns if c[:2] in ("a_", "b_")}
    swapped = test.rename(columns=swap)
    out_swapped = model.predict_interval(swapped)
    np.testing.assert_allclose(out["a_speed"], out_swapped["b_speed"], rtol=1e-6)


@pytest.mark.parametrize("family", ["gbm", "fcn", "rnn", "gnn"])
def test_runtime_families_predict_one_row_per_sample(graphs: pd.DataFrame, family: str) -> None:
    held_out = graphs["device"] == "Tesla_T4"
    model = make_predictor("runtime", family, epochs=5).fit(graphs[~held_out])
    out = model.predict_interval(graphs[held_out].drop(columns=["e2e_latency_ms"]))
    assert set(out.index) == set(graphs.loc[held_out, "sample_id"])
    _check_intervals(out, "e2e_latency_ms")


def test_duration_handles_unseen_users() -> None:
    trace = datasets.load("pollux-philly").iloc[:3000]
    model = make_predictor("duration", "gbm").fit(trace.iloc[:2500])
    rows = trace.iloc[2500:].drop(columns=["duration_s"])
    rows = rows.assign(vc="a-new-virtual-cluster") if "vc" in rows else rows
    _check_intervals(model.predict_interval(rows), "duration_s")
