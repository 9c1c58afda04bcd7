"""The measured backend the optimizer's tests decide with (tests/conftest.py) answers what
was measured, and NaN where nothing was."""

from __future__ import annotations

import numpy as np
import pandas as pd
from conftest import MeasuredBackend, needs_data, pollux_placements

from perfcast.predictor.backend import PredictionBackend


@needs_data
def test_measured_backend_is_a_prediction_backend_answering_measured_values() -> None:
    backend = MeasuredBackend()
    assert isinstance(backend, PredictionBackend)
    raw = pollux_placements()
    single = raw[(raw["num_gpus"] == 1)].head(5)
    got = backend.predict("scaling", single)
    assert len(got) == len(single)
    # one placement per single-GPU configuration: the answer is the measured step time
    np.testing.assert_allclose(got["step_time_s"], single["step_time_s"])
    assert (got["step_time_s_p10"] <= got["step_time_s"]).all()
    assert (got["step_time_s"] <= got["step_time_s_p90"]).all()


@needs_data
def test_measured_backend_returns_nan_for_unmeasured_rows() -> None:
    rows = pd.DataFrame(
        [{"job": "imagenet", "gpu_type": "h100", "num_nodes": 1, "num_gpus": 1,
          "local_batch_size": 20}]
    )  # fmt: skip
    assert MeasuredBackend().predict("scaling", rows)["step_time_s"].isna().all()
