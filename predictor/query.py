"""A big-data job's run time from its DAG, input scale and resources (`query`).

Rows are the `plan` contract's long table (one row per operator or stage); predictions are one
row per `sample_id`. The physical base (`features.plans`: per-node work over the run's
threads or executors, through the DAG, at a rate per DAG form learned from the training runs)
is corrected by every family, which predicts log(e2e / base): `gbm` and `fcn` from per-run
aggregates of the DAG, `rnn` (a GRU over the nodes in topological order, as Chou's Hive
predictor) and `gnn` (message passing over the DAG) from the nodes themselves. Every family's
p10/p90 is conformalized (`ConformalQuantiles`: out-of-fold errors widen the quantile heads).
"""

from __future__ import annotations

from typing import Self

import numpy as np
import pandas as pd
from sklearn.base import BaseEstimator

from perfcast.features.plans import PlanRates, plan_graphs, plan_table, runs
from perfcast.predictor.base import TaskPredictor, interval_frame
from perfcast.predictor.graph_models import GraphQuantileNet
from perfcast.predictor.regressors import ConformalQuantiles, make_regressor

GRAPH_FAMILIES = ("rnn", "gnn")


class PlanGraphRegressor(BaseEstimator):
    """`GraphQuantileNet` behind the tabular regressor interface (a frame whose `graph` column
    holds `GraphArrays`), so `ConformalQuantiles` calibrates it like gbm and fcn."""

    def __init__(self, architecture: str = "gnn", epochs: int = 40, random_state: int = 0):
        self.architecture = architecture
        self.epochs = epochs
        self.random_state = random_state

    def fit(self, X: pd.DataFrame, y: np.ndarray) -> Self:
        self.net_ = GraphQuantileNet(
            self.architecture, epochs=self.epochs, batch_size=32, random_state=self.random_state
        ).fit(list(X["graph"]), np.asarray(y, dtype=float))
        return self

    def predict_quantiles(self, X: pd.DataFrame) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        return self.net_.predict_quantiles(list(X["graph"]))


class QueryPredictor(TaskPredictor):
    task = "query"
    kind = "plan"
    targets = ("e2e_latency_ms",)

    def __init__(self, model: str = "gbm", epochs: int = 40, random_state: int = 0) -> None:
        self.model = model
        self.epochs = epochs
        self.random_state = random_state

    @property
    def family(self) -> str:  # type: ignore[override]
        return self.model

    def _inputs(self, rows: pd.DataFrame) -> tuple[pd.DataFrame, np.ndarray]:
        X, log_base = plan_table(rows, self.rates_)
        if self.model in GRAPH_FAMILIES:
            graphs = plan_graphs(rows, self.rates_, X)
            return pd.DataFrame({"graph": graphs}, index=X.index), log_base
        return X, log_base

    def _fit(self, rows: pd.DataFrame) -> Self:
        self.rates_ = PlanRates().fit(rows)
        X, log_base = self._inputs(rows)
        y = np.log(runs(rows)["e2e_latency_ms"].reindex(X.index).to_numpy(dtype=float))
        if self.model in GRAPH_FAMILIES:
            net = PlanGraphRegressor(self.model, self.epochs, self.random_state)
            self.regressor_ = ConformalQuantiles(net, random_state=self.random_state)
        else:
            self.regressor_ = make_regressor(self.model, random_state=self.random_state)
        self.regressor_.fit(X, y - log_base)
        self.fitted_ = True
        return self

    def base_ms(self, rows: pd.DataFrame) -> pd.Series:
        """The physical base alone (ms per sample_id), at the rates learned in fit."""
        return self.rates_.base_ms(self._check_rows(rows))

    def _predict_interval(self, rows: pd.DataFrame) -> pd.DataFrame:
        X, log_base = self._inputs(rows)
        quantiles = self.regressor_.predict_quantiles(X)
        values = tuple(np.exp(q + log_base) for q in quantiles)
        return interval_frame(self.targets, X.index.rename("sample_id"), [values])
