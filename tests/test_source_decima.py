"""Decima's Spark TPC-H stage DAGs as `plan` rows, and the job-time replay behind their target."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from perfcast import datasets
from perfcast.datasets.fetch import fetch
from perfcast.datasets.sources.decima import ENGINE, replay_ms
from perfcast.errors import ContractError


@pytest.fixture(scope="module")
def stages():
    return datasets.load("decima-tpch-stages")


def test_every_query_scale_and_executor_count_is_a_sample(stages):
    runs = stages.drop_duplicates("sample_id")
    assert runs["query"].nunique() == 18
    assert sorted(runs["scale_factor"].unique()) == [2.0, 5.0, 10.0, 20.0, 50.0]
    # Decima ran most jobs at these counts (a few at 12, 13, 29, 30, 58 or 59 instead)
    common = runs["threads"].value_counts()
    assert set(common[common == 90].index) == {2, 5, 10}
    assert set(common[common > 80].index) == {2, 5, 10, 20, 40, 50, 60, 80, 100}
    assert (runs["engine"] == ENGINE).all()
    assert len(runs) == 802


def test_stage_columns_follow_the_source_file(stages):
    record = json.loads(fetch("decima/spark_env/tpch/10g/query_9.json").read_text())
    sample = stages[stages["sample_id"] == "spark-tpch-q9-10g-e20"].sort_values("node_id")
    adjacency = np.asarray(record["adj_mat"])
    assert len(sample) == len(adjacency)
    for stage, inputs in zip(sample["node_id"], sample["inputs"], strict=True):
        assert json.loads(inputs) == list(np.flatnonzero(adjacency[:, stage]))
    durations = record["task_duration"]["3"]
    expected = durations["first_wave"]["20"] + durations["rest_wave"]["20"]
    stage3 = sample[sample["node_id"] == 3].iloc[0]
    assert stage3["num_tasks"] == len(expected)
    assert stage3["latency_ms"] == pytest.approx(sum(expected))


def test_more_executors_shorten_a_big_job(stages):
    runs = stages.drop_duplicates("sample_id").set_index("sample_id")["e2e_latency_ms"]
    assert runs["spark-tpch-q9-50g-e2"] > 5 * runs["spark-tpch-q9-50g-e40"]


def test_a_chain_on_one_executor_takes_the_sum_of_its_tasks():
    durations = [[3.0, 4.0], [5.0], [1.0, 1.0, 2.0]]
    assert replay_ms([[], [0], [1]], durations, executors=1) == 16.0
    # two executors: stage 0 in 4, stage 1 in 5, stage 2 in 1 + 2 (three tasks, two slots)
    assert replay_ms([[], [0], [1]], durations, executors=2) == 4.0 + 5.0 + 3.0


def test_a_cycle_is_refused():
    with pytest.raises(ContractError, match="cycle"):
        replay_ms([[1], [0]], [[1.0], [1.0]], executors=2)


@st.composite
def _dags(draw):
    n = draw(st.integers(1, 7))
    inputs = [
        sorted(draw(st.sets(st.integers(0, i - 1), max_size=2))) if i else [] for i in range(n)
    ]
    durations = [draw(st.lists(st.floats(1, 1000), min_size=1, max_size=6)) for _ in range(n)]
    return inputs, durations


def _longest_path(inputs, weight):
    finish = []
    for stage, parents in enumerate(inputs):
        finish.append(max((finish[p] for p in parents), default=0.0) + weight[stage])
    return max(finish)


@settings(max_examples=200, deadline=None)
@given(_dags(), st.integers(1, 8))
def test_replay_lies_between_the_physical_bounds(dag, executors):
    inputs, durations = dag
    total = sum(map(sum, durations))
    job = replay_ms(inputs, durations, executors)
    assert job >= total / executors - 1e-6
    assert job >= _longest_path(inputs, [max(d) for d in durations]) - 1e-6
    assert job <= total + 1e-6
    # with an executor per task, every stage takes its longest task
    wide = replay_ms(inputs, durations, max(map(len, durations)) * len(durations))
    assert wide == pytest.approx(_longest_path(inputs, [max(d) for d in durations]))
