"""The live CLI's input handling and trace loading (no cluster needed)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from perfcast.scheduler.live.spec import JobSpecError, load_job
from perfcast.scheduler.live.store import JobStore
from perfcast.scheduler.live.trace import load_trace

PERFCAST = str(Path(sys.executable).parent / "perfcast")


def perfcast(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "COLUMNS": "200"}  # rich tables: no truncated cells
    return subprocess.run([PERFCAST, *args], capture_output=True, text=True, timeout=120, env=env)


def test_submit_jobs_and_job_commands(tmp_path):
    state = str(tmp_path / "state")
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\niterations: 0\n")
    done = perfcast("submit", str(bad), "--state", state)
    assert done.returncode == 2 and "iterations" in done.stderr
    good = tmp_path / "job.yaml"
    good.write_text("name: demo\niterations: 10\nbatch_size: 8\n")
    assert perfcast("submit", str(good), "--id", "demo-1", "--state", state).returncode == 0
    again = perfcast("submit", str(good), "--id", "demo-1", "--state", state)
    assert again.returncode == 2 and "already exists" in again.stderr
    listing = perfcast("jobs", "--state", state)
    assert "demo-1" in listing.stdout and "pending" in listing.stdout
    unknown = perfcast("job", "suspend", "nope", "--state", state)
    assert unknown.returncode == 2 and "no job 'nope'" in unknown.stderr
    # a job that failed: its error in the table (last line) and in full in `job show`
    store = JobStore(Path(state) / "state.db")
    error = 'Traceback (most recent call last):\n  File "x.py"\nTypeError: bad entrypoint'
    store.update_job("demo-1", status="failed", error=error)
    store.log("demo-1", "failed", "4 failures in a row")
    listing = perfcast("jobs", "--state", state)
    assert "failed" in listing.stdout and "TypeError: bad entrypoint" in listing.stdout
    shown = perfcast("job", "show", "demo-1", "--state", state)
    assert shown.returncode == 0 and 'File "x.py"' in shown.stdout
    assert "4 failures in a row" in shown.stdout
    assert perfcast("job", "show", "nope", "--state", state).returncode == 2


def test_trace_rows_become_scaled_jobs(tmp_path):
    trace = tmp_path / "t.csv"
    pd.DataFrame(
        {"job_id": ["b", "a"], "submit_time_s": [200.0, 100.0], "num_gpus": [2, 0],
         "duration_s": [1000.0, 10.0]}
    ).to_csv(trace, index=False)  # fmt: skip
    jobs = load_trace(trace, time_scale=0.01, step_s=0.05)
    assert [j for j, _ in jobs] == ["a", "b"]
    a, b = (spec for _, spec in jobs)
    assert (a.submit_time_s, a.num_gpus, a.iterations) == (0.0, 1, 2)
    assert (b.submit_time_s, b.num_gpus, b.iterations, b.batch_size) == (1.0, 2, 200, 64)
    assert b.min_step_time_s == 0.05
    duplicate = tmp_path / "d.yaml"
    duplicate.write_text("- {id: x, name: x, iterations: 1}\n- {id: x, name: y, iterations: 1}\n")
    with pytest.raises(JobSpecError, match="duplicate id 'x'"):
        load_trace(duplicate, time_scale=1, step_s=1)


def test_the_live_examples_are_valid_jobs():
    root = Path(__file__).resolve().parents[1] / "examples"
    job = load_job(root / "live_job.yaml")
    assert job.device == "cpu" and job.config["lr_step_every"] == 500 and job.max_restarts == 3
    jobs = load_trace(root / "live_trace.yaml", time_scale=1, step_s=1)
    assert [j for j, _ in jobs] == ["a", "b", "c", "d", "e"]
    assert jobs[2][1].config == {"lr_step_every": 100}
