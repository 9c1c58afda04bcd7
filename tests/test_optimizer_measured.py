"""A prediction backend that answers from real measurements, for the optimizer's tests.

`MeasuredBackend` looks rows up in Pollux's measured step times (`pollux/traces/<model>/
placements.csv`, 4×T4 per node) and Gavel's measured co-located throughputs
(`gavel/physical_cluster_throughputs.json`), both read through the verified `fetch`. It speaks
`predictor.backend.PredictionBackend`; rows it has no measurement for get NaN. The p10/p90 of a
scaling row are the 10th/90th percentiles of the step times measured over the placements with
the same nodes, GPUs and local batch size.
"""

from __future__ import annotations

import ast
import functools
import json
import re

import numpy as np
import pandas as pd
import pytest

from perfcast.datasets.fetch import fetch, shared_data_available
from perfcast.predictor.backend import PredictionBackend

POLLUX_MODELS = ("bert", "cifar10", "deepspeech2", "imagenet", "ncf", "yolov3")
GAVEL_GPUS = ("k80", "p100", "v100")
SCALING_KEY = ["job", "gpu_type", "num_nodes", "num_gpus", "local_batch_size"]
PAIR_KEY = ["gpu_type", "a_job", "a_batch_size", "b_job", "b_batch_size"]

needs_data = pytest.mark.skipif(
    not shared_data_available(), reason="the shared public datasets are not available"
)


@functools.cache
def pollux_placements() -> pd.DataFrame:
    """Pollux's measured step times as scaling-contract rows (job = model folder name)."""
    frames = []
    for model in POLLUX_MODELS:
        raw = pd.read_csv(fetch(f"pollux/traces/{model}/placements.csv"), dtype={"placement": str})
        digits = raw["placement"].str.replace("0", "")
        frames.append(
            pd.DataFrame(
                {
                    "job": model,
                    "gpu_type": "t4",
                    "num_nodes": digits.str.len().astype("int64"),
                    "num_gpus": digits.map(lambda p: sum(map(int, p))).astype("int64"),
                    "placement": raw["placement"],
                    "local_batch_size": raw["local_bsz"].astype("int64"),
                    "step_time_s": raw["step_time"].astype(float),
                }
            )
        )
    return pd.concat(frames, ignore_index=True)


@functools.cache
def scaling_table() -> pd.DataFrame:
    grouped = pollux_placements().groupby(SCALING_KEY)["step_time_s"]
    return pd.DataFrame(
        {
            "step_time_s": grouped.median(),
            "step_time_s_p10": grouped.quantile(0.1),
            "step_time_s_p90": grouped.quantile(0.9),
        }
    ).reset_index()


_GAVEL_NAME = re.compile(r"^(?P<job>.+) \(batch size (?P<bs>\d+)\)$")


@functools.cache
def gavel_pairs() -> pd.DataFrame:
    """Gavel's measured single-GPU co-locations as interference-contract rows."""
    data = json.loads(fetch("gavel/physical_cluster_throughputs.json").read_text())
    rows = []
    for gpu in GAVEL_GPUS:
        for a_key, others in data[gpu].items():
            a_name, a_scale = ast.literal_eval(a_key)
            a = _GAVEL_NAME.match(a_name)
            if a_scale != 1 or a is None:
                continue
            for b_key, pair in others.items():
                if b_key == "null" or pair == [0, 0]:  # [0, 0]: not measured
                    continue
                b_name, _ = ast.literal_eval(b_key)
                b = _GAVEL_NAME.match(b_name)
                if b is None or b_key not in data[gpu]:
                    continue
                rows.append(
                    {
                        "gpu_type": gpu,
                        "a_job": a["job"],
                        "a_batch_size": int(a["bs"]),
                        "b_job": b["job"],
                        "b_batch_size": int(b["bs"]),
                        "a_speed": pair[0] / others["null"],
                        "b_speed": pair[1] / data[gpu][b_key]["null"],
                    }
                )
    return pd.DataFrame(rows)


class MeasuredBackend:
    """Answers `scaling` and `interference` rows from the measured tables (NaN if unmeasured)."""

    def predict(self, task: str, rows: pd.DataFrame) -> pd.DataFrame:
        if task == "scaling":
            table, key, targets = scaling_table(), SCALING_KEY, ["step_time_s"]
        elif task == "interference":
            table, key, targets = gavel_pairs(), PAIR_KEY, ["a_speed", "b_speed"]
            table = table.assign(**{f"{t}_{q}": table[t] for t in targets for q in ("p10", "p90")})
        else:
            raise ValueError(f"MeasuredBackend has no {task!r} data")
        columns = [c for t in targets for c in (t, f"{t}_p10", f"{t}_p90")]
        left = rows[key].reset_index(drop=True)
        for name in key:  # align dtypes with the table for the merge
            left[name] = left[name].astype(table[name].dtype)
        out = left.merge(table[key + columns], on=key, how="left", validate="many_to_one")
        return out[columns]


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
