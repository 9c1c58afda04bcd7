"""The Sia loader against values read by hand from the raw files."""

from __future__ import annotations

import pandas as pd
import pytest

from perfcast import datasets
from perfcast.datasets.fetch import shared_data_available

pytestmark = pytest.mark.skipif(
    not shared_data_available(), reason="the public datasets (../shared/datasets) are not here"
)


@pytest.fixture(scope="module")
def scaling(tmp_path_factory: pytest.TempPathFactory) -> pd.DataFrame:
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PERFCAST_HOME", str(tmp_path_factory.mktemp("home")))
        return datasets.load("sia-scaling")


def _row(df: pd.DataFrame, **where: object) -> pd.Series:
    mask = pd.Series(True, index=df.index)
    for column, value in where.items():
        mask &= df[column] == value
    assert mask.sum() == 1, where
    return df[mask].iloc[0]


def test_counts_and_clusters(scaling: pd.DataFrame) -> None:
    # data lines, rtx placements + scalability: bert 220 + 100, cifar10 446 + 193,
    # deepspeech2 279 + 114, imagenet 336 + 136, ncf 924 + 420, yolov3 132 + 60 = 3360;
    # quad placements: 28 + 52 + 36 + 40 + 84 + 20 = 260 (scalability-quad repeats them)
    assert len(scaling) == 3360 + 260
    by_cluster = scaling.groupby("cluster")["gpu_type"].unique().map(list).to_dict()
    assert by_cluster == {"sia-quad": ["rtx6000"], "sia-rtx": ["rtx2080ti"]}
    assert (scaling.loc[scaling["cluster"] == "sia-quad", "num_nodes"] == 1).all()
    assert scaling["num_gpus"].max() == 24  # 3 nodes x 8 on rtx
    assert "gpt_pmp" not in set(scaling["application"])  # a formula, not measurements
    assert (scaling["sync_time_s"] <= scaling["step_time_s"]).all()


def test_values(scaling: pd.DataFrame) -> None:
    # bert/placements-rtx.csv line 2: 4,0.2522909343242645,0.006434326052665711,1
    one = _row(scaling, job="bert-squad", gpu_type="rtx2080ti", placement="1", local_batch_size=4)
    assert (one["num_nodes"], one["num_gpus"]) == (1, 1)
    assert (one["step_time_s"], one["sync_time_s"]) == (0.2522909343242645, 0.006434326052665711)
    # bert/placements-rtx.csv line 217: 4,0.8702814877033234,0.6153699226379394,88
    two = _row(scaling, job="bert-squad", placement="88", local_batch_size=4)
    assert (two["num_nodes"], two["num_gpus"], two["step_time_s"]) == (2, 16, 0.8702814877033234)
    # imagenet/placements-quad.csv line 12: 20,2,0.14333279430866241,0.01595195385813713
    quad = _row(scaling, job="resnet50-imagenet", gpu_type="rtx6000", local_batch_size=20,
                placement="2")  # fmt: skip
    assert (quad["num_gpus"], quad["step_time_s"]) == (2, 0.14333279430866241)
    # cifar10/scalability-rtx.csv line 2: 32,0.08104744553565979,0.030526737809181213,3,3
    spread = scaling[
        (scaling["job"] == "resnet18-cifar10")
        & scaling["placement"].isna()
        & (scaling["local_batch_size"] == 32)
        & (scaling["num_nodes"] == 3)
        & (scaling["num_gpus"] == 3)
    ]
    assert spread["step_time_s"].tolist()[0] == 0.08104744553565979
