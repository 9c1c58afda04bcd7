"""The few-row path of scaling prediction (predictor/scaling_fast.py) answers exactly what the
general path answers: the same p10, p50, p90 and flags for any handful of rows, measured or
not, with or without the optional columns a request may carry."""

from __future__ import annotations

import pandas as pd
import pytest
from conftest import requires_data
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from perfcast import datasets
from perfcast.predictor import make_predictor

pytestmark = requires_data


@pytest.fixture(scope="module")
def training_rows() -> pd.DataFrame:
    return pd.concat(
        [
            datasets.load(name).assign(cluster=name.removesuffix("-scaling"))
            for name in ("gavel-scaling", "muri-scaling")
        ],
        ignore_index=True,
    )


@pytest.fixture(scope="module")
def model(training_rows: pd.DataFrame):
    k80 = (training_rows["gpu_type"] == "k80") & (training_rows["num_gpus"] > 1)
    return make_predictor("scaling", "gbm").fit(training_rows[~k80])  # k80: a new GPU's rows


@st.composite
def request_rows(draw, measured: pd.DataFrame) -> pd.DataFrame:
    """1-10 rows: measured ones as they are, measured ones changed, and invented ones."""
    rows = []
    for _ in range(draw(st.integers(1, 10))):
        base = measured.iloc[draw(st.integers(0, len(measured) - 1))].drop("step_time_s")
        row = base.to_dict()
        if draw(st.booleans()):
            per_node = draw(st.lists(st.integers(1, 8), min_size=1, max_size=4))
            row |= {"num_nodes": len(per_node), "num_gpus": sum(per_node)}
            row["placement"] = draw(st.sampled_from(["".join(map(str, per_node)), None]))
        if draw(st.booleans()):
            row["local_batch_size"] = draw(st.sampled_from([1, 16, 64, 128, 1000]))
        if draw(st.booleans()):
            row["job"] = draw(st.sampled_from(["resnet18", "bert", "my-llama-7b", "vgg16"]))
        if draw(st.booleans()):
            row["gpu_type"] = draw(st.sampled_from(["k80", "v100", "a100", "h100", "tpu-x"]))
        row["cluster"] = draw(st.sampled_from([row.get("cluster"), None, "elsewhere"]))
        for column in ("intra_node_bw_gbps", "inter_node_bw_gbps", "params_m"):
            row[column] = draw(st.sampled_from([None, None, 0.5, 300.0]))
        for column in ("peak_tflops_fp32", "mem_bw_gbps", "gflops_per_sample"):
            row[column] = draw(st.sampled_from([None, 2.0, 900.0]))
        row["amp"] = draw(st.sampled_from([None, True, False]))
        rows.append(row)
    return pd.DataFrame(rows)


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(data=st.data())
def test_the_few_row_path_answers_what_the_general_path_does(model, training_rows, data) -> None:
    rows = data.draw(request_rows(training_rows))
    for column in ("params_m", "amp", "gflops_per_sample", "mem_bw_gbps"):
        if rows[column].isna().all():  # a request without the column at all, too
            rows = rows.drop(columns=[column])
    fast = model.predict_interval(rows)
    general = model._predict_interval(model._check_rows(rows), fast=False)
    pd.testing.assert_frame_equal(fast, general, check_exact=True)
