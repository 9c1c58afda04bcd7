"""The Pollux loaders against values read by hand from the raw files."""

from __future__ import annotations

import pandas as pd
import pytest

from perfcast import datasets
from perfcast.datasets.fetch import shared_data_available

pytestmark = pytest.mark.skipif(
    not shared_data_available(), reason="the public datasets (../shared/datasets) are not here"
)


def _row(df: pd.DataFrame, **where: object) -> pd.Series:
    mask = pd.Series(True, index=df.index)
    for column, value in where.items():
        mask &= df[column] == value
    assert mask.sum() == 1, where
    return df[mask].iloc[0]


def test_scaling() -> None:
    scaling = datasets.load("pollux-scaling")
    # placements.csv + scalability.csv data lines of bert, cifar10, deepspeech2, imagenet, ncf,
    # yolov3: (540 + 180) + (1183 + 329) + (754 + 198) + (864 + 288) + (1661 + 458) + (540 + 108)
    assert len(scaling) == 7103
    assert set(scaling["gpu_type"]) == {"t4"}
    assert (scaling["sync_time_s"] <= scaling["step_time_s"]).all()
    # bert/placements.csv line 2: 1,4,0.45532354712486267,0.013738612174987792
    one = _row(scaling, job="bert-squad", placement="1", local_batch_size=4)
    assert (one["num_nodes"], one["num_gpus"]) == (1, 1)
    assert (one["step_time_s"], one["sync_time_s"]) == (0.45532354712486267, 0.013738612174987792)
    # bert/placements.csv: 44,8,2.53326416015625,1.8925004196166992 -> 2 nodes, 8 GPUs
    two = _row(scaling, job="bert-squad", placement="44", local_batch_size=8)
    assert (two["num_nodes"], two["num_gpus"], two["step_time_s"]) == (2, 8, 2.53326416015625)
    # bert/scalability.csv line 2: 6,6,4,1.4923269003629684,1.0928203125 (placement unknown)
    spread = scaling[
        (scaling["job"] == "bert-squad") & scaling["placement"].isna() & (scaling["num_gpus"] == 6)
    ]
    first = spread[spread["local_batch_size"] == 4].iloc[0]
    assert (first["num_nodes"], first["step_time_s"], first["sync_time_s"]) == (
        6, 1.4923269003629684, 1.0928203125,
    )  # fmt: skip


def test_philly() -> None:
    philly = datasets.load("pollux-philly").set_index("job_id", drop=False)
    assert len(philly) == 82247  # every data line: no run time <= 0 in this file
    assert philly["submit_time_s"].min() == 0.0
    # line 2: 2017-10-09 07:01:55,66.0,1,66.0,11cb48; the trace starts 2017-09-04 10:30:41,
    # 35 days earlier less 3 h 28 min 46 s
    first = philly.loc["philly/0"]
    assert first["submit_time_s"] == 35 * 86400 - (3 * 3600 + 28 * 60 + 46)
    assert (first["duration_s"], first["num_gpus"], first["vc"]) == (66.0, 1, "11cb48")
    # line 4: 2017-09-29 07:58:32,860662.0,1,860662.0,6c71a0
    assert philly.loc["philly/2", "duration_s"] == 860662.0


def test_workloads() -> None:
    mixes = datasets.load("pollux-workloads").set_index("job_id", drop=False)
    assert len(mixes) == 7680  # 40 files: 8 x (160 + 80 + 240 + 320 + 160) jobs
    assert mixes["trace"].nunique() == 40
    assert set(mixes["job"]) <= set(datasets.load("pollux-scaling")["job"])
    # workloads-realistic/workload-1.csv: bert-27,5813,bert,1,12 -> bert/placements.csv
    # "1,12,0.9215156733989716,..." and validation-12.csv after its 2 epochs: iteration 14774
    bert = mixes.loc["workloads-realistic/workload-1/bert-27"]
    assert (bert["submit_time_s"], bert["num_gpus"], bert["iterations"]) == (5813.0, 1, 14774)
    assert bert["duration_s"] == pytest.approx(14774 * 0.9215156733989716)
    # workloads/workload-1.csv: ncf-2,135,ncf,1,32768 -> "1,32768,0.02131553226047092,...",
    # ncf/validation-32768.csv after 10 epochs: iteration 1548
    ncf = mixes.loc["workloads/workload-1/ncf-2"]
    assert ncf["duration_s"] == pytest.approx(1548 * 0.02131553226047092)
    # workloads-realistic/workload-1.csv: cifar10-0,107,cifar10,1,128; local batch 128 lies
    # between cifar10/placements.csv rows "1,91,0.07591350078582763" and
    # "1,129,0.10385050773620605"; validation-128.csv after 100 epochs: iteration 39062
    lo, hi = 0.07591350078582763, 0.10385050773620605
    step = lo + (128 - 91) / (129 - 91) * (hi - lo)
    cifar = mixes.loc["workloads-realistic/workload-1/cifar10-0"]
    assert cifar["duration_s"] == pytest.approx(39062 * step)
