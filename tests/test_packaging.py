"""The built wheel installs next to Hugging Face `datasets` and both import: perfcast's packages
live under `perfcast.*`, never as generic top-level names. Also: the command line starts without
loading the heavy libraries, and the recorded dataset row counts match the loaders."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest
from conftest import requires_data
from wheel_build import built_wheel, clean_venv, pip_install

ROOT = Path(__file__).resolve().parent.parent
HEAVY = ("pandas", "numpy", "torch", "sklearn", "mlflow", "ray", "pandera", "lightgbm")


def _run(*args: str | Path, **kwargs: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(a) for a in args], check=True, capture_output=True, text=True, **kwargs
    )


@pytest.mark.slow
def test_wheel_installs_next_to_hugging_face_datasets(tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    python = clean_venv(venv)
    pip_install(python, "--no-deps", built_wheel())
    # perfcast's own dependencies come from this environment, appended after the clean venv's
    # site-packages (a .pth line), so the venv's `datasets` and perfcast wheel come first.
    # Written before `datasets` installs: what this environment already has (pandas, pyarrow,
    # numpy...) satisfies it, and only the rest (the package itself, huggingface-hub,
    # multiprocess...) goes into the venv: 6 s of CPU instead of 30 (376 MB unpacked).
    purelib = _run(python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])")
    Path(purelib.stdout.strip(), "deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    pip_install(python, "datasets")  # Hugging Face's, from the index
    env = {**os.environ, "PERFCAST_HOME": str(tmp_path / "home")}
    check = _run(python, "-c", """
import json, datasets, perfcast.datasets
from perfcast.datasets.registry import registry
print(json.dumps({"hf": datasets.__file__, "ours": perfcast.datasets.__file__,
                  "hf_has": hasattr(datasets, "load_dataset"), "n": len(registry())}))
""", env=env, cwd=tmp_path)  # fmt: skip
    seen = json.loads(check.stdout)
    assert seen["hf_has"] and seen["hf"].startswith(str(venv))
    assert seen["ours"].startswith(str(venv)) and "/perfcast/datasets/" in seen["ours"]
    assert seen["n"] >= 10
    help_text = _run(venv / "bin" / "perfcast", "--help", env=env, cwd=tmp_path).stdout
    assert "simulate" in help_text and "datasets" in help_text
    # data files ship in the wheel: the measured tables load from site-packages
    listing = _run(venv / "bin" / "perfcast", "datasets", "show", "measured-cpu-colocation",
                   env=env, cwd=tmp_path).stdout  # fmt: skip
    assert "measured-cpu-colocation" in listing


def test_command_line_starts_without_heavy_libraries() -> None:
    probe = _run(sys.executable, "-c", f"""
import sys
import perfcast.cli
print(",".join(m for m in {HEAVY!r} if m in sys.modules))
""")  # fmt: skip
    assert probe.stdout.strip() == "", f"`perfcast --help` would import {probe.stdout.strip()}"


def test_the_live_scheduler_process_does_not_load_torch() -> None:
    """The scheduler process (`run-trace`, `cluster serve`) creates worker actors but trains
    nothing: torch is the workers' own import (seconds of every scheduler start)."""
    probe = _run(sys.executable, "-c", """
import sys
from perfcast.scheduler.live.executor import RayExecutor
from perfcast.scheduler.live.runner import LiveRunner
from perfcast.scheduler.live.worker import TrainingWorker
print(",".join(m for m in ("torch", "lightgbm", "sklearn") if m in sys.modules))
""")  # fmt: skip
    assert probe.stdout.strip() == "", f"the scheduler process imports {probe.stdout.strip()}"


@pytest.mark.slow
@requires_data
def test_recorded_row_counts_match_the_loaders() -> None:
    from perfcast.datasets.registry import load, recorded_rows, registry

    recorded = recorded_rows()
    actual = {name: len(load(name)) for name in registry()}
    assert recorded == actual, (
        "datasets/row_counts.json is stale; write this into it:\n" + json.dumps(actual, indent=1)
    )
