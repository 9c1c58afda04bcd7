"""A job's run time from trace features (task `duration`), for shortest-job-first policies."""

from __future__ import annotations

from typing import Self

import numpy as np
import pandas as pd

from perfcast.features.trace import DurationFeatures
from perfcast.predictor.base import TaskPredictor, interval_frame
from perfcast.predictor.regressors import make_regressor


class DurationPredictor(TaskPredictor):
    task = "duration"
    kind = "trace"
    targets = ("duration_s",)

    def __init__(self, model: str = "gbm", random_state: int = 0) -> None:
        self.model = model
        self.random_state = random_state

    @property
    def family(self) -> str:  # type: ignore[override]
        return self.model

    def _fit(self, rows: pd.DataFrame) -> Self:
        self.features_ = DurationFeatures().fit(rows)
        y = np.log(rows["duration_s"].to_numpy(dtype=float))
        regressor = make_regressor(self.model, random_state=self.random_state)
        self.regressor_ = regressor.fit(self.features_.transform(rows, out_of_fold=True), y)
        self.fitted_ = True
        return self

    def _predict_interval(self, rows: pd.DataFrame) -> pd.DataFrame:
        quantiles = self.regressor_.predict_quantiles(self.features_.transform(rows))
        return interval_frame(self.targets, rows.index, [tuple(np.exp(q) for q in quantiles)])
