"""The Muri loaders against values read by hand from the raw trace files."""

from __future__ import annotations

import pandas as pd
import pytest

from perfcast import datasets
from perfcast.datasets.fetch import shared_data_available

pytestmark = pytest.mark.skipif(
    not shared_data_available(), reason="the public datasets (../shared/datasets) are not here"
)


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory):
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PERFCAST_HOME", str(tmp_path_factory.mktemp("home")))
        yield


@pytest.fixture(scope="module")
def scaling(home) -> pd.DataFrame:
    return datasets.load("muri-scaling")


@pytest.fixture(scope="module")
def traces(home) -> pd.DataFrame:
    return datasets.load("muri-traces")


def one(df: pd.DataFrame, **where: object) -> pd.Series:
    mask = pd.Series(True, index=df.index)
    for column, value in where.items():
        mask &= df[column] == value
    assert mask.sum() == 1
    return df[mask].iloc[0]


def test_scaling_rows(scaling: pd.DataFrame) -> None:
    assert len(scaling) == 8 * 6  # 8 models x {1, 2, 4, 8, 16, 32} GPUs
    assert set(scaling["gpu_type"]) == {"v100"}
    # job_type_1.csv row 4: 3,4,352712000,1946376,gpt2,4,842781000,282000,433,0.6,413,20,0
    gpt2 = one(scaling, job="gpt2", num_gpus=4)
    assert gpt2["step_time_s"] == pytest.approx(433 / 1000)
    assert gpt2["load_time_s"] == pytest.approx(0.6 / 1000)
    assert gpt2["compute_time_s"] == pytest.approx(413 / 1000)
    assert gpt2["comm_time_s"] == gpt2["sync_time_s"] == pytest.approx(20 / 1000)
    assert (gpt2["num_nodes"], gpt2["local_batch_size"]) == (1, 4)
    # trace2.csv row 3038: 3037,32,4335128000,129711,vgg16,16,43583000,5000,336,87,67,131,1
    vgg = one(scaling, job="vgg16", num_gpus=32)
    assert vgg["step_time_s"] == pytest.approx(0.336)
    assert vgg["comm_time_s"] == pytest.approx(0.131)
    assert vgg["num_nodes"] == 32 // 8


def test_scaling_keeps_the_simulator_value_where_the_testbed_trace_differs(
    scaling: pd.DataFrame,
) -> None:
    # resnet18 on 32 GPUs: resource_time_2 = 93 in the simulator traces, 13 in cluster_trace.csv
    assert one(scaling, job="resnet18", num_gpus=32)["comm_time_s"] == pytest.approx(0.093)


def test_trace_rows(traces: pd.DataFrame, scaling: pd.DataFrame) -> None:
    # 992*4 job_type + 1494*2 + 5755*2 + 992*2 + 2638*2 simulator rows + 400 testbed rows
    assert len(traces) == 992 * 4 + 1494 * 2 + 5755 * 2 + 992 * 2 + 2638 * 2 + 400
    assert traces["job_id"].is_unique
    # job_type_1.csv row 2: 1,4,1456000,4874384,bert,4,926133000,1456000,190,0.5,163,18,1
    bert = one(traces, job_id="job_type_1/1")
    assert bert["submit_time_s"] == pytest.approx(1456.0)
    assert bert["duration_s"] == pytest.approx(926133.0)
    assert (bert["num_gpus"], bert["job"], bert["iterations"]) == (4, "bert", 4874384)
    # cluster_trace.csv row 1: 0,8,0,10956,gpt2,4,5095000,91000,437,0.6,419,49,0
    gpt2 = one(traces, job_id="testbed/cluster_trace/0")
    assert (gpt2["duration_s"], gpt2["trace"]) == (5095.0, "testbed/cluster_trace")
    assert set(traces["job"]) == set(scaling["job"])
