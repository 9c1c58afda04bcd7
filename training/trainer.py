"""Offline training: fit on a training part, score on a held-out part, log everything to
MLflow, register the model, and move the `champion` alias only when it wins on the same
held-out rows."""

from __future__ import annotations

import json
import logging
import time
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import mlflow
import numpy as np
import pandas as pd
from mlflow.models import ModelSignature, infer_signature
from mlflow.tracking import MlflowClient
from mlflow.types.schema import ColSpec, Schema
from mlflow.utils import logging_utils

from perfcast import datasets
from perfcast.datasets.contract import SCHEMAS
from perfcast.datasets.splits import folds
from perfcast.errors import DataNotFoundError, PerfcastError
from perfcast.features.graphs import samples
from perfcast.predictor import DEFAULT_FAMILY, FAMILIES, make_predictor
from perfcast.predictor.backend import PER_SAMPLE_TASKS, TASK_TABLES
from perfcast.predictor.base import MODEL_FORMAT
from perfcast.predictor.tasks import TASK_SPECS
from perfcast.training import by_source, model_store
from perfcast.training.evaluation import best_family, describe_choice, score, validate_families
from perfcast.units import duration, number, pct

# What `perfcast serve` trains when a task has no champion: public data, or ours (measured-*).
# Without the data folder the package's starter set stands in (datasets/embedded/); sia-scaling
# and decima-tpch-stages state no licence, are never shipped, and are left out where they cannot
# be read or fetched (default_data).
DEFAULT_DATA = {name: spec.default_data for name, spec in TASK_SPECS.items()}


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


def default_data(task: str) -> tuple[str, tuple[str, ...]]:
    """The task's default datasets that can be read here (the full files, the package's starter
    table, or a download), and a note for each one left out. All left out is an error."""
    kept, notes = [], []
    for name in DEFAULT_DATA[task].split(","):
        try:
            datasets.load(name)
        except DataNotFoundError as err:
            notes.append(f"{task}: trained without {name}{_not_shipped(name)}: {err}")
        else:
            kept.append(name)
    if not kept:
        raise DataNotFoundError(
            f"no dataset of {task}'s default data ({DEFAULT_DATA[task]}) can be read here:\n"
            + "\n".join(notes)
        )
    return ",".join(kept), tuple(notes)


def _not_shipped(name: str) -> str:
    from perfcast.datasets.starter import licences, shippable

    spec = datasets.get(name)
    if shippable(spec):
        return ""
    return f" (its licence, {'/'.join(sorted(licences(spec)))}, keeps it out of the package)"


def data_origin(data: str) -> str:
    """Where each dataset of `data` is read from here: `name:present|embedded|fetchable`
    (a file path: itself)."""
    if Path(data).suffix in (".csv", ".parquet"):
        return data
    return ",".join(f"{n}:{datasets.get(n.strip()).status()}" for n in data.split(","))


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
    # what the promotion decision should be read with (an unloadable champion replaced, the
    # comparison rows, a held-out error worse than the baseline, what auto chose)
    notes: tuple[str, ...] = ()
    # the decision and why, in one line (also the run's perfcast.promotion tag):
    # "kept v3: new model 206% vs 5.1% on the same 1,204 held-out rows"
    promotion: str = ""


DATA_ORIGIN_TAG = "perfcast.data_origin"  # e.g. pollux-scaling:embedded,gavel-scaling:present
PROMOTION_TAG = "perfcast.promotion"  # the promotion line, on the run and its model version
AUTO_CHOICE_TAG = "perfcast.auto_choice"  # `--model auto`: which family and on what evidence

# told when a stage of a training starts: ("data" | "choose" | "fit" | "score" | "register" |
# "compare", what it does), to show progress; a stage ends when the next one starts
Stage = Callable[[str, str], None]


def _no_stage(stage: str, what: str) -> None:
    pass


@contextmanager
def quiet_third_party() -> Iterator[None]:
    """Other libraries' chatter stays out of a training's output: their Python warnings, and
    MLflow's notices (the CloudPickle warning on every log_model, "Successfully registered
    model ...", "Created version ..."). Errors still raise; warnings perfcast's own modules
    raise still show."""
    mlflow_logger = logging.getLogger("mlflow")
    level = mlflow_logger.level
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", module=r"(?!perfcast\.)")
        mlflow_logger.setLevel(logging.ERROR)
        try:
            yield
        finally:
            mlflow_logger.setLevel(level)


@contextmanager
def _mlflow_silent() -> Iterator[None]:
    """MLflow's eprint lines (registration notices) go nowhere for the duration."""
    logging_utils.disable_logging()
    try:
        yield
    finally:
        logging_utils.enable_logging()


def train(
    task: str, data: str, model: str = "auto", split: str = "random", stage: Stage | None = None
) -> TrainResult:
    """Fit, score on the held-out fifth, register, and promote on a win; `stage` is told each
    stage as it starts (progress)."""
    with quiet_third_party():
        return _train(task, data, model, split, stage or _no_stage)


def _train(task: str, data: str, model: str, split: str, stage: Stage) -> TrainResult:
    kind = TASK_TABLES[task][0]
    stage("data", f"reading {data}")
    rows = load_rows(task, data)
    train_rows, test_rows = holdout(rows, kind, split)
    notes = []
    family, chosen_by_source = model, None
    if model == "auto":
        # chosen as the champion is: by how each family does on sources it never saw, where the
        # task's data has a split by source; else on a random validation fold
        stage("choose", f"auto: validating {', '.join(FAMILIES[task])}")
        step = lambda what: stage("choose", what)  # noqa: E731
        chosen_by_source = by_source.choose(task, FAMILIES[task], rows, step)
        if chosen_by_source is not None:
            scores = {f: m[f"{by_source.PREFIX}mape"] for f, m in chosen_by_source.items()}
            what = f"{by_source.SPLIT_NAMES[task]} MAPE"
        else:
            scores = validate_families(task, kind, train_rows, step=step)
            what = "validation MAPE"
        family = best_family(scores)
        notes.append(describe_choice(scores, what))
    model_store.configure()
    model_store.close_orphaned_runs()
    with mlflow.start_run(run_name=f"{task}-{family}") as run:
        model_store.tag_owner()
        mlflow.log_params(
            {"task": task, "model": family, "requested_model": model, "data": data,
             "split": split, "train_rows": len(train_rows), "test_rows": len(test_rows)}
        )  # fmt: skip
        mlflow.set_tag(model_store.FORMAT_TAG, str(MODEL_FORMAT))
        mlflow.set_tag(DATA_ORIGIN_TAG, data_origin(data))
        stage("fit", f"{family} on {len(train_rows):,} training rows")
        start = time.perf_counter()
        predictor = make_predictor(task, family).fit(train_rows)
        fit_s = time.perf_counter() - start
        stage("score", f"on {len(test_rows):,} held-out rows")
        metrics = {**score(predictor, test_rows), "fit_s": fit_s}
        if chosen_by_source is not None:  # worked out while choosing
            metrics.update(chosen_by_source[family])
        elif task in by_source.SCORERS:
            stage("by source", f"{family} on each source held out (what a new cluster gets)")
            metrics.update(by_source.scores(task, family, rows))
        if model == "auto":
            mlflow.set_tag(AUTO_CHOICE_TAG, notes[0])
        mlflow.log_metrics(metrics)
        # what the fit chose for itself on held-out groups (the graph networks' epochs)
        chosen = getattr(getattr(predictor, "regressor_", None), "chosen_", None) or {}
        mlflow.log_params({f"chosen_{name}": value for name, value in chosen.items()})
        example = test_rows.drop(columns=list(TASK_TABLES[task][1])).head(20)
        if task in PER_SAMPLE_TASKS:  # a whole graph sample, not a slice of one
            first = test_rows["sample_id"].iloc[0]
            example = test_rows[test_rows["sample_id"] == first].drop(columns=["e2e_latency_ms"])
        stage("register", f"{model_store.model_name(task)} in MLflow")
        example = _signature_safe(example)
        output = predictor.predict_interval(example).reset_index(drop=True)
        mlflow.log_dict(
            {"input_columns": {c: str(t) for c, t in example.dtypes.items()},
             "output_columns": list(output.columns)},
            "feature_schema.json",
        )  # fmt: skip
        with _mlflow_silent():
            info = mlflow.pyfunc.log_model(
                name="model",
                python_model=model_store.PerfcastModel(predictor),
                signature=_signature(task, example, output),
                input_example=example,
                registered_model_name=model_store.model_name(task),
                pip_requirements=model_store.pip_requirements(),
            )
    version = str(info.registered_model_version)
    model_store.record_sha256(task, version)
    baseline = baseline_mape(task, train_rows, test_rows)
    if metrics["mape"] >= baseline:
        notes.append(
            f"warning: held-out MAPE {metrics['mape']:.1f}% is no better than predicting the "
            f"training median ({baseline:.1f}%)"
        )
    stage("compare", "with the champion on the same held-out rows")
    try:
        champion = model_store.load_champion(task)
    except model_store.ChampionLoadError as err:
        champion = None
        notes.append(f"replacing a champion that cannot be loaded: {err}")
        promotion = f"promoted v{version}: the champion, v{err.version}, cannot be loaded"
    else:
        name = model_store.model_name(task)
        promotion = f"promoted v{version}: no {name} champion to compare with"
    champion_metrics = None
    promoted = True
    if champion is not None:
        rows_fair, where = comparison_rows(task, champion, train_rows, test_rows)
        notes.append(where)
        if rows_fair.empty:
            champion_metrics = {"mape": float("nan")}
            promoted = False
            promotion = (
                f"kept v{champion.version}: no held-out row is unseen by both models, so they "
                "cannot be compared fairly"
            )
        else:
            champion_metrics = score(champion.predictor, rows_fair)
            metrics = {**metrics, "mape_vs_champion_rows": score(predictor, rows_fair)["mape"]}
            challenger, held = metrics["mape_vs_champion_rows"], champion_metrics["mape"]
            promoted = bool(challenger < held)
            random_line = (
                f"new model {pct(challenger)} vs {pct(held)} MAPE on the same "
                f"{len(rows_fair):,} held-out rows"
            )
            # scored by source on the same data: that decides (random rows are the tie-break)
            decided = (
                by_source.promotion(metrics, champion.metrics) if champion.data == data else None
            )
            if decided is not None:
                promoted, why = decided
                random_line = f"{why}; {random_line}"
            verdict = (
                f"promoted v{version} over v{champion.version}"
                if promoted
                else f"kept v{champion.version}"
            )
            promotion = f"{verdict}: {random_line}"
    if promoted:
        model_store.set_champion(task, version)
    _tag_promotion(run.info.run_id, task, version, promotion)
    return TrainResult(
        task, family, run.info.run_id, version, metrics, champion_metrics, promoted, tuple(notes),
        promotion,
    )  # fmt: skip


def _tag_promotion(run_id: str, task: str, version: str, promotion: str) -> None:
    """The promotion line on the run and on its model version: MLflow says why a model is (not)
    the champion."""
    client = MlflowClient()
    client.set_tag(run_id, PROMOTION_TAG, promotion)
    client.set_model_version_tag(model_store.model_name(task), version, PROMOTION_TAG, promotion)


def comparison_rows(
    task: str, champion: model_store.Champion, train_rows: pd.DataFrame, test_rows: pd.DataFrame
) -> tuple[pd.DataFrame, str]:
    """Rows neither the challenger nor the champion was trained on, from both held-out parts
    (the champion's data too: a model that cannot predict jobs the champion knew must not win
    on rows it chose), and a sentence saying which."""
    kind = TASK_TABLES[task][0]
    data, split = champion_params(champion)
    try:
        known_rows = load_rows(task, data)
        champion_train, champion_test = holdout(known_rows, kind, split)
    except (PerfcastError, OSError):
        return (
            test_rows,
            f"the champion's training data ({data}) is not readable: compared on the new "
            "held-out rows",
        )
    both = pd.concat([test_rows, champion_test], ignore_index=True)
    both = both[~_keys(both, task).duplicated().to_numpy()]
    seen = set(_keys(train_rows, task)) | set(_keys(champion_train, task))
    fair = both[~_keys(both, task).isin(seen).to_numpy()].reset_index(drop=True)
    return fair, (
        f"compared with the champion on {len(fair)} held-out rows neither was trained on "
        f"(from this data and the champion's {data})"
    )


def champion_params(champion: model_store.Champion) -> tuple[str, str]:
    """The data and split the champion was trained with (from its MLflow run)."""
    params = mlflow.get_run(champion.run_id).data.params
    return params.get("data", DEFAULT_DATA[champion.task]), params.get("split", "random")


def _keys(rows: pd.DataFrame, task: str) -> pd.Series:
    """One identity per row (runtime: per graph sample), independent of column order."""
    if task in PER_SAMPLE_TASKS:
        return rows["sample_id"].astype(str).reset_index(drop=True)
    columns = sorted(c for c in SCHEMAS[TASK_TABLES[task][0]].columns if c in rows.columns)
    frame = rows[columns].astype(str).reset_index(drop=True)
    return pd.util.hash_pandas_object(frame, index=False)


def baseline_mape(task: str, train_rows: pd.DataFrame, test_rows: pd.DataFrame) -> float:
    """MAPE (%) of the napkin baseline: every held-out row predicted at the training median."""
    targets = TASK_TABLES[task][1]
    if task in PER_SAMPLE_TASKS:
        train_y = samples(train_rows)[targets[0]].to_numpy(dtype=float)
        test_y = samples(test_rows)[targets[0]].to_numpy(dtype=float)
    else:
        train_y = np.concatenate([train_rows[t].to_numpy(dtype=float) for t in targets])
        test_y = np.concatenate([test_rows[t].to_numpy(dtype=float) for t in targets])
    return float(np.mean(np.abs(test_y - np.median(train_y)) / np.abs(test_y)) * 100)


def _signature(task: str, example: pd.DataFrame, output: pd.DataFrame) -> ModelSignature:
    """The inferred signature with the contract's optional columns (placement, sync_time_s,
    source, ...) marked optional: `mlflow.pyfunc.load_model(...).predict(<the contract's
    required columns>)` is answered."""
    signature = infer_signature(example, output)
    columns = SCHEMAS[TASK_TABLES[task][0]].columns
    # only the contract's required columns are required (extra columns are optional too)
    inputs = [
        ColSpec(spec.type, spec.name, required=spec.name in columns and columns[spec.name].required)
        for spec in signature.inputs.inputs
    ]
    return ModelSignature(inputs=Schema(inputs), outputs=signature.outputs)


def _signature_safe(example: pd.DataFrame) -> pd.DataFrame:
    """The input example with nullable integer and boolean columns that hold missing values
    as floats: MLflow types such a column `long` (`boolean`) and then cannot cast the example's
    own NA to it (`amp` is NA where measured data is joined with a source that has none)."""
    out = example.copy()
    for column, dtype in example.dtypes.items():
        nullable = isinstance(dtype, pd.api.extensions.ExtensionDtype) and dtype.kind in "iub"
        if nullable and example[column].isna().any():
            out[column] = example[column].astype("float64")
    return out


def describe(result: TrainResult) -> str:
    """The result in a few lines: the model, its figures on sources it never saw (where the
    task has them) and on held-out rows like its training, the promotion line, then the notes
    to read it with."""
    m = result.metrics
    lines = [
        f"{result.task}: {result.family} -> model version {result.version} "
        f"(run {result.run_id[:8]})",
        f"  held-out MAPE {pct(m['mape'])}, MAE {number(m['mae'])}, p10-p90 coverage "
        f"{m['interval_coverage']:.0%}, fit {duration(m['fit_s'])}",
    ]
    if f"{by_source.PREFIX}mape" in m:  # what a new cluster should expect, first
        lines.insert(1, (
            f"  on clusters it never saw (leave one out): MAPE {pct(m['by_source_mape'])} "
            f"against perfect scaling's {pct(m['by_source_napkin_mape'])}, p10-p90 coverage "
            f"{m['by_source_coverage']:.0%}, median p90/p10 {m['by_source_width']:.2f}"
        ))  # fmt: skip
    if result.promotion:
        lines.append(f"  {result.promotion}")
    return "\n".join(lines + [f"  {note}" for note in result.notes])


def ensure_champions(tasks: list[str], echo=print) -> None:
    """Train and register the default model of every task that has no champion yet, on the
    default datasets that can be read here (saying which were left out and why)."""
    for task in tasks:
        try:
            if model_store.load_champion(task) is not None:
                continue
            why = f"no champion for {task}"
        except model_store.ChampionLoadError as err:
            why = str(err)
        data, notes = default_data(task)
        for note in notes:
            echo(note)
        echo(f"{why}: training the default model on {data} ({data_origin(data)}) ...")
        start = time.perf_counter()
        result = train(task, data, model=DEFAULT_FAMILY[task])
        echo(describe(result) + f" [{duration(time.perf_counter() - start)}]")


def result_json(result: TrainResult) -> str:
    return json.dumps(
        {"task": result.task, "model": result.family, "run_id": result.run_id,
         "version": result.version, "promoted": result.promoted, **result.metrics}
    )  # fmt: skip
