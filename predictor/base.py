"""The estimator contract every perfcast predictor follows (scikit-learn style).

`__init__` only stores parameters; `fit(rows)` learns from contract-table rows (targets taken
from the rows when `y` is None) and returns `self`; learned attributes end in `_`;
`predict(rows)` gives point predictions; `predict_interval(rows)` gives, for each target, the
columns `<target>`, `<target>_p10` and `<target>_p90` (the shape `predictor.backend` promises).
Both take a frame (checked against the contract), `CheckedRows` (rows already checked) or
records (parsed JSON objects); each predictor picks its fastest way to read what it is given.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from typing import ClassVar, Literal, Self, overload

import numpy as np
import pandas as pd
from sklearn.base import BaseEstimator

from perfcast.datasets.contract import validate, validate_prediction_rows
from perfcast.errors import ContractError
from perfcast.predictor.tasks import TASK_SPECS

# The shape of the predictors' learned state. Bump it whenever a change to a predictor or its
# features would make a model saved by an earlier perfcast unreadable or wrong: champions saved
# in another format are not loaded (training/model_store.py), and the next training replaces them.
# What each bump changed: CHANGELOG.md, "Model formats".
MODEL_FORMAT = 19

# What a model knows of a prediction row: `predict_interval` frames carry a string column
# `flags`, comma-separated tokens from this vocabulary in this order ("" when none), and the
# interval is wider on flagged rows. Each task adds its own tokens here, so all share one list.
FLAGS: dict[str, str] = {
    # scaling
    "new_job": "the job was never seen in training",
    "new_gpu_type": "the GPU type was never seen in training",
    "unmeasured_config": "this job's synchronization was never measured on this cluster (or "
    "with this spread over nodes): its gradient bytes come from other clusters or the prior",
    "extrapolated_gpus": "more GPUs than any training row of this job used",
    "extrapolated_batch": "a local batch outside the range measured for this job and GPU type",
    "no_interconnect_facts": "no link bandwidths for this GPU type and none on the row: PCIe "
    "gen3 and 10 Gbit/s Ethernet are assumed, the slowest links of the table",
    "monotonic_guard": "moved to the time predicted for a slower GPU (lowered to it) or a "
    "smaller batch (raised to it) of the same job and configuration in the same request",
    # interference
    "new_workload": "a job of the pair was never seen in training: its slowdown is shrunk "
    "toward none (speed 1.0) by what its utilization counters or model family support, and "
    "p10 keeps the full learned slowdown",
    "new_model_family": "no utilization counters for both jobs and a model family never seen "
    "in training: only part of the learned slowdown is applied",
    "time_sliced": "a new workload's pair that took turns on the device (`sharing` time-slice) "
    "with both solo busy fractions measured: each job's speed is 1 / (1 + the other's busy "
    "fraction), in the general model's interval",
    # runtime (also new_gpu_type, monotonic_guard)
    "new_model": "the model (the graph's `model` name) was never seen in training: the "
    "per-op model's sum answers, with the interval of its errors on models (and devices) it "
    "never saw",
    # query
    "new_query": "the query was never seen in training: the interval is calibrated on the "
    "training runs' errors with their whole query held out",
    "new_scale": "an input scale beyond the largest its engine was trained on (an "
    "extrapolation in data size): the interval is calibrated on each engine's largest scale "
    "held out",
    "new_operator": "an operator kind never seen in training: the wider of the two margins",
    # duration
    "new_trace": "the job's trace (`source`) was not among the training traces: the "
    "prediction is shrunk toward the training median as far as the cross-trace check "
    "found the model carries over, with the cross-trace interval (never wider than the "
    "training durations' p10-p90)",
    "no_signal": "nothing the model learned is known to carry over to this row (one training "
    "trace, or a cross-trace check that found the model no better than the median): the "
    "training median answers, with the training p10-p90",
}


class CheckedRows(pd.DataFrame):
    """Prediction rows already as the contract's check returns them (its values; text may be
    categorical), made by a caller from rows it checked, as the optimizer makes its
    candidates from a checked request. `CheckedRows(frame)` shares `frame`'s data. A
    predictor answers them without checking them again; any other reader of a frame (the
    HTTP client, the simulator's oracle) reads them as the frame they are. What pandas
    derives from them (a slice, a copy) is a plain DataFrame, checked again when predicted."""


# What a predictor answers: a frame of contract-table rows without targets, checked against
# the contract first; `CheckedRows`, trusted; or records (rows as parsed JSON objects, as the
# service receives them), checked as the frame they make.
PredictionRows = pd.DataFrame | Sequence[Mapping[str, object]]
Columns = dict[str, np.ndarray]  # an answer as columns: name -> one value per prediction


class TaskPredictor(BaseEstimator, ABC):
    task: ClassVar[str]  # a name in the task registry; kind and targets are read from it
    kind: ClassVar[str]  # contract table the rows follow
    targets: ClassVar[tuple[str, ...]]
    # whether each row's prediction depends on that row alone, so that `predict_interval` may
    # answer several groups (a micro-batch's requests) in one call
    rows_independent: ClassVar[bool] = False

    model: str  # the model family, a parameter of every task's predictor

    @property
    def family(self) -> str:
        """The model family name, e.g. "gbm", "fcn", "rnn", "gnn": the `model` parameter."""
        return self.model

    def __init_subclass__(cls, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        task = cls.__dict__.get("task")
        if task is not None:  # a task's predictor: its table and targets are the registry's
            spec = TASK_SPECS[task]
            cls.kind, cls.targets = spec.table, spec.targets

    def fit(self, rows: pd.DataFrame, y: pd.DataFrame | None = None) -> Self:
        rows = self._with_targets(rows, y)
        return self._fit(validate(rows, self.kind, source=f"{self.task} training rows"))

    def predict(self, rows: PredictionRows) -> np.ndarray:
        """The targets' point predictions (`predict_interval`'s `<target>` columns): one
        array, or one column per target."""
        frame = self.predict_interval(rows)
        values = frame[list(self.targets)].to_numpy()
        return values[:, 0] if len(self.targets) == 1 else values

    @overload
    def predict_interval(
        self,
        rows: PredictionRows,
        groups: Sequence[int] | None = None,
        *,
        columns: Literal[False] = False,
    ) -> pd.DataFrame: ...

    @overload
    def predict_interval(
        self, rows: PredictionRows, groups: Sequence[int] | None = None, *, columns: Literal[True]
    ) -> Columns: ...

    def predict_interval(
        self, rows: PredictionRows, groups: Sequence[int] | None = None, *, columns: bool = False
    ) -> pd.DataFrame | Columns:
        """For each target, `<target>`, `<target>_p10` and `<target>_p90`, then `flags`; a
        frame with the rows' index (a per-sample task's: one row per `sample_id`).

        `rows`: a frame, checked against the contract first (a bad row is refused as a bad
        file's would be); `CheckedRows`, not checked again (scaling then answers `flags` as a
        categorical of the same strings: 10^5 candidates have a few distinct sets); or
        records, checked as their frame would be (scaling reads a few records whose values
        already have the contract's types without making one: `scaling.FEW_ROWS`). `groups`
        (one per row; the requests of a micro-batch, in order) are answered as separate calls
        would answer them. `columns=True` answers a dict of arrays instead of a frame, a
        per-sample task's `sample_id` first: what the service serializes."""
        self._require_fitted()
        if groups is not None and not self.rows_independent and len(set(groups)) > 1:
            if not isinstance(rows, pd.DataFrame):  # one frame: the parts keep its index
                rows = pd.DataFrame.from_records(list(rows))
            parts = [self._answer(part, columns) for part in _split(rows, groups)]
            if columns:
                return {name: np.concatenate([p[name] for p in parts]) for name in parts[0]}
            return pd.concat(parts)
        return self._answer(rows, columns)

    def _require_fitted(self) -> None:
        if not hasattr(self, "fitted_"):
            raise ContractError(f"{type(self).__name__} is not fitted")

    def _answer(self, rows: PredictionRows, columns: bool) -> pd.DataFrame | Columns:
        """`predict_interval` of one group: `_predict_interval` of the checked rows."""
        frame = self._predict_interval(self._checked(rows))
        if not columns:
            return frame
        if frame.index.name is not None:  # a per-sample task's sample_id
            frame = frame.reset_index()
        return {str(name): column.to_numpy() for name, column in frame.items()}

    def _checked(self, rows: PredictionRows) -> pd.DataFrame:
        """`rows` as the contract's check returns them: `CheckedRows` as they are, a frame or
        records checked."""
        if isinstance(rows, CheckedRows):
            return rows
        if not isinstance(rows, pd.DataFrame):
            rows = pd.DataFrame.from_records(list(rows))
        return self._check_rows(rows)

    @abstractmethod
    def _fit(self, rows: pd.DataFrame) -> Self: ...

    @abstractmethod
    def _predict_interval(self, rows: pd.DataFrame) -> pd.DataFrame:
        """The answer to checked rows (`_checked`'s), with their index."""

    def _with_targets(self, rows: pd.DataFrame, y: pd.DataFrame | None) -> pd.DataFrame:
        if y is None:
            return rows
        rows = rows.copy()
        y = pd.DataFrame(y)
        for i, target in enumerate(self.targets):
            rows[target] = y[target].to_numpy() if target in y else y.iloc[:, i].to_numpy()
        return rows

    def _check_rows(self, rows: pd.DataFrame) -> pd.DataFrame:
        """Validate prediction rows against the contract with placeholder targets, so a row
        is refused for the same reasons a training row would be (targets are not needed)."""
        if rows.empty:
            raise ContractError(f"no rows to predict for task {self.task}")
        return validate_prediction_rows(
            rows, self.kind, self.targets, source=f"{self.task} prediction rows"
        )


def flags_column(flags: dict[str, np.ndarray], n: int) -> np.ndarray:
    """The `flags` column from one boolean array per token (keys from FLAGS)."""
    words, codes = _flag_sets(flags, n)
    return np.array(words, dtype=object)[codes]


def flags_categorical(flags: dict[str, np.ndarray], n: int) -> pd.Categorical:
    """`flags_column` as a categorical: each distinct set of flags spelled once (10^5
    candidates have a few), numbered in order of its bits, not one string per row."""
    words, codes = _flag_sets(flags, n)
    return pd.Categorical.from_codes(codes, categories=pd.Index(words, dtype=object))


def _flag_sets(flags: dict[str, np.ndarray], n: int) -> tuple[list[str], np.ndarray]:
    """(each distinct set of flags spelled, in order of its bits; each row's set's number),
    without pandas: a one-row answer's categorical cost more than the rest of its flags."""
    unknown = set(flags) - set(FLAGS)
    if unknown:
        raise ValueError(f"flags outside the FLAGS vocabulary: {sorted(unknown)}")
    tokens = [t for t in FLAGS if t in flags]
    bits = np.zeros(n, dtype=np.int64)  # one bit per token: few distinct sets to spell out
    for i, token in enumerate(tokens):
        raised = np.asarray(flags[token], dtype=bool)
        if raised.any():  # (a token no row has sets no bit)
            bits |= raised.astype(np.int64) << i
    present = np.zeros(1 << len(tokens), dtype=bool)  # a table of every set: no sort
    present[bits] = True
    sets = np.flatnonzero(present)
    words = [",".join(t for i, t in enumerate(tokens) if s >> i & 1) for s in sets.tolist()]
    code = np.cumsum(present) - 1
    return words, code[bits]


def interval_columns(
    targets: tuple[str, ...], quantiles: list[tuple[np.ndarray, ...]]
) -> dict[str, np.ndarray]:
    """The output columns from (p10, p50, p90) arrays per target, p10 <= p50 <= p90."""
    columns: dict[str, np.ndarray] = {}
    for target, (lo, mid, hi) in zip(targets, quantiles, strict=True):
        stacked = np.vstack([lo, mid, hi])
        # in order already, without NaN or zeros (whose signs a sort may swap): as sorted
        ordered = (stacked[0] <= stacked[1]).all() and (stacked[1] <= stacked[2]).all()
        if not (ordered and np.count_nonzero(stacked) == stacked.size):
            stacked = np.sort(stacked, axis=0)
        columns[target] = stacked[1]
        columns[f"{target}_p10"] = stacked[0]
        columns[f"{target}_p90"] = stacked[2]
    return columns


def interval_frame(
    targets: tuple[str, ...], index: pd.Index, quantiles: list[tuple[np.ndarray, ...]]
) -> pd.DataFrame:
    """The output frame of `interval_columns`."""
    return pd.DataFrame(interval_columns(targets, quantiles), index=index)


def _split(rows: pd.DataFrame, groups: Sequence[int]) -> list[pd.DataFrame]:
    """`rows` cut where `groups` changes value (a micro-batch's requests, in order);
    `CheckedRows` stay so."""
    if len(groups) != len(rows):
        raise ValueError(f"{len(groups)} groups for {len(rows)} rows")
    cuts = [i for i in range(1, len(groups)) if groups[i] != groups[i - 1]]
    parts = [rows.iloc[a:b] for a, b in zip([0, *cuts], [*cuts, len(rows)], strict=True)]
    return [CheckedRows(p) for p in parts] if isinstance(rows, CheckedRows) else parts
