"""One-job configuration search, scored by a backend answering from Pollux's measured step times."""

from __future__ import annotations

import itertools

import numpy as np
import pandas as pd
import pytest
from conftest import MeasuredBackend, needs_data, scaling_table

from perfcast.errors import PerfcastError
from perfcast.optimizer.candidates import GpuPool, enumerate_candidates
from perfcast.optimizer.configs import NoFeasibleConfigError, recommend
from perfcast.optimizer.scoring import Work, score_candidates

pytestmark = needs_data
JOB = {"job": "imagenet"}
POOL = GpuPool("t4", gpus_per_node=4, nodes=4, price_per_gpu_hour=0.35)
WORK = Work(samples=1.28e7)


class CountingBackend(MeasuredBackend):
    def __init__(self) -> None:
        self.calls = 0

    def predict(self, task: str, rows: pd.DataFrame) -> pd.DataFrame:
        self.calls += 1
        return super().predict(task, rows)


def _sizes(job: str = "imagenet") -> list[int]:
    table = scaling_table()
    return sorted(table.loc[table["job"] == job, "local_batch_size"].unique().tolist())


def _measured_best_throughput(job: str) -> float:
    table = scaling_table()
    rows = table[table["job"] == job]
    return float((rows["num_gpus"] * rows["local_batch_size"] / rows["step_time_s"]).max())


def test_candidates_cover_every_even_spread_exactly_once() -> None:
    pool = GpuPool("t4", gpus_per_node=3, nodes=4)
    got = enumerate_candidates(JOB, [pool], [8, 16])
    expected = {
        (g, k, b)
        for g, k, b in itertools.product(range(1, 13), range(1, 5), [8, 16])
        if k <= g <= 3 * k
    }
    keys = list(zip(got["num_gpus"], got["num_nodes"], got["local_batch_size"], strict=True))
    assert len(keys) == len(set(keys)) == len(expected) and set(keys) == expected
    per_node = got["placement"].astype(str).map(lambda p: [int(c) for c in p])
    assert (per_node.map(sum) == got["num_gpus"]).all()
    assert (per_node.map(len) == got["num_nodes"]).all()
    assert (per_node.map(lambda d: max(d) - min(d)) <= 1).all()
    assert (per_node.map(max) <= 3).all()


def test_min_time_ranks_by_time_calls_the_backend_once_and_finds_the_measured_best() -> None:
    backend = CountingBackend()
    rec = recommend(JOB, [POOL], backend, local_batch_sizes=_sizes(), work=WORK, top_k=5)
    assert backend.calls == 1
    top = rec.top
    assert len(top) == 5 and top["total_time_s_p90"].is_monotonic_increasing  # risk-aware
    assert top["throughput"].iloc[0] == pytest.approx(_measured_best_throughput("imagenet"))
    assert (top["num_gpus"] <= 16).all() and (top["num_nodes"] <= 4).all()
    np.testing.assert_allclose(top["total_time_s"], WORK.samples / top["throughput"])
    for name in ("step_time_s", "throughput", "scaling_efficiency", "total_time_s", "cost"):
        assert (top[f"{name}_p10"] <= top[name] + 1e-12).all()
        assert (top[name] <= top[f"{name}_p90"] + 1e-12).all()
    assert top["reason"].iloc[0].startswith("fastest")
    assert top["reason"].str.contains(r"\d+×t4").all()


def test_min_cost_and_budget() -> None:
    rec = recommend(
        JOB, [POOL], MeasuredBackend(), local_batch_sizes=_sizes(), objective="min_cost",
        work=WORK, max_cost=7.0, top_k=10,
    )  # fmt: skip
    top = rec.top
    assert top["cost"].is_monotonic_increasing and (top["cost"] <= 7.0).all()
    expected_cost = top["total_time_s"] / 3600 * top["num_gpus"] * 0.35
    np.testing.assert_allclose(top["cost"], expected_cost)
    assert "under the $7 budget" in top["reason"].iloc[0]
    assert rec.infeasible > 0  # some configurations do cost more than $7


def test_max_throughput_per_gpu_ranking_and_efficiency() -> None:
    rec = recommend(
        JOB, [POOL], MeasuredBackend(), local_batch_sizes=_sizes(),
        objective="max_throughput_per_gpu", top_k=8,
    )  # fmt: skip
    assert rec.top["throughput_per_gpu"].is_monotonic_decreasing
    scored = score_candidates(enumerate_candidates(JOB, [POOL], _sizes()), MeasuredBackend(), None)
    assert rec.top["throughput_per_gpu"].iloc[0] == pytest.approx(
        scored["throughput_per_gpu"].max()
    )
    single = scored[scored["num_gpus"] == 1]
    np.testing.assert_allclose(single["scaling_efficiency"], 1.0)
    assert rec.top["total_time_s"].isna().all()  # no work given: no time nor cost


def test_deadline_is_honoured_with_the_cheapest_configuration() -> None:
    deadline = 3 * 3600.0
    rec = recommend(
        JOB, [POOL], MeasuredBackend(), local_batch_sizes=_sizes(), work=WORK,
        deadline_s=deadline, top_k=5,
    )  # fmt: skip
    assert (rec.top["total_time_s_p90"] <= deadline).all()
    scored = score_candidates(enumerate_candidates(JOB, [POOL], _sizes()), MeasuredBackend(), WORK)
    meeting = scored[scored["total_time_s_p90"] <= deadline]
    assert rec.top["cost"].iloc[0] == pytest.approx(meeting["cost"].min())
    with pytest.raises(NoFeasibleConfigError, match=r"deadline of 60 s.*fastest p90 time"):
        recommend(
            JOB, [POOL], MeasuredBackend(), local_batch_sizes=_sizes(), work=WORK, deadline_s=60
        )


def test_unmeasured_gpu_types_are_dropped_and_said_so() -> None:
    pools = [POOL, GpuPool("h100", gpus_per_node=8, nodes=2)]
    rec = recommend(JOB, pools, MeasuredBackend(), local_batch_sizes=_sizes(), work=WORK)
    assert (rec.top["gpu_type"] == "t4").all()
    assert rec.unpredicted > 0 and "dropped" in rec.notes[0]


def test_gpu_counts_limit_the_search_but_efficiency_still_has_its_reference() -> None:
    rec = recommend(
        JOB, [POOL], MeasuredBackend(), local_batch_sizes=_sizes(), work=WORK,
        gpu_counts=[4, 8], top_k=50,
    )  # fmt: skip
    assert set(rec.top["num_gpus"]) <= {4, 8}
    assert rec.top["scaling_efficiency"].notna().all()


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"objective": "fastest"}, "unknown objective"),
        ({"objective": "min_time", "work": None}, "total work"),
        ({"objective": "min_cost", "pools": [GpuPool("t4", 4, 4)]}, "price_per_gpu_hour"),
        ({"local_batch_sizes": []}, "local_batch_sizes"),
        ({"job": {"name": "x"}}, "'job' name"),
        ({"job": {"job": "imagenet", "num_gpus": 2}}, "must not set num_gpus"),
    ],
)
def test_bad_requests_are_refused_clearly(kwargs: dict, message: str) -> None:
    args = {"job": JOB, "pools": [POOL], "local_batch_sizes": _sizes(), "work": WORK} | kwargs
    job, pools = args.pop("job"), args.pop("pools")
    with pytest.raises(PerfcastError, match=message):
        recommend(job, pools, MeasuredBackend(), **args)


def test_bad_pools_and_work_are_refused() -> None:
    with pytest.raises(PerfcastError, match="lower-case"):
        GpuPool("T4", 4, 1)
    with pytest.raises(PerfcastError, match=">= 1"):
        GpuPool("t4", 0, 1)
    with pytest.raises(PerfcastError, match="exactly one"):
        Work(samples=10, iterations=10)
