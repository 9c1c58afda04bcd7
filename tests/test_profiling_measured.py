"""The committed measured dataset: registered as measured, valid, small, and consistent."""

from __future__ import annotations

import json

import pytest

from perfcast import datasets
from perfcast.datasets.registry import registry
from perfcast.datasets.sources.measured import MEASURED_DIR


@pytest.fixture(autouse=True)
def fresh_home(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("PERFCAST_HOME", str(tmp_path))


def test_measured_datasets_are_registered_valid_and_small() -> None:
    meta = json.loads((MEASURED_DIR / "cpu" / "meta.json").read_text())
    specs = {n: s for n, s in registry().items() if n.startswith("measured-cpu-")}
    # the profile-dataset run wrote the files its meta.json lists; the TPC-H sweep is a separate
    # measurement (perfcast profile query) registered beside them
    from_meta = {
        n for n, s in specs.items() if any(f.endswith(tuple(meta["files"])) for f in s.files)
    }
    assert len(from_meta) == len(meta["files"]) == 4
    assert set(specs) - from_meta == {"measured-cpu-tpch-sweep"}
    for name, spec in specs.items():
        assert spec.measured and spec.license == "Apache-2.0"
        assert spec.source == f"measured:{meta['host']}"
        assert len(datasets.load(name)) > 0
    total = sum(p.stat().st_size for p in MEASURED_DIR.rglob("*") if p.is_file())
    assert total < 5 * 2**20


def test_measured_scaling_is_self_consistent() -> None:
    df = datasets.load("measured-cpu-zoo-scaling")
    assert (df["gpu_type"] == "cpu").all()
    product = df["throughput_samples_s"] * df["step_time_s"]
    assert ((product - df["local_batch_size"]).abs() < 1e-6 * df["local_batch_size"]).all()
    assert df["gpu_util"].isna().all()  # measured without a GPU: missing, never zero
    assert (df["step_time_p10_s"] <= df["step_time_s"]).all()
    pairs = datasets.load("measured-cpu-colocation")
    assert (pairs["a_speed"] > 0).all() and pairs["a_gpu_util"].isna().all()
