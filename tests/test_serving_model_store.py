"""Model store resilience, as the service meets it: a champion whose artifact is truncated is
reported by task and file while the other tasks serve, and `train` replaces it; killed
trainings do not stay RUNNING; a challenger is compared with the champion on rows neither was
trained on. Real models on real public data (muri-scaling; a dozen NeuSight graph samples)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from fastapi.testclient import TestClient
from mlflow.tracking import MlflowClient

from perfcast import datasets
from perfcast.datasets.fetch import shared_data_available
from perfcast.serving.app import create_app
from perfcast.serving.models import ServedModels
from perfcast.serving.rows import example_row
from perfcast.serving.settings import Settings
from perfcast.training import model_store, trainer

pytestmark = pytest.mark.skipif(
    not shared_data_available(), reason="the public datasets are not available"
)
ROW = {"job": "resnet18", "gpu_type": "v100", "num_nodes": 1, "num_gpus": 4,
       "local_batch_size": 128}  # fmt: skip


@pytest.fixture(scope="module")
def graph_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    graphs = datasets.load("neusight-graphs")
    ids = graphs["sample_id"].drop_duplicates()
    subset = graphs[graphs["sample_id"].isin(ids.iloc[:: len(ids) // 12].head(12))]
    path = tmp_path_factory.mktemp("graphs") / "neusight-subset.csv"
    subset.to_csv(path, index=False)
    return path


def _truncate_champion(task: str) -> Path:
    client = MlflowClient()
    version = client.get_model_version_by_alias(model_store.model_name(task), "champion")
    where = model_store._local(client.get_model_version_download_uri(version.name, version.version))
    pickle = next(where.rglob("python_model.pkl"))
    pickle.write_bytes(pickle.read_bytes()[:100])
    return pickle


def test_a_corrupt_champion_fails_alone_and_train_replaces_it(graph_file: Path) -> None:
    model_store.configure()
    if model_store.load_champion("scaling") is None:
        trainer.train("scaling", "muri-scaling", model="gbm")
    trainer.train("runtime", str(graph_file), model="gbm")
    pickle = _truncate_champion("runtime")

    with pytest.raises(model_store.ChampionLoadError) as err:
        model_store.load_champion("runtime")
    assert "runtime" in str(err.value) and "sha256" in str(err.value)
    assert "$PERFCAST_HOME/mlartifacts/" in str(err.value)

    models = ServedModels(("scaling", "runtime"))
    assert models.reload() == ["runtime"]
    http = TestClient(create_app(Settings(tasks=("scaling", "runtime")), models))
    assert http.post("/v1/predict/scaling", json={"rows": [ROW]}).status_code == 200
    r = http.post("/v1/predict/runtime", json={"rows": [example_row("runtime")]})
    assert r.status_code == 503 and "sha256" in r.json()["reason"]
    assert str(pickle.parent) not in r.text  # no server path in an answer
    ready = http.get("/readyz").json()
    assert ready["missing"] == ["runtime"] and "$PERFCAST_HOME/mlartifacts/" in ready["reason"]

    result = trainer.train("runtime", str(graph_file), model="gbm")
    assert result.promoted and any("cannot be loaded" in n for n in result.notes)
    assert model_store.load_champion("runtime").version == result.version
    assert models.reload() == []


def test_runs_of_killed_trainings_are_closed(tmp_path: Path) -> None:
    code = (
        "import os, mlflow\n"
        "from perfcast.training import model_store\n"
        "model_store.configure()\n"
        "run = mlflow.start_run()\n"
        "model_store.tag_owner()\n"
        "print(run.info.run_id, flush=True)\n"
        "os._exit(9)\n"  # killed: the run is never ended
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env=os.environ.copy(), check=False)  # fmt: skip
    run_id = out.stdout.split()[-1]
    client = MlflowClient()
    assert client.get_run(run_id).info.status == "RUNNING"
    assert run_id in model_store.close_orphaned_runs()
    assert client.get_run(run_id).info.status == "KILLED"
    assert run_id not in model_store.close_orphaned_runs()


def test_challenger_and_champion_meet_on_rows_neither_was_trained_on(tmp_path: Path) -> None:
    model_store.configure()
    if model_store.load_champion("scaling") is None:
        trainer.train("scaling", "muri-scaling", model="gbm")
    champion = model_store.load_champion("scaling")
    data, split = trainer.champion_params(champion)
    rows = datasets.load("muri-scaling")
    # the challenger never sees two of the champion's jobs, and holds out by job
    left_out = sorted(rows["job"].unique())[:2]
    path = tmp_path / "fewer-jobs.csv"
    rows[~rows["job"].isin(left_out)].to_csv(path, index=False)
    mine = trainer.load_rows("scaling", str(path))
    train_rows, test_rows = trainer.holdout(mine, "scaling", "job")
    fair, note = trainer.comparison_rows("scaling", champion, train_rows, test_rows)
    champion_train, _ = trainer.holdout(trainer.load_rows("scaling", data), "scaling", split)

    keys = set(trainer._keys(fair, "scaling"))
    assert len(keys) == len(fair) > 0 and "neither was trained on" in note
    assert not keys & set(trainer._keys(train_rows, "scaling"))
    assert not keys & set(trainer._keys(champion_train, "scaling"))
    # the champion's own held-out rows count: jobs the challenger cannot know are in
    assert set(left_out) & set(fair["job"])

    result = trainer.train("scaling", str(path), model="gbm", split="job")
    assert "mape_vs_champion_rows" in result.metrics
    assert result.promoted == (
        result.metrics["mape_vs_champion_rows"] < result.champion_metrics["mape"]
    )
    # the promotion says so when the held-out error is no better than the median baseline
    warned = [n for n in result.notes if n.startswith("warning")]
    baseline = trainer.baseline_mape("scaling", train_rows, test_rows)
    assert bool(warned) == (result.metrics["mape"] >= baseline), (warned, baseline)
    assert isinstance(trainer.describe(result), str) and pd.notna(result.metrics["mape"])


def test_serve_trains_missing_models_after_binding_and_readyz_says_so(
    monkeypatch, tmp_path
) -> None:
    from perfcast.serving.cli import _train_missing

    # a home of its own: a champion another test of this worker trained would be served
    monkeypatch.setenv("PERFCAST_HOME", str(tmp_path / "home"))

    models = ServedModels(("scaling", "interference"))  # nothing loaded yet
    http = TestClient(create_app(Settings(tasks=("scaling", "interference")), models))
    models.training = {"scaling": "training its default scaling model now (1 of 1)"}
    ready = http.get("/readyz")
    assert ready.status_code == 503 and "training its default scaling" in ready.json()["reason"]
    r = http.post("/v1/predict/scaling", json={"rows": [ROW]})
    assert r.status_code == 503 and "training" in r.json()["reason"]

    seen = {}

    def train(tasks: list[str], echo) -> None:  # the default data is larger; same path
        if tasks == ["scaling"]:
            trainer.train("scaling", "muri-scaling", model="gbm")
        else:  # scaling, trained first, answers while the next task trains
            seen["scaling"] = http.post("/v1/predict/scaling", json={"rows": [ROW]}).status_code
            seen["reason"] = http.get("/readyz").json()["reason"]

    _train_missing(models, ["scaling", "interference"], train)
    assert seen["scaling"] == 200 and "interference model now (2 of 2)" in seen["reason"]
    assert models.missing == ["interference"]  # its training was only looked at, not run
    assert http.post("/v1/predict/scaling", json={"rows": [ROW]}).status_code == 200


def test_the_registered_pyfunc_predicts_from_the_contract_columns_alone() -> None:
    import mlflow

    model_store.configure()
    if model_store.load_champion("scaling") is None:
        trainer.train("scaling", "muri-scaling", model="gbm")
    pyfunc = mlflow.pyfunc.load_model("models:/perfcast-scaling@champion")
    out = pyfunc.predict(pd.DataFrame([ROW]))  # no placement, sync_time_s, source, ...
    assert out["step_time_s"].iloc[0] > 0
    required = [c.name for c in pyfunc.metadata.get_input_schema().inputs if c.required]
    assert sorted(required) == sorted(ROW)
