"""End-to-end iteration latency of a model on a device from its operator graph (`runtime`).

Rows are the `graph` contract's long table (one row per node); predictions are one row per
`sample_id`. Every family predicts log(latency / roofline) (see features.graphs): `gbm` and
`fcn` from per-sample aggregates, `rnn` and `gnn` from the node graph itself.
"""

from __future__ import annotations

from typing import Self

import numpy as np
import pandas as pd

from features.graphs import RuntimeHistory, node_arrays, sample_table, samples
from predictor.base import TaskPredictor, interval_frame
from predictor.graph_models import GraphQuantileNet
from predictor.regressors import make_regressor

GRAPH_FAMILIES = ("rnn", "gnn")


class RuntimePredictor(TaskPredictor):
    task = "runtime"
    kind = "graph"
    targets = ("e2e_latency_ms",)

    def __init__(self, model: str = "gbm", epochs: int = 80, random_state: int = 0) -> None:
        self.model = model
        self.epochs = epochs
        self.random_state = random_state

    @property
    def family(self) -> str:  # type: ignore[override]
        return self.model

    def _fit(self, rows: pd.DataFrame) -> Self:
        y = np.log(samples(rows)["e2e_latency_ms"].to_numpy(dtype=float))
        X, log_base = sample_table(rows)
        self.history_ = RuntimeHistory().fit(rows, y - log_base)
        history = self.history_.transform(rows)
        if self.model in GRAPH_FAMILIES:
            graphs = node_arrays(rows, history)
            self.regressor_ = GraphQuantileNet(
                self.model, epochs=self.epochs, random_state=self.random_state
            ).fit(graphs, y - log_base)
        else:
            self.regressor_ = make_regressor(self.model, random_state=self.random_state)
            self.regressor_.fit(X.join(history), y - log_base)
        self.fitted_ = True
        return self

    def _predict_interval(self, rows: pd.DataFrame) -> pd.DataFrame:
        history = self.history_.transform(rows)
        if self.model in GRAPH_FAMILIES:
            graphs = node_arrays(rows, history)
            index = pd.Index([g.sample_id for g in graphs], name="sample_id")
            log_base = np.array([g.log_base for g in graphs])
            quantiles = self.regressor_.predict_quantiles(graphs)
        else:
            X, log_base = sample_table(rows)
            index = X.index
            quantiles = self.regressor_.predict_quantiles(X.join(history))
        values = tuple(np.exp(q + log_base) for q in quantiles)
        return interval_frame(self.targets, index, [values])
