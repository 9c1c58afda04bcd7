"""The live prediction error (serving/live_error.py) as properties, on jobs written to the live
scheduler's store the way the executor writes them, predicted by a champion stand-in that
answers the step times measured here (`measured-cpu-zoo-scaling`, the zoo the live MLPs are
named after). The browser test (test_ui_dashboard.py) checks the same figure on a real run."""

from __future__ import annotations

import functools
import math
from pathlib import Path

import pandas as pd
import pytest
from conftest import requires_data
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from perfcast import datasets
from perfcast.scheduler.live.spec import JobSpec
from perfcast.scheduler.live.store import JobStore
from perfcast.serving.live_error import live_error, scaling_row

pytestmark = requires_data

KEY = ["job", "gpu_type", "num_nodes", "num_gpus", "local_batch_size"]


@functools.cache
def zoo() -> pd.DataFrame:
    return datasets.load("measured-cpu-zoo-scaling")


class ZooChampion:
    """A champion's interface answering the zoo's measured step time and its p10/p90 (NaN for
    rows the zoo never measured)."""

    family, version = "measured", "7"

    @property
    def predictor(self) -> ZooChampion:
        return self

    def predict_interval(self, rows: pd.DataFrame) -> pd.DataFrame:
        table = zoo().rename(
            columns={"step_time_p10_s": "step_time_s_p10", "step_time_p90_s": "step_time_s_p90"}
        )
        out = rows[KEY].merge(
            table[[*KEY, "step_time_s", "step_time_s_p10", "step_time_s_p90"]], on=KEY, how="left"
        )
        return out[["step_time_s", "step_time_s_p10", "step_time_s_p90"]]


def _zoo_mlps() -> list[tuple[int, int, int]]:
    """(width, depth, batch) of the MLPs the zoo measured on the CPU."""
    mlps = zoo()[zoo()["job"].str.startswith("mlp-")]
    return [(int(r.width), int(r.depth), int(r.local_batch_size)) for r in mlps.itertuples()]


job = st.tuples(
    st.deferred(lambda: st.sampled_from(_zoo_mlps())),  # read when drawn: data may be absent
    st.floats(1e-4, 5.0),  # measured mean step time, s
    st.sampled_from(["exclusive", "exclusive", "timeslice", "packed"]),
    st.sampled_from([0.0, 0.0, 0.05]),  # min_step_time_s: paced by a trace replay when > 0
    st.sampled_from(["running", "done"]),
)


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(jobs=st.lists(job, min_size=1, max_size=6))
def test_live_error_counts_exactly_the_unpaced_exclusive_jobs(tmp_path_factory, jobs) -> None:
    path = tmp_path_factory.mktemp("live") / "state.db"
    store = JobStore(path)
    want = []
    for i, ((width, depth, batch), step, share, paced, status) in enumerate(jobs):
        spec = JobSpec(name=f"j{i}", width=width, depth=depth, input_dim=784, batch_size=batch,
                       iterations=100, min_step_time_s=paced)  # fmt: skip
        store.add_job(f"j{i}", spec.model_dump(), 0.0)
        gpus = [(0, i % 4)] if status == "running" else []  # a finished job holds none
        store.update_job(f"j{i}", status=status, gpus=gpus, share=share, mean_step_time_s=step)
        if share == "exclusive" and paced == 0:
            row = zoo()[(zoo()["job"] == f"mlp-w{width}-d{depth}-i784")
                        & (zoo()["local_batch_size"] == batch)].iloc[0]  # fmt: skip
            want.append((f"j{i}", abs(row["step_time_s"] - step) / step, row, step))
    store.close()

    result = live_error(path, ZooChampion())
    assert result is not None and (result.family, result.version) == ("measured", "7")
    assert [j.job_id for j in result.jobs] == [w[0] for w in want]
    assert sum(result.left_out.values()) == len(jobs) - len(want)
    if not want:
        assert result.mape is None and result.coverage is None
        return
    assert result.mape == pytest.approx(100 * sum(w[1] for w in want) / len(want), rel=1e-9)
    inside = [w[2]["step_time_p10_s"] <= w[3] <= w[2]["step_time_p90_s"] for w in want]
    assert result.coverage == pytest.approx(sum(inside) / len(inside))
    assert all(math.isfinite(j.error) and j.error >= 0 for j in result.jobs)


def test_the_row_says_why_a_job_is_not_counted(tmp_path: Path) -> None:
    store = JobStore(tmp_path / "state.db")
    cuda = JobSpec(name="g", iterations=10, device="cuda", num_gpus=2, batch_size=64)
    store.add_job("g", cuda.model_dump(), 0.0)
    store.update_job("g", status="running", gpus=[(0, 0), (1, 0)])
    assert "config.gpu_type" in scaling_row(cuda, store.job("g"))
    named = cuda.model_copy(update={"config": {"gpu_type": "a100"}})
    assert scaling_row(named, store.job("g")) == {
        "job": "mlp-w64-d2-i32", "gpu_type": "a100", "num_nodes": 2, "num_gpus": 2,
        "local_batch_size": 32,
    }  # fmt: skip
    store.close()
    assert live_error(tmp_path / "absent.db", ZooChampion()) is None
