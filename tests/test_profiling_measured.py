"""The committed measured dataset: registered as measured, valid, small, and consistent."""

from __future__ import annotations

import json

import pandas as pd
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


def test_the_h100_session_is_registered_with_what_it_measured() -> None:
    meta = json.loads((MEASURED_DIR / "h100" / "meta.json").read_text())
    assert meta["device"] == "nvidia h100 80gb hbm3"
    # DuckDB plans are device-independent: the GPU session measures the zoo, pairs and graphs
    assert set(meta["files"]) == {"zoo_scaling.csv", "colocation.csv", "zoo_graphs.csv"}
    for stem in ("zoo-scaling", "colocation", "zoo-graphs"):
        assert registry()[f"measured-h100-{stem}"].measured
        assert len(datasets.load(f"measured-h100-{stem}")) > 0


def test_h100_step_times_grow_with_the_batch_and_carry_nvml_counters() -> None:
    df = datasets.load("measured-h100-zoo-scaling")
    assert (df["gpu_type"] == "nvidia h100 80gb hbm3").all()
    for job, rows in df.groupby("job"):
        rows = rows.sort_values("local_batch_size")
        assert rows["step_time_s"].is_monotonic_increasing, job
        assert rows["peak_mem_mb"].is_monotonic_increasing, job
    # counters were sampled on every profile (values: see docs/profiling.md on short windows)
    assert (df["gpu_samples"] > 0).all() and df["power_w"].between(50, 700).all()


def test_h100_pairs_time_slice_the_device() -> None:
    """Two processes on one GPU without MPS take turns: neither runs faster than alone, and
    a job beside a copy of itself gets the same share as the copy."""
    pairs = datasets.load("measured-h100-colocation")
    speeds = pd.concat([pairs["a_speed"], pairs["b_speed"]])
    assert speeds.between(0.3, 1.0).all()
    assert pairs[["a_gpu_util", "b_gpu_util", "a_mem_util", "b_mem_util"]].notna().all().all()
    twins = pairs[
        (pairs["a_job"] == pairs["b_job"]) & (pairs["a_batch_size"] == pairs["b_batch_size"])
    ]
    assert len(twins) >= 2
    assert ((twins["a_speed"] - twins["b_speed"]).abs() < 0.02).all()
