"""The data contract refuses broken tables with the file, row and column, and the CLI exits 2."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
from typer.testing import CliRunner

from perfcast import datasets
from perfcast.cli import app
from perfcast.errors import ContractError

runner = CliRunner()

GOOD_SCALING = pd.DataFrame(
    {
        "job": ["resnet50", "resnet50"],
        "gpu_type": ["v100", "v100"],
        "num_nodes": [1, 2],
        "num_gpus": [1, 4],
        "placement": ["1", "22"],
        "local_batch_size": [32, 32],
        "step_time_s": [0.25, 0.31],
    }
)


def _write(tmp_path: Path, df: pd.DataFrame, name: str = "t.csv") -> Path:
    path = tmp_path / name
    df.to_csv(path, index=False)
    return path


def test_valid_table_passes_and_cli_says_ok(tmp_path: Path) -> None:
    path = _write(tmp_path, GOOD_SCALING)
    result = runner.invoke(app, ["datasets", "validate", str(path), "--kind", "scaling"])
    assert result.exit_code == 0, result.output
    assert "ok: 2 rows" in result.output


@pytest.mark.parametrize(
    ("mutate", "row", "column"),
    [
        (lambda df: df.drop(columns=["step_time_s"]), None, "step_time_s"),
        (lambda df: df.assign(num_gpus=["1", "four"]), 2, "num_gpus"),
        (lambda df: df.assign(step_time_s=[0.25, -0.31]), 2, "step_time_s"),
        (lambda df: df.assign(step_time_s=[float("nan"), 0.31]), 1, "step_time_s"),
        (lambda df: df.assign(placement=["1", "32"]), 2, "placement"),
    ],
    ids=["missing-column", "wrong-type", "negative-target", "nan-target", "bad-placement"],
)
def test_broken_scaling_tables_name_row_and_column(tmp_path: Path, mutate, row, column) -> None:
    path = _write(tmp_path, mutate(GOOD_SCALING.copy()))
    with pytest.raises(ContractError) as err:
        datasets.read_table(path, kind="scaling")
    assert err.value.file == str(path)
    assert err.value.column == column
    assert err.value.row == row
    result = runner.invoke(app, ["datasets", "validate", str(path), "--kind", "scaling"])
    assert result.exit_code == 2


def test_empty_table_is_refused(tmp_path: Path) -> None:
    path = _write(tmp_path, GOOD_SCALING.iloc[:0])
    with pytest.raises(ContractError, match="empty"):
        datasets.read_table(path, kind="scaling")


def test_malformed_graph_json_is_refused(tmp_path: Path) -> None:
    node = {
        "sample_id": "s1", "model": "mlp", "device": "cpu", "mode": "train", "batch_size": 8,
        "e2e_latency_ms": 1.5, "node_id": 0, "op": "linear", "input_shapes": "[[8, 4]]",
        "output_shape": "[8, 2]", "flops": 128.0, "bytes": 200.0, "inputs": "[0,",
    }  # fmt: skip
    path = _write(tmp_path, pd.DataFrame([node]))
    with pytest.raises(ContractError) as err:
        datasets.read_table(path, kind="graph")
    assert err.value.column == "inputs" and err.value.row == 1


def test_interference_speed_must_be_positive() -> None:
    row = {"gpu_type": "v100", "a_job": "a", "b_job": "b", "a_batch_size": 1, "b_batch_size": 1,
           "a_speed": 0.0, "b_speed": 0.9}  # fmt: skip
    with pytest.raises(ContractError) as err:
        datasets.validate(pd.DataFrame([row]), "interference")
    assert err.value.column == "a_speed"


def test_interference_sharing_is_one_of_the_modes_or_absent() -> None:
    row = {"gpu_type": "h100", "a_job": "a", "b_job": "b", "a_batch_size": 1, "b_batch_size": 1,
           "a_speed": 0.5, "b_speed": 0.5}  # fmt: skip
    for sharing in ("time-slice", "mps", "mig", None):
        datasets.validate(pd.DataFrame([row | {"sharing": sharing}]), "interference")
    with pytest.raises(ContractError) as err:
        datasets.validate(pd.DataFrame([row | {"sharing": "round-robin"}]), "interference")
    assert err.value.column == "sharing"


def test_nothing_is_written_from_a_broken_table(tmp_path: Path) -> None:
    out = tmp_path / "out.parquet"
    with pytest.raises(ContractError):
        datasets.write_table(GOOD_SCALING.assign(step_time_s=-1.0), out, kind="scaling")
    assert list(tmp_path.iterdir()) == []


def test_unknown_dataset_and_kind_exit_2(tmp_path: Path) -> None:
    assert runner.invoke(app, ["datasets", "show", "no-such-dataset"]).exit_code == 2
    path = _write(tmp_path, GOOD_SCALING)
    result = runner.invoke(app, ["datasets", "validate", str(path), "--kind", "nope"])
    assert result.exit_code == 2


def test_datasets_list_json_covers_every_kind() -> None:
    if not datasets.fetch.shared_data_available():
        pytest.skip("public datasets not available")
    result = runner.invoke(app, ["datasets", "list", "--json"])
    assert result.exit_code == 0, result.output
    rows = json.loads(result.output.strip().splitlines()[-1])
    assert {"name", "kind", "rows", "license"} <= set(rows[0])
    assert all(r["rows"] > 0 for r in rows)
    assert {"scaling", "trace", "graph"} <= {r["kind"] for r in rows}
