"""The Chronus trace loader against values read by hand from the raw files."""

from __future__ import annotations

import math

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
        return datasets.load("chronus-traces").set_index("job_id", drop=False)


def test_counts(traces: pd.DataFrame) -> None:
    assert len(traces) == 3 * 30940  # MIX1, MIX2, SLO: 30940 data lines each
    assert traces["job_id"].is_unique
    assert traces.groupby("trace").size().to_dict() == {
        "Philly_MIX1": 30940, "Philly_MIX2": 30940, "Philly_SLO": 30940,
    }  # fmt: skip


def test_hand_checked_rows(traces: pd.DataFrame) -> None:
    # MIX1 row 1: 0,vc_6214e9,1,8555,5049,vgg16,747,14,1105,10,0,strict
    strict = traces.loc["Philly_MIX1/0"]
    assert (strict["submit_time_s"], strict["duration_s"], strict["deadline_s"]) == (
        8555.0, 747.0, 1105.0,
    )  # fmt: skip
    assert (strict["user"], strict["job"], strict["num_gpus"]) == ("vc_6214e9", "vgg16", 1)
    # MIX1 row 3: 2,vc_ee9e8c,1,14341,3621,alexnet,30,17,14341,10,1,best -> no deadline
    best = traces.loc["Philly_MIX1/2"]
    assert best["job_type"] == "best"
    assert math.isnan(best["deadline_s"])
    # MIX2 row 3: 2,vc_6c71a0,4,12378,3495,mobilenet_v2,26,14,102-142-182-242,10-8-5-2,0,soft
    soft = traces.loc["Philly_MIX2/2"]
    assert (soft["num_gpus"], soft["deadline_s"], soft["deadline_steps_s"]) == (
        4, 102.0, "102-142-182-242",
    )  # fmt: skip
