"""The service as an adversary meets it: values JSON cannot answer for, loose types, huge
error bodies, work out of proportion to the body, more requests than the CPU can take, slow
bodies, clients that leave, keys that are not ASCII, reload without a key. On a real scaling
champion (muri-scaling) and the real shared data."""

from __future__ import annotations

import asyncio
import gc
import json
import socket
import threading
import time
import weakref

import httpx
import pandas as pd
import pytest
from fastapi.testclient import TestClient
from serving_server import PREDICT, ROW, LoopbackServer, served_scaling
from typer.testing import CliRunner

from perfcast.cli import app as perfcast_cli
from perfcast.datasets import io
from perfcast.datasets.fetch import shared_data_available
from perfcast.errors import ContractError
from perfcast.optimizer import elastic
from perfcast.serving.app import MAX_ERRORS, create_app
from perfcast.serving.batching import INLINE_ROWS, PredictionBatcher
from perfcast.serving.models import ServedModels
from perfcast.serving.settings import Settings
from perfcast.training import model_store

pytestmark = pytest.mark.skipif(
    not shared_data_available(), reason="the public datasets are not available"
)

KEY = "k3y"


@pytest.fixture(scope="module")
def models() -> ServedModels:
    return served_scaling()


def _app(models: ServedModels, **settings):
    return create_app(Settings(api_key=KEY, tasks=("scaling",), **settings), models)


@pytest.fixture(scope="module")
def http(models) -> TestClient:
    return TestClient(_app(models, max_body_bytes=2**20, max_columns=64))


def _body(rows: str) -> bytes:
    return ('{"rows": [' + rows + "]}").encode()


# ---- values JSON cannot answer for ---------------------------------------------------------


@pytest.mark.parametrize("number", ["NaN", "Infinity", "-Infinity", "1e999", "-1E+400"])
def test_non_finite_numbers_are_a_422_naming_the_field_on_a_kept_connection(models, number) -> None:
    bad = _body(json.dumps(ROW).replace('"num_gpus": 4', f'"num_gpus": {number}'))
    with LoopbackServer(_app(models)) as url, httpx.Client(base_url=url) as client:
        r = client.post(PREDICT, content=bad, headers={"content-type": "application/json"})
        assert r.status_code == 422, r.text
        assert r.json()["detail"][0]["loc"] == ["body", "rows", 0, "num_gpus"]
        assert number.lstrip("-") in r.json()["detail"][0]["msg"]
        assert r.headers.get("connection") != "close"
        assert client.post(PREDICT, json={"rows": [ROW]}).status_code == 200  # same connection
        assert client.post("/v1/recommend", content=b'{"top_k": NaN}').status_code == 422


def test_a_string_that_merely_says_nan_is_no_number(http) -> None:
    r = http.post(PREDICT, json={"rows": [{**ROW, "job": "NaN-Infinity-1e999"}]})
    assert r.status_code == 200, r.text


def test_lone_surrogates_are_a_422_but_paired_ones_are_text(http) -> None:
    lone = _body('{"job": "\\ud800x", "gpu_type": "v100", "num_nodes": 1, "num_gpus": 1, '
                 '"local_batch_size": 8}')  # fmt: skip
    r = http.post(PREDICT, content=lone)
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", "rows", 0, "job"]
    key = _body('{"\\udfff": 1, "job": "a", "gpu_type": "v100", "num_nodes": 1, "num_gpus": 1, '
                '"local_batch_size": 8}')  # fmt: skip
    assert http.post(PREDICT, content=key).status_code == 422
    pair = lone.replace(b"\\ud800x", b"\\ud83d\\ude00")  # an emoji: valid Unicode
    r = http.post(PREDICT, content=pair, headers={"content-type": "application/json"})
    assert r.status_code == 200, r.text


def test_a_non_ascii_api_key_is_a_401_and_reload_is_closed_without_a_key(http, models) -> None:
    r = http.post("/v1/models/reload", headers={"X-API-Key": "schlüssel".encode()})
    assert r.status_code == 401
    assert http.post("/v1/models/reload", headers={"X-API-Key": KEY}).status_code == 200
    keyless = TestClient(create_app(Settings(tasks=("scaling",)), models))
    r = keyless.post("/v1/models/reload")
    assert r.status_code == 403 and "PERFCAST_API_KEY" in r.json()["detail"]
    schemes = http.get("/openapi.json").json()["components"]["securitySchemes"]
    scheme = schemes["APIKeyHeader"]
    assert (scheme["type"], scheme["in"], scheme["name"]) == ("apiKey", "header", "X-API-Key")


def test_serve_refuses_a_network_interface_without_a_key(monkeypatch) -> None:
    monkeypatch.delenv("PERFCAST_API_KEY", raising=False)
    out = CliRunner().invoke(perfcast_cli, ["serve", "--host", "0.0.0.0", "--no-train-missing"])
    assert out.exit_code == 2 and "PERFCAST_API_KEY" in out.output


# ---- strict types ----------------------------------------------------------------------------


@pytest.mark.parametrize("value", [4.5, True, "4", [4], {"n": 4}])
def test_an_integer_column_takes_only_integers(http, value) -> None:
    r = http.post(PREDICT, json={"rows": [ROW, {**ROW, "num_gpus": value}]})
    assert r.status_code == 422, r.text
    assert len(r.json()["detail"]) == 1  # one problem, said once
    first = r.json()["detail"][0]
    assert first["loc"] == ["body", "rows", 1, "num_gpus"]
    assert "integer" in first["msg"]


def test_a_whole_float_is_an_integer_as_pandas_writes_it(http) -> None:
    r = http.post(PREDICT, json={"rows": [{**ROW, "num_gpus": 4.0}]})
    assert r.status_code == 200
    assert r.json()["predictions"] == http.post(PREDICT, json={"rows": [ROW]}).json()["predictions"]


@pytest.mark.parametrize("value", [2.5, True, "2"])
def test_integer_fields_of_requests_are_strict(http, value) -> None:
    request = {"job": {"job": "resnet18"}, "local_batch_sizes": [64],
               "pools": [{"gpu_type": "v100", "gpus_per_node": 8, "nodes": value}]}  # fmt: skip
    r = http.post("/v1/recommend", json=request)
    assert r.status_code == 422
    assert ["body", "pools", 0, "nodes"] in [d["loc"] for d in r.json()["detail"]]


def test_error_bodies_are_short_and_never_echo_the_input(models) -> None:
    http = TestClient(_app(models))  # the default 16 MB body limit
    rows = [{**ROW, "job": "x" * 50}] * 10_001
    r = http.post(PREDICT, json={"rows": rows})
    assert r.status_code == 422 and len(r.content) < 1000, len(r.content)
    assert "xxxxx" not in r.text
    many = [{"gpu_type": 1, "gpus_per_node": "x", "nodes": None}] * 12  # 36 problems
    r = http.post(
        "/v1/recommend", json={"job": {"job": "a"}, "pools": many, "local_batch_sizes": [1]}
    )
    assert r.status_code == 422 and len(r.json()["detail"]) == MAX_ERRORS + 1
    assert r.json()["detail"][-1]["type"] == "truncated"


def test_fewer_gpus_than_nodes_names_the_gpu_count(http) -> None:
    r = http.post(PREDICT, json={"rows": [{**ROW, "num_gpus": 2, "num_nodes": 3}]})
    assert r.status_code == 422
    first = r.json()["detail"][0]
    assert first["loc"] == ["body", "rows", 0, "num_gpus"]
    assert "value 2 fails num_gpus >= num_nodes" in first["msg"], first["msg"]


def test_csv_files_refuse_fractions_in_integer_columns_and_repeated_headers(tmp_path) -> None:
    table = pd.DataFrame([{**ROW, "step_time_s": 0.5}] * 3)
    table["local_batch_size"] = [128.0, 128.7, 128.0]
    path = tmp_path / "fraction.csv"
    table.to_csv(path, index=False)
    with pytest.raises(ContractError, match=r"128\.7") as err:
        io.read_table(path, "scaling")
    assert (err.value.row, err.value.column) == (2, "local_batch_size")
    whole = tmp_path / "whole.csv"
    table.assign(local_batch_size=128.0).to_csv(whole, index=False)
    assert io.read_table(whole, "scaling")["local_batch_size"].tolist() == [128] * 3
    repeated = tmp_path / "repeated.csv"
    repeated.write_text("job,gpu_type,num_gpus,num_nodes,num_gpus,local_batch_size,step_time_s\n"
                        "a,v100,1,1,2,8,0.1\n")  # fmt: skip
    with pytest.raises(ContractError, match="'num_gpus' twice"):
        io.read_table(repeated, "scaling")


# ---- bounded work ----------------------------------------------------------------------------


def test_rows_with_many_distinct_keys_are_refused_by_count_not_by_size(http) -> None:
    rows = [{**ROW, **{f"k{i}_{j}": 1 for j in range(3)}} for i in range(30)]  # 90 extra keys
    r = http.post(PREDICT, json={"rows": rows})
    assert r.status_code == 413 and r.json()["limit"] == "max_columns", r.text
    assert "PERFCAST_MAX_COLUMNS" in r.json()["detail"][0]["msg"]
    same = [{**ROW, "extra": i} for i in range(30)]  # one extra column, 30 rows: fine
    assert http.post(PREDICT, json={"rows": same}).status_code == 200


def test_an_allocation_past_the_exact_table_is_answered_with_its_proven_gap(http, models):
    points = [
        {"num_gpus": g, "batch_size": 64 * g, "samples_per_s": 90.0 * g**0.8} for g in (1, 8, 4096)
    ]
    given = {"job_id": "a", "throughput": points}
    r = http.post("/v1/allocate", json={"total_gpus": 65_536, "jobs": [given]})
    assert r.status_code == 200, r.text  # three choices: 4 × 65,537 cells, solved exactly
    assert r.json()["allocations"][0]["num_gpus"] == 4096
    assert r.json()["exact"] and r.json()["optimality_gap"] == 0
    # 400 jobs × 4 choices on 16,384 GPUs: 26M cells, past the exact DP's 5M
    many = [{**given, "job_id": str(i)} for i in range(400)]
    r = http.post("/v1/allocate", json={"total_gpus": 16_384, "jobs": many})
    assert r.status_code == 200, r.text
    answer = r.json()
    assert not answer["exact"] and 0 <= answer["optimality_gap"] < 0.05
    assert answer["used_gpus"] <= 16_384
    # the proven gap is loose on so few, so lumpy choices: the exact DP finds no better
    table = {(p["num_gpus"], p["batch_size"]): p["samples_per_s"] for p in points}
    jobs = [elastic.ElasticJob(j["job_id"], table) for j in many]
    exact = elastic.solve(jobs, 16_384, exact_cells=10**9)
    assert answer["weighted_throughput"] == pytest.approx(exact.value, rel=1e-9)
    # the hull's work is bounded by the jobs' GPU-count choices
    r = TestClient(_app(models, max_allocation_choices=1000)).post(
        "/v1/allocate", json={"total_gpus": 16_384, "jobs": many}
    )
    assert r.status_code == 413 and r.json()["limit"] == "max_allocation_choices", r.text
    assert r.json()["value"] == 400 * 4  # three GPU counts each, and 0


def test_recommend_is_bounded_by_its_candidates(models) -> None:
    client = TestClient(_app(models, max_candidates=1000))
    request = {"job": {"job": "resnet18"}, "local_batch_sizes": [32, 64],
               "pools": [{"gpu_type": "v100", "gpus_per_node": 8, "nodes": 16}]}  # fmt: skip
    r = client.post("/v1/recommend", json=request)
    assert r.status_code == 413 and r.json()["limit"] == "max_candidates"
    assert r.json()["value"] == 2 * (7 * 16 * 17 // 2 + 16)


# ---- admission control -----------------------------------------------------------------------


class _Gated(ServedModels):
    """The real champions, whose predictions wait until the test opens the gate."""

    def __init__(self, inner: ServedModels) -> None:
        self.__dict__.update(inner.__dict__)
        self.gate, self.entered = threading.Event(), threading.Event()

    def predict(self, task, rows, groups=None, *, columns=False):
        self.entered.set()
        self.gate.wait(30)
        return super().predict(task, rows, groups, columns=columns)


def test_a_full_service_answers_503_with_retry_after_and_health_still_answers(models) -> None:
    gated = _Gated(models)
    app = _app(gated, max_in_flight=2)

    async def scenario() -> tuple[list[int], httpx.Response, httpx.Response]:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
            # requests of more rows than run on the event loop: their calls wait in a thread
            rows = [ROW] * (INLINE_ROWS + 1)
            held = [asyncio.create_task(client.post(PREDICT, json={"rows": rows}))
                    for _ in range(2)]  # fmt: skip
            while not gated.entered.is_set():
                await asyncio.sleep(0.01)
            refused = await client.post(PREDICT, json={"rows": [ROW]})
            health = await client.get("/healthz")
            gated.gate.set()
            return [(await h).status_code for h in held], refused, health

    held, refused, health = asyncio.run(scenario())
    assert held == [200, 200]
    assert refused.status_code == 503 and refused.headers["retry-after"] == "1"
    assert "PERFCAST_MAX_IN_FLIGHT" in refused.json()["detail"]
    assert health.status_code == 200


def test_rows_of_a_client_that_left_are_dropped_before_the_predictor(models) -> None:
    batcher = PredictionBatcher(models)

    async def gone() -> bool:
        return True

    async def scenario() -> None:
        with pytest.raises(asyncio.CancelledError):
            await batcher.predict("scaling", [ROW], gone)

    asyncio.run(scenario())
    assert batcher.dropped == 1 and batcher.calls == 0


def test_bad_rows_in_a_batch_fail_alone_without_one_call_per_request(models) -> None:
    app = _app(models)
    good = [{**ROW, "num_gpus": g, "local_batch_size": b} for g in (1, 2, 4, 8) for b in (32, 64)]
    bad = [{**ROW, "local_batch_size": 0}, {**ROW, "num_nodes": 0}]

    async def send_all(rows: list[dict]) -> list[httpx.Response]:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
            posts = [client.post(PREDICT, json={"rows": [r]}) for r in rows]
            return await asyncio.gather(*posts)

    before = app.state.batcher.calls
    answers = asyncio.run(send_all([*good[:4], bad[0], *good[4:], bad[1]]))
    codes = [a.status_code for a in answers]
    assert codes == [200] * 4 + [422] + [200] * 4 + [422]
    assert answers[4].json()["detail"][0]["loc"] == ["body", "rows", 0, "local_batch_size"]
    assert answers[9].json()["detail"][0]["loc"] == ["body", "rows", 0, "num_nodes"]
    # at most: the first alone, the rest batched, one more call per bad request
    assert app.state.batcher.calls - before <= 4, app.state.batcher.calls - before


def test_a_half_sent_body_is_answered_408_after_the_read_timeout(models) -> None:
    with LoopbackServer(_app(models, read_timeout_s=1.0)) as url:
        port = int(url.rsplit(":", 1)[1])
        with socket.create_connection(("127.0.0.1", port), timeout=20) as sock:
            sock.sendall(b"POST /v1/predict/scaling HTTP/1.1\r\nHost: t\r\n"
                         b"Content-Type: application/json\r\nContent-Length: 500\r\n\r\n"
                         b'{"rows": [')  # fmt: skip
            answer = sock.recv(4096)
    assert answer.startswith(b"HTTP/1.1 408"), answer[:100]


def _answer_and_close(sock: socket.socket) -> bytes:
    received = b""
    while chunk := sock.recv(4096):  # b"": the server closed the connection
        received += chunk
    return received


@pytest.mark.parametrize("parser", ["httptools", "h11"])
@pytest.mark.parametrize(
    "half",
    [b"", b"POST /v1/predict/sca", b"POST /v1/predict/scaling HTTP/1.1\r\nHost: t\r\nContent-"],
    ids=["nothing", "half a request line", "headers without their end"],
)
def test_a_request_whose_headers_do_not_arrive_is_closed_after_the_header_timeout(
    models, half, parser
) -> None:
    from uvicorn.protocols.http.h11_impl import H11Protocol

    base = H11Protocol if parser == "h11" else None
    with LoopbackServer(_app(models, header_timeout_s=0.5), base) as url:
        port = int(url.rsplit(":", 1)[1])
        with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
            sock.sendall(half)
            answer = _answer_and_close(sock)  # a timeout here (socket.timeout) fails the test
    assert answer.startswith(b"HTTP/1.1 408"), answer[:100]


def test_the_header_timeout_restarts_with_each_request_on_a_kept_connection(models) -> None:
    with LoopbackServer(_app(models, header_timeout_s=1.0)) as url:
        port = int(url.rsplit(":", 1)[1])
        with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
            for _ in range(2):  # each request's headers sent slowly, in time
                for part in (b"GET /healthz HTTP/1.1\r\n", b"Host: t\r\n", b"\r\n"):
                    sock.sendall(part)
                    time.sleep(0.2)
                assert sock.recv(4096).startswith(b"HTTP/1.1 200")
            sock.sendall(b"GET /heal")  # then half of a third request
            answer = _answer_and_close(sock)
    assert answer.startswith(b"HTTP/1.1 408"), answer[:100]


def test_recommend_answers_a_diverse_pareto_set_not_near_duplicates(models) -> None:
    from perfcast.optimizer import candidates, configs, scoring

    pools = [candidates.GpuPool("v100", gpus_per_node=8, nodes=8, price_per_gpu_hour=2.48)]
    kwargs = {"local_batch_sizes": [32, 64, 128], "work": scoring.Work(samples=1e8), "top_k": 5}
    top = configs.recommend({"job": "resnet18"}, pools, models, **kwargs).top
    every = scoring.score_candidates(
        candidates.enumerate_candidates({"job": "resnet18"}, pools, [32, 64, 128]),
        models,
        kwargs["work"],
    )
    # min_time ranks by the p90 time; the front is of the median time, cost and GPUs
    assert top["total_time_s_p90"].iloc[0] == pytest.approx(every["total_time_s_p90"].min())
    assert top["total_time_s_p90"].is_monotonic_increasing and top["num_gpus"].nunique() == 5
    assert top["num_gpus"].max() >= 2 * top["num_gpus"].min()  # not 32, 31, 30, 29, 28
    for row in top.iloc[1:].itertuples():  # none is beaten on time, cost and GPUs at once
        better = (
            (every["total_time_s"] <= row.total_time_s)
            & (every["cost"] <= row.cost)
            & (every["num_gpus"] <= row.num_gpus)
        )
        strictly = (every["total_time_s"] < row.total_time_s) | (every["cost"] < row.cost)
        assert not (better & (strictly | (every["num_gpus"] < row.num_gpus))).any(), row


# ---- ecosystem: logs, metrics, client ----------------------------------------------------


def test_access_log_is_one_json_line_per_request_and_metrics_name_the_models(http) -> None:
    import io as text_io
    import logging

    from perfcast.serving.logs import JsonFormatter

    stream = text_io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonFormatter())
    access = logging.getLogger("perfcast.access")
    level = access.level
    access.addHandler(handler)
    access.setLevel(logging.INFO)
    try:
        http.post(PREDICT, json={"rows": [ROW]})
        http.post(PREDICT, json={"rows": [{**ROW, "num_gpus": 4.5}]})
    finally:
        access.removeHandler(handler)
        access.setLevel(level)
    lines = [json.loads(line) for line in stream.getvalue().splitlines()]
    assert [(e["route"], e["status"]) for e in lines] == [(PREDICT, 200), (PREDICT, 422)]
    assert all(e["ms"] > 0 and e["path"] == PREDICT for e in lines)
    champion = model_store.load_champion("scaling")
    text = http.get("/metrics").text
    assert (
        f'perfcast_model_info{{family="{champion.family}",run_id="{champion.run_id}",'
        f'task="scaling",version="{champion.version}"}} 1.0'
    ) in text


def test_the_client_waits_as_retry_after_says_and_gives_up_after_its_retries() -> None:
    from perfcast.serving.client import PerfcastClient, ServiceError

    answers = iter([503, 503, 200, 503, 503])
    calls = []

    def service(request: httpx.Request) -> httpx.Response:
        calls.append(request.url.path)
        status = next(answers)
        body = {"models": []} if status == 200 else {"detail": "full"}
        return httpx.Response(status, json=body, headers={"Retry-After": "0"})

    http = httpx.Client(transport=httpx.MockTransport(service), base_url="http://t")
    assert PerfcastClient("http://t", http=http, retries=3).models() == {"models": []}
    assert len(calls) == 3
    with pytest.raises(ServiceError, match="503"):
        PerfcastClient("http://t", http=http, retries=1).models()
    assert len(calls) == 5


def test_a_frozen_heap_still_frees_the_models_a_reload_replaces() -> None:
    """`perfcast serve` freezes what is alive after each reload, so that no full collection
    walks the models while requests wait; the models a reload replaces, reference cycles and
    all, must still be freed."""

    class CyclicBackend:  # a reference cycle: only the cycle collector can free it
        def __init__(self, tasks: tuple[str, ...]) -> None:
            self.me = self

        def load_all(self) -> list[str]:
            return []

        def loaded(self) -> dict[str, object]:
            return {}

    made: list[weakref.ref] = []

    def factory(tasks: tuple[str, ...]) -> CyclicBackend:
        backend = CyclicBackend(tasks)
        made.append(weakref.ref(backend))
        return backend

    models = ServedModels(("scaling",), backend_factory=factory, freeze_heap=True)  # type: ignore[arg-type]
    try:
        models.reload()
        assert gc.get_freeze_count() > 0
        served = made[-1]
        models.reload()
        assert served() is None, "the replaced backend outlived its reload"
        assert made[-1]() is not None
    finally:
        gc.unfreeze()
