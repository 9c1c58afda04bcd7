"""The Gavel loaders against values read by hand from the raw files."""

from __future__ import annotations

import shutil
from pathlib import Path

import pandas as pd
import pytest

from perfcast import datasets
from perfcast.datasets import fetch as fetch_module
from perfcast.datasets.fetch import shared_data_available
from perfcast.errors import ChecksumError

pytestmark = pytest.mark.skipif(
    not shared_data_available(), reason="the public datasets (../shared/datasets) are not here"
)

SIM = "gavel/simulation_throughputs.json"


@pytest.fixture(scope="module")
def scaling() -> pd.DataFrame:
    return datasets.load("gavel-scaling")


def _row(df: pd.DataFrame, **where: object) -> pd.Series:
    mask = pd.Series(True, index=df.index)
    for column, value in where.items():
        mask &= df[column] == value
    assert mask.sum() == 1, where
    return df[mask].iloc[0]


def test_scaling_counts(scaling: pd.DataFrame) -> None:
    # consolidated: 83 configs x 3 GPU types, less 3 zeros (ResNet-50 bs128 on 2/4/8 K80s);
    # spread: configs at scale 2/4/8 (57 on V100 and P100, 51 on K80)
    assert len(scaling) == 3 * 83 - 3 + 57 + 57 + 51
    assert scaling["consolidated"].sum() == 246
    assert not ((~scaling["consolidated"]) & (scaling["num_gpus"] == 1)).any()
    assert set(scaling["gpu_type"]) == {"k80", "p100", "v100"}
    assert scaling["job"].nunique() == 7  # batch size lives in local_batch_size


def test_scaling_hand_checked_rows(scaling: pd.DataFrame) -> None:
    # v100 "('ResNet-50 (batch size 64)', 8)": null 17.303172756892167 (summed worker steps/s)
    packed = _row(scaling, job="resnet50-imagenet", gpu_type="v100", local_batch_size=64,
                  num_gpus=8, consolidated=True)  # fmt: skip
    assert (packed["num_nodes"], packed["placement"]) == (1, "8")
    assert packed["step_time_s"] == pytest.approx(8 / 17.303172756892167)
    # v100_unconsolidated, same key: null 19.757330902241037, one GPU per server
    spread = _row(scaling, job="resnet50-imagenet", gpu_type="v100", local_batch_size=64,
                  num_gpus=8, consolidated=False)  # fmt: skip
    assert (spread["num_nodes"], spread["placement"]) == (8, "11111111")
    assert spread["step_time_s"] == pytest.approx(8 / 19.757330902241037)
    # k80 "('ResNet-18 (batch size 16)', 1)": null 4.795294551566172
    single = _row(scaling, job="resnet18-cifar10", gpu_type="k80", local_batch_size=16, num_gpus=1)
    assert single["step_time_s"] == pytest.approx(1 / 4.795294551566172)


def test_physical_scaling() -> None:
    physical = datasets.load("gavel-physical-scaling")
    assert len(physical) == 3 * 83 - 4  # ResNet-50 bs128 reads 0 on 1/2/4/8 K80s here
    assert physical["consolidated"].all()
    # physical file, k80 "('ResNet-18 (batch size 16)', 1)": null 4.907044539018749
    row = _row(physical, job="resnet18-cifar10", gpu_type="k80", local_batch_size=16, num_gpus=1)
    assert row["step_time_s"] == pytest.approx(1 / 4.907044539018749)


def test_interference() -> None:
    pairs = datasets.load("gavel-interference")
    # non-zero ordered pairs 589/656/636 (k80/p100/v100) incl. 23/24/24 self-pairs
    assert len(pairs) == (589 - 23) // 2 + 23 + (656 - 24) // 2 + 24 + (636 - 24) // 2 + 24
    a = pairs["a_job"] + "/" + pairs["a_batch_size"].astype(str)
    b = pairs["b_job"] + "/" + pairs["b_batch_size"].astype(str)
    first, second = a.where(a <= b, b), b.where(a <= b, a)
    assert not pd.DataFrame({"g": pairs["gpu_type"], "1": first, "2": second}).duplicated().any()
    # k80: ResNet-18 bs16 x bs32 = [2.539979567443098, 3.1201925448827033],
    # solos 4.795294551566172 and 7.175820532538584
    k80 = _row(pairs, gpu_type="k80", a_job="resnet18-cifar10", a_batch_size=16,
               b_job="resnet18-cifar10", b_batch_size=32)  # fmt: skip
    assert k80["a_speed"] == pytest.approx(2.539979567443098 / 4.795294551566172)
    assert k80["b_speed"] == pytest.approx(3.1201925448827033 / 7.175820532538584)
    assert k80["b_solo_throughput"] == pytest.approx(7.175820532538584)
    # v100: ResNet-18 bs64 x ResNet-50 bs16 = [17.015945476820608, 8.676110745759736],
    # solos 24.093231895382736 and 11.396129065315943
    v100 = _row(pairs, gpu_type="v100", a_job="resnet18-cifar10", a_batch_size=64,
                b_job="resnet50-imagenet", b_batch_size=16)  # fmt: skip
    assert v100["a_speed"] == pytest.approx(17.015945476820608 / 24.093231895382736)
    assert v100["b_speed"] == pytest.approx(8.676110745759736 / 11.396129065315943)


def test_traces() -> None:
    traces = datasets.load("gavel-traces").set_index("job_id", drop=False)
    # 15551 trace lines, less 1548 msr jobs on a (type, GPU count) Gavel never measured
    assert len(traces) == 14003
    assert traces["trace"].nunique() == 15 + 8
    # msr/seed=0/795a4c.trace line 2: Recommendation (batch size 8192) ... 1066  1511.000000  1;
    # V100 solo throughput of that config 2.841510364354536
    rec = traces.loc["msr/seed=0/795a4c/1"]
    assert (rec["submit_time_s"], rec["num_gpus"], rec["vc"]) == (1511.0, 1, "795a4c")
    assert (rec["job"], rec["batch_size"]) == ("autoencoder-ml20m", 8192)
    assert rec["duration_s"] == pytest.approx(1066 / 2.841510364354536)
    # physical_cluster/small_test.trace line 1: Transformer (batch size 128) ... 346  2 ... 0;
    # V100 "('Transformer (batch size 128)', 2)" 10.069238394742342 summed worker steps/s
    tr = traces.loc["physical_cluster/small_test/0"]
    assert (tr["submit_time_s"], tr["num_gpus"], tr["iterations"]) == (0.0, 2, 173)
    assert tr["duration_s"] == pytest.approx(346 / 10.069238394742342)
    # every job maps to a gavel-scaling row (same job name, batch size, GPU count on V100)
    scaling = datasets.load("gavel-scaling")
    keys = set(zip(scaling["job"], scaling["local_batch_size"], scaling["num_gpus"], strict=True))
    sizes = zip(traces["job"], traces["batch_size"], traces["num_gpus"], strict=True)
    assert all(key in keys for key in sizes)


def test_tampered_file_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    copy = tmp_path / SIM
    copy.parent.mkdir(parents=True)
    shutil.copyfile(fetch_module.fetch(SIM), copy)
    data = bytearray(copy.read_bytes())
    data[100] = ord("9") if data[100] != ord("9") else ord("8")
    copy.write_bytes(bytes(data))
    monkeypatch.setenv("PERFCAST_DATA_DIR", str(tmp_path))
    fetch_module._verified.cache_clear()
    try:
        with pytest.raises(ChecksumError, match="does not match the manifest"):
            fetch_module.fetch(SIM)
        with pytest.raises(ChecksumError):
            datasets.load("gavel-interference", use_cache=False)
    finally:
        fetch_module._verified.cache_clear()
