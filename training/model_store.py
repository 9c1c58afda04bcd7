"""MLflow: tracking store, the pyfunc model perfcast logs, and the registry's `champion` alias.

The default store is an embedded SQLite file under perfcast's data directory
(`$PERFCAST_HOME`, else `var/` in the project); `MLFLOW_TRACKING_URI` overrides it. What the
trainer registers is exactly what the server loads: a pyfunc model answering
`predict(DataFrame) -> DataFrame` with `<target>`, `<target>_p10`, `<target>_p90`.
"""

from __future__ import annotations

import logging
import os
import socket
import warnings
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote, urlparse

import mlflow
import pandas as pd
from mlflow.exceptions import MlflowException
from mlflow.tracking import MlflowClient

from perfcast.errors import PerfcastError
from perfcast.paths import state_dir
from perfcast.predictor.base import MODEL_FORMAT, TaskPredictor

EXPERIMENT = "perfcast"
CHAMPION = "champion"
FORMAT_TAG = "perfcast.model_format"  # run tag: the MODEL_FORMAT the model was saved in
_FORMAT_WARNED: set[tuple[str, str]] = set()  # (task, version): say it once per process
logger = logging.getLogger("perfcast")


def model_name(task: str) -> str:
    return f"perfcast-{task}"


_EXPORTED: str | None = None  # the MLFLOW_TRACKING_URI that mlflow.set_tracking_uri exported


def configure() -> str:
    """Point MLflow at the tracking store and the perfcast experiment; returns the URI: the
    user's MLFLOW_TRACKING_URI, else the store under the state directory. mlflow exports the
    URI it is set to into the environment, where it is not the user's: read as theirs, it
    pinned a process to its first store, whatever PERFCAST_HOME said later."""
    global _EXPORTED
    given = os.environ.get("MLFLOW_TRACKING_URI")
    if given is not None and given == _EXPORTED:
        given = None
    uri = given or f"sqlite:///{state_dir() / 'mlflow.db'}"
    logging.getLogger("alembic").setLevel(logging.WARNING)
    logging.getLogger("mlflow").setLevel(logging.WARNING)
    warnings.filterwarnings("ignore", module="mlflow")
    mlflow.set_tracking_uri(uri)
    mlflow.set_registry_uri(uri)
    if given is None:
        _EXPORTED = os.environ.get("MLFLOW_TRACKING_URI")
    if mlflow.get_experiment_by_name(EXPERIMENT) is None:
        artifacts = (state_dir() / "mlartifacts").as_uri() if uri.startswith("sqlite") else None
        mlflow.create_experiment(EXPERIMENT, artifact_location=artifacts)
    mlflow.set_experiment(EXPERIMENT)
    return uri


class PerfcastModel(mlflow.pyfunc.PythonModel):
    """The pyfunc wrapper around a fitted task predictor."""

    def __init__(self, predictor: TaskPredictor) -> None:
        self.predictor = predictor

    def predict(self, context: object, model_input: pd.DataFrame, params: dict | None = None):
        return self.predictor.predict_interval(model_input).reset_index(drop=True)


@dataclass(frozen=True)
class Champion:
    task: str
    predictor: TaskPredictor
    version: str
    run_id: str
    family: str
    trained_at: str
    metrics: dict[str, float]


class ChampionLoadError(PerfcastError):
    """The registered champion's artifact cannot be loaded (truncated, corrupt, unreadable)."""

    def __init__(self, task: str, version: str, location: str, cause: Exception) -> None:
        self.task, self.version, self.location = task, version, location
        super().__init__(
            f"the {task} champion (model version {version}) cannot be loaded from {location}: "
            f"{type(cause).__name__}: {str(cause)[:200]}; train again "
            f"(`perfcast train --task {task}`) to replace it"
        )


def load_champion(task: str) -> Champion | None:
    """The registered champion of `task`, or None when there is none, or when it was saved by
    a perfcast whose models had another format (it is then replaced by the next training)."""
    configure()
    client = MlflowClient()
    try:
        version = client.get_model_version_by_alias(model_name(task), CHAMPION)
    except MlflowException:
        return None
    run = client.get_run(version.run_id)
    saved_format = run.data.tags.get(FORMAT_TAG)
    if saved_format != str(MODEL_FORMAT):
        if (task, version.version) in _FORMAT_WARNED:
            return None
        _FORMAT_WARNED.add((task, version.version))
        logger.warning(
            "ignoring the champion of %s (version %s): saved in model format %s, this perfcast "
            "reads format %s; train again to replace it",
            model_name(task), version.version, saved_format or "unknown", MODEL_FORMAT,
        )  # fmt: skip
        return None
    try:
        model = mlflow.pyfunc.load_model(f"models:/{model_name(task)}@{CHAMPION}")
        predictor = model.unwrap_python_model().predictor
    except Exception as err:  # a truncated or corrupt artifact: anything unpickling can raise
        where = _local(client.get_model_version_download_uri(model_name(task), version.version))
        pickle = next(where.rglob("python_model.pkl"), None) if where.is_dir() else None
        raise ChampionLoadError(task, str(version.version), str(pickle or where), err) from None
    return Champion(
        task=task,
        predictor=predictor,
        version=str(version.version),
        run_id=version.run_id,
        family=run.data.params.get("model", "unknown"),
        trained_at=pd.Timestamp(run.info.start_time, unit="ms", tz="UTC").isoformat(),
        metrics={k: float(v) for k, v in run.data.metrics.items()},
    )


HOST_TAG, PID_TAG = "perfcast.host", "perfcast.pid"  # who runs a training, to find orphans


def tag_owner() -> None:
    """Tag the active run with this host and process, so a killed training can be told from a
    running one."""
    mlflow.set_tags({HOST_TAG: socket.gethostname(), PID_TAG: str(os.getpid())})


def close_orphaned_runs() -> list[str]:
    """Mark KILLED the runs left RUNNING by trainings on this host whose process is gone;
    returns their ids."""
    configure()
    client = MlflowClient()
    experiment = client.get_experiment_by_name(EXPERIMENT)
    if experiment is None:
        return []
    runs = client.search_runs(
        [experiment.experiment_id], filter_string="attributes.status = 'RUNNING'"
    )
    closed = []
    for run in runs:
        tags = run.data.tags
        if tags.get(HOST_TAG) != socket.gethostname() or not tags.get(PID_TAG, "").isdigit():
            continue  # another machine's run, or one from before the tags: not ours to judge
        if not _alive(int(tags[PID_TAG])):
            client.set_terminated(run.info.run_id, status="KILLED")
            closed.append(run.info.run_id)
    return closed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _local(uri: str) -> Path:
    """A file: URI or a plain path as a local path."""
    return Path(unquote(urlparse(uri).path)) if uri.startswith("file:") else Path(uri)


def set_champion(task: str, version: str) -> None:
    MlflowClient().set_registered_model_alias(model_name(task), CHAMPION, version)


def require_champion(task: str) -> Champion:
    champion = load_champion(task)
    if champion is None:
        raise PerfcastError(
            f"no champion model for task {task}; train one with `perfcast train --task {task}`"
        )
    return champion
