"""Small things a new user meets (issue 35): a YAML file that is not UTF-8 is a clear error
(exit 2, the file and the byte named), not a UnicodeDecodeError traceback; `recommend` reads at
80 columns in human units."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from conftest import requires_data
from typer.testing import CliRunner

from perfcast.cli import app
from perfcast.errors import PerfcastError
from perfcast.scheduler.live.spec import load_job
from perfcast.scheduler.live.trace import load_trace

runner = CliRunner()
EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
LATIN1 = "job:\n  job: resnet18  # café\n".encode("latin-1")


def _latin1(tmp_path: Path, text: bytes = LATIN1, name: str = "job.yaml") -> Path:
    path = tmp_path / name
    path.write_bytes(text)
    return path


@pytest.mark.parametrize("command", ["recommend", "allocate", "place"])
def test_a_yaml_that_is_not_utf8_is_a_clear_error(tmp_path: Path, command: str) -> None:
    path = _latin1(tmp_path)
    result = runner.invoke(app, [command, str(path)])
    assert result.exit_code == 2, result.output
    assert "not UTF-8" in result.output and "Traceback" not in result.output
    assert not isinstance(result.exception, UnicodeDecodeError)


def test_simulate_names_a_cluster_file_that_is_not_utf8(tmp_path: Path) -> None:
    cluster = _latin1(tmp_path, b"nodes:\n  - {count: 2, gpus: 4, type: v100}  # caf\xe9\n")
    trace = tmp_path / "t.csv"
    trace.write_text("job_id,submit_time_s,num_gpus,duration_s\na,0,1,10\n")
    result = runner.invoke(
        app, ["simulate", "--trace", str(trace), "--cluster", str(cluster), "--policy", "fifo"]
    )
    assert result.exit_code == 2
    flat = " ".join(result.output.split())
    assert f"{cluster} is not UTF-8 text (byte 0xe9 at offset 49)" in flat


def test_live_job_files_that_are_not_utf8_are_perfcast_errors(tmp_path: Path) -> None:
    path = _latin1(tmp_path, b"name: caf\xe9\n")
    with pytest.raises(PerfcastError, match="not UTF-8 text"):
        load_job(path)
    with pytest.raises(PerfcastError, match="not UTF-8 text"):
        load_trace(path, time_scale=1.0, step_s=1.0)


@pytest.fixture
def scaling_champion(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from perfcast.training import trainer

    monkeypatch.setenv("PERFCAST_HOME", str(tmp_path / "home"))
    trainer.train("scaling", "muri-scaling", model="gbm")


@requires_data
def test_recommend_reads_at_80_columns_in_human_units(scaling_champion: None) -> None:
    result = runner.invoke(app, ["recommend", str(EXAMPLES / "job.yaml")], env={"COLUMNS": "80"})
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    table = [line for line in lines if line.startswith("│")]
    assert table and all(len(line) <= 80 for line in lines if line[:1] in "┏│┃└┡")
    for line in table:
        cells = [c.strip() for c in line.strip("│").split("│")]
        assert re.fullmatch(r"[\d.]+ (ms|s|min)", cells[2]), cells  # step
        assert re.fullmatch(r"[\d.]+ (s|min|h|d)", cells[3]), cells  # total time
    assert "step p10–p90 left out at 80 columns" in result.stdout
    assert not re.search(r"\d[eE][+-]?\d", result.stdout)


def test_live_jobs_reads_at_80_columns_and_prints_json(tmp_path: Path) -> None:
    import json

    from perfcast.scheduler.live.store import JobStore

    store = JobStore(tmp_path / "state.db")
    for i, status in enumerate(("running", "failed", "pending")):
        spec = {"name": f"job-{i}", "iterations": 400, "batch_size": 32, "min_step_time_s": 0.05}
        store.add_job(f"job-{i}", spec, submit_time_s=float(i))
        if status != "pending":
            store.update_job(
                f"job-{i}", status=status, gpus=[(0, i), (1, i)], iteration=120,
                samples_done=120 * 32, mean_step_time_s=0.0612,
                metrics={"loss": 0.4321, "accuracy": 0.9},
                error="Traceback ...\nRuntimeError: CUDA out of memory on node 1"
                if status == "failed" else None,
            )  # fmt: skip
    store.close()
    narrow = runner.invoke(app, ["jobs", "--state", str(tmp_path)], env={"COLUMNS": "80"})
    assert narrow.exit_code == 0, narrow.output
    lines = narrow.output.splitlines()
    assert all(len(line) <= 80 for line in lines), narrow.output
    assert "…" not in narrow.output
    flat = " ".join(narrow.output.split())
    assert "left out at 80 columns: --json has them" in flat
    assert re.search(r"│ job-0 +│ running +│", narrow.output)
    # the failed job's error, folded within its column, never cut
    assert re.search(r"│ job-1 +│ failed +│.*│ RuntimeError: CUDA out of +│", narrow.output)
    assert "61.2 ms" in narrow.output  # the measured step time, in human units
    listed = json.loads(runner.invoke(app, ["jobs", "--state", str(tmp_path), "--json"]).output)
    assert [j["job"] for j in listed] == ["job-0", "job-1", "job-2"]
    assert listed[0]["measured_step_s"] == 0.0612 and listed[0]["progress"] == 0.3
    assert listed[1]["error"] == "RuntimeError: CUDA out of memory on node 1"
