"""Offline training: fit on a training part, score on a held-out part, log everything to
MLflow, register the model, and move the `champion` alias only when it wins on the same
held-out rows."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path

import mlflow
import pandas as pd
from mlflow.models import infer_signature

from perfcast import datasets
from perfcast.datasets.splits import folds
from perfcast.errors import PerfcastError
from perfcast.predictor.backend import PER_SAMPLE_TASKS, TASK_TABLES
from perfcast.predictor.base import MODEL_FORMAT
from perfcast.training import model_store
from perfcast.training.evaluation import choose_family, fit_and_score, score

# what `perfcast serve` trains when a task has no champion (shipped public data)
DEFAULT_DATA = {
    "scaling": "pollux-scaling,gavel-scaling,muri-scaling",
    "interference": "gavel-interference",
    "runtime": "neusight-graphs",
    "query": "decima-tpch-stages,measured-cpu-tpch-sweep",
    "duration": "pollux-philly",
}


def load_rows(task: str, data: str) -> pd.DataFrame:
    """Rows for `task` from dataset names (comma-separated, concatenated) or a file path."""
    kind = TASK_TABLES[task][0]
    if Path(data).suffix in (".csv", ".parquet"):
        return datasets.read_table(data, kind=kind)
    frames = []
    for name in data.split(","):
        spec = datasets.get(name.strip())
        if spec.kind != kind:
            raise PerfcastError(
                f"dataset {spec.name} is a {spec.kind} table; task {task} needs {kind}"
            )
        frames.append(datasets.load(spec.name))
    return datasets.validate(pd.concat(frames, ignore_index=True), kind, source=data)


def holdout(rows: pd.DataFrame, kind: str, split: str, seed: int = 0) -> tuple:
    """The trainer's one held-out fold (a fifth of the rows, grouped as `split` says)."""
    train, test = next(folds(rows, kind, split, n_folds=5, seed=seed))
    return rows.iloc[train], rows.iloc[test]


@dataclass(frozen=True)
class TrainResult:
    task: str
    family: str
    run_id: str
    version: str
    metrics: dict[str, float]
    champion_metrics: dict[str, float] | None
    promoted: bool


def train(task: str, data: str, model: str = "auto", split: str = "random") -> TrainResult:
    kind = TASK_TABLES[task][0]
    rows = load_rows(task, data)
    train_rows, test_rows = holdout(rows, kind, split)
    family = choose_family(task, kind, train_rows) if model == "auto" else model
    model_store.configure()
    with mlflow.start_run(run_name=f"{task}-{family}") as run:
        mlflow.log_params(
            {"task": task, "model": family, "requested_model": model, "data": data,
             "split": split, "train_rows": len(train_rows), "test_rows": len(test_rows)}
        )  # fmt: skip
        mlflow.set_tag(model_store.FORMAT_TAG, str(MODEL_FORMAT))
        predictor, metrics = fit_and_score(task, family, train_rows, test_rows)
        mlflow.log_metrics(metrics)
        example = test_rows.drop(columns=list(TASK_TABLES[task][1])).head(20)
        if task in PER_SAMPLE_TASKS:  # a whole graph sample, not a slice of one
            first = test_rows["sample_id"].iloc[0]
            example = test_rows[test_rows["sample_id"] == first].drop(columns=["e2e_latency_ms"])
        example = _signature_safe(example)
        output = predictor.predict_interval(example).reset_index(drop=True)
        mlflow.log_dict(
            {"input_columns": {c: str(t) for c, t in example.dtypes.items()},
             "output_columns": list(output.columns)},
            "feature_schema.json",
        )  # fmt: skip
        info = mlflow.pyfunc.log_model(
            name="model",
            python_model=model_store.PerfcastModel(predictor),
            signature=infer_signature(example, output),
            input_example=example,
            registered_model_name=model_store.model_name(task),
        )
    version = str(info.registered_model_version)
    champion = model_store.load_champion(task)
    champion_metrics = score(champion.predictor, test_rows) if champion else None
    promoted = champion_metrics is None or metrics["mape"] < champion_metrics["mape"]
    if promoted:
        model_store.set_champion(task, version)
    return TrainResult(task, family, run.info.run_id, version, metrics, champion_metrics, promoted)


def _signature_safe(example: pd.DataFrame) -> pd.DataFrame:
    """The input example with nullable integer columns that hold missing values as floats:
    MLflow types such a column `long` and then cannot cast the example's own NA to it."""
    out = example.copy()
    for column, dtype in example.dtypes.items():
        nullable_int = isinstance(dtype, pd.api.extensions.ExtensionDtype) and dtype.kind in "iu"
        if nullable_int and example[column].isna().any():
            out[column] = example[column].astype("float64")
    return out


def describe(result: TrainResult) -> str:
    m = result.metrics
    text = (
        f"{result.task}: {result.family} -> model version {result.version} "
        f"(run {result.run_id[:8]}): held-out MAPE {m['mape']:.1f}%, MAE {m['mae']:.4g}, "
        f"p10-p90 coverage {m['interval_coverage']:.0%}, fit {m['fit_s']:.1f} s"
    )
    if result.champion_metrics is None:
        return text + "; no champion yet, now champion"
    verdict = "now champion" if result.promoted else "champion kept"
    return (
        text
        + f"; champion's MAPE on the same rows {result.champion_metrics['mape']:.1f}%: {verdict}"
    )


def ensure_champions(tasks: list[str], echo=print) -> None:
    """Train and register the default model of every task that has no champion yet."""
    for task in tasks:
        if model_store.load_champion(task) is not None:
            continue
        echo(f"no champion for {task}: training the default model on {DEFAULT_DATA[task]} ...")
        start = time.perf_counter()
        result = train(task, DEFAULT_DATA[task], model="gbm")
        echo(describe(result) + f" [{time.perf_counter() - start:.0f} s]")


def result_json(result: TrainResult) -> str:
    return json.dumps(
        {"task": result.task, "model": result.family, "run_id": result.run_id,
         "version": result.version, "promoted": result.promoted, **result.metrics}
    )  # fmt: skip
