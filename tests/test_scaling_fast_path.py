"""The few-row path of scaling prediction (predictor/scaling_fast.py) answers exactly what the
general path answers: the same p10, p50, p90 and flags for any handful of rows, measured or
not, with or without the optional columns a request may carry."""

from __future__ import annotations

import pandas as pd
import pytest
from conftest import gavel_muri_scaling_rows, requires_data, scaling_model_without_k80_multi
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

pytestmark = requires_data


@pytest.fixture(scope="module")
def training_rows() -> pd.DataFrame:
    return gavel_muri_scaling_rows()


@pytest.fixture(scope="module")
def model():
    return scaling_model_without_k80_multi()  # k80: a new GPU's rows


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


def _records(rows: pd.DataFrame, data) -> list[dict]:
    """The rows as a JSON client sends them: Python values, a missing value left out or null."""
    records = []
    for row in rows.to_dict("records"):
        plain = {k: v.item() if hasattr(v, "item") else v for k, v in row.items()}
        missing = [k for k, v in plain.items() if v is None or v != v]
        drop = data.draw(st.lists(st.sampled_from(missing), unique=True)) if missing else []
        records.append({k: v for k, v in plain.items() if k not in drop})
    return records


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(data=st.data())
def test_records_are_answered_as_their_checked_frame(model, training_rows, data) -> None:
    """`predict_columns` on records (the service's path: no frame for a few plain rows)
    answers what the frame path answers for the same rows."""
    records = _records(data.draw(request_rows(training_rows)), data)
    frame = pd.DataFrame.from_records(records)
    want = model._predict_interval(model._check_rows(frame), fast=False)
    got = pd.DataFrame(model.predict_columns(records))
    pd.testing.assert_frame_equal(got, want.reset_index(drop=True), check_exact=True)


@settings(
    max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(data=st.data())
def test_groups_of_one_call_are_answered_as_separate_calls(model, training_rows, data) -> None:
    """A micro-batch of requests in one call: the monotonic guard compares rows of one request
    only, so each request gets what it would get alone, on the few-row path and beyond it."""
    requests = [
        _records(data.draw(request_rows(training_rows)), data)
        for _ in range(data.draw(st.integers(2, 5)))
    ]
    if data.draw(st.booleans()):  # beyond the few-row path: the general one
        requests.append(requests[0] * 8)
    rows = [row for request in requests for row in request]
    groups = [i for i, request in enumerate(requests) for _ in request]
    together = pd.DataFrame(model.predict_columns(rows, groups))
    alone = pd.concat(
        [pd.DataFrame(model.predict_columns(request)) for request in requests],
        ignore_index=True,
    )
    pd.testing.assert_frame_equal(together, alone, check_exact=True)
