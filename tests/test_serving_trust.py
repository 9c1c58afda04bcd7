"""What the service trusts in its model store: only files whose sha256 was recorded when they
were registered, only a champion that answers its own canary prediction, a reload that keeps
the working model when the new one fails, a home that can be copied and serves (and writes)
only its own files, and a model that asks only for perfcast to be loaded. Real models on real
public data (muri-scaling)."""

from __future__ import annotations

import os
import pickle
import shutil
from pathlib import Path

import mlflow
import pandas as pd
import pytest
from fastapi.testclient import TestClient
from mlflow.tracking import MlflowClient

from perfcast.datasets.fetch import shared_data_available
from perfcast.paths import state_dir
from perfcast.serving.app import create_app
from perfcast.serving.models import ServedModels
from perfcast.serving.settings import Settings
from perfcast.training import model_store, trainer

pytestmark = pytest.mark.skipif(
    not shared_data_available(), reason="the public datasets are not available"
)
ROW = {"job": "resnet18", "gpu_type": "v100", "num_nodes": 1, "num_gpus": 4,
       "local_batch_size": 128}  # fmt: skip


@pytest.fixture(scope="module")
def champion() -> model_store.Champion:
    if model_store.load_champion("scaling") is None:
        trainer.train("scaling", "muri-scaling", model="gbm")
    return model_store.load_champion("scaling")


def _files(task: str) -> Path:
    client = MlflowClient()
    version = client.get_model_version_by_alias(model_store.model_name(task), "champion")
    return model_store._local(client.get_model_version_download_uri(version.name, version.version))


class _Payload:
    """A pickle that writes a file when it is loaded: what a swapped artifact could do."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (exec, (f"open({str(self.marker)!r}, 'w').write('ran')",))


def test_a_swapped_pickle_is_refused_unrun_and_the_working_model_keeps_serving(
    champion, tmp_path
) -> None:
    served = ServedModels(("scaling",))
    assert served.reload() == []
    http = TestClient(create_app(Settings(tasks=("scaling",)), served))
    target = next(_files("scaling").rglob("python_model.pkl"))
    original = target.read_bytes()
    marker = tmp_path / "ran"
    try:
        target.write_bytes(pickle.dumps(_Payload(marker)))
        with pytest.raises(model_store.ChampionIntegrityError, match="sha256"):
            model_store.load_champion("scaling")
        assert served.reload() == []  # the model that was serving still serves
        assert http.post("/v1/predict/scaling", json={"rows": [ROW]}).status_code == 200
        info = http.get("/v1/models").json()["models"][0]
        assert info["version"] == champion.version and "sha256" in info["warning"]
        assert str(state_dir()) not in http.get("/v1/models").text
        fresh = ServedModels(("scaling",))  # a service starting now has nothing to keep
        assert fresh.reload() == ["scaling"] and "sha256" in fresh.reason("scaling")
    finally:
        target.write_bytes(original)
    assert not marker.exists(), "the swapped pickle ran"
    assert model_store.load_champion("scaling").version == champion.version


def test_a_champion_that_cannot_predict_fails_its_canary_and_is_not_served(champion) -> None:
    model_store.configure()
    example = pd.DataFrame([ROW])
    with mlflow.start_run(run_name="scaling-broken"):
        mlflow.set_tag(model_store.FORMAT_TAG, str(model_store.MODEL_FORMAT))
        info = mlflow.pyfunc.log_model(
            name="model",
            python_model=model_store.PerfcastModel(None),  # type: ignore[arg-type]
            input_example=example,
            registered_model_name=model_store.model_name("scaling"),
            pip_requirements=model_store.pip_requirements(),
        )
    broken = str(info.registered_model_version)
    model_store.record_sha256("scaling", broken)  # its files are the registered ones
    model_store.set_champion("scaling", broken)
    try:
        with pytest.raises(model_store.ChampionLoadError, match="cannot be loaded"):
            model_store.load_champion("scaling")
        served = ServedModels(("scaling",))
        assert served.reload() == ["scaling"]
        ready = TestClient(create_app(Settings(tasks=("scaling",)), served)).get("/readyz")
        assert ready.status_code == 503 and "AttributeError" in ready.json()["reason"]
    finally:
        model_store.set_champion("scaling", champion.version)


def test_a_registered_model_asks_only_for_perfcast(champion) -> None:
    requirements = (_files("scaling") / "requirements.txt").read_text().split()
    names = sorted(r.split("==")[0] for r in requirements if not r.startswith("-"))
    assert names == ["mlflow", "perfcast"]  # MLflow adds itself; no test packages


def test_a_copied_home_serves_and_writes_only_its_own_files(champion, tmp_path) -> None:
    original = state_dir()
    copy = tmp_path / "home-copy"
    shutil.copytree(original, copy, ignore=shutil.ignore_patterns("downloads", "cache"))
    before = sorted(p.relative_to(original) for p in (original / "mlartifacts").rglob("*"))
    os.environ["PERFCAST_HOME"] = str(copy)
    try:
        loaded = model_store.load_champion("scaling")
        assert loaded is not None and loaded.version == champion.version
        assert str(copy) in _files("scaling").as_posix()
        result = trainer.train("scaling", "muri-scaling", model="gbm")
        assert str(copy) in _files("scaling").as_posix() or not result.promoted
        client = MlflowClient()
        run = client.get_run(result.run_id)
        assert run.info.artifact_uri.startswith((copy / "mlartifacts").as_uri())
    finally:
        os.environ["PERFCAST_HOME"] = str(original)
        model_store.configure()
    after = sorted(p.relative_to(original) for p in (original / "mlartifacts").rglob("*"))
    assert after == before, "training in the copy wrote into the original home"
    assert model_store.load_champion("scaling").version == champion.version


def test_a_store_replaced_under_the_service_is_read_afresh_on_reload(champion) -> None:
    served = ServedModels(("scaling",))
    assert served.reload() == []
    http = TestClient(create_app(Settings(tasks=("scaling",), api_key="k"), served))
    db = state_dir() / "mlflow.db"
    saved = db.read_bytes()
    try:
        db.write_bytes(b"")  # truncated (a full disk, a bad copy)
        r = http.post("/v1/models/reload", headers={"X-API-Key": "k"})
        assert r.status_code == 200, r.text  # the model that was serving still serves
        assert r.json()["models"][0]["warning"]
    finally:
        db.write_bytes(saved)  # restored from a backup
    r = http.post("/v1/models/reload", headers={"X-API-Key": "k"})
    assert r.status_code == 200, r.text
    assert r.json()["models"][0]["warning"] is None
    assert r.json()["models"][0]["version"] == champion.version
    ready = http.get("/readyz").json()
    assert ready["ready"] and ready["trained_on"]["scaling"].startswith("muri-scaling")


def test_a_default_training_that_dies_says_why_for_its_task_and_the_others_go_on(
    champion,
) -> None:
    from perfcast.serving.cli import _train_missing
    from perfcast.training.inprocess import InProcessBackend

    # interference never loads (whatever champions earlier tests left in this home)
    served = ServedModels(
        ("scaling", "interference"), backend_factory=lambda tasks: InProcessBackend(("scaling",))
    )
    served.reload()
    http = TestClient(create_app(Settings(tasks=("scaling", "interference")), served))
    trained = []

    def train(tasks: list[str], echo) -> None:
        if tasks == ["interference"]:
            raise RuntimeError("the trainer thread hit a bug")  # not a PerfcastError
        trained.append(tasks[0])

    _train_missing(served, ["interference", "scaling"], train)
    assert trained == ["scaling"]  # the failure of the first did not stop the second
    ready = http.get("/readyz").json()
    assert "interference" in ready["missing"]
    assert "training its default model failed: the trainer thread hit a bug" in ready["reason"]
    assert "scaling" not in ready["reason"]  # each task says its own state
