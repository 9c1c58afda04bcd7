"""What the models page shows of each champion beyond `GET /v1/models`: the data and split it
was trained with (its MLflow run's parameters) and the napkin baseline's error on the same
held-out rows, recomputed the way the trainer scored the model (the trainer logs the model's
held-out MAPE but not the baseline's)."""

from __future__ import annotations

import functools
import logging
from dataclasses import dataclass

import mlflow
import numpy as np
import pandas as pd
from mlflow.exceptions import MlflowException

from perfcast.errors import PerfcastError
from perfcast.predictor.backend import TASK_TABLES
from perfcast.training import model_store
from perfcast.training.trainer import DEFAULT_DATA, baseline_mape, holdout, load_rows
from perfcast.units import pct

log = logging.getLogger("perfcast.serving.ui")


@dataclass(frozen=True)
class TrainedOn:
    data: str
    split: str
    train_rows: int | None
    test_rows: int | None
    baseline_mape: float | None  # percent; None when the training data cannot be read
    # median over the held-out rows of (p90 - p10) / prediction (the trainer logs no width)
    interval_width: float | None = None
    note: str = ""


@functools.lru_cache(maxsize=64)  # per MLflow run: its data and held-out fold never change
def trained_on(task: str, run_id: str, predictor: object = None) -> TrainedOn:
    """`predictor`, the loaded champion, gives the interval width on the held-out rows."""
    model_store.configure()
    try:
        params = mlflow.get_run(run_id).data.params
    except MlflowException as err:  # the run was deleted after its model was loaded
        return TrainedOn(
            "?", "?", None, None, None, note=f"MLflow run {run_id} not readable: {err}"
        )
    data = params.get("data", DEFAULT_DATA.get(task, "?"))
    split = params.get("split", "random")
    train_n, test_n = _int(params.get("train_rows")), _int(params.get("test_rows"))
    try:
        rows = load_rows(task, data)
        train, test = holdout(rows, TASK_TABLES[task][0], split)
        baseline = baseline_mape(task, train, test)
    except (PerfcastError, OSError) as err:
        log.info("no baseline for the %s champion (run %s): %s", task, run_id, err)
        return TrainedOn(data, split, train_n, test_n, None, note=f"baseline not computed: {err}")
    width = None if predictor is None else _median_width(task, predictor, test)
    return TrainedOn(data, split, train_n, test_n, baseline, width)


def _median_width(task: str, predictor, test: pd.DataFrame) -> float | None:
    target = TASK_TABLES[task][1][0]
    try:
        out = predictor.predict_interval(test.drop(columns=list(TASK_TABLES[task][1])))
    except PerfcastError as err:
        log.info("no interval width for the %s champion: %s", task, err)
        return None
    width = (out[f"{target}_p90"] - out[f"{target}_p10"]) / out[target].abs()
    width = width[np.isfinite(width.to_numpy(dtype=float))]
    return float(width.median()) if len(width) else None


def _int(value: str | None) -> int | None:
    return int(value) if value is not None and value.isdigit() else None


@dataclass(frozen=True)
class Comparison:
    """A model's held-out error beside the napkin baseline's, and the colour that says what it
    shows: `better` (green) only for a lower error that is also below 100% (a MAPE at or over
    100% is worse than predicting 0 for every row, however far the baseline is behind)."""

    text: str  # "3.2× lower than the baseline"
    tone: str  # better | poor | worse: the CSS class
    why: str  # the hover text


def compare_to_baseline(
    mape: float | None, baseline: float | None, against: str = "the baseline"
) -> Comparison | None:
    """`against` names the other answer: the baseline (the training median), perfect scaling."""
    if mape is None or baseline is None or not (mape > 0 and baseline > 0):
        return None
    theirs = f"{against}'s {pct(baseline)}"
    if mape < baseline:
        text = f"{baseline / mape:.1f}× lower than {against}"
        if mape < 100:
            return Comparison(text, "better", f"{pct(mape)} against {theirs}")
        return Comparison(
            text, "poor",
            f"{pct(mape)} is lower than {theirs} but at or over 100%: "
            "predicting 0 for every row would err less",
        )  # fmt: skip
    return Comparison(
        f"{mape / baseline:.1f}× higher than {against}", "worse",
        f"{pct(mape)} against {theirs}: {against} predicts these rows better",
    )  # fmt: skip
