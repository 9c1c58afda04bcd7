"""Step time of a job for a placement, batch size and GPU type (task `scaling`)."""

from __future__ import annotations

from typing import Self

import numpy as np
import pandas as pd
from sklearn.base import clone

from perfcast.features.scaling import ScalingFeatures
from perfcast.predictor.base import TaskPredictor, interval_frame
from perfcast.predictor.regressors import QUANTILES, make_regressor

COVERAGE = QUANTILES[2] - QUANTILES[0]


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
        X, log_base, log_y = _design(self.features_, rows)
        has_base = np.isfinite(log_base)
        self.ratio_model_ = None
        self.new_gpu_margin_ = None
        if has_base.sum() >= 8:
            self.ratio_model_ = make_regressor(self.model, random_state=self.random_state)
            self.ratio_model_.fit(X[has_base], log_y[has_base] - log_base[has_base])
            self.new_gpu_margin_ = self._new_gpu_margin(rows)
        self.direct_model_ = make_regressor(self.model, random_state=self.random_state)
        self.direct_model_.fit(X, log_y)
        self.fitted_ = True
        return self

    def _new_gpu_margin(self, rows: pd.DataFrame) -> float | None:
        """Conformal margin for the rows a new GPU presents (`ScalingFeatures.uncharted`).
        Random folds calibrate p10/p90 on errors of GPUs the model knows, which are smaller:
        here each GPU type's multi-GPU rows are held out in turn (their one-GPU rows kept) and
        predicted by an uncalibrated model, and the margin is what makes p10-p90 cover 80% of
        those errors."""
        scores = []
        multi = (rows["num_gpus"] > 1).to_numpy()
        for gpu in rows["gpu_type"].unique():
            held = multi & (rows["gpu_type"] == gpu).to_numpy()
            if not held.any() or held.all():
                continue
            train, test = rows[~held], rows[held]
            features = ScalingFeatures().fit(train)
            X, log_base, log_y = _design(features, train)
            fit = np.isfinite(log_base)
            if fit.sum() < 8:
                continue
            X_test, base_test = features.transform(test, new_gpu=True)
            usable = np.isfinite(base_test) & features.uncharted(test)
            if not usable.any():
                continue
            model = clone(self.ratio_model_.regressor).fit(X[fit], log_y[fit] - log_base[fit])
            lo, _, hi = model.predict_quantiles(X_test[usable])
            y = np.log(test["step_time_s"].to_numpy(dtype=float))[usable] - base_test[usable]
            scores.append(np.maximum(lo - y, y - hi))
        if not scores:
            return None
        pooled = np.concatenate(scores)
        level = min(1.0, np.ceil((len(pooled) + 1) * COVERAGE) / len(pooled))
        return float(np.quantile(pooled, level))

    def _predict_interval(self, rows: pd.DataFrame) -> pd.DataFrame:
        X, log_base = self.features_.transform(rows)
        out = np.empty((3, len(X)))
        has_base = np.isfinite(log_base)
        if self.ratio_model_ is None:
            has_base[:] = False
        if has_base.any():
            ratio = np.vstack(self.ratio_model_.predict_quantiles(X[has_base]))
            new_gpu = self.features_.uncharted(rows)[has_base]
            if self.new_gpu_margin_ is not None and new_gpu.any():
                raw = np.vstack(self.ratio_model_.regressor_.predict_quantiles(X[has_base]))
                ratio[0, new_gpu] = np.minimum(
                    raw[0, new_gpu] - self.new_gpu_margin_, ratio[0, new_gpu]
                )
                ratio[2, new_gpu] = np.maximum(
                    raw[2, new_gpu] + self.new_gpu_margin_, ratio[2, new_gpu]
                )
            out[:, has_base] = ratio + log_base[has_base]
        if (~has_base).any():
            out[:, ~has_base] = np.vstack(self.direct_model_.predict_quantiles(X[~has_base]))
        lo, mid, hi = np.exp(out)
        return interval_frame(self.targets, rows.index, [(lo, mid, hi)])


def _design(
    features: ScalingFeatures, rows: pd.DataFrame
) -> tuple[pd.DataFrame, np.ndarray, np.ndarray]:
    """Training features, log base and log target. The rows are also seen in the new-GPU view
    (overhead from other GPU types only) where it differs, so a GPU known from its one-GPU
    rows is not a situation the correction model has never seen."""
    X, log_base = features.transform(rows)
    log_y = np.log(rows["step_time_s"].to_numpy(dtype=float))
    X_new, log_base_new = features.transform(rows, new_gpu=True)
    differs = (X_new["overhead_from_other_gpu"] > X["overhead_from_other_gpu"]).to_numpy()
    return (
        pd.concat([X, X_new[differs]], ignore_index=True),
        np.concatenate([log_base, log_base_new[differs]]),
        np.concatenate([log_y, log_y[differs]]),
    )
