"""`perfcast train` and `perfcast evaluate`."""

from __future__ import annotations

import json
from typing import Annotated

import typer
from rich.console import Console

from perfcast.predictor import FAMILIES, TASKS
from perfcast.predictor.backend import TASK_TABLES

# The trainer, MLflow and the models load inside the commands: `perfcast --help` stays fast.

app = typer.Typer()
console = Console(stderr=True)

TASK_HELP = f"Task: {'|'.join(TASKS)}."
SPLIT_HELP = "Held-out split: random, job, gpu_type, ... (an unknown name lists them all)."
MODEL_HELP = (
    "Model family, per task: "
    + "; ".join(f"{task} {'|'.join(names)}" for task, names in FAMILIES.items())
    + "; or auto (chosen by validation)."
)


def _check_task(task: str) -> None:
    if task not in TASKS:
        raise typer.BadParameter(f"unknown task {task!r}; expected one of {', '.join(TASKS)}")


@app.command()
def train(
    task: Annotated[str, typer.Option(help=TASK_HELP)],
    data: Annotated[
        str | None,
        typer.Option(
            help="Dataset name(s), comma-separated, or a .csv/.parquet file. "
            "Default: the task's shipped public data."
        ),
    ] = None,
    model: Annotated[str, typer.Option(help=MODEL_HELP)] = "auto",
    split: Annotated[str, typer.Option(help=SPLIT_HELP)] = "random",
    as_json: Annotated[bool, typer.Option("--json", help="Last stdout line: JSON result.")] = False,
) -> None:
    """Train a model, log it to MLflow, register it as perfcast-<task>, and make it the
    champion if it beats the current one on the same held-out rows."""
    from perfcast.training import trainer

    _check_task(task)
    with console.status(f"training {task} ({model}) ..."):
        result = trainer.train(task, data or trainer.DEFAULT_DATA[task], model=model, split=split)
    console.print(trainer.describe(result))
    if as_json:
        print(trainer.result_json(result))


@app.command()
def evaluate(
    task: Annotated[str, typer.Option(help=TASK_HELP)],
    train_data: Annotated[
        str, typer.Option("--train", help="Training data: dataset name(s) or file.")
    ],
    test_data: Annotated[
        str | None, typer.Option("--test", help="Test data; omit to cross-validate on --train.")
    ] = None,
    model: Annotated[str, typer.Option(help=MODEL_HELP)] = "auto",
    split: Annotated[
        str, typer.Option(help="Cross-validation split without --test; " + SPLIT_HELP.lower())
    ] = "random",
    as_json: Annotated[
        bool, typer.Option("--json", help="Last stdout line: JSON metrics.")
    ] = False,
) -> None:
    """Fit on TRAIN and score TEST (or cross-validate on TRAIN with --split). Prints n, mape
    (percent), mae, rmse, r2, spearman, interval_coverage, fit_s, predict_us_per_row."""
    from perfcast.training import trainer
    from perfcast.training.evaluation import choose_family, cross_validate, fit_and_score

    _check_task(task)
    kind = TASK_TABLES[task][0]
    rows = trainer.load_rows(task, train_data)
    if model != "auto" and model not in FAMILIES[task]:
        raise typer.BadParameter(f"model must be auto or one of {', '.join(FAMILIES[task])}")
    with console.status(f"evaluating {task} ..."):
        if test_data:
            family = choose_family(task, kind, rows) if model == "auto" else model
            metrics = fit_and_score(task, family, rows, trainer.load_rows(task, test_data))[1]
        else:
            family, metrics = model, cross_validate(task, kind, rows, model, split)
    metrics = {"task": task, "model": family, **metrics}
    for key, value in metrics.items():
        console.print(
            f"{key:>20}: {value:.4g}" if isinstance(value, float) else f"{key:>20}: {value}"
        )
    if as_json:
        print(json.dumps(metrics))
