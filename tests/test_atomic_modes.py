"""Atomic writes give files the mode a plain `open` would (issue 35: `simulate --out` files were
0600, the temporary file's), keep an existing file's mode, and give a secret the mode asked."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from perfcast.atomic import atomic_write_text


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.fixture
def umask_022():
    before = os.umask(0o022)
    yield
    os.umask(before)


def test_a_new_file_gets_the_umasks_mode(tmp_path: Path, umask_022: None) -> None:
    assert _mode(atomic_write_text(tmp_path / "metrics.json", "{}")) == 0o644
    os.umask(0o027)
    assert _mode(atomic_write_text(tmp_path / "other.json", "{}")) == 0o640


def test_a_replaced_file_keeps_its_mode_and_a_secret_gets_its_own(
    tmp_path: Path, umask_022: None
) -> None:
    path = tmp_path / "shared.csv"
    path.write_text("a\n")
    path.chmod(0o664)
    atomic_write_text(path, "b\n")
    assert _mode(path) == 0o664 and path.read_text() == "b\n"
    token = atomic_write_text(tmp_path / "token", "secret", permissions=0o600)
    assert _mode(token) == 0o600


def test_simulate_out_files_are_readable_by_others(tmp_path: Path, umask_022: None) -> None:
    from typer.testing import CliRunner

    from perfcast.cli import app

    trace = tmp_path / "t.csv"
    trace.write_text("job_id,submit_time_s,num_gpus,duration_s\na,0,1,10\nb,5,2,20\n")
    out = tmp_path / "run"
    result = CliRunner().invoke(
        app, ["simulate", "--trace", str(trace), "--cluster", "1x2:v100", "--policy", "fifo",
              "--out", str(out)],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    written = sorted(out.iterdir())
    assert {p.name for p in written} >= {"metrics.json", "jobs.csv", "report.html"}
    assert all(_mode(p) == 0o644 for p in written), {p.name: oct(_mode(p)) for p in written}
