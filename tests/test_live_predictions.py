"""The live scheduler's `--predictor`: which backend a policy gets, what it refuses (before
Ray starts), and the rows it asks for on logical GPUs."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from perfcast.scheduler.live.predictions import (
    LiveRowsBackend,
    PredictorChoiceError,
    choose_predictor,
    live_predictor,
)
from perfcast.scheduler.policies import make_policy

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize(
    "policy,given,chosen",
    [
        ("elastic", None, "inprocess"),  # cannot decide without: the default backend
        ("srtf-predicted", "http", "http"),
        ("fifo", None, None),  # needs none
        ("gandiva", None, None),  # time-slices without them, packs only with them
        ("gandiva", "inprocess", "inprocess"),
        ("fifo", "none", None),
    ],
)
def test_each_policy_gets_the_backend_it_needs(policy, given, chosen) -> None:
    assert choose_predictor(make_policy(policy), given) == chosen


@pytest.mark.parametrize(
    "policy,given,message",
    [
        ("elastic", "none", "'elastic' needs predictions"),
        ("fifo", "oracle", "no true step times"),
        ("fifo", "magic", "unknown --predictor 'magic'"),
    ],
)
def test_a_predictor_the_run_cannot_use_is_refused_by_name(policy, given, message) -> None:
    with pytest.raises(PredictorChoiceError, match=message):
        choose_predictor(make_policy(policy), given)


class RecordingBackend:
    def __init__(self) -> None:
        self.asked: list[pd.DataFrame] = []

    def predict(self, task: str, rows: pd.DataFrame) -> pd.DataFrame:
        self.asked.append(rows)
        return pd.DataFrame({"step_time_s": [1.0] * len(rows)})


def test_logical_gpus_are_asked_for_as_the_named_gpu_type() -> None:
    inner = RecordingBackend()
    rows = pd.DataFrame({"job": ["mlp", "cnn"], "gpu_type": ["logical", "a100"]})
    LiveRowsBackend(inner, "v100").predict("scaling", rows)
    assert inner.asked[0]["gpu_type"].tolist() == ["v100", "a100"]  # a named type stays
    LiveRowsBackend(inner, None).predict("scaling", rows)
    assert inner.asked[1]["gpu_type"].tolist() == ["logical", "a100"]


def test_no_backend_no_predictor_and_a_backend_becomes_the_policys_predictor() -> None:
    assert live_predictor(None, gpu_type=None, gpus_per_node=4) is None
    predictor = live_predictor(RecordingBackend(), gpu_type="v100", gpus_per_node=4)
    assert isinstance(predictor.backend, LiveRowsBackend)


@pytest.mark.parametrize(
    "options,message",
    [
        (["--policy", "elastic", "--predictor", "none"], "'elastic' needs predictions"),
        (["--policy", "fifo", "--predictor", "oracle"], "no true step times"),
    ],
)
def test_run_trace_refuses_before_ray_starts(tmp_path, options, message) -> None:
    perfcast = str(Path(sys.executable).parent / "perfcast")
    trace = str(ROOT / "examples" / "live_trace.yaml")
    done = subprocess.run(
        [perfcast, "run-trace", trace, *options, "--state", str(tmp_path)],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 2, done.stdout + done.stderr
    assert message in done.stdout + done.stderr
    assert "Ray" not in done.stdout + done.stderr  # refused before a cluster was started
