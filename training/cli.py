"""`perfcast train` and `perfcast evaluate`."""

from __future__ import annotations

import json
import time
from types import TracebackType
from typing import Annotated

import typer
from rich.console import Console
from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

from perfcast.predictor import FAMILIES, TASKS
from perfcast.predictor.backend import TASK_TABLES
from perfcast.units import duration, number, pct

# The trainer, MLflow and the models load inside the commands: `perfcast --help` stays fast.

app = typer.Typer()
console = Console(stderr=True)

TASK_HELP = f"Task: {'|'.join(TASKS)}."
SPLIT_HELP = "Held-out split: random, job, gpu_type, ... (an unknown name lists them all)."
MODEL_HELP = (
    "Model family, per task: "
    + "; ".join(f"{task} {'|'.join(names)}" for task, names in FAMILIES.items())
    + "; or auto (chosen by source where the data has sources, else by validation)."
)


class Stages:
    """A long job's stages as they go: a spinner line naming the stage, what it does now and
    its time so far; and, as each stage ends, a line that stays (`  fit       gbm on 4,816
    training rows  8.1 s`), which is also all a pipe or a log file sees. Called as
    `stages(stage, what)` when a stage starts, or again with the same stage for a sub-step."""

    def __init__(self, out: Console) -> None:
        self.out = out
        self.bar = Progress(
            SpinnerColumn(),
            TextColumn("{task.fields[stage]:<9}"),
            TextColumn("{task.description}"),
            TimeElapsedColumn(),
            console=out,
            transient=True,
        )
        self.task = self.bar.add_task("", stage="", total=None)
        self.current: tuple[str, str, float] | None = None

    def __enter__(self) -> Stages:
        if self.out.is_terminal:  # piped: only the lines that stay (a live bar adds blanks)
            self.bar.start()
        return self

    def __call__(self, stage: str, what: str) -> None:
        if self.current is None or self.current[0] != stage:
            self._finish()
            self.current = (stage, what, time.perf_counter())
        self.bar.update(self.task, stage=stage, description=what)

    def _finish(self) -> None:
        if self.current is not None:
            stage, what, start = self.current
            self.out.print(
                f"  {stage:<9} {what}  [dim]{duration(time.perf_counter() - start)}[/]",
                highlight=False,
            )
            self.current = None

    def __exit__(
        self, kind: type[BaseException] | None, err: BaseException | None, tb: TracebackType | None
    ) -> None:
        if kind is None:
            self._finish()
        if self.bar.live.is_started:
            self.bar.stop()


def _shown(key: str, value: object) -> str:
    """An evaluate figure as a person reads it: percents, durations, plain numbers."""
    if not isinstance(value, float):
        return str(value)
    if key == "mape":
        return pct(value)
    if key == "interval_coverage":
        return f"{value:.0%}"
    if key == "fit_s":
        return duration(value)
    if key == "predict_us_per_row":
        return duration(value * 1e-6)
    return number(value) if abs(value) >= 1 else f"{value:.3g}"


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
    console.print(f"training {task} ({model}):", highlight=False)
    with Stages(console) as stages:
        data = data or trainer.DEFAULT_DATA[task]
        result = trainer.train(task, data, model=model, split=split, stage=stages)
    console.print(trainer.describe(result), highlight=False, soft_wrap=True)
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
    from perfcast.training.evaluation import (
        best_family,
        cross_validate,
        describe_choice,
        describe_folds,
        fit_and_score,
        validate_families,
    )

    _check_task(task)
    kind = TASK_TABLES[task][0]
    if model != "auto" and model not in FAMILIES[task]:
        raise typer.BadParameter(f"model must be auto or one of {', '.join(FAMILIES[task])}")
    chose = ""
    with trainer.quiet_third_party(), Stages(console) as stages:
        stages("data", f"reading {train_data}")
        rows = trainer.load_rows(task, train_data)
        if test_data:
            test_rows = trainer.load_rows(task, test_data)
            family = model
            if model == "auto":
                stages("choose", f"auto: validating {', '.join(FAMILIES[task])}")
                scores = validate_families(
                    task, kind, rows, step=lambda what: stages("choose", what)
                )
                family, chose = best_family(scores), describe_choice(scores)
            stages("fit", f"{family} on {len(rows):,} rows, scored on {len(test_rows):,}")
            metrics = fit_and_score(task, family, rows, test_rows)[1]
        else:
            chosen: list[str] = []
            stages("folds", f"cross-validating {model} by {split}")
            metrics = cross_validate(
                task, kind, rows, model, split, step=lambda what: stages("folds", what),
                chosen=chosen,
            )  # fmt: skip
            # one family in every fold names it; several stay "auto" (the line below says which)
            family = chosen[0] if len(set(chosen)) == 1 else model
            chose = describe_folds(chosen) if model == "auto" else ""
    if chose:
        console.print(chose, highlight=False)
    metrics = {"task": task, "model": family, **metrics}
    for key, value in metrics.items():
        console.print(f"{key:>20}: {_shown(key, value)}", highlight=False)
    if as_json:
        print(json.dumps(metrics))
