"""`min_time` ranks on what the optimizer can vouch for: the p90 total time, so of two
configurations with the same median time the measured one (narrow interval) comes before the
extrapolated one (wide interval), and each reason says which its step time is."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from perfcast.optimizer import candidates, configs, reasons, scoring
from perfcast.predictor.base import CheckedRows

BATCH = 32
WORK = scoring.Work(samples=3.2e6)
POOL = candidates.GpuPool("a100", gpus_per_node=8, nodes=1)

# (step time p10, p50, p90 in seconds, flags) per GPU count, at BATCH per GPU. 4 and 8 GPUs
# have the same median throughput (1600 samples/s: 2000 s for WORK); 4 GPUs' step time is
# extrapolated (a new job, p90 3000 s), 8 GPUs' measured (p90 2200 s). One GPU is the
# efficiency's reference, outside the search.
STEPS = {
    1: (0.036, 0.04, 0.044, ""),
    4: (0.06, 0.08, 0.12, "new_job"),
    8: (0.144, 0.16, 0.176, ""),
}


class FakeBackend:
    """A `PredictionBackend` answering `STEPS` by each candidate's GPU count, flags as text
    (as `predict` answers)."""

    def __init__(self, steps: dict = STEPS) -> None:
        self.steps = steps

    def predict(self, task: str, rows: pd.DataFrame) -> pd.DataFrame:
        assert task == "scaling"
        answers = [self.steps[int(g)] for g in rows["num_gpus"]]
        columns = ["step_time_s_p10", "step_time_s", "step_time_s_p90", "flags"]
        out = pd.DataFrame(answers, columns=columns, index=rows.index)
        out["flags"] = out["flags"].astype("str")
        return out


class CategoricalFakeBackend(FakeBackend):
    """... flags a categorical, as the in-process predictors answer `CheckedRows`."""

    def predict(self, task: str, rows: pd.DataFrame) -> pd.DataFrame:
        assert isinstance(rows, CheckedRows)  # the optimizer's candidates, checked once
        out = super().predict(task, rows)
        out["flags"] = out["flags"].astype("category")
        return out


def _recommend(backend: FakeBackend, **kwargs) -> configs.Recommendation:
    return configs.recommend(
        {"job": "my-new-model"},
        [POOL],
        backend,
        local_batch_sizes=[BATCH],
        work=WORK,
        gpu_counts=[4, 8],
        **kwargs,
    )


@pytest.mark.parametrize(
    "backend", [FakeBackend(), CategoricalFakeBackend()], ids=["text", "categorical"]
)
def test_min_time_puts_the_measured_configuration_before_an_extrapolated_one_of_equal_p50(
    backend,
) -> None:
    top = _recommend(backend, top_k=2).top
    # the same median time: the median (then fewer GPUs) would have put 4 GPUs first
    np.testing.assert_allclose(top["total_time_s"], [2000.0, 2000.0])
    assert top["num_gpus"].tolist() == [8, 4]
    np.testing.assert_allclose(top["total_time_s_p90"], [2200.0, 3000.0])
    assert top["flags"].tolist() == ["", "new_job"]
    first, second = top["reason"]
    assert first.startswith("fastest at p90: 8×a100") and first.endswith("; step time measured")
    assert "33.3 min (p90 36.7 min)" in first  # 2,000 s, p90 2,200 s, in human units
    assert second.startswith("#2: 4×a100") and second.endswith("; step time extrapolated")
    assert "(+36% p90 time vs #1)" in second


def test_ties_on_the_p90_time_go_to_fewer_gpus() -> None:
    same = {**STEPS, 4: (0.06, 0.08, 0.088, "extrapolated_gpus")}  # p90 2200 s, as 8 GPUs'
    top = _recommend(FakeBackend(same), top_k=2).top
    assert top["num_gpus"].tolist() == [4, 8]
    assert top["reason"].iloc[0].endswith("; step time near a measurement")


def test_the_median_still_ranks_the_other_objectives() -> None:
    top = _recommend(FakeBackend(), objective="max_throughput_per_gpu", top_k=2).top
    assert top["num_gpus"].tolist() == [4, 8]  # 400 against 200 samples/s per GPU


def test_no_efficiency_above_100_percent_is_shown() -> None:
    """A predicted (or measured) step time faster than one GPU's at the same local batch
    scores above perfect scaling; the column keeps it, the reason shows at most 100%."""
    faster = {**STEPS, 4: (0.02, 0.03, 0.04, "")}
    top = _recommend(FakeBackend(faster), top_k=2).top
    row = top.set_index("num_gpus").loc[4]
    assert row["scaling_efficiency"] == pytest.approx(0.04 / 0.03)
    assert "100% scaling efficiency" in row["reason"]
    assert "133%" not in row["reason"]


@pytest.mark.parametrize(
    ("flags", "said"),
    [
        ("", "; step time measured"),
        ("extrapolated_batch", "; step time near a measurement"),
        ("extrapolated_gpus", "; step time near a measurement"),
        ("extrapolated_gpus,extrapolated_batch", "; step time extrapolated"),
        ("new_job", "; step time extrapolated"),
        ("new_gpu_type", "; step time extrapolated"),
        ("unmeasured_config", "; step time extrapolated"),
        ("no_interconnect_facts", "; step time extrapolated"),
        ("unmeasured_config,extrapolated_gpus", "; step time extrapolated"),
        ("monotonic_guard", "; step time extrapolated"),
        (None, ""),
        (math.nan, ""),
        (pd.NA, ""),
    ],
)
def test_provenance_from_flags(flags, said) -> None:
    assert reasons._provenance(flags) == said


def test_a_backend_without_flags_says_nothing_of_provenance() -> None:
    class Unflagged(FakeBackend):
        def predict(self, task: str, rows: pd.DataFrame) -> pd.DataFrame:
            return super().predict(task, rows).drop(columns="flags")

    top = _recommend(Unflagged(), top_k=2).top
    assert "flags" not in top and not top["reason"].str.contains("step time").any()
    assert top["num_gpus"].tolist() == [8, 4]  # still ranked by the p90 time
