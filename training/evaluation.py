"""Scoring a predictor on contract rows, and choosing a model family by validation."""

from __future__ import annotations

import time

import numpy as np
import pandas as pd

from perfcast.datasets.splits import folds
from perfcast.features.graphs import samples
from perfcast.predictor import FAMILIES, TaskPredictor, make_predictor
from perfcast.predictor.backend import PER_SAMPLE_TASKS
from perfcast.training.metrics import regression_metrics

# the split `--model auto` validates on inside the training data, per table kind
AUTO_SPLIT = {
    "scaling": "random", "interference": "random", "graph": "random", "trace": "random",
    "plan": "random",
}  # fmt: skip


def truth_and_predictions(
    predictor: TaskPredictor, rows: pd.DataFrame
) -> tuple[np.ndarray, pd.DataFrame]:
    """(true values, predicted frame) flattened over targets: for interference both jobs'
    speeds count as rows; for runtime one row per sample."""
    out = predictor.predict_interval(rows)
    if predictor.task in PER_SAMPLE_TASKS:
        truth = samples(rows)["e2e_latency_ms"].reindex(out.index).to_numpy(dtype=float)
        return truth, out.rename(columns=lambda c: c.replace("e2e_latency_ms", "y"))
    parts, truths = [], []
    for target in predictor.targets:
        parts.append(
            out[[target, f"{target}_p10", f"{target}_p90"]].set_axis(
                ["y", "y_p10", "y_p90"], axis=1
            )
        )
        truths.append(rows[target].to_numpy(dtype=float))
    return np.concatenate(truths), pd.concat(parts, ignore_index=True)


def score(predictor: TaskPredictor, rows: pd.DataFrame) -> dict[str, float]:
    """Accuracy of a fitted predictor on `rows`, plus prediction cost per row."""
    start = time.perf_counter()
    truth, predicted = truth_and_predictions(predictor, rows)
    elapsed = time.perf_counter() - start
    metrics = regression_metrics(truth, predicted["y"], predicted["y_p10"], predicted["y_p90"])
    metrics["predict_us_per_row"] = elapsed / len(rows) * 1e6
    return metrics


def fit_and_score(
    task: str, family: str, train: pd.DataFrame, test: pd.DataFrame, **params: object
) -> tuple[TaskPredictor, dict[str, float]]:
    start = time.perf_counter()
    predictor = make_predictor(task, family, **params).fit(train)
    fit_s = time.perf_counter() - start
    metrics = score(predictor, test)
    metrics["fit_s"] = fit_s
    return predictor, metrics


def choose_family(task: str, kind: str, rows: pd.DataFrame, families: tuple[str, ...] = ()) -> str:
    """`--model auto`: the family with the lowest MAPE on one validation fold carved out of
    `rows` (the training data only; the caller's test data is never seen)."""
    families = families or FAMILIES[task]
    train, valid = next(folds(rows, kind, AUTO_SPLIT[kind], n_folds=4, seed=1))
    results = {
        family: fit_and_score(task, family, rows.iloc[train], rows.iloc[valid])[1]["mape"]
        for family in families
    }
    return min(results, key=results.__getitem__)


def cross_validate(
    task: str, kind: str, rows: pd.DataFrame, model: str, split: str, **params: object
) -> dict[str, float]:
    """Pooled metrics over the folds of `split`; with model "auto" each fold picks its family
    on its own training rows."""
    truths, predictions, fit_s = [], [], 0.0
    for train_idx, test_idx in folds(rows, kind, split):
        train, test = rows.iloc[train_idx], rows.iloc[test_idx]
        family = choose_family(task, kind, train) if model == "auto" else model
        start = time.perf_counter()
        predictor = make_predictor(task, family, **params).fit(train)
        fit_s += time.perf_counter() - start
        truth, predicted = truth_and_predictions(predictor, test)
        truths.append(truth)
        predictions.append(predicted)
    pred = pd.concat(predictions, ignore_index=True)
    out = regression_metrics(np.concatenate(truths), pred["y"], pred["y_p10"], pred["y_p90"])
    out["fit_s"] = fit_s
    return out
