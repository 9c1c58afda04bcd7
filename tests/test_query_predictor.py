"""The `query` task: plan features, the physical base, and the predictors on the real data."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from perfcast import datasets
from perfcast.datasets.splits import folds
from perfcast.errors import ContractError
from perfcast.features.plans import PlanRates, base_units, op_kind, plan_graphs, plan_table
from perfcast.predictor import make_predictor


def _stage_dag(inputs: list[list[int]], tasks: list[int], task_ms: list[float], executors: int):
    return pd.DataFrame(
        {
            "sample_id": "s",
            "query": "q",
            "engine": "spark-test",
            "scale_factor": 1.0,
            "threads": executors,
            "e2e_latency_ms": 1.0,
            "node_id": range(len(inputs)),
            "op": "stage",
            "inputs": [json.dumps(i) for i in inputs],
            "num_tasks": tasks,
            "task_ms": task_ms,
        }
    )


def test_a_stage_takes_its_waves_and_parallel_stages_overlap():
    # 0 -> 2 <- 1: stages 0 and 1 run at once, the longer one sets when 2 starts
    dag = _stage_dag([[], [], [0, 1]], tasks=[4, 2, 3], task_ms=[10.0, 50.0, 5.0], executors=2)
    assert base_units(dag)["s"] == pytest.approx(max(2 * 10.0, 1 * 50.0) + 2 * 5.0)


def test_an_operator_plan_costs_rows_over_threads():
    plan = pd.DataFrame(
        {
            "sample_id": "p", "query": "q", "engine": "duckdb-test", "scale_factor": 1.0,
            "threads": 1, "e2e_latency_ms": 1.0, "node_id": [0, 1, 2],
            "op": ["projection", "hash_join", "table_scan"],
            "inputs": ["[1]", "[2]", "[]"], "cardinality": [10.0, 10.0, 100.0],
        }
    )  # fmt: skip
    one = base_units(plan)["p"]
    assert one == pytest.approx((10 + 10) + (10 + 100) + 100)
    assert base_units(plan.assign(threads=4))["p"] == pytest.approx(one / 4)
    with_scanned = base_units(plan.assign(rows_scanned=1000.0))["p"]
    assert with_scanned == pytest.approx(one + 1000.0)


@st.composite
def _dags(draw):
    n = draw(st.integers(1, 8))
    inputs = [[]] + [sorted(draw(st.sets(st.integers(0, i - 1), max_size=3))) for i in range(1, n)]
    tasks = draw(st.lists(st.integers(1, 500), min_size=n, max_size=n))
    task_ms = draw(st.lists(st.floats(0.1, 1e4), min_size=n, max_size=n))
    return inputs, tasks, task_ms


@settings(max_examples=100, deadline=None)
@given(_dags(), st.integers(1, 50), st.integers(1, 50))
def test_more_executors_never_lengthen_the_base(dag, a, b):
    few, many = sorted((a, b))
    slow = base_units(_stage_dag(*dag, executors=few))["s"]
    fast = base_units(_stage_dag(*dag, executors=many))["s"]
    assert fast <= slow * (1 + 1e-9)
    # and the base never beats the work spread over every executor
    _, tasks, task_ms = dag
    assert slow >= max(t * m for t, m in zip(tasks, task_ms, strict=True)) / few * (1 - 1e-9)


def test_operator_kinds_are_normalized():
    ops = pd.Series(["TABLE_SCAN", "hash_join", "perfect_hash_group_by", "top_n", "stage", "x"])
    assert list(op_kind(ops)) == ["scan", "hash_join", "group_by", "sort", "stage", "other"]


def test_bad_plans_are_refused_with_the_sample_named():
    cyclic = _stage_dag([[1], [0]], tasks=[1, 1], task_ms=[1.0, 1.0], executors=1)
    with pytest.raises(ContractError, match="cycle"):
        base_units(cyclic)
    no_tasks = _stage_dag([[]], tasks=[1], task_ms=[1.0], executors=1).drop(columns="task_ms")
    with pytest.raises(ContractError, match="num_tasks or task_ms"):
        base_units(no_tasks)


@pytest.fixture(scope="module")
def spark():
    return datasets.load("decima-tpch-stages")


@pytest.fixture(scope="module")
def duckdb_runs():
    return datasets.load("measured-cpu-tpch-sweep")


def _mape(predictor, rows) -> tuple[float, pd.DataFrame]:
    out = predictor.predict_interval(rows)
    truth = rows.drop_duplicates("sample_id").set_index("sample_id")["e2e_latency_ms"]
    truth = truth.reindex(out.index)
    return float((np.abs(out["e2e_latency_ms"] - truth) / truth).mean() * 100), out.assign(
        truth=truth
    )


def test_graph_views_follow_the_topological_order(spark):
    rows = spark[spark["sample_id"].isin(spark["sample_id"].unique()[:5])]
    rates = PlanRates().fit(rows)
    table, _ = plan_table(rows, rates)
    for graph in plan_graphs(rows, rates, table):
        src, dst = graph.edges
        assert (src < dst).all()  # every input placed before its consumer
        assert graph.x[:, -1].sum() == pytest.approx(1.0, abs=1e-5)


def test_gbm_predicts_unseen_spark_queries_better_than_the_median(spark):
    train_idx, test_idx = next(folds(spark, "plan", "query", n_folds=5))
    train, test = spark.iloc[train_idx], spark.iloc[test_idx]
    assert not set(train["query"]) & set(test["query"])
    predictor = make_predictor("query", "gbm").fit(train)
    mape, out = _mape(predictor, test)
    median = train.drop_duplicates("sample_id")["e2e_latency_ms"].median()
    median_mape = float((np.abs(median - out["truth"]) / out["truth"]).mean() * 100)
    assert mape < median_mape / 2
    base = predictor.base_ms(test).reindex(out.index)
    assert mape < float((np.abs(base - out["truth"]) / out["truth"]).mean() * 100)
    assert (out["e2e_latency_ms_p10"] <= out["e2e_latency_ms"]).all()
    assert (out["e2e_latency_ms"] <= out["e2e_latency_ms_p90"]).all()
    assert len(out) == test["sample_id"].nunique()


def test_scale_split_extrapolates_to_the_largest_scale(spark, duckdb_runs):
    rows = pd.concat([spark, duckdb_runs], ignore_index=True)
    train_idx, test_idx = next(folds(rows, "plan", "scale"))
    test = rows.iloc[test_idx]
    assert set(test.groupby("engine")["scale_factor"].unique().map(tuple)) == {(50.0,), (1.0,)}
    assert rows.iloc[train_idx].groupby("engine")["scale_factor"].max().to_dict() == {
        "spark-decima": 20.0,
        "duckdb-2.0.0": 0.3,
    }


def test_operator_rates_beat_one_rate_on_unseen_duckdb_queries(duckdb_runs):
    """The per-kind base (overhead + a cost per row and thread for each operator kind) against
    one rate for every row, on DuckDB queries never seen (5 folds, pooled): it must be closer,
    its rates never negative, and a plan with more rows (or fewer threads) never faster."""
    truth = duckdb_runs.drop_duplicates("sample_id").set_index("sample_id")["e2e_latency_ms"]
    one_rate, per_kind = [], []
    for train_idx, test_idx in folds(duckdb_runs, "plan", "query", n_folds=5):
        train, test = duckdb_runs.iloc[train_idx], duckdb_runs.iloc[test_idx]
        rates = PlanRates().fit(train)
        assert rates.overhead_ms_ >= 0 and min(rates.kind_rates_.values()) >= 0
        assert max(rates.kind_rates_.values()) > 0
        one_rate.append(base_units(test) * rates.rates_["operator"])
        per_kind.append(rates.base_ms(test))
    bigger = test.assign(cardinality=test["cardinality"] * 2)
    assert (rates.base_ms(bigger) >= per_kind[-1]).all()
    assert (rates.base_ms(test.assign(threads=1)) >= rates.base_ms(test.assign(threads=2))).all()

    def mape(pred: list[pd.Series]) -> float:
        return float((np.abs(pd.concat(pred).reindex(truth.index) - truth) / truth).mean())

    assert mape(per_kind) < 0.8 * mape(one_rate)
