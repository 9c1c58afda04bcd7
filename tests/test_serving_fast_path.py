"""The predict routes' fast path (`serving/routers/predict.py` `FastPredict`, run by
`serving/middleware.py` `ServiceMiddleware`) answers byte for byte as the FastAPI route does,
errors included, and leaves to FastAPI whatever it does not answer; `disconnected()` reads only
a message that is ready; the benchmark's load generator (`benchmarks/serving.py`
`Http11Connection`) reads whole HTTP/1.1 answers on kept connections."""

from __future__ import annotations

import asyncio
import json

import pytest
from fastapi.testclient import TestClient

from perfcast.datasets.fetch import shared_data_available
from perfcast.serving.app import create_app
from perfcast.serving.middleware import disconnected
from perfcast.serving.models import ServedModels
from perfcast.serving.routers.predict import FastPredict
from perfcast.serving.settings import Settings
from perfcast.training import model_store, trainer

ROW = {"job": "resnet18", "gpu_type": "v100", "num_nodes": 1, "num_gpus": 4,
       "local_batch_size": 128}  # fmt: skip
PREDICT = "/v1/predict/scaling"
JSON = {"content-type": "application/json"}

# (body, headers): answered by the fast path (200s and the service's own errors) or by FastAPI
REQUESTS = {
    "one row": (json.dumps({"rows": [ROW]}), JSON),
    "two rows": (json.dumps({"rows": [ROW, {**ROW, "num_nodes": 2, "num_gpus": 16}]}), JSON),
    "a job never seen (flags)": (json.dumps({"rows": [{**ROW, "job": "never-seen-net"}]}), JSON),
    "a whole float": (json.dumps({"rows": [{**ROW, "num_gpus": 4.0}]}), JSON),
    "a further column": (json.dumps({"rows": [{**ROW, "extra": 1.5}]}), JSON),
    "charset": (json.dumps({"rows": [ROW]}), {"content-type": "application/json; charset=utf-8"}),
    "a contract break (422)": (
        json.dumps({"rows": [{**ROW, "num_gpus": 2, "num_nodes": 3}]}),
        JSON,
    ),
    "too many columns (413)": (
        json.dumps({"rows": [{**ROW, **{f"k{i}": 1 for i in range(70)}}]}),
        JSON,
    ),
    "a loose type (FastAPI's 422)": (json.dumps({"rows": [{**ROW, "num_gpus": 4.5}]}), JSON),
    "no rows (FastAPI's 422)": (json.dumps({"rows": []}), JSON),
    "not an object": (json.dumps([ROW]), JSON),
    "not JSON": ('{"rows": [', JSON),
    "no content type": (json.dumps({"rows": [ROW]}), {}),
    "text/plain": (json.dumps({"rows": [ROW]}), {"content-type": "text/plain"}),
}  # fmt: skip


@pytest.fixture(scope="module")
def models() -> ServedModels:
    if not shared_data_available():
        pytest.skip("the public datasets are not available")
    if model_store.load_champion("scaling") is None:
        trainer.train("scaling", "muri-scaling", model="gbm")
    served = ServedModels(("scaling",))
    served.reload()
    return served


def _client(models: ServedModels, fast: bool) -> TestClient:
    app = create_app(Settings(tasks=("scaling",), max_columns=64), models)
    if not fast:  # the middleware is built at the first request, from these arguments
        (service,) = app.user_middleware
        service.kwargs["fast_paths"] = {}
    return TestClient(app)


def test_the_fast_path_answers_as_the_route_does(models, monkeypatch) -> None:
    taken: list[int | None] = []
    call = FastPredict.__call__

    async def counted(self, scope, receive, send, body):
        status = await call(self, scope, receive, send, body)
        taken.append(status)
        return status

    monkeypatch.setattr(FastPredict, "__call__", counted)
    slow = _client(models, fast=False)
    fast = _client(models, fast=True)  # last: the models count into its metrics
    for name, (body, headers) in REQUESTS.items():
        for path in (PREDICT, "/v1/predict/interference"):  # interference: not served, 503
            taken.clear()
            a = fast.post(path, content=body.encode(), headers=headers)
            b = slow.post(path, content=body.encode(), headers=headers)
            assert taken in ([None], [a.status_code]), name  # None: left to FastAPI
            assert (a.status_code, a.content) == (b.status_code, b.content), (name, a.text)
            assert a.headers.items() == b.headers.items(), name
    taken.clear()
    assert fast.post(PREDICT, json={"rows": [ROW]}).status_code == 200
    assert taken == [200]  # a valid request does take the fast path
    taken.clear()
    assert fast.post(PREDICT, json={"rows": [{**ROW, "num_gpus": "4"}]}).status_code == 422
    assert taken == [None]  # ... and one the model refuses does not
    metrics = fast.get("/metrics").text
    counted = 'perfcast_http_requests_total{method="POST",route="/v1/predict/scaling",status="200"}'
    assert counted in metrics
    assert 'perfcast_predictions_total{model="gbm:v' in metrics


def test_gone_reads_only_a_message_that_is_ready() -> None:
    async def scenario() -> tuple[bool, bool, int]:
        event = asyncio.Event()

        async def waits() -> dict:
            await event.wait()
            return {"type": "http.request", "body": b"", "more_body": False}

        async def left() -> dict:
            return {"type": "http.disconnect"}

        still_there = await disconnected(waits)()
        return still_there, await disconnected(left)(), len(event._waiters)  # type: ignore[attr-defined]

    still_there, gone, waiters = asyncio.run(scenario())
    assert (still_there, gone, waiters) == (False, True, 0)


def test_the_load_generator_reads_whole_answers_on_a_kept_connection() -> None:
    from benchmarks.serving import Http11Connection, _checked

    answers = [
        b"HTTP/1.1 200 OK\r\ncontent-length: 51\r\ncontent-type: application/json\r\n\r\n"
        b'{"predictions": [{"step_time_s_p90": 1.0}], "x": 1}',
        b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n"
        b'5\r\n{"pre\r\n26\r\ndictions": [{"step_time_s_p90": 2.0}]}\r\n0\r\n\r\n',
        b"HTTP/1.1 503 Service Unavailable\r\nconnection: close\r\nretry-after: 1\r\n"
        b'content-length: 16\r\n\r\n{"detail": "no"}',
    ]
    connections = []

    async def scenario() -> list:
        async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            connections.append(writer)
            while answers:
                head = await reader.readuntil(b"\r\n\r\n")
                length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
                assert json.loads(await reader.readexactly(length)) == {"rows": [ROW]}
                writer.write(answers.pop(0))
                await writer.drain()
            writer.close()

        server = await asyncio.start_server(serve, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        connection = Http11Connection(f"http://127.0.0.1:{port}")
        body = json.dumps({"rows": [ROW]}).encode()
        out = []
        for _ in range(3):
            status, payload = await connection.post(PREDICT, body)
            out.append(_checked(status, payload, rows=1))
        out.append(connection.writer is None)  # closed after the server's Connection: close
        server.close()
        return out

    assert asyncio.run(scenario()) == [200, 200, 503, True]
    assert len(connections) == 1  # the three requests on one kept connection
    assert _checked(200, b'{"predictions": []}', rows=1) == "HTTP 200 without its predictions"
    assert _checked(500, b"oops", rows=1) == "HTTP 500 without a JSON body"
    assert _checked(503, b"Service Unavailable", rows=1) == 503  # uvicorn's own, past its limit


class _Transport:
    def __init__(self) -> None:
        self.writes: list[bytes] = []
        self.closed = False

    def write(self, data: bytes) -> None:
        self.writes.append(data)

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        self.closed = True


def test_a_response_head_leaves_with_its_body_in_one_write() -> None:
    from perfcast.serving.server import OneWriteTransport

    head = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n"

    async def scenario() -> list[list[bytes]]:
        loop = asyncio.get_running_loop()
        seen = []
        raw = _Transport()
        transport = OneWriteTransport(raw, loop)
        transport.write(head)
        transport.write(b"{}")  # the body, at once: one write
        seen.append(list(raw.writes))
        raw.writes.clear()
        transport.write(head.replace(b"2", b"0"))  # a HEAD answer: no body write follows
        seen.append(list(raw.writes))
        await asyncio.sleep(0)  # the loop's next step sends it alone
        seen.append(list(raw.writes))
        raw.writes.clear()
        transport.write(head)
        transport.close()  # closing sends what is held first
        seen.append([*raw.writes, raw.closed])
        return seen

    one, held, flushed, closed = asyncio.run(scenario())
    assert one == [head + b"{}"]
    assert held == [] and flushed == [head.replace(b"2", b"0")]
    assert closed == [head, True]


def test_head_requests_and_kept_connections_through_uvicorn() -> None:
    import socket
    import threading
    import time

    import uvicorn
    from fastapi import FastAPI

    from perfcast.serving import server

    app = FastAPI()

    @app.api_route("/ping", methods=["GET", "HEAD"])
    async def ping() -> dict:
        return {"ok": True}

    config = server.config(app, Settings(), port=0, log_level="error")
    running = uvicorn.Server(config)
    thread = threading.Thread(target=running.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not (running.started and running.servers) and time.monotonic() < deadline:
        time.sleep(0.05)
    port = running.servers[0].sockets[0].getsockname()[1]
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
            sock.sendall(b"HEAD /ping HTTP/1.1\r\nHost: t\r\n\r\n")
            head = sock.recv(4096)
            assert head.startswith(b"HTTP/1.1 200") and head.endswith(b"\r\n\r\n"), head
            sock.sendall(b"GET /ping HTTP/1.1\r\nHost: t\r\n\r\n")  # same connection
            answer = b""
            while not answer.endswith(b'{"ok":true}'):
                answer += sock.recv(4096)
            assert answer.startswith(b"HTTP/1.1 200")
    finally:
        running.should_exit = True
        thread.join(10)


POOL = {"gpu_type": "v100", "gpus_per_node": 8, "nodes": 8, "price_per_gpu_hour": 2.48}
RECOMMEND = {"job": {"job": "resnet18"}, "pools": [POOL], "local_batch_sizes": [32, 128, 512],
             "work": {"samples": 1e8}}  # fmt: skip
RECOMMENDS = {
    "the benchmark's 10^5 candidates": {
        **RECOMMEND, "pools": [{**POOL, "nodes": 64}],
        "local_batch_sizes": [16, 32, 64, 128, 256, 512, 1024],
    },
    "a job never seen (flags)": {**RECOMMEND, "job": {"job": "never-seen-net"}, "top_k": 8},
    "two pools, cheapest": {
        **RECOMMEND, "objective": "min_cost",
        "pools": [POOL, {"gpu_type": "k80", "gpus_per_node": 4, "nodes": 3}],
    },
    "a deadline": {**RECOMMEND, "deadline_s": 3e4},
    "per GPU, no work": {**RECOMMEND, "objective": "max_throughput_per_gpu", "work": None},
    "amp as text": {**RECOMMEND, "job": {"job": "resnet18", "amp": "yes"}},
    "links stated": {**RECOMMEND, "job": {"job": "resnet18", "inter_node_bw_gbps": 1}},
    "a contract break": {**RECOMMEND, "job": {"job": "resnet18", "intra_node_bw_gbps": -1}},
    "nothing feasible": {**RECOMMEND, "deadline_s": 1e-3},
}  # fmt: skip


@pytest.mark.parametrize("body", RECOMMENDS.values(), ids=RECOMMENDS.keys())
def test_recommend_from_checked_candidates_answers_as_checking_every_row(
    models, body, monkeypatch
) -> None:
    """`POST /v1/recommend` predicts the candidates of a checked request unchecked (as
    `CheckedRows`): the same answer, byte for byte, as checking each row, errors included."""
    from perfcast.optimizer import scoring
    from perfcast.serving import schemas, service

    request = schemas.RecommendRequest(**body)
    answers = []
    for checked in (False, True):
        with monkeypatch.context() as patch:
            if not checked:  # the candidates handed on as enumerated: every row checked
                patch.setattr(scoring, "checked_candidates", lambda candidates: candidates)
            try:
                answers.append(service.recommend(models, request).model_dump_json())
            except Exception as err:  # the error the route words: the same one
                answers.append((type(err), str(err), getattr(err, "details", None)))
    assert answers[1] == answers[0]
    served = _client(models, fast=True).post("/v1/recommend", json=body)
    if isinstance(answers[0], tuple):
        assert served.status_code == 422, served.text
    else:
        assert served.status_code == 200, served.text
        assert served.json() == json.loads(answers[0])
