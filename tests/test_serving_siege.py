"""The service under siege, on a real uvicorn server on loopback: idle connections by the
thousand, half-sent bodies, a burst larger than it admits, huge headers, forged hosts and
forwarded addresses. A legitimate client must keep getting its answers throughout.

Latency is judged against the same client's latency on the same server just before the siege
(a busy CI machine slows both), with the issue's absolute figures as the floor."""

from __future__ import annotations

import asyncio
import json
import select
import socket
import time

import httpx
import numpy as np
import pytest
from fastapi.testclient import TestClient
from serving_server import PREDICT, ROW, LoopbackServer, served_scaling

from perfcast import datasets
from perfcast.datasets.fetch import shared_data_available
from perfcast.serving import server
from perfcast.serving.app import create_app
from perfcast.serving.batching import INLINE_ROWS
from perfcast.serving.models import ServedModels
from perfcast.serving.settings import Settings

pytestmark = pytest.mark.skipif(
    not shared_data_available(), reason="the public datasets are not available"
)


@pytest.fixture(scope="module")
def models() -> ServedModels:
    return served_scaling()


def _app(models: ServedModels, **settings):
    return create_app(Settings(tasks=("scaling",), **settings), models)


def _timed(client: httpx.Client, count: int, rate: float) -> tuple[list[int], np.ndarray]:
    """`count` single-row predictions at `rate` a second, open loop on one kept connection:
    (statuses, seconds each)."""
    statuses, seconds = [], []
    start = time.perf_counter()
    for i in range(count):
        wait = start + i / rate - time.perf_counter()
        if wait > 0:
            time.sleep(wait)
        began = time.perf_counter()
        statuses.append(client.post(PREDICT, json={"rows": [ROW]}).status_code)
        seconds.append(time.perf_counter() - began)
    return statuses, np.array(seconds)


def _health_s(client: httpx.Client, count: int = 20) -> float:
    """The median seconds of `/healthz` over `count` calls."""
    seconds = []
    for _ in range(count):
        began = time.perf_counter()
        assert client.get("/healthz").status_code == 200
        seconds.append(time.perf_counter() - began)
    return float(np.median(seconds))


def test_idle_connections_and_half_sent_bodies_leave_a_client_served(models) -> None:
    with LoopbackServer(_app(models, header_timeout_s=30.0, read_timeout_s=30.0)) as url:
        port = int(url.rsplit(":", 1)[1])
        with httpx.Client(base_url=url, timeout=10) as client:
            statuses, quiet = _timed(client, 100, rate=100)
            assert set(statuses) == {200}
            quiet_health = _health_s(client)
            idle = [socket.create_connection(("127.0.0.1", port)) for _ in range(1000)]
            half = []
            for _ in range(64):
                sock = socket.create_connection(("127.0.0.1", port))
                sock.sendall(b"POST /v1/predict/scaling HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                             b"Content-Type: application/json\r\nContent-Length: 100000\r\n"
                             b'\r\n{"rows":[')  # fmt: skip
                half.append(sock)
            try:
                statuses, siege = _timed(client, 200, rate=100)
                siege_health = _health_s(client)
            finally:
                for sock in idle + half:
                    sock.close()
    assert set(statuses) == {200}, statuses
    # what goes wrong when held connections take the slots: requests wait for the 30 s body
    # timeout, not milliseconds more. The 50 ms p99 and 10 ms health targets are measured by
    # benchmarks/serving.py; here, on a CI machine shared with other work (a p99 of 62 ms
    # against 10 ms quiet was seen), the bound only has to tell waiting from being served
    p99_quiet, p99_siege = np.quantile(quiet, 0.99), np.quantile(siege, 0.99)
    assert p99_siege < max(0.5, 10 * p99_quiet), (p99_quiet, p99_siege)
    assert siege_health < max(0.1, 10 * quiet_health), (quiet_health, siege_health)


def test_connections_past_the_limit_push_out_the_idle_ones(models) -> None:
    app = _app(models, max_connections=64, max_connections_per_client=32, header_timeout_s=60.0)
    with LoopbackServer(app) as url:
        port = int(url.rsplit(":", 1)[1])
        idle = [socket.create_connection(("127.0.0.1", port)) for _ in range(48)]
        try:
            time.sleep(server.IDLE_S + 0.3)  # silent long enough to be closed for room
            clients = [httpx.Client(base_url=url) for _ in range(5)]
            for client in clients:  # each keeps its connection open: each one pushes one out
                assert client.post(PREDICT, json={"rows": [ROW]}).status_code == 200
            time.sleep(0.2)
            answers = _answers(idle, quiet_s=0.5)
            for client in clients:
                client.close()
        finally:
            for sock in idle:
                sock.close()
    # the 16 past the client's limit of 32 came while the others were fresh: refused; then
    # each new connection closed the idle one that was oldest. Both get a JSON 503
    refused = [i for i, a in enumerate(answers) if a and a.startswith(b"HTTP/1.1 503")]
    assert refused == [*range(5), *range(32, 48)], answers
    assert all(b"retry-after: 1" in answers[i] for i in refused)
    assert answers[5:32] == [None] * 27, answers


def _answers(socks: list[socket.socket], quiet_s: float) -> list[bytes | None]:
    """What each socket received (b"": closed), None for those still silent once `quiet_s`
    passed with nothing new: all waited on at once, not one after another."""
    answers: dict[socket.socket, bytes | None] = dict.fromkeys(socks)
    pending = list(socks)
    while pending and (readable := select.select(pending, [], [], quiet_s)[0]):
        for sock in readable:
            answers[sock] = sock.recv(4096)
            pending.remove(sock)
    return [answers[sock] for sock in socks]


async def _burst(port: int, count: int, body: bytes) -> list[tuple[int, bytes]]:
    """`count` requests at once, each on its own connection: (status, raw answer) each."""

    async def one() -> tuple[int, bytes]:
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
        except OSError:
            return 0, b""
        try:
            length = str(len(body)).encode()
            writer.write(b"POST /v1/predict/scaling HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                         b"Content-Type: application/json\r\nConnection: close\r\n"
                         b"Content-Length: " + length + b"\r\n\r\n" + body)  # fmt: skip
            await writer.drain()
            answer = await asyncio.wait_for(reader.read(), 60)
        except (OSError, TimeoutError):
            return 0, b""
        finally:
            writer.close()
        status = int(answer.split(b" ", 2)[1]) if answer.startswith(b"HTTP/1.1 ") else 0
        return status, answer

    return await asyncio.gather(*(one() for _ in range(count)))


def test_a_burst_is_admitted_as_far_as_it_fits_and_the_rest_get_json_503s(models) -> None:
    # requests of more rows than run on the event loop wait in a thread: they overlap
    body = json.dumps({"rows": [ROW] * (INLINE_ROWS + 1)}).encode()
    app = _app(models, max_in_flight=8, max_connections=512)
    with LoopbackServer(app) as url:
        answers = asyncio.run(_burst(int(url.rsplit(":", 1)[1]), 2000, body))
    statuses = [status for status, _ in answers]
    assert statuses.count(200) >= 8, np.unique(statuses, return_counts=True)
    assert set(statuses) <= {200, 503}, np.unique(statuses, return_counts=True)
    refusals = [answer for status, answer in answers if status == 503]
    assert refusals, "a burst of 2,000 on 8 places and 512 connections refused nothing"
    for answer in refusals:
        head, _, payload = answer.partition(b"\r\n\r\n")
        assert b"retry-after: 1" in head.lower(), head
        assert "retry" in json.loads(payload)["detail"].lower()


def test_headers_past_the_limit_are_431_at_once(models) -> None:
    with LoopbackServer(_app(models, max_header_bytes=8192)) as url:
        port = int(url.rsplit(":", 1)[1])
        with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
            sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Big: ")
            sent = 0
            try:
                for _ in range(64 * 16):  # up to 64 MB, as the attack sent
                    sock.sendall(b"a" * 65536)
                    sent += 65536
            except OSError:  # the server answered and closed while we were still sending
                pass
            answer = sock.recv(4096)
    assert answer.startswith(b"HTTP/1.1 431"), answer[:200]
    assert b"PERFCAST_MAX_HEADER_BYTES" in answer
    # "at once" is judged by what the server read, not by a clock: it closed the connection
    # long before the 64 MB were sent (a server reading on would have taken them all)
    assert sent < 16 * 2**20, sent


def test_a_foreign_host_header_is_refused_and_loopback_names_are_answered(models) -> None:
    app = _app(models, allowed_hosts=("localhost", "127.0.0.1", "::1"))
    with LoopbackServer(app) as url, httpx.Client(base_url=url) as client:
        assert client.get("/healthz").status_code == 200
        assert client.get("/healthz", headers={"Host": "localhost:8000"}).status_code == 200
        assert client.get("/healthz", headers={"Host": "[::1]:8000"}).status_code == 200
        forged = client.post(PREDICT, json={"rows": [ROW]}, headers={"Host": "evil.example"})
    assert forged.status_code == 400, forged.text
    assert "PERFCAST_ALLOWED_HOSTS" in forged.json()["detail"]


def test_every_answer_carries_security_headers(models) -> None:
    with LoopbackServer(_app(models)) as url, httpx.Client(base_url=url) as client:
        for path in ("/healthz", "/ui/", "/docs", "/openapi.json"):
            r = client.get(path, follow_redirects=True)
            assert r.status_code == 200, (path, r.status_code)
            assert r.headers["x-content-type-options"] == "nosniff", path
            assert r.headers["x-frame-options"] == "DENY", path
            assert "frame-ancestors 'none'" in r.headers["content-security-policy"], path
        policy = client.get("/ui/", follow_redirects=True).headers["content-security-policy"]
        assert "'unsafe-inline'" not in policy.split("script-src")[1].split(";")[0]
        r = client.post(PREDICT, json={"rows": [ROW]})
        assert r.status_code == 200 and r.headers["x-content-type-options"] == "nosniff"
        assert "server" not in r.headers


def test_x_forwarded_for_is_believed_only_from_a_named_proxy(models, caplog) -> None:
    import logging

    caplog.set_level(logging.INFO, logger="perfcast.access")
    forged = {"X-Forwarded-For": "203.0.113.9"}
    with LoopbackServer(_app(models)) as url, httpx.Client(base_url=url) as client:
        assert client.get("/healthz", headers=forged).status_code == 200
    proxied = _app(models, trusted_proxies=("127.0.0.1",))
    with LoopbackServer(proxied) as url, httpx.Client(base_url=url) as client:
        assert client.get("/healthz", headers=forged).status_code == 200
    clients = [r.client for r in caplog.records if getattr(r, "path", "") == "/healthz"]
    assert clients == ["127.0.0.1", "203.0.113.9"], clients


def test_a_client_that_leaves_mid_body_is_counted_499_not_500(models) -> None:
    app = _app(models)
    with LoopbackServer(app) as url:
        port = int(url.rsplit(":", 1)[1])
        with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
            sock.sendall(b"POST /v1/predict/scaling HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                         b"Content-Length: 1000\r\n\r\n{\"rows\": [")  # fmt: skip
            time.sleep(0.2)
        time.sleep(0.5)
        metrics = httpx.get(f"{url}/metrics").text
    lines = [line for line in metrics.splitlines() if 'status="499"' in line]
    assert lines and not any('status="500"' in line for line in metrics.splitlines()), lines


# ---- a work bound on every route -----------------------------------------------------------


def _refused(client: TestClient, path: str, body: dict, limit: str) -> None:
    """POST `body`; asserts a 413 naming `limit` and its setting."""
    r = client.post(path, json=body)
    assert r.status_code == 413, r.text[:300]
    assert r.json()["limit"] == limit and f"PERFCAST_{limit.upper()}" in r.text


@pytest.fixture(scope="module")
def plan_rows() -> list[dict]:
    """One measured Spark job's plan rows (Decima's TPC-H stages), without the target."""
    rows = datasets.load("decima-tpch-stages")
    job = rows[rows["sample_id"] == rows["sample_id"].iloc[0]].drop(columns=["e2e_latency_ms"])
    return job.astype(object).where(job.notna(), None).to_dict("records")


def test_each_route_answers_its_work_bound_with_a_413_before_doing_the_work(
    models, plan_rows, monkeypatch
) -> None:
    # "before doing the work" is judged by the work itself, not by a clock: no refused request
    # may reach the models (a timed bound failed on CI's busy machine)
    predicted: list[str] = []
    predict = models.predict
    monkeypatch.setattr(
        models, "predict", lambda task, *a, **k: predicted.append(task) or predict(task, *a, **k)
    )
    client = TestClient(_app(models, max_columns=64))
    nodes = [{"name": f"n{t}", "gpu_type": t, "gpus": 8, "gpu_memory_mb": 16384}
             for t in ("k80", "p100", "v100", "a100")]  # fmt: skip
    # a thousand kinds of one-GPU job: 10^6 pairs of kinds × 4 GPU types to predict
    jobs = [{"job_id": f"j{i}", "num_gpus": 1, "features": {"job": "resnet18",
             "local_batch_size": 1 + i}} for i in range(1000)]  # fmt: skip
    _refused(client, "/v1/place", {"nodes": nodes, "jobs": jobs}, "max_placement_predictions")
    assert predicted == []
    # a thousand jobs of one kind are one pair of kinds × 4 GPU types: within the bound (this
    # app serves no interference model to answer with)
    alike = [{**j, "features": {"job": "resnet18", "local_batch_size": 32}} for j in jobs]
    answer = client.post("/v1/place", json={"nodes": nodes, "jobs": alike})
    assert answer.status_code == 503 and "interference" in answer.text, answer.text
    assert predicted == ["interference"], predicted  # the spy sees the work a request does
    predicted.clear()
    plan = (plan_rows * (3000 // len(plan_rows) + 1))[:3000]
    body = {"rows": plan, "parallelism": list(range(1, 65)), "memory_limits_mb": [
        1024.0 * m for m in range(1, 17)]}  # fmt: skip
    _refused(client, "/v1/recommend/query", body, "max_query_rows")
    wide = [{**row, **{f"own{i}_{k}": 1 for k in range(20)}} for i, row in enumerate(plan[:2000])]
    _refused(client, "/v1/predict/query", {"rows": wide}, "max_columns")
    wide_features = [{**job, "features": {**job["features"], f"own{i}": 1}}
                     for i, job in enumerate(jobs[:100])]  # fmt: skip
    _refused(client, "/v1/place", {"nodes": nodes[:1], "jobs": wide_features}, "max_columns")
    assert predicted == [], predicted


def test_a_validation_storm_is_cut_at_the_first_bad_job(models) -> None:
    client = TestClient(_app(models))
    job = {"min_gpus": "x", "max_gpus": "y", "weight": -1, "local_batch_sizes": ["a"] * 5,
           "job": {f"k{i}": "v" * 10 for i in range(12)}}  # fmt: skip
    body = {"total_gpus": 8, "jobs": [{**job, "job_id": f"j{i}"} for i in range(10_000)]}
    r = client.post("/v1/allocate", json=body)
    assert r.status_code == 422
    detail = r.json()["detail"]
    # the cut is judged by the answer, not by a clock: only the first bad job was validated
    assert {tuple(d["loc"][:3]) for d in detail} == {("body", "jobs", 0)}, detail


def test_the_pages_go_through_the_same_admission_as_the_api(models) -> None:
    client = TestClient(_app(models, max_in_flight=0))  # every place taken
    for path in ("/ui/ask", "/v1/models"):
        r = client.get(path)
        assert r.status_code == 503 and r.headers["retry-after"] == "1", path
    assert client.get("/healthz").status_code == 200
    assert client.get("/readyz").status_code == 200


def test_pipelined_requests_then_a_reset_log_no_error(models, caplog) -> None:
    import logging
    import struct

    caplog.set_level(logging.ERROR)
    body = json.dumps({"rows": [ROW]}).encode()
    request = (b"POST /v1/predict/scaling HTTP/1.1\r\nHost: 127.0.0.1\r\n"
               b"Content-Type: application/json\r\nContent-Length: "
               + str(len(body)).encode() + b"\r\n\r\n" + body)  # fmt: skip
    with LoopbackServer(_app(models)) as url:
        port = int(url.rsplit(":", 1)[1])
        for _ in range(5):
            sock = socket.create_connection(("127.0.0.1", port))
            sock.sendall(request * 50)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            sock.close()  # a reset, with answers still being written
        time.sleep(1.0)
        assert httpx.post(f"{url}{PREDICT}", json={"rows": [ROW]}).status_code == 200
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert not errors, [r.getMessage() for r in errors]
