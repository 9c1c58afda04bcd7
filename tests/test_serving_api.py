"""The HTTP service on real champion models: predictions, decisions, models, health, metrics,
the error contract (413/422/503), the HTTP client as a prediction backend, and the CLI.

Models are trained once per module on real public data (muri-scaling; a dozen NeuSight graph
samples) into the session's own PERFCAST_HOME; interference has no model on purpose (503).
"""

from __future__ import annotations

import os

# LightGBM's OpenMP threads sleep instead of spinning when they wait: on a small shared CPU
# this makes fitting several times faster. Read when the OpenMP runtime loads, so set it before
# anything imports lightgbm (it has no effect if an earlier test module already did).
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import json
import threading
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from perfcast import datasets
from perfcast.cli import app as perfcast_cli
from perfcast.datasets.fetch import shared_data_available
from perfcast.errors import ContractError
from perfcast.optimizer import candidates, configs, elastic, scoring
from perfcast.predictor import DEFAULT_FAMILY
from perfcast.predictor.backend import PredictionBackend
from perfcast.serving.app import create_app
from perfcast.serving.client import PerfcastClient, ServiceError
from perfcast.serving.models import ModelUnavailableError
from perfcast.serving.schemas import PREDICT_MODELS
from perfcast.serving.settings import Settings
from perfcast.training import model_store, trainer
from perfcast.training.inprocess import InProcessBackend

pytestmark = pytest.mark.skipif(
    not shared_data_available(), reason="the public datasets are not available"
)

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
KEY = "test-key"
ROW = {"job": "resnet18", "gpu_type": "v100", "num_nodes": 1, "num_gpus": 4,
       "local_batch_size": 128}  # fmt: skip


@pytest.fixture(scope="module", autouse=True)
def _own_home(tmp_path_factory: pytest.TempPathFactory):
    """This module asserts what is served (runtime's default family, no interference model),
    so it keeps a store of its own: a module run before it may have registered others."""
    before = os.environ["PERFCAST_HOME"]
    os.environ["PERFCAST_HOME"] = str(tmp_path_factory.mktemp("serving-home"))
    yield
    os.environ["PERFCAST_HOME"] = before


@pytest.fixture(scope="module")
def graph_rows(tmp_path_factory: pytest.TempPathFactory) -> pd.DataFrame:
    graphs = datasets.load("neusight-graphs")
    ids = graphs["sample_id"].drop_duplicates()
    return graphs[graphs["sample_id"].isin(ids.iloc[:: len(ids) // 12].head(12))]


@pytest.fixture(scope="module")
def app(graph_rows: pd.DataFrame, tmp_path_factory: pytest.TempPathFactory):
    if model_store.load_champion("scaling") is None:
        trainer.train("scaling", "muri-scaling", model="gbm")
    if model_store.load_champion("runtime") is None:
        path = tmp_path_factory.mktemp("graphs") / "neusight-subset.csv"
        graph_rows.to_csv(path, index=False)
        trainer.train("runtime", str(path), model=DEFAULT_FAMILY["runtime"])  # what is served
    tasks = ("scaling", "interference", "runtime")
    return create_app(Settings(api_key=KEY, max_body_bytes=2**20, tasks=tasks))


@pytest.fixture(scope="module")
def http(app) -> TestClient:
    return TestClient(app)


@pytest.fixture(scope="module")
def local() -> InProcessBackend:
    return InProcessBackend(("scaling", "runtime"))


def test_predict_scaling_matches_the_in_process_champion(http, local) -> None:
    rows = [ROW, {**ROW, "num_gpus": 16, "num_nodes": 2, "placement": "88"}]
    r = http.post("/v1/predict/scaling", json={"rows": rows})
    assert r.status_code == 200, r.text
    body = r.json()
    PREDICT_MODELS["scaling"][1].model_validate(body)  # the answer is what OpenAPI says
    champion = model_store.load_champion("scaling")
    assert body["model"]["family"] == champion.family and body["targets"] == ["step_time_s"]
    assert body["model"]["version"] == champion.version
    got = pd.DataFrame(body["predictions"])
    want = local.predict("scaling", pd.DataFrame(rows))
    numbers = [c for c in got.columns if c != "flags"]
    np.testing.assert_allclose(got[numbers].to_numpy(float), want[numbers].to_numpy(float))
    assert [",".join(f) for f in got["flags"]] == want["flags"].tolist()
    assert (got["step_time_s_p10"] <= got["step_time_s"]).all()
    assert (got["step_time_s"] <= got["step_time_s_p90"]).all()


def test_predict_runtime_answers_once_per_sample(http, graph_rows) -> None:
    two = graph_rows[graph_rows["sample_id"].isin(graph_rows["sample_id"].unique()[:2])]
    rows = json.loads(two.drop(columns=["e2e_latency_ms"]).to_json(orient="records"))
    r = http.post("/v1/predict/runtime", json={"rows": rows})
    assert r.status_code == 200, r.text
    PREDICT_MODELS["runtime"][1].model_validate(r.json())
    assert r.json()["model"]["family"] == DEFAULT_FAMILY["runtime"]
    predictions = r.json()["predictions"]
    assert [p["sample_id"] for p in predictions] == list(two["sample_id"].unique())
    assert all(p["e2e_latency_ms"] > 0 for p in predictions)


def test_a_runtime_answer_says_what_was_new(http, graph_rows) -> None:
    """Issue 11's example: `my-llama-7b` on `h100` (specs from the datasheet) is answered
    with an interval and says that neither the model nor the device was seen in training."""
    one = graph_rows[graph_rows["sample_id"] == graph_rows["sample_id"].iloc[0]]
    specs = ["mem_gb", "mem_bw_gbps", "num_sm", "peak_tflops_fp32", "l2_mb"]
    new = one.drop(columns=["e2e_latency_ms", *specs]).assign(model="my-llama-7b", device="h100")
    rows = json.loads(
        pd.concat([one.drop(columns="e2e_latency_ms"), new]).to_json(orient="records")
    )
    for row in rows[len(one) :]:
        row["sample_id"] = "my-llama-7b/h100"
    r = http.post("/v1/predict/runtime", json={"rows": rows})
    assert r.status_code == 200, r.text
    seen, unseen = r.json()["predictions"]
    assert seen["flags"] == []
    assert unseen["flags"] == ["new_gpu_type", "new_model"]
    assert unseen["e2e_latency_ms_p10"] < unseen["e2e_latency_ms"] < unseen["e2e_latency_ms_p90"]


def test_a_row_breaking_the_contract_is_a_422_naming_row_and_column(http) -> None:
    rows = [ROW, {**ROW, "local_batch_size": 0}]
    r = http.post("/v1/predict/scaling", json={"rows": rows})
    assert r.status_code == 422
    first = r.json()["detail"][0]
    assert first["loc"] == ["body", "rows", 1, "local_batch_size"]
    missing = http.post("/v1/predict/scaling", json={"rows": [{"job": "x"}]})
    assert missing.status_code == 422
    assert missing.json()["detail"][0]["loc"] == ["body", "rows", 0, "gpu_type"]


def test_bad_request_fields_are_422_with_the_field_path(http) -> None:
    request = {"job": {"job": "resnet18"}, "local_batch_sizes": [64], "work": {"samples": 1e6},
               "pools": [{"gpu_type": "v100", "gpus_per_node": 8, "nodes": 0}]}  # fmt: skip
    r = http.post("/v1/recommend", json=request)
    assert r.status_code == 422
    assert ["body", "pools", 0, "nodes"] in [d["loc"] for d in r.json()["detail"]]
    # a job column the contract cannot read is the caller's error (was a 500: pandera raised
    # TypeError on the candidates' categorical column)
    pools = [{**request["pools"][0], "nodes": 1}]
    # (the number columns too, found by fuzzing the job's contract columns); named once, as
    # the job's column, not as a row of the 10^5 candidates that carry it
    for column, value in [("amp", "maybe"), ("sync_time_s", ""), ("intra_node_bw_gbps", " "),
                          ("inter_node_bw_gbps", "fast")]:  # fmt: skip
        job = {"job": "resnet18", column: value}
        bad = http.post("/v1/recommend", json={**request, "job": job, "pools": pools})
        assert bad.status_code == 422, (column, bad.text)
        assert [d["loc"] for d in bad.json()["detail"]] == [["body", "job", column]], bad.text
    too_many = http.post("/v1/predict/scaling", json={"rows": [{"job": "x"}] * 10_001})
    assert too_many.status_code == 422 and too_many.json()["detail"][0]["loc"] == ["body", "rows"]


def test_a_task_without_a_model_is_a_503_with_the_reason(http) -> None:
    row = {"gpu_type": "v100", "a_job": "x", "a_batch_size": 1, "b_job": "y", "b_batch_size": 1}
    r = http.post("/v1/predict/interference", json={"rows": [row]})
    assert r.status_code == 503
    assert "perfcast train --task interference" in r.json()["reason"]
    trace_row = {"job_id": "1", "submit_time_s": 0.0, "num_gpus": 4}
    assert http.post("/v1/predict/duration", json={"rows": [trace_row]}).status_code == 503


def test_oversized_bodies_are_refused_with_413(http) -> None:
    big = json.dumps({"rows": [ROW] * 11_000}).encode()  # over the app's 1 MiB limit
    assert len(big) > 2**20
    assert http.post("/v1/predict/scaling", content=big).status_code == 413

    def chunks():  # no Content-Length: the limit applies while the body streams in
        for i in range(0, len(big), 65536):
            yield big[i : i + 65536]

    assert http.post("/v1/predict/scaling", content=chunks()).status_code == 413


def test_recommend_ranks_configurations_with_reasons(http) -> None:
    request = {"job": {"job": "resnet18"}, "local_batch_sizes": [64, 128],
               "pools": [{"gpu_type": "v100", "gpus_per_node": 8, "nodes": 2,
                          "price_per_gpu_hour": 2.5}],
               "work": {"samples": 1e7}, "top_k": 4}  # fmt: skip
    r = http.post("/v1/recommend", json=request)
    assert r.status_code == 200, r.text
    body = r.json()
    times = [c["total_time_s"]["p90"] for c in body["top"]]  # min_time ranks by the p90
    assert len(times) == 4 and times == sorted(times)
    assert body["top"][0]["reason"].startswith("fastest")
    assert body["candidates"] > 4
    first = body["top"][0]
    assert first["cost"]["value"] == pytest.approx(
        first["total_time_s"]["value"] / 3600 * first["num_gpus"] * 2.5
    )
    impossible = http.post("/v1/recommend", json={**request, "deadline_s": 1})
    assert impossible.status_code == 422 and "deadline" in impossible.text


def test_allocate_given_throughputs_is_the_exact_dp(http) -> None:
    jobs = [
        {"job_id": "a", "throughput": [{"num_gpus": g, "batch_size": 64 * g,
                                        "samples_per_s": 100 * g**0.5} for g in (1, 2, 4)]},
        {"job_id": "b", "min_gpus": 1, "throughput": [{"num_gpus": g, "batch_size": 32 * g,
                                                       "samples_per_s": 80 * g} for g in (1, 2)]},
    ]  # fmt: skip
    r = http.post("/v1/allocate", json={"total_gpus": 4, "jobs": jobs})
    assert r.status_code == 200, r.text
    got = {a["job_id"]: (a["num_gpus"], a["batch_size"]) for a in r.json()["allocations"]}
    tables = [
        elastic.ElasticJob(j["job_id"], {(p["num_gpus"], p["batch_size"]): p["samples_per_s"]
                                         for p in j["throughput"]}, j.get("min_gpus", 0))
        for j in jobs
    ]  # fmt: skip
    assert got == elastic.allocate(tables, 4)


def test_allocate_predicts_throughputs_with_the_scaling_model(http) -> None:
    job = {"job_id": "p", "job": {"job": "resnet18"}, "gpu_type": "v100",
           "local_batch_sizes": [64, 128], "max_gpus": 8}  # fmt: skip
    r = http.post("/v1/allocate", json={"total_gpus": 8, "jobs": [job]})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["predicted_jobs"] == 1
    assert 1 <= body["used_gpus"] <= 8 and body["total_throughput"] > 0


def test_place_assigns_gpus_with_reasons(http) -> None:
    request = yaml.safe_load((EXAMPLES / "cluster.yaml").read_text())
    r = http.post("/v1/place", json=request)
    assert r.status_code == 200, r.text
    body = r.json()
    assigned = {a["job_id"]: a for a in body["assignments"]}
    assert len(assigned["bert-1"]["gpus"]) == 4 and assigned["bert-1"]["reason"]
    used = [(g["node"], g["gpu"]) for a in assigned.values() for g in a["gpus"]]
    assert len(used) == len(set(used))  # no GPU given twice without sharing


def test_models_list_versions_and_reload_needs_the_key(http) -> None:
    models = {m["task"]: m for m in http.get("/v1/models").json()["models"]}
    champion = model_store.load_champion("scaling")  # other test modules may have trained more
    assert models["scaling"]["loaded"] and models["scaling"]["version"] == champion.version
    assert "mape" in models["scaling"]["metrics"] and models["scaling"]["run_id"]
    assert not models["interference"]["loaded"] and models["interference"]["reason"]
    assert http.post("/v1/models/reload").status_code == 401
    assert http.post("/v1/models/reload", headers={"X-API-Key": "wrong"}).status_code == 401
    r = http.post("/v1/models/reload", headers={"X-API-Key": KEY})
    assert r.status_code == 200 and r.json()["models"][0]["loaded"]


def test_health_readiness_and_metrics(http) -> None:
    assert http.get("/healthz").json() == {"status": "ok"}
    ready = http.get("/readyz")
    assert ready.status_code == 503 and ready.json()["missing"] == ["interference"]
    http.post("/v1/predict/scaling", json={"rows": [ROW, ROW]})
    text = http.get("/metrics").text
    assert (
        'perfcast_http_requests_total{method="POST",route="/v1/predict/scaling",status="200"}'
        in text
    )
    champion = model_store.load_champion("scaling")
    label = f"{champion.family}:v{champion.version}"
    assert f'perfcast_predictions_total{{model="{label}",task="scaling"}}' in text
    assert "perfcast_http_request_duration_seconds_bucket" in text
    page = http.get("/docs")  # Swagger UI from the app's own assets: no CDN, no internet
    assert page.status_code == 200 and "https://" not in page.text and "cdn" not in page.text
    script = page.text.split('src="')[1].split('"')[0]
    asset = http.get(script)
    assert asset.status_code == 200 and "SwaggerUIBundle" in asset.text


def test_client_is_a_prediction_backend_with_the_in_process_shapes(http, local, graph_rows):
    client = PerfcastClient("http://testserver", http=http, max_rows=3)  # forces 3 requests
    assert isinstance(client, PredictionBackend)
    rows = pd.DataFrame([{**ROW, "num_gpus": g} for g in range(1, 8)])
    pd.testing.assert_frame_equal(client.predict("scaling", rows), local.predict("scaling", rows))
    nodes = graph_rows[graph_rows["sample_id"].isin(graph_rows["sample_id"].unique()[:3])]
    nodes = nodes.drop(columns=["e2e_latency_ms"])
    client.max_rows = 300  # a sample never splits: ~3 requests of whole samples
    got, want = client.predict("runtime", nodes), local.predict("runtime", nodes)
    pd.testing.assert_frame_equal(got, want, check_dtype=False)
    bad = pd.DataFrame([ROW] * 4 + [{**ROW, "num_gpus": 0}])
    with pytest.raises(ContractError) as err:
        client.predict("scaling", bad)
    assert err.value.row == 5
    with pytest.raises(ModelUnavailableError):
        pair = {"gpu_type": "v100", "a_job": "x", "a_batch_size": 1, "b_job": "y",
                "b_batch_size": 1}  # fmt: skip
        client.predict("interference", pd.DataFrame([pair]))


def test_optimizer_gives_the_same_answer_over_http(http, local) -> None:
    pools = [candidates.GpuPool("v100", gpus_per_node=4, nodes=2)]
    kwargs = {"local_batch_sizes": [64, 128], "work": scoring.Work(samples=1e6), "top_k": 3}
    over_http = configs.recommend(
        {"job": "vgg16"}, pools, PerfcastClient("http://testserver", http=http), **kwargs
    )
    in_process = configs.recommend({"job": "vgg16"}, pools, local, **kwargs)
    pd.testing.assert_frame_equal(over_http.top, in_process.top, check_dtype=False)


def test_client_against_a_real_server_on_loopback(app) -> None:
    import uvicorn

    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="error"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not (server.started and server.servers) and time.monotonic() < deadline:
        time.sleep(0.05)
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        with PerfcastClient(f"http://127.0.0.1:{port}") as client:
            assert client.ready() is False  # interference is missing
            out = client.predict("scaling", pd.DataFrame([ROW]))
            want = ["step_time_s", "step_time_s_p10", "step_time_s_p90", "flags"]
            assert list(out.columns) == want
    finally:
        server.should_exit = True
        thread.join(10)
    with pytest.raises(ServiceError, match="cannot reach"):
        PerfcastClient(f"http://127.0.0.1:{port}", timeout=2).predict(
            "scaling", pd.DataFrame([ROW])
        )


def test_cli_recommend_allocate_place_run_the_same_code(app, tmp_path) -> None:
    runner = CliRunner()
    out = runner.invoke(perfcast_cli, ["recommend", str(EXAMPLES / "job.yaml"), "--json"])
    assert out.exit_code == 0, out.output
    answer = json.loads(out.stdout[out.stdout.index("{") :])
    assert len(answer["top"]) == 5 and answer["top"][0]["reason"].startswith("fastest")
    out = runner.invoke(perfcast_cli, ["allocate", str(EXAMPLES / "jobs.yaml")])
    assert out.exit_code == 0 and "measured-c" in out.stdout, out.output
    bad = tmp_path / "bad.yaml"
    bad.write_text("job: {job: x}\npools: [{gpu_type: V1OO, gpus_per_node: 8, nodes: 1}]\n"
                   "local_batch_sizes: [64]\n")  # fmt: skip
    out = runner.invoke(perfcast_cli, ["recommend", str(bad)])
    assert out.exit_code == 2 and "pools.0.gpu_type" in out.output
    assert "did you mean 'v100'" in out.output  # V100 itself is v100 (any case)


def test_concurrent_requests_are_batched_with_the_same_answers(app, local) -> None:
    import asyncio

    import httpx

    good = [{**ROW, "num_gpus": g, "local_batch_size": b} for g in (1, 2, 4, 8) for b in (32, 64)]
    bad = {**ROW, "local_batch_size": 0}

    async def send_all(rows: list[dict]) -> list[httpx.Response]:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
            posts = [client.post("/v1/predict/scaling", json={"rows": [r]}) for r in rows]
            return await asyncio.gather(*posts)

    calls = app.state.batcher.calls
    answers = asyncio.run(send_all(good))
    assert app.state.batcher.calls - calls < len(good)  # fewer predictor calls than requests
    assert all(a.status_code == 200 for a in answers)
    got = pd.DataFrame([a.json()["predictions"][0] for a in answers])
    want = pd.concat([local.predict("scaling", pd.DataFrame([r])) for r in good])
    numbers = [c for c in got.columns if c != "flags"]
    np.testing.assert_allclose(got[numbers].to_numpy(float), want[numbers].to_numpy(float))
    # a bad row fails its own request only
    answers = asyncio.run(send_all([*good[:3], bad, *good[3:]]))
    assert [a.status_code for a in answers] == [200] * 3 + [422] + [200] * (len(good) - 3)
    assert answers[3].json()["detail"][0]["loc"] == ["body", "rows", 0, "local_batch_size"]


def test_an_unexpected_error_is_a_logged_500_with_an_error_id(caplog) -> None:
    class Broken:
        def predict_interval(self, rows, groups=None, *, columns: bool = False):
            raise RuntimeError("a bug")

    class OneBrokenChampion:
        def __init__(self, tasks: tuple[str, ...]) -> None:
            self.champion = model_store.Champion("scaling", Broken(), "7", "r", "gbm", "t", {})

        def load_all(self) -> list[str]:
            return []

        def loaded(self) -> dict[str, object]:
            return {"scaling": self.champion}

    from perfcast.serving.models import ServedModels

    models = ServedModels(("scaling",), backend_factory=OneBrokenChampion)
    models.reload()
    client = TestClient(create_app(Settings(), models), raise_server_exceptions=False)
    r = client.post("/v1/predict/scaling", json={"rows": [ROW]})
    assert r.status_code == 500 and r.json()["detail"].startswith("internal error ")
    assert "RuntimeError" in r.json()["detail"] and "a bug" in caplog.text
