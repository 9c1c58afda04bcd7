"""MLflow: tracking store, the pyfunc model perfcast logs, and the registry's `champion` alias.

The default store is an embedded SQLite file under perfcast's data directory
(`$PERFCAST_HOME`, else `var/` in the project); `MLFLOW_TRACKING_URI` overrides it. What the
trainer registers is exactly what the server loads: a pyfunc model answering
`predict(DataFrame) -> DataFrame` with `<target>`, `<target>_p10`, `<target>_p90`.

Trust: a model is a pickle, and unpickling runs code. The trainer records the sha256 of each
registered model's files as a tag of its version (`SHA256_TAG`); `load_champion` copies the
files, checks them against it, and only then unpickles the copy, so a file swapped in the store
after registration is refused. Whoever can write the tracking database can still register a
model of their own: the store is as trusted as the code (docs/serving.md, "Trust").

A home is relocatable: the default store records absolute artifact locations, so `configure`
re-roots them when the home was copied or moved (its artifacts are read and written there,
never in the folder it was copied from).
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import socket
import sqlite3
import tempfile
import warnings
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote, urlparse

import mlflow
import pandas as pd
from mlflow.exceptions import MlflowException
from mlflow.tracking import MlflowClient

from perfcast.errors import PerfcastError
from perfcast.paths import shown, state_dir
from perfcast.predictor.base import MODEL_FORMAT, TaskPredictor

EXPERIMENT = "perfcast"
CHAMPION = "champion"
FORMAT_TAG = "perfcast.model_format"  # run tag: the MODEL_FORMAT the model was saved in
SHA256_TAG = "perfcast.sha256"  # model version tag: the sha256 of its files (`artifact_sha256`)
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
    if given is None:
        _rehome(state_dir() / "mlflow.db", state_dir() / "mlartifacts")
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


# (table, column) of the default store that hold an artifact location
_LOCATIONS = (
    ("experiments", "artifact_location"),
    ("runs", "artifact_uri"),
    ("model_versions", "storage_location"),
    ("logged_models", "artifact_location"),
)


def _rehome(db: Path, artifacts: Path) -> None:
    """Re-root the artifact locations of the store `db` at `artifacts` when they point at the
    `mlartifacts` folder of another home (this one was copied or moved). MLflow has no API to
    change an experiment's artifact location; its schema stores them as plain text."""
    if not db.exists():
        return
    here = artifacts.as_uri()
    with sqlite3.connect(db) as con:
        try:
            row = con.execute(
                "SELECT artifact_location FROM experiments WHERE name = ?", (EXPERIMENT,)
            ).fetchone()
        except sqlite3.OperationalError:  # a new or foreign database: nothing of ours yet
            return
        if row is None or row[0] == here or not str(row[0]).endswith("/mlartifacts"):
            return
        there = str(row[0])
        logger.info("this home was moved or copied: artifacts re-rooted from %s", there)
        for table, column in _LOCATIONS:
            try:
                con.execute(
                    f"UPDATE {table} SET {column} = ? || substr({column}, ?) "
                    f"WHERE substr({column}, 1, ?) = ?",
                    (here, len(there) + 1, len(there), there),
                )
            except sqlite3.OperationalError:  # a table this MLflow version does not have
                continue


# MLflow rewrites this one in place whenever the model is loaded by a models:/ URI (it names
# the registry version, and is never executed)
_UNHASHED = frozenset({"registered_model_meta"})


def artifact_sha256(directory: Path) -> str:
    """The sha256 of a model's files: each relative path and its bytes, in path order."""
    digest = hashlib.sha256()
    files = (p for p in directory.rglob("*") if p.is_file() and p.name not in _UNHASHED)
    for path in sorted(files):
        digest.update(path.relative_to(directory).as_posix().encode() + b"\0")
        with path.open("rb") as f:
            for block in iter(lambda: f.read(2**20), b""):
                digest.update(block)
        digest.update(b"\0")
    return digest.hexdigest()


def record_sha256(task: str, version: str) -> str:
    """Tag the registered model `version` of `task` with the sha256 of its files; returns it."""
    client = MlflowClient()
    with tempfile.TemporaryDirectory(prefix="perfcast-model-") as tmp:
        files = _copy(client.get_model_version_download_uri(model_name(task), version), tmp)
        digest = artifact_sha256(files)
    client.set_model_version_tag(model_name(task), version, SHA256_TAG, digest)
    return digest


def pip_requirements() -> list[str]:
    """What loading a perfcast model needs: perfcast itself brings the rest. (MLflow's
    inference from the training process pinned test packages: hypothesis, pytest, trio.)"""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return [f"perfcast=={version('perfcast')}"]
    except PackageNotFoundError:  # pragma: no cover - run from a tree that was never installed
        return ["perfcast"]


def _copy(uri: str, destination: str) -> Path:
    """The model files at `uri` copied under `destination` (a local folder, or any MLflow
    artifact store); returns the copy's folder."""
    local = _local(uri)
    if uri.startswith("file:") or local.is_absolute():
        if not local.is_dir():
            raise FileNotFoundError(f"no model files at {shown(local)}")
        target = Path(destination) / "model"
        shutil.copytree(local, target)
        return target
    return Path(mlflow.artifacts.download_artifacts(artifact_uri=uri, dst_path=destination))


def reopen() -> None:
    """Forget MLflow's open stores (it keeps one per URI for the process's life, with its
    database connections): the next call opens the store afresh. After the database file was
    replaced or restored under a running service, the kept connections answered "no such
    table" until a restart."""
    from mlflow.tracking._model_registry.registry import ModelRegistryStoreRegistry
    from mlflow.tracking._tracking_service.registry import TrackingStoreRegistry

    TrackingStoreRegistry._get_store_with_resolved_uri.cache_clear()
    ModelRegistryStoreRegistry._get_store_with_resolved_uri.cache_clear()


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
    # the data it was trained on, and where each table came from (shared folder, embedded
    # starter set, download): the run's `data` parameter and `perfcast.data_origin` tag
    data: str = "unknown"
    data_origin: str | None = None


class ChampionLoadError(PerfcastError):
    """The registered champion's artifact cannot be loaded (truncated, corrupt, unreadable)."""

    def __init__(self, task: str, version: str, location: str, cause: Exception) -> None:
        self.task, self.version, self.location = task, version, location
        super().__init__(
            f"the {task} champion (model version {version}) cannot be loaded from {location}: "
            f"{type(cause).__name__}: {str(cause)[:200]}; train again "
            f"(`perfcast train --task {task}`) to replace it"
        )


class ArtifactMismatch(Exception):
    """A model's files differ from those registered."""


class ChampionIntegrityError(ChampionLoadError):
    """The champion's files are not the ones registered: their sha256 differs from the one
    recorded at registration (or none was). They are never unpickled."""

    def __init__(self, task: str, version: str, location: str, recorded: str | None) -> None:
        why = "do not match the sha256 recorded" if recorded else "have no sha256 recorded"
        cause = ArtifactMismatch(
            f"its files {why} when it was registered, so they were not unpickled "
            "(unpickling runs code)"
        )
        super().__init__(task, version, location, cause)


def _canary(predictor: object, files: Path) -> None:
    """Predict the model's own input example: a champion that loads but cannot answer (a
    predictor of None, a broken pickle of the right shape) fails here, not on every request."""
    example = mlflow.models.Model.load(str(files)).load_input_example(str(files))
    if example is None:
        raise ValueError("the model has no input example to predict")
    out = predictor.predict_interval(example)  # type: ignore[attr-defined]
    values = out.select_dtypes("number").to_numpy(dtype=float)
    if len(out) == 0 or not values.size or not (values == values).all():
        raise ValueError("its canary prediction (its own input example) is empty or NaN")


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
    uri = client.get_model_version_download_uri(model_name(task), version.version)
    with tempfile.TemporaryDirectory(prefix="perfcast-model-") as tmp:
        try:
            files = _copy(uri, tmp)
        except Exception as err:  # the store's files are gone or unreadable
            raise ChampionLoadError(task, str(version.version), "the model store", err) from None
        recorded = version.tags.get(SHA256_TAG)
        if recorded is None or artifact_sha256(files) != recorded:
            where = shown(_local(uri))
            raise ChampionIntegrityError(task, str(version.version), where, recorded)
        try:
            # MLflow's own check of the model's pip requirements against this environment
            # scans every installed distribution (~2 s of CPU, once per process); the format
            # tag above is the check that matters, the requirement is only perfcast itself
            model = mlflow.pyfunc.load_model(str(files), suppress_warnings=True)
            predictor = model.unwrap_python_model().predictor
            _canary(predictor, files)
        except Exception as err:  # a corrupt artifact: anything unpickling can raise
            raise ChampionLoadError(task, str(version.version), shown(_local(uri)), err) from None
    return Champion(
        task=task,
        predictor=predictor,
        version=str(version.version),
        run_id=version.run_id,
        family=run.data.params.get("model", "unknown"),
        trained_at=pd.Timestamp(run.info.start_time, unit="ms", tz="UTC").isoformat(),
        metrics={k: float(v) for k, v in run.data.metrics.items()},
        data=run.data.params.get("data", "unknown"),
        data_origin=run.data.tags.get("perfcast.data_origin"),
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
