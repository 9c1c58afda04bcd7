"""The ElasticFlow trace loader against values read by hand from the raw files."""

from __future__ import annotations

import pandas as pd
import pytest

from perfcast import datasets
from perfcast.datasets.fetch import shared_data_available

pytestmark = pytest.mark.skipif(
    not shared_data_available(), reason="the public datasets (../shared/datasets) are not here"
)


@pytest.fixture(scope="module")
def traces(tmp_path_factory: pytest.TempPathFactory) -> pd.DataFrame:
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PERFCAST_HOME", str(tmp_path_factory.mktemp("home")))
        return datasets.load("elasticflow-traces").set_index("job_id", drop=False)


def test_counts(traces: pd.DataFrame) -> None:
    assert len(traces) == 69351  # sum of the ten files' data lines
    assert traces["job_id"].is_unique
    assert sorted(traces["vc"].unique()) == [f"cluster{i:02d}" for i in range(1, 11)]
    # every cluster starts at 0
    assert (traces.groupby("vc")["submit_time_s"].min() == 0).all()


def test_hand_checked_rows(traces: pd.DataFrame) -> None:
    # cluster01.csv rows 1-2: 965d744f-...,1932025,2429,64 and fb10987f-...,2000581,1532,1
    first = traces.loc["cluster01/965d744f-0445-c1a8-12af-97e4c536c66e"]
    assert (first["submit_time_s"], first["duration_s"], first["num_gpus"]) == (0.0, 2429.0, 64)
    second = traces.loc["cluster01/fb10987f-20ac-3703-eb67-146a77a6e17c"]
    assert second["submit_time_s"] == 2000581 - 1932025
    assert (second["duration_s"], second["num_gpus"]) == (1532.0, 1)
    # cluster02.csv rows 1-2: f60b9881-...,5010,1265,1 and fd9f45f4-...,5016,2066,1
    later = traces.loc["cluster02/fd9f45f4-0816-d739-c393-3447f3dc50bf"]
    assert (later["submit_time_s"], later["duration_s"], later["vc"]) == (6.0, 2066.0, "cluster02")
