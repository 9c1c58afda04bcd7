"""Every task says what it does not know (issue 37), drawn by hypothesis: for each of the five
tasks, any training row is answered with p10 < p50 < p90 and no flag, and a row made unseen in
one way (a new job, GPU, workload, device, model, trace, query, scale or operator) carries
that way's flag, with its interval still ordered. One small model per task, fitted once."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch
from conftest import (
    RUNTIME_HELD_MODEL,
    RUNTIME_TRAIN_DEVICES,
    gavel_muri_scaling_rows,
    gavel_pairs,
    interference_model_on_gavel_pairs,
    requires_data,
    runtime_model_without_a_model,
    scaling_model_without_k80_multi,
    spark_query_model,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from perfcast import datasets
from perfcast.predictor import make_predictor

pytestmark = requires_data
torch.set_num_threads(1)
EXAMPLES = settings(max_examples=15, suppress_health_check=[HealthCheck.function_scoped_fixture])


def _strictly_ordered(out: pd.DataFrame, targets: tuple[str, ...]) -> None:
    for target in targets:
        lo, mid, hi = (out[c].to_numpy() for c in (f"{target}_p10", target, f"{target}_p90"))
        assert (lo < mid).all() and (mid < hi).all(), (lo, mid, hi)


def _flags(out: pd.DataFrame) -> list[set[str]]:
    return [set(filter(None, str(text).split(","))) for text in out["flags"]]


def _check(model, training_row: pd.DataFrame, unseen_row: pd.DataFrame, flag: str) -> None:
    """The training row: ordered, no flag; the unseen row: ordered, `flag` among its flags."""
    targets = tuple(model.targets)
    seen = model.predict_interval(training_row.drop(columns=list(targets), errors="ignore"))
    _strictly_ordered(seen, targets)
    assert _flags(seen) == [set()] * len(seen)
    new = model.predict_interval(unseen_row.drop(columns=list(targets), errors="ignore"))
    _strictly_ordered(new, targets)
    assert all(flag in f for f in _flags(new)), (flag, _flags(new))


# -- scaling: the shared gbm model (Gavel and Muri, less the K80's multi-GPU rows) ----------


@pytest.fixture(scope="module")
def scaling():
    model = scaling_model_without_k80_multi()
    rows = gavel_muri_scaling_rows()
    trained = rows[~((rows["gpu_type"] == "k80") & (rows["num_gpus"] > 1))]
    return model, trained.reset_index(drop=True)


@EXAMPLES
@given(pick=st.integers(0, 10**6), way=st.sampled_from(["job", "gpu", "gpus"]))
def test_scaling_flags_an_unseen_job_gpu_or_size_and_never_a_training_row(
    scaling, pick: int, way: str
) -> None:
    model, rows = scaling
    row = rows.iloc[[pick % len(rows)]]
    unseen, flag = {
        "job": (row.assign(job="a-job-never-seen"), "new_job"),
        "gpu": (row.assign(gpu_type="h100"), "new_gpu_type"),
        "gpus": (row.assign(num_gpus=1024, num_nodes=128, placement=None), "extrapolated_gpus"),
    }[way]
    _check(model, row, unseen, flag)


# -- interference: gbm on Gavel's measured pairs ------------------------------------------


@pytest.fixture(scope="module")
def interference():
    return interference_model_on_gavel_pairs(), gavel_pairs()


@EXAMPLES
@given(pick=st.integers(0, 10**6), side=st.sampled_from(["a", "b"]))
def test_interference_flags_a_new_workload_and_never_a_training_pair(
    interference, pick: int, side: str
) -> None:
    model, pairs = interference
    row = pairs.iloc[[pick % len(pairs)]]
    _check(model, row, row.assign(**{f"{side}_job": "a-workload-never-seen"}), "new_workload")


# -- runtime: the shared gbm model (five devices, one model held out) --------------------


@pytest.fixture(scope="module")
def runtime():
    graphs = datasets.load("neusight-graphs")
    trained = graphs["device"].isin(RUNTIME_TRAIN_DEVICES) & (graphs["model"] != RUNTIME_HELD_MODEL)
    return runtime_model_without_a_model(), graphs[trained]


@settings(EXAMPLES, max_examples=6)  # each example predicts two whole graphs
@given(pick=st.integers(0, 10**6), way=st.sampled_from(["device", "model"]))
def test_runtime_flags_a_new_device_or_model_and_never_a_training_graph(
    runtime, pick: int, way: str
) -> None:
    model, graphs = runtime
    ids = graphs["sample_id"].unique()
    sample = graphs[graphs["sample_id"] == ids[pick % len(ids)]]
    unseen, flag = {
        "device": (sample.assign(device="NVIDIA_H100_80GB_HBM3"), "new_gpu_type"),
        "model": (sample.assign(model="a-model-never-seen"), "new_model"),
    }[way]
    _check(model, sample, unseen, flag)


# -- duration: gbm on two traces, each row naming its trace --------------------------------


@pytest.fixture(scope="module")
def duration():
    rows = pd.concat(
        [
            datasets.load(name).sample(1_500, random_state=0).assign(source=name)
            for name in ("pollux-philly", "elasticflow-traces")
        ],
        ignore_index=True,
    )
    return make_predictor("duration", "gbm").fit(rows), rows


@EXAMPLES
@given(pick=st.integers(0, 10**6))
def test_duration_flags_a_new_trace_and_never_a_training_job(duration, pick: int) -> None:
    model, rows = duration
    row = rows.iloc[[pick % len(rows)]]
    _check(model, row, row.assign(source="a-trace-never-seen"), "new_trace")


# -- query: the shared gbm model (Spark's TPC-H runs less a fifth of the queries and the
# largest scale) -------------------------------------------------------------------------


@pytest.fixture(scope="module")
def query():
    model, held_queries, largest = spark_query_model()
    spark = datasets.load("decima-tpch-stages")
    trained = spark[~spark["query"].isin(held_queries) & (spark["scale_factor"] < largest)]
    return model, trained, spark, held_queries, largest


@EXAMPLES
@given(pick=st.integers(0, 10**6), way=st.sampled_from(["query", "scale", "operator"]))
def test_query_flags_a_new_query_scale_or_operator_and_never_a_training_run(
    query, pick: int, way: str
) -> None:
    model, trained, spark, held_queries, largest = query

    def one_run(rows: pd.DataFrame) -> pd.DataFrame:
        ids = rows["sample_id"].unique()
        return rows[rows["sample_id"] == ids[pick % len(ids)]]

    run = one_run(trained)
    if way == "query":
        unseen = one_run(
            spark[spark["query"].isin(held_queries) & (spark["scale_factor"] < largest)]
        )
    elif way == "scale":
        unseen = one_run(
            spark[~spark["query"].isin(held_queries) & (spark["scale_factor"] == largest)]
        )
    else:  # one operator renamed to a kind never trained on (an operator carries its rows)
        first = run.index == run.index[0]
        cardinality = run["cardinality"] if "cardinality" in run.columns else np.nan
        unseen = run.assign(
            op=np.where(first, "an-operator-never-seen", run["op"]),
            cardinality=np.where(first, 1_000.0, cardinality),
        )
    _check(model, run, unseen, f"new_{way}")
