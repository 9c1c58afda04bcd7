"""Each job's speed (co-located ÷ alone) when two jobs share one accelerator."""

from __future__ import annotations

from typing import Self

import numpy as np
import pandas as pd

from features.interference import InterferenceFeatures
from predictor.base import TaskPredictor, interval_frame
from predictor.regressors import make_regressor


class InterferencePredictor(TaskPredictor):
    """One regressor of log(speed) from (self, other) features, applied to both sides."""

    task = "interference"
    kind = "interference"
    targets = ("a_speed", "b_speed")

    def __init__(self, model: str = "gbm", random_state: int = 0) -> None:
        self.model = model
        self.random_state = random_state

    @property
    def family(self) -> str:  # type: ignore[override]
        return self.model

    def _fit(self, rows: pd.DataFrame) -> Self:
        self.features_ = InterferenceFeatures().fit(rows)
        X = pd.concat(
            [self.features_.transform(rows, "a"), self.features_.transform(rows, "b")],
            ignore_index=True,
        )
        y = np.log(np.concatenate([rows["a_speed"], rows["b_speed"]]).astype(float))
        self.regressor_ = make_regressor(self.model, random_state=self.random_state).fit(X, y)
        self.fitted_ = True
        return self

    def _predict_interval(self, rows: pd.DataFrame) -> pd.DataFrame:
        sides = []
        for side in ("a", "b"):
            quantiles = self.regressor_.predict_quantiles(self.features_.transform(rows, side))
            sides.append(tuple(np.exp(q) for q in quantiles))
        return interval_frame(self.targets, rows.index, sides)
