"""The fast paths of prediction give the same answers as the slow, general code they skip:
LightGBM boosters on a float matrix vs the sklearn wrapper on a frame, and the contract's
pandera-free check of passing tables vs pandera itself (which still words every error)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from conftest import requires_data

from perfcast import datasets
from perfcast.datasets.contract import SCHEMAS, _normalize_booleans, _passing_table, validate
from perfcast.errors import ContractError
from perfcast.features.scaling import ScalingFeatures
from perfcast.predictor.regressors import QuantileGBM

pytestmark = requires_data


@pytest.fixture(scope="module")
def gavel_scaling() -> pd.DataFrame:
    return datasets.load("gavel-scaling")


def test_boosters_on_a_matrix_predict_exactly_what_the_sklearn_wrapper_does(
    gavel_scaling: pd.DataFrame,
) -> None:
    features = ScalingFeatures().fit(gavel_scaling)
    X, _ = features.transform(gavel_scaling)
    gbm = QuantileGBM(n_estimators=30).fit(X, np.log(gavel_scaling["step_time_s"]))
    jobs = X["job"].astype(str)
    # an unseen job, a missing one, and the categories in another order than at fit time
    shuffled = X.assign(
        job=pd.Categorical(
            ["unseen-job", None, *jobs.iloc[2:]],
            categories=["unseen-job", *sorted(set(jobs), reverse=True)],
        )
    )
    for frame in (X, shuffled, X.head(1)):
        fast = gbm.predict_quantiles(frame)
        wrapper = [model.predict(frame) for model in gbm.models_]
        for a, b in zip(fast, wrapper, strict=True):
            np.testing.assert_array_equal(a, b)


def _raw(table: pd.DataFrame) -> pd.DataFrame:
    """The table as a JSON request would give it: Python objects, None for missing."""
    return table.astype(object).where(table.notna(), None)


@pytest.mark.parametrize(
    "name", ["gavel-scaling", "muri-scaling", "gavel-interference", "measured-cpu-tpch-plans"]
)
def test_passing_tables_come_out_as_pandera_makes_them(name: str) -> None:
    table = datasets.load(name)
    schema = SCHEMAS[datasets.get(name).kind]
    for frame in (table, _raw(table)):
        frame = _normalize_booleans(frame.reset_index(drop=True).copy(), schema)
        fast = _passing_table(frame.copy(), schema)
        assert fast is not None
        slow = schema.validate(frame.copy(), lazy=True)
        pd.testing.assert_frame_equal(fast, slow)


BAD_ROWS = {
    "gpus below one": ({"num_gpus": 0}, "num_gpus"),
    "gpus not a number": ({"num_gpus": "four"}, "num_gpus"),
    "negative sync time": ({"sync_time_s": -1.0}, "sync_time_s"),
    "upper-case GPU": ({"gpu_type": "V100"}, "gpu_type"),
    "empty job": ({"job": ""}, "job"),
    "missing job": ({"job": None}, "job"),
    "infinite step": ({"step_time_s": float("inf")}, "step_time_s"),
    "fewer GPUs than nodes": ({"num_gpus": 1, "num_nodes": 2}, "num_gpus"),
    "placement not digits": ({"placement": "4a"}, "placement"),
    "amp not a boolean": ({"amp": "maybe"}, "amp"),
}


@pytest.mark.parametrize("change", BAD_ROWS.values(), ids=BAD_ROWS.keys())
def test_bad_rows_are_left_to_pandera_and_refused(change: tuple[dict, str]) -> None:
    good = {"job": "resnet18", "gpu_type": "v100", "num_nodes": 1, "num_gpus": 4,
            "placement": "4", "local_batch_size": 128, "amp": True, "step_time_s": 0.1}  # fmt: skip
    values, column = change
    frame = pd.DataFrame([good, {**good, **values}])
    schema = SCHEMAS["scaling"]
    assert _passing_table(_normalize_booleans(frame.copy(), schema), schema) is None
    with pytest.raises(ContractError) as err:
        validate(frame, "scaling", source="test rows")
    assert err.value.row == 2 and err.value.column == column


def test_placement_error_names_the_first_bad_row() -> None:
    frame = pd.DataFrame(
        {"job": "j", "gpu_type": "v100", "num_nodes": [1, 2, 2, 1], "num_gpus": [4, 8, 8, 2],
         "placement": ["4", "44", "404", "3"], "local_batch_size": 32, "step_time_s": 1.0}
    )  # fmt: skip
    with pytest.raises(ContractError, match=r"placement '3' does not match num_gpus=2") as err:
        validate(frame, "scaling")
    assert err.value.row == 4 and err.value.column == "placement"
