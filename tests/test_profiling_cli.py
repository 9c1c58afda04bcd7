"""`perfcast profile ...`: every output file validates as its contract kind."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from typer.testing import CliRunner

from perfcast.datasets import read_table
from perfcast.errors import PerfcastError
from perfcast.features.cli import app

runner = CliRunner()


def _ok(args: list[str]) -> None:
    result = runner.invoke(app, args)
    assert result.exit_code == 0, (result.output, result.exception)


def test_run_writes_scaling_rows(tmp_path: Path) -> None:
    out = tmp_path / "mlp.csv"
    _ok(["run", "--model", "mlp", "--width", "32", "--depth", "2", "--input-size", "16",
         "--batch-sizes", "4,8", "--steps", "5", "--warmup", "1", "--threads", "1",
         "--out", str(out)])  # fmt: skip
    df = read_table(out, kind="scaling")
    assert df["job"].tolist() == ["mlp-w32-d2-i16"] * 2
    assert df["local_batch_size"].tolist() == [4, 8] and (df["gpu_type"] == "cpu").all()
    assert df["source"].str.startswith("measured:").all()
    # forward FLOPs per sample by hand: 2*(16*32 + 32*32 + 32*10) + relu 2*32
    assert df["gflops_per_sample"].iloc[0] * 1e9 == pytest.approx(2 * 1856 + 64)
    assert all(math.isnan(v) for v in df["gpu_util"])


def test_graph_and_query_write_valid_tables(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("PERFCAST_HOME", str(tmp_path / "home"))
    graph = tmp_path / "g.parquet"
    _ok(["graph", "--model", "bert-encoder", "--width", "32", "--depth", "1",
         "--input-size", "8", "--batch-size", "2", "--steps", "2", "--threads", "1",
         "--out", str(graph)])  # fmt: skip
    g = read_table(graph, kind="graph")
    assert {"linear", "bmm", "softmax", "layernorm", "embedding"} <= set(g["op"])
    assert (g["seq_len"] == 8).all()
    plans = tmp_path / "plans.csv"
    _ok(["query", "--queries", "1,6", "--scale", "0.002", "--threads", "1,2",
         "--memory-limits", "64", "--out", str(plans)])  # fmt: skip
    p = read_table(plans, kind="plan")
    assert p["sample_id"].nunique() == 4


def test_colocate_writes_an_interference_row(tmp_path: Path) -> None:
    out = tmp_path / "pair.csv"
    result = runner.invoke(
        app, ["colocate", "--a", "mlp-w16-d1-i8:8", "--b", "mlp-w16-d1-i8:8", "--window", "0.5",
              "--warmup", "1", "--out", str(out)],
    )  # fmt: skip
    assert result.exit_code == 0, (result.output, result.exception)
    assert len(read_table(out, kind="interference")) == 1
    # piped, it says what it measures before it takes its time (issue 35: it was silent)
    lines = result.output.splitlines()
    assert lines[0] == "mlp-w16-d1-i8:8 beside mlp-w16-d1-i8:8 (solo runs, then together) ..."
    assert lines[1].startswith("speeds: ") and "" not in lines


def test_bad_options_are_user_errors(tmp_path: Path) -> None:
    result = runner.invoke(app, ["run", "--model", "mlp", "--batch-sizes", "8,x",
                                 "--out", str(tmp_path / "x.csv")])  # fmt: skip
    assert isinstance(result.exception, PerfcastError)
    assert "--batch-sizes" in str(result.exception)
    result = runner.invoke(app, ["graph", "--model", "mlp", "--mode", "eval",
                                 "--out", str(tmp_path / "x.csv")])  # fmt: skip
    assert isinstance(result.exception, PerfcastError)
    assert not (tmp_path / "x.csv").exists()
