"""The query model says what it does not know: a query, a scale beyond its engine's largest,
or an operator kind the training never had is flagged, and its interval is calibrated on the
training runs' errors with that thing held out. Real Spark plans (Decima's TPC-H stages) and
real DuckDB plans measured here."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from conftest import spark_query_model

from perfcast import datasets
from perfcast.datasets.fetch import shared_data_available

pytestmark = pytest.mark.skipif(
    not shared_data_available(), reason="the public datasets are not available"
)
TARGET = "e2e_latency_ms"


@pytest.fixture(scope="module")
def spark() -> pd.DataFrame:
    return datasets.load("decima-tpch-stages")


@pytest.fixture(scope="module")
def held_out() -> tuple[list[str], float]:
    _, queries, largest = spark_query_model()
    return queries, largest


@pytest.fixture(scope="module")
def model():
    return spark_query_model()[0]  # shared with tests/test_flag_properties.py


def _truth(rows: pd.DataFrame) -> pd.Series:
    return rows.drop_duplicates("sample_id").set_index("sample_id")[TARGET]


def _runs(rows: pd.DataFrame, n: int, seed: int = 0) -> pd.DataFrame:
    ids = pd.Series(rows["sample_id"].unique()).sample(n, random_state=seed)
    return rows[rows["sample_id"].isin(ids)]


def test_training_runs_carry_no_flag_and_unseen_ones_their_own(spark, held_out, model) -> None:
    queries, largest = held_out
    trained = spark[~spark["query"].isin(queries) & (spark["scale_factor"] < largest)]
    assert set(model.predict_interval(_runs(trained, 40))["flags"]) == {""}
    new_query = spark[spark["query"].isin(queries) & (spark["scale_factor"] < largest)]
    assert set(model.predict_interval(_runs(new_query, 20))["flags"]) == {"new_query"}
    new_scale = spark[~spark["query"].isin(queries) & (spark["scale_factor"] == largest)]
    assert set(model.predict_interval(_runs(new_scale, 20))["flags"]) == {"new_scale"}
    duckdb = datasets.load("measured-cpu-tpch-sweep")  # operators, not Spark stages
    flags = model.predict_interval(_runs(duckdb, 10))["flags"].str.split(",")
    assert all("new_operator" in f for f in flags), flags


def test_every_interval_is_ordered_and_an_unseen_query_gets_a_wider_one(
    spark, held_out, model
) -> None:
    largest = held_out[1]
    rows = spark[spark["scale_factor"] < largest]
    out = model.predict_interval(rows)
    lo, mid, hi = (out[c].to_numpy() for c in (f"{TARGET}_p10", TARGET, f"{TARGET}_p90"))
    assert (lo < mid).all() and (mid < hi).all()
    width = np.log(hi / lo)
    flagged = out["flags"].eq("new_query").to_numpy()
    assert flagged.any() and (~flagged).any()
    assert np.median(width[flagged]) > np.median(width[~flagged])
    assert width[flagged].min() >= 2 * model.unseen_margins_["new_query"] - 1e-9


def test_an_unseen_query_is_covered_as_calibrated(spark, held_out, model) -> None:
    queries, largest = held_out
    rows = spark[spark["query"].isin(queries) & (spark["scale_factor"] < largest)]
    out = model.predict_interval(rows)
    truth = _truth(rows).reindex(out.index)
    inside = (truth >= out[f"{TARGET}_p10"]) & (truth <= out[f"{TARGET}_p90"])
    # calibrated to 80% on the training runs' queries held out; measured 96% on these
    assert inside.mean() >= 0.75, inside.mean()
    assert np.median(out[f"{TARGET}_p90"] / out[f"{TARGET}_p10"]) < 1.6
