"""`POST /v1/observe` (issue 32, item 5: a few measurements fix a new cluster): measured scaling
rows added to the served champion move its next answers there toward them, in memory, until a
reload; bad rows are refused naming row and column and change nothing; `GET /v1/models`
counts the rows observed.

The champion is trained once per module on real public data (muri-scaling: V100s, no Sia
cluster) into the module's own PERFCAST_HOME, as in tests/test_serving_api.py; the
measurements are Sia's real RTX 2080 Ti step times of resnet50-imagenet (sia-scaling)."""

from __future__ import annotations

import os

# LightGBM's OpenMP threads sleep instead of spinning when they wait: on a small shared CPU
# this makes fitting several times faster. Read when the OpenMP runtime loads, so set it before
# anything imports lightgbm (it has no effect if an earlier test module already did).
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import json
import math

import pandas as pd
import pytest
from fastapi.testclient import TestClient

from perfcast import datasets
from perfcast.datasets.fetch import shared_data_available
from perfcast.errors import ContractError
from perfcast.serving.app import create_app
from perfcast.serving.client import PerfcastClient
from perfcast.serving.models import ServedModels
from perfcast.serving.schemas import ObserveResponse
from perfcast.serving.settings import Settings
from perfcast.training import model_store, trainer

pytestmark = pytest.mark.skipif(
    not shared_data_available(), reason="the public datasets are not available"
)

KEY = "test-key"
AUTH = {"X-API-Key": KEY}
JOB, CLUSTER, GPU, BATCH = "resnet50-imagenet", "sia-rtx", "rtx2080ti", 57
COLUMNS = ["job", "gpu_type", "cluster", "num_nodes", "num_gpus", "placement", "local_batch_size"]


@pytest.fixture(scope="module", autouse=True)
def _own_home(tmp_path_factory: pytest.TempPathFactory):
    """A store of this module's own: it asserts what the served champion was trained on."""
    before = os.environ["PERFCAST_HOME"]
    os.environ["PERFCAST_HOME"] = str(tmp_path_factory.mktemp("observe-home"))
    if model_store.load_champion("scaling") is None:
        trainer.train("scaling", "muri-scaling", model="gbm")
    yield
    os.environ["PERFCAST_HOME"] = before


@pytest.fixture()
def app():
    """A fresh service per test (observations are in memory, per app)."""
    return create_app(Settings(api_key=KEY, max_body_bytes=2**20, tasks=("scaling",)))


@pytest.fixture()
def http(app) -> TestClient:
    return TestClient(app)


@pytest.fixture(scope="module")
def measured() -> pd.DataFrame:
    """Sia's measured one-node step times of the job at one local batch, one row per count."""
    sia = datasets.load("sia-scaling")
    rows = sia[
        (sia["cluster"] == CLUSTER)
        & (sia["job"] == JOB)
        & (sia["num_nodes"] == 1)
        & (sia["num_gpus"] > 1)
        & (sia["local_batch_size"] == BATCH)
        & sia["placement"].notna()
    ]
    rows = rows.drop_duplicates("num_gpus").sort_values("num_gpus")
    return rows[[*COLUMNS, "step_time_s"]].reset_index(drop=True)


def _records(rows: pd.DataFrame) -> list[dict]:
    return json.loads(rows.to_json(orient="records"))


def _predicted(http: TestClient, rows: pd.DataFrame) -> list[float]:
    r = http.post("/v1/predict/scaling", json={"rows": _records(rows[COLUMNS])})
    assert r.status_code == 200, r.text
    return [p["step_time_s"] for p in r.json()["predictions"]]


def _observed_rows(http: TestClient) -> int | None:
    r = http.get("/v1/models")
    assert r.status_code == 200, r.text
    (scaling,) = [m for m in r.json()["models"] if m["task"] == "scaling"]
    return scaling["observed_rows"]


def _off(predicted: float, measured: float) -> float:
    return abs(math.log(predicted / measured))


def test_three_measurements_move_the_next_answers_there_toward_them(app, http, measured):
    champion = app.state.models.champion("scaling")
    trained = champion.predictor.rows_
    assert not ((trained["job"] == JOB) & (trained["cluster"] == CLUSTER)).any()
    seen, neighbours = measured[measured["num_gpus"] <= 4], measured[measured["num_gpus"] > 4]
    assert len(seen) == 3 and len(neighbours) >= 2
    before_seen, before_next = _predicted(http, seen), _predicted(http, neighbours)

    r = http.post("/v1/observe", json={"rows": _records(seen)}, headers=AUTH)
    assert r.status_code == 200, r.text
    ObserveResponse.model_validate(r.json())
    assert r.json()["task"] == "scaling" and r.json()["observed"] == 3
    assert r.json()["model"]["version"] == champion.version

    after_seen, after_next = _predicted(http, seen), _predicted(http, neighbours)
    times = seen["step_time_s"].tolist()
    for before, after, time in zip(before_seen, after_seen, times, strict=True):
        assert _off(after, time) < _off(before, time), (before, after, time)
    # the GPU counts not measured move the same way (the job's compute and bytes there)
    times = neighbours["step_time_s"].tolist()
    for before, after, time in zip(before_next, after_next, times, strict=True):
        assert _off(after, time) < _off(before, time), (before, after, time)
    # the champion the earlier requests read was copied, never changed
    assert champion.predictor.rows_ is trained and len(champion.predictor.rows_) == len(trained)
    assert app.state.models.champion("scaling") is not champion

    # a recommendation uses the observed model too: its step times are the predict route's
    request = {
        "job": {"job": JOB, "cluster": CLUSTER},
        "pools": [{"gpu_type": GPU, "gpus_per_node": 8, "nodes": 1}],
        "local_batch_sizes": [BATCH],
        "work": {"iterations": 1000},
        "gpu_counts": [4],  # and 1, always a candidate
    }
    r = http.post("/v1/recommend", json=request)
    assert r.status_code == 200, r.text
    (four,) = [c for c in r.json()["top"] if c["num_gpus"] == 4]
    config = {"job": JOB, "gpu_type": GPU, "cluster": CLUSTER, "num_nodes": four["num_nodes"],
              "num_gpus": 4, "local_batch_size": BATCH}  # fmt: skip
    got = http.post("/v1/predict/scaling", json={"rows": [config]}).json()["predictions"][0]
    assert four["step_time_s"]["value"] == pytest.approx(got["step_time_s"], rel=1e-9)
    unobserved = champion.predictor.predict_interval(pd.DataFrame([config]))
    assert got["step_time_s"] < unobserved["step_time_s"].iloc[0] * 0.95

    # in memory only: a reload serves the registry's champion, without the measurements
    assert http.post("/v1/models/reload", headers=AUTH).status_code == 200
    assert _predicted(http, seen) == pytest.approx(before_seen, rel=1e-12)
    assert _observed_rows(http) == 0


@pytest.mark.parametrize(
    ("change", "code"),
    [
        ({"step_time_s": -0.2}, "greater_than"),
        ({"step_time_s": 0}, "greater_than"),
        ({"step_time_s": None}, "missing"),  # None: the key left out
        ({"step_time_s": "0.2"}, "float_type"),
    ],
)
def test_a_bad_row_is_refused_naming_row_and_column_and_changes_nothing(
    app, http, measured, change, code
):
    rows = _records(measured.head(3))
    bad = {**rows[1], **change}
    if change["step_time_s"] is None:
        del bad["step_time_s"]
    before = _predicted(http, measured)
    r = http.post("/v1/observe", json={"rows": [rows[0], bad, rows[2]]}, headers=AUTH)
    assert r.status_code == 422, r.text
    first = r.json()["detail"][0]
    assert first["loc"] == ["body", "rows", 1, "step_time_s"] and first["type"] == code, first
    assert _predicted(http, measured) == before and _observed_rows(http) == 0


def test_a_row_the_contract_refuses_is_named_and_changes_nothing(app, http, measured):
    """A table check of the contract (num_gpus >= num_nodes), past the typed rows: 422 naming
    the row and column, as predict answers it, and the champion stays as it was."""
    rows = _records(measured.head(3))
    rows[2] = {**rows[2], "num_gpus": 2, "num_nodes": 3, "placement": None}
    champion = app.state.models.champion("scaling")
    r = http.post("/v1/observe", json={"rows": rows}, headers=AUTH)
    assert r.status_code == 422, r.text
    first = r.json()["detail"][0]
    assert first["loc"][:3] == ["body", "rows", 2] and first["type"] == "data_contract", first
    assert first["loc"][3] in ("num_gpus", "num_nodes"), first
    predicted = http.post("/v1/predict/scaling", json={"rows": rows}).json()["detail"][0]
    assert predicted["loc"] == first["loc"]
    assert app.state.models.champion("scaling") is champion and _observed_rows(http) == 0


def test_models_count_the_rows_observed_since_the_champion_was_loaded(http, measured):
    assert _observed_rows(http) == 0
    rows = _records(measured)
    r = http.post("/v1/observe", json={"rows": rows[:3]}, headers=AUTH)
    assert r.status_code == 200 and r.json()["observed_rows"] == 3, r.text
    assert _observed_rows(http) == 3
    r = http.post("/v1/observe", json={"rows": rows[3:5]}, headers=AUTH)
    assert r.json()["observed"] == 2 and r.json()["observed_rows"] == 5, r.text
    assert _observed_rows(http) == 5


def test_the_client_observes_a_frame_and_raises_the_contract_error(app, measured):
    client = PerfcastClient(http=TestClient(app), api_key=KEY)
    answer = client.observe(measured.head(3))
    assert answer["observed"] == 3 and client.models()["models"][0]["observed_rows"] == 3
    bad = measured.head(2).assign(step_time_s=[0.2, -1.0])
    with pytest.raises(ContractError) as err:
        client.observe(bad)
    assert err.value.row == 2 and err.value.column == "step_time_s"


def test_observe_is_closed_without_the_key_and_503_without_a_model(http, measured):
    rows = {"rows": _records(measured.head(1))}
    assert http.post("/v1/observe", json=rows).status_code == 401
    wrong = http.post("/v1/observe", json=rows, headers={"X-API-Key": "wrong"})
    assert wrong.status_code == 401
    empty = create_app(Settings(api_key=KEY, tasks=("scaling",)), ServedModels(("scaling",)))
    r = TestClient(empty).post("/v1/observe", json=rows, headers=AUTH)
    assert r.status_code == 503 and r.json()["task"] == "scaling", r.text
    assert r.json()["reason"] and r.headers["retry-after"] == "60"


def test_observe_is_within_the_body_and_column_limits(http, measured):
    row = _records(measured.head(1))[0]
    big = http.post(
        "/v1/observe", json={"rows": [{**row, "note": "x" * 2**20}]}, headers=AUTH
    )  # over this app's 1 MiB body limit
    assert big.status_code == 413, big.text
    wide = [{**row, f"extra_{i}": 1} for i in range(300)]  # 300 distinct names > 256
    r = http.post("/v1/observe", json={"rows": wide}, headers=AUTH)
    assert r.status_code == 413 and r.json()["limit"] == "max_columns", r.text
    assert _observed_rows(http) == 0


def test_predictions_during_observations_read_one_whole_champion(app, measured) -> None:
    """Observations swap a refitted copy in: a prediction made meanwhile is the answer of the
    champion before or after one of them, never of one half refitted, and none fails."""
    import threading

    models = app.state.models
    rows = measured[COLUMNS]
    champions, answers, errors = [models.champion("scaling")], [], []
    stop = threading.Event()

    def predict() -> None:
        while not stop.is_set():
            try:
                answers.append(models.predict("scaling", rows)["step_time_s"].tolist())
            except Exception as err:  # the test reports it
                errors.append(err)

    reader = threading.Thread(target=predict)
    reader.start()
    try:
        for start in range(0, 6, 2):
            champion, _ = models.observe("scaling", measured.iloc[start : start + 2])
            champions.append(champion)
    finally:
        stop.set()
        reader.join()
    assert not errors and answers
    possible = [c.predictor.predict_interval(rows)["step_time_s"].tolist() for c in champions]
    assert all(answer in possible for answer in answers)
    assert models.observed_rows("scaling") == 6
    assert len(champions[0].predictor.rows_) + 6 == len(champions[-1].predictor.rows_)
