"""Features for the `duration` task: a job's run time from what is known at submission."""

from __future__ import annotations

from typing import Self

import numpy as np
import pandas as pd

_CATEGORICAL = ("vc", "user", "job")
_SECONDS_PER_DAY = 86_400.0
_FOLDS = 5


class DurationFeatures:
    """Request size, time of submission and the categorical context (virtual cluster, user,
    workload: an unseen value becomes missing, never an error), plus each category's mean log
    duration in the reference rows (the history a shortest-job-first scheduler keeps). On the
    reference rows themselves that mean comes from the other folds of a 5-fold split: a
    leave-one-out mean would leak the row's own duration, since (sum - own) / (count - 1)
    gives `own` back to a model that also sees the category."""

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

    def transform(self, rows: pd.DataFrame, *, out_of_fold: bool = False) -> pd.DataFrame:
        X = pd.DataFrame(index=rows.index)
        X["log_num_gpus"] = np.log2(rows["num_gpus"].astype(float) + 1)
        submit = rows["submit_time_s"].astype(float)
        X["day_fraction"] = (submit % _SECONDS_PER_DAY) / _SECONDS_PER_DAY
        X["weekday"] = (submit // _SECONDS_PER_DAY) % 7
        for column in ("batch_size", "iterations"):
            present = column in rows.columns
            X[f"log_{column}"] = np.log1p(rows[column].astype(float)) if present else np.nan
        for column, categories in self.categories_.items():
            values = (
                rows[column].astype("string")
                if column in rows
                else pd.Series(pd.NA, index=rows.index, dtype="string")
            )
            X[column] = pd.Categorical(values, categories=categories)
            # the lookups on plain object arrays: Series.map of a string column took ~35 ms
            # a call on 16,000 rows, most of a duration fit's feature time
            keys = values.to_numpy(dtype=object, na_value=None)
            history = self.history_[column]
            total = _lookup(history["sum"], keys, np.nan)
            count = _lookup(history["count"], keys, np.nan)
            if out_of_fold:
                fold = np.arange(len(rows)) % _FOLDS
                log_d = np.log(rows["duration_s"].to_numpy(dtype=float))
                for k in range(_FOLDS):  # remove the row's own fold from its history
                    mine = fold == k
                    own = pd.Series(log_d[mine]).groupby(keys[mine]).agg(["sum", "count"])
                    total[mine] -= _lookup(own["sum"], keys[mine], 0.0)
                    count[mine] -= _lookup(own["count"], keys[mine], 0.0)
            with np.errstate(invalid="ignore", divide="ignore"):
                X[f"{column}_mean_log_duration"] = np.where(count > 0, total / count, np.nan)
        return X


def _lookup(table: pd.Series, keys: np.ndarray, missing: float) -> np.ndarray:
    """`table`'s value (as float) at each of `keys` (an object array; None for no value), and
    `missing` where it has none: what `Series.map(table)` gives, without the string column."""
    position = pd.Index(table.index.to_numpy(dtype=object)).get_indexer(keys)
    values = table.to_numpy(dtype=float)
    return np.where(position >= 0, values[position], missing)
