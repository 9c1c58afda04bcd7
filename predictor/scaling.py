"""Step time of a job for a placement, batch size and GPU type (task `scaling`)."""

from __future__ import annotations

from typing import Self

import numpy as np
import pandas as pd

from features.scaling import ScalingFeatures
from predictor.base import TaskPredictor, interval_frame
from predictor.regressors import make_regressor


class ScalingPredictor(TaskPredictor):
    """Predicts log(step / physical base) where a base exists (see features.scaling), and
    log(step) directly where it does not. `model` picks the regressor family (gbm or fcn)."""

    task = "scaling"
    kind = "scaling"
    targets = ("step_time_s",)

    def __init__(self, model: str = "gbm", random_state: int = 0) -> None:
        self.model = model
        self.random_state = random_state

    @property
    def family(self) -> str:  # type: ignore[override]
        return self.model

    def _fit(self, rows: pd.DataFrame) -> Self:
        self.features_ = ScalingFeatures().fit(rows)
        X, log_base = self.features_.transform(rows)
        log_y = np.log(rows["step_time_s"].to_numpy(dtype=float))
        # Also learn from the new-GPU view (overhead from other GPU types only) of the rows
        # where it differs, so a GPU known from its one-GPU rows is not a situation the
        # correction model has never seen.
        X_new, log_base_new = self.features_.transform(rows, new_gpu=True)
        differs = (X_new["overhead_from_other_gpu"] > X["overhead_from_other_gpu"]).to_numpy()
        X = pd.concat([X, X_new[differs]], ignore_index=True)
        log_base = np.concatenate([log_base, log_base_new[differs]])
        log_y = np.concatenate([log_y, log_y[differs]])
        has_base = np.isfinite(log_base)
        self.ratio_model_ = None
        if has_base.sum() >= 8:
            self.ratio_model_ = make_regressor(self.model, random_state=self.random_state)
            self.ratio_model_.fit(X[has_base], log_y[has_base] - log_base[has_base])
        self.direct_model_ = make_regressor(self.model, random_state=self.random_state)
        self.direct_model_.fit(X, log_y)
        self.fitted_ = True
        return self

    def _predict_interval(self, rows: pd.DataFrame) -> pd.DataFrame:
        X, log_base = self.features_.transform(rows)
        out = np.empty((3, len(X)))
        has_base = np.isfinite(log_base)
        if self.ratio_model_ is None:
            has_base[:] = False
        if has_base.any():
            ratio = np.vstack(self.ratio_model_.predict_quantiles(X[has_base]))
            out[:, has_base] = ratio + log_base[has_base]
        if (~has_base).any():
            out[:, ~has_base] = np.vstack(self.direct_model_.predict_quantiles(X[~has_base]))
        lo, mid, hi = np.exp(out)
        return interval_frame(self.targets, rows.index, [(lo, mid, hi)])
