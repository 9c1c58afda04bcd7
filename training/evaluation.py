"""Scoring a predictor on contract rows, and choosing a model family by validation."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable

import numpy as np
import pandas as pd

from perfcast.datasets.splits import folds
from perfcast.features.graphs import samples
from perfcast.predictor import FAMILIES, TASK_SPECS, TaskPredictor, make_predictor
from perfcast.predictor.backend import PER_SAMPLE_TASKS
from perfcast.training.metrics import regression_metrics
from perfcast.units import pct

# told what is being fitted now ("fcn on 3,612 rows (2/2)"): a progress display, or nothing
Step = Callable[[str], None]


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


def validate_families(
    task: str,
    kind: str,
    rows: pd.DataFrame,
    families: tuple[str, ...] = (),
    step: Step | None = None,
) -> dict[str, float]:
    """`--model auto`'s evidence: each family's MAPE (%) on one validation fold carved out of
    `rows` (the training data only; the caller's test data is never seen)."""
    families = families or FAMILIES[task]
    train, valid = next(folds(rows, kind, TASK_SPECS[task].auto_split, n_folds=4, seed=1))
    results = {}
    for i, family in enumerate(families, 1):
        if step:
            step(f"auto: validating {family} on {len(train):,} rows ({i}/{len(families)})")
        results[family] = fit_and_score(task, family, rows.iloc[train], rows.iloc[valid])[1]["mape"]
    return results


def best_family(scores: dict[str, float]) -> str:
    return min(scores, key=scores.__getitem__)


def choose_family(
    task: str,
    kind: str,
    rows: pd.DataFrame,
    families: tuple[str, ...] = (),
    step: Step | None = None,
) -> str:
    """`--model auto`: the family with the lowest MAPE on one validation fold of `rows`."""
    return best_family(validate_families(task, kind, rows, families, step))


def describe_choice(scores: dict[str, float], what: str = "validation MAPE") -> str:
    """`auto chose gbm (validation MAPE: gbm 7.8%, fcn 12%)`."""
    shown = ", ".join(f"{family} {pct(mape)}" for family, mape in scores.items())
    return f"auto chose {best_family(scores)} ({what}: {shown})"


def describe_folds(chosen: list[str]) -> str:
    """What auto chose fold by fold: `auto chose gbm in 4 folds, fcn in 1`."""
    counts = Counter(chosen).most_common()
    parts = [f"{family} in {n} fold{'s' * (n != 1)}" for family, n in counts]
    return "auto chose " + ", ".join(parts)


def _prefixed(step: Step | None, prefix: str) -> Step | None:
    if step is None:
        return None
    return lambda what: step(f"{prefix}: {what}")


def cross_validate(
    task: str,
    kind: str,
    rows: pd.DataFrame,
    model: str,
    split: str,
    step: Step | None = None,
    chosen: list[str] | None = None,
    **params: object,
) -> dict[str, float]:
    """Pooled metrics over the folds of `split`; with model "auto" each fold picks its family
    on its own training rows (appended to `chosen`, fold by fold)."""
    truths, predictions, fit_s = [], [], 0.0
    parts = list(folds(rows, kind, split))
    for fold, (train_idx, test_idx) in enumerate(parts, 1):
        train, test = rows.iloc[train_idx], rows.iloc[test_idx]
        where = f"fold {fold}/{len(parts)}"
        family = model
        if model == "auto":
            family = choose_family(task, kind, train, step=_prefixed(step, where))
        if chosen is not None:
            chosen.append(family)
        if step:
            step(f"{where}: fitting {family} on {len(train):,} rows")
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
