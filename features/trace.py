"""Features for the `duration` task: a job's run time from what is known at submission."""

from __future__ import annotations

from typing import Self

import numpy as np
import pandas as pd

_CATEGORICAL = ("vc", "user", "job")
_SECONDS_PER_DAY = 86_400.0


class DurationFeatures:
    """Request size, time of submission and the categorical context (virtual cluster, user,
    workload: an unseen value becomes missing, never an error), plus each category's mean log
    duration in the reference rows (the history a shortest-job-first scheduler keeps). On the
    reference rows themselves that mean leaves the row out, as it would be for a new job."""

    def fit(self, rows: pd.DataFrame) -> Self:
        log_d = np.log(rows["duration_s"].astype(float))
        self.categories_ = {}
        self.history_ = {}
        for column in _CATEGORICAL:
            if column in rows.columns and rows[column].notna().any():
                values = rows[column].astype("string")
                self.categories_[column] = pd.Index(sorted(values.dropna().unique()))
                self.history_[column] = log_d.groupby(values).agg(["sum", "count"])
        return self

    def transform(self, rows: pd.DataFrame, *, leave_own_out: bool = False) -> pd.DataFrame:
        X = pd.DataFrame(index=rows.index)
        X["log_num_gpus"] = np.log2(rows["num_gpus"].astype(float) + 1)
        submit = rows["submit_time_s"].astype(float)
        X["day_fraction"] = (submit % _SECONDS_PER_DAY) / _SECONDS_PER_DAY
        X["weekday"] = (submit // _SECONDS_PER_DAY) % 7
        for column in ("batch_size", "iterations"):
            present = column in rows.columns
            X[f"log_{column}"] = np.log1p(rows[column].astype(float)) if present else np.nan
        for column, categories in self.categories_.items():
            values = rows[column].astype("string") if column in rows else pd.Series(pd.NA)
            X[column] = pd.Categorical(values, categories=categories)
            stats = self.history_[column]
            total = values.map(stats["sum"]).astype(float)
            count = values.map(stats["count"]).astype(float)
            if leave_own_out:
                total = total - np.log(rows["duration_s"].astype(float))
                count = count - 1
            X[f"{column}_mean_log_duration"] = (total / count.where(count > 0)).astype(float)
        return X
