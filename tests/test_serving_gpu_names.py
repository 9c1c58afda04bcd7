"""GPU names in requests (issue 35): any case is the contract's lower case (`V100` is `v100`),
and a name perfcast does not know (`v1oo`) is a 422 naming the field and the nearest known
name, on every route that takes one, instead of a confident answer with a flag. No model is
needed: the request is refused before any model is asked."""

from __future__ import annotations

import json

import pytest
from fastapi.testclient import TestClient

from perfcast.serving.app import create_app
from perfcast.serving.models import ServedModels
from perfcast.serving.rows import KNOWN_GPUS, gpu_type
from perfcast.serving.schemas import PREDICT_MODELS, RecommendRequest
from perfcast.serving.settings import Settings

ROW = {"job": "resnet18", "gpu_type": "v100", "num_nodes": 1, "num_gpus": 4,
       "local_batch_size": 128}  # fmt: skip
RECOMMEND = {
    "job": {"job": "resnet18"},
    "pools": [{"gpu_type": "v100", "gpus_per_node": 4, "nodes": 1}],
    "local_batch_sizes": [32],
    "work": {"iterations": 100},
}


@pytest.fixture(scope="module")
def client() -> TestClient:
    models = ServedModels(("scaling", "interference"))  # none loaded: a valid request is a 503
    app = create_app(Settings(tasks=("scaling", "interference")), models=models)
    return TestClient(app, raise_server_exceptions=False)


@pytest.mark.parametrize(
    "given,read",
    [("v100", "v100"), ("V100", "v100"), (" A100 ", "a100"), ("Tesla_V100-PCIE-32GB",
     "tesla_v100-pcie-32gb"), ("CPU", "cpu"), ("nvidia h100 80gb hbm3", "nvidia h100 80gb hbm3")],
)  # fmt: skip
def test_known_names_are_read_in_lower_case(given: str, read: str) -> None:
    rows = PREDICT_MODELS["scaling"][0].model_validate({"rows": [{**ROW, "gpu_type": given}]})
    assert rows.rows[0]["gpu_type"] == read
    pools = RecommendRequest.model_validate(
        {**RECOMMEND, "pools": [{**RECOMMEND["pools"][0], "gpu_type": given}]}
    ).pools
    assert pools[0].gpu_type == read


@pytest.mark.parametrize(
    "given,near",
    [("v1oo", "v100"), ("a1oo", "a100"), ("h10", "h100"), ("k8o", "k80"), ("rtx2080", "rtx2080ti")],
)  # fmt: skip
def test_an_unknown_gpu_is_a_422_naming_the_field_and_the_nearest_name(
    client: TestClient, given: str, near: str
) -> None:
    for path, body, loc in (
        ("/v1/predict/scaling", {"rows": [ROW, {**ROW, "gpu_type": given}]},
         ["body", "rows", 1, "gpu_type"]),
        ("/v1/recommend", {**RECOMMEND, "pools": [{**RECOMMEND["pools"][0], "gpu_type": given}]},
         ["body", "pools", 0, "gpu_type"]),
    ):  # fmt: skip
        answer = client.post(path, json=body)
        assert answer.status_code == 422, (path, answer.text)
        (error,) = answer.json()["detail"]
        assert error["loc"] == loc and error["type"] == "unknown_gpu_type"
        assert f"gpu_type {given!r} is not a GPU type perfcast knows" in error["msg"]
        assert f"(did you mean {near!r}?)" in error["msg"]
        assert "known: a10, a100" in error["msg"]


def test_a_known_name_in_any_case_reaches_the_model(client: TestClient) -> None:
    """Upper case passes the request model: the answer is the missing model's 503, not a 422
    (the fast path and FastAPI's route alike)."""
    for name in ("V100", "T4"):
        body = json.dumps({"rows": [{**ROW, "gpu_type": name}]})
        answer = client.post(
            "/v1/predict/scaling", content=body, headers={"content-type": "application/json"}
        )
        assert answer.status_code == 503, answer.text
        assert "no model for task scaling" in answer.text


def test_every_datasheet_name_passes_as_itself() -> None:
    assert {gpu_type(name) for name in KNOWN_GPUS} == set(KNOWN_GPUS)
    assert "cpu" in KNOWN_GPUS and "v100" in KNOWN_GPUS


def test_the_schema_still_documents_gpu_type() -> None:
    schema = TestClient(create_app(Settings(tasks=("scaling",)))).get("/openapi.json").json()
    row = schema["components"]["schemas"]["ScalingRow"]["properties"]["gpu_type"]
    assert "lower case" in row["description"]
