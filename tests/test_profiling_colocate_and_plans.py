"""Co-located pairs and DuckDB TPC-H plans, measured for real on tiny inputs."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd
import psutil
import pytest
import torch

from perfcast.datasets.contract import validate
from perfcast.errors import PerfcastError
from perfcast.features.profiling import colocate as colocate_module
from perfcast.features.profiling import query_plans
from perfcast.features.profiling.colocate import (
    JobSpec,
    WindowSettings,
    colocate,
    gpu_sharing,
)


def test_colocated_tiny_models_write_valid_interference_rows() -> None:
    a, b = JobSpec.parse("mlp-w32-d1-i16:16"), JobSpec.parse("ncf-w8-d1-i2:32")
    frame = colocate([(a, b)], WindowSettings(warmup=1, duration_s=0.6))
    row = validate(frame, "interference").iloc[0]
    assert (row["gpu_type"], row["a_job"], row["b_batch_size"]) == ("cpu", a.job, 32)
    for side in "ab":
        speed = row[f"{side}_colocated_throughput"] / row[f"{side}_solo_throughput"]
        assert row[f"{side}_speed"] == pytest.approx(speed)
        assert 0 < row[f"{side}_speed"] < 3
        assert math.isnan(row[f"{side}_gpu_util"]) and math.isnan(row[f"{side}_mem_util"])
        assert row[f"{side}_mem_mb"] > 0 and row[f"{side}_cpu_util"] > 0
    assert pd.isna(row["sharing"])  # cores are shared by the OS: no GPU sharing mode


def test_a_pair_is_measured_between_solo_runs_and_its_solo_is_their_mean(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """On a machine whose background load drifts, the solo throughput a pair is divided by is
    the mean of the solo windows just before and just after it, not one measured earlier."""
    a, b = JobSpec.parse("mlp-w32-d1-i16:16"), JobSpec.parse("ncf-w8-d1-i2:32")
    counters = {"gpu_util": 1.0, "mem_util": 2.0, "mem_mb": 3.0, "cpu_util": 4.0, "power_w": 5.0}
    windows = iter([  # in the order run: a alone, b alone, together, a alone, b alone
        {"solo": {"throughput": 10.0} | counters},
        {"solo": {"throughput": 40.0} | counters},
        {"a": {"throughput": 6.0} | counters, "b": {"throughput": 30.0} | counters},
        {"solo": {"throughput": 14.0} | counters},
        {"solo": {"throughput": 20.0} | counters},
    ])  # fmt: skip
    runs: list[dict] = []

    def run(jobs: dict, settings: WindowSettings) -> dict:
        runs.append(jobs)
        return next(windows)

    monkeypatch.setattr(colocate_module, "_run_processes", run)
    row = colocate([(a, b)], WindowSettings()).iloc[0]
    assert runs == [{"solo": a}, {"solo": b}, {"a": a, "b": b}, {"solo": a}, {"solo": b}]
    assert (row["a_solo_throughput"], row["b_solo_throughput"]) == (12.0, 30.0)
    assert (row["a_speed"], row["b_speed"]) == (0.5, 1.0)


def test_a_gpu_pair_says_whether_an_mps_server_ran(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without MPS two processes take turns on a GPU (`time-slice`, the rule the interference
    predictor applies); with an MPS server their kernels may run at once (`mps`)."""

    class Proc:
        def __init__(self, name: str | None) -> None:
            self.info = {"name": name}

    running = [Proc("python3"), Proc(None)]
    monkeypatch.setattr(psutil, "process_iter", lambda attrs: iter(running))
    assert gpu_sharing(torch.device("cuda", 0)) == "time-slice"
    running.append(Proc("nvidia-cuda-mps-server"))
    assert gpu_sharing(torch.device("cuda", 0)) == "mps"
    assert gpu_sharing(torch.device("cpu")) is None


def test_job_spec_is_checked() -> None:
    with pytest.raises(PerfcastError, match="NAME:BATCH"):
        JobSpec.parse("mlp")
    with pytest.raises(PerfcastError, match="unknown zoo model"):
        JobSpec.parse("vgg:8")


@pytest.fixture(scope="module")
def tpch(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return query_plans.generate_tpch(0.002, tmp_path_factory.mktemp("tpch"))


def test_tpch_plan_validates_as_contract_plan(tpch: Path) -> None:
    con = query_plans.connect(tpch)
    orders = con.execute("select count(*) from orders").fetchone()[0]
    assert orders == 3000  # TPC-H: 1,500,000 orders per unit of scale
    plan = query_plans.profile_query(con, 3, scale=0.002, threads=2, memory_limit_mb=128)
    clean = validate(plan, "plan")
    assert clean["sample_id"].nunique() == 1
    assert (clean["threads"] == 2).all() and (clean["memory_limit_mb"] == 128).all()
    ops = set(clean["op"])
    assert "hash_join" in ops and "table_scan" in ops
    # a tree: every operator but the root feeds exactly one parent
    children = [c for text in clean["inputs"] for c in json.loads(text)]
    assert sorted(children) == list(range(1, len(clean)))
    assert clean.loc[0, "cardinality"] == 10  # LIMIT 10
    assert clean["latency_ms"].sum() <= clean["e2e_latency_ms"].iloc[0] * 1.5


def test_settings_change_the_run(tpch: Path) -> None:
    con = query_plans.connect(tpch)
    one = query_plans.profile_query(con, 6, scale=0.002, threads=1, memory_limit_mb=None)
    assert (
        one["sample_id"].iloc[0]
        != query_plans.profile_query(con, 6, scale=0.002, threads=2, memory_limit_mb=None)[
            "sample_id"
        ].iloc[0]
    )
    assert math.isnan(one["memory_limit_mb"].iloc[0])
    with pytest.raises(PerfcastError, match="unknown TPC-H query"):
        query_plans.profile_query(con, 99, scale=0.002, threads=1, memory_limit_mb=None)
