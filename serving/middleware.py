"""Plain ASGI middleware (cheaper than BaseHTTPMiddleware): request metrics, the request body
(size, read timeout, JSON safety) and admission control."""

from __future__ import annotations

import asyncio
import json
import logging
import time

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from perfcast.serving.json_safety import find_unsafe
from perfcast.serving.metrics import ServiceMetrics

access_log = logging.getLogger("perfcast.access")  # one JSON line per request (`perfcast serve`)


class MetricsMiddleware:
    """Count every HTTP request and time it, labelled by the matched route's template (never
    the raw path, so labels stay few)."""

    def __init__(self, app: ASGIApp, metrics: ServiceMetrics) -> None:
        self.app, self.metrics = app, metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        status = 500

        async def send_with_status(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_with_status)
        finally:
            route = scope.get("route")  # set by FastAPI's router on a match
            template = getattr(route, "path", "unmatched")
            method = scope["method"]
            seconds = time.perf_counter() - start
            self.metrics.requests.labels(method, template, str(status)).inc()
            self.metrics.latency.labels(method, template).observe(seconds)
            if access_log.isEnabledFor(logging.INFO):
                client = scope.get("client") or ("", 0)
                access_log.info(
                    "access",
                    extra={"method": method, "path": scope["path"], "route": template,
                           "status": status, "ms": round(seconds * 1000, 2),
                           "client": client[0]},
                )  # fmt: skip


class RequestBodyMiddleware:
    """Read each request body whole before the app sees it, then replay it:

    - over `max_bytes` -> 413 (at once from Content-Length, else once the stream passes it);
    - not complete within `read_timeout_s` -> 408 (a client that sends half a body and waits
      holds no worker for long);
    - holding a value JSON cannot answer for (NaN, Infinity, 1e999, a lone surrogate) -> 422
      naming the field. The connection stays open for the client's next request.
    """

    def __init__(self, app: ASGIApp, max_bytes: int, read_timeout_s: float) -> None:
        self.app, self.max_bytes, self.read_timeout_s = app, max_bytes, read_timeout_s

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope["headers"]).get(b"content-length")
        if declared is not None:
            try:
                too_big = int(declared) > self.max_bytes
            except ValueError:
                await _reject(send, 400, "Content-Length is not a number", close=True)
                return
            if too_big:
                await _reject(send, 413, self._message(int(declared)), close=True)
                return
        try:
            body = await asyncio.wait_for(self._read(receive), self.read_timeout_s)
        except TimeoutError:
            message = f"the request body did not arrive within {self.read_timeout_s:g} s"
            await _reject(send, 408, message, close=True)
            return
        except _TooLarge as err:
            await _reject(send, 413, self._message(err.size, streamed=True), close=True)
            return
        if body is None:  # the client went away mid-body
            return
        unsafe = find_unsafe(body) if body else None
        if unsafe is not None:
            path, message = unsafe
            detail = [{"loc": ["body", *path], "msg": message, "type": "json_invalid"}]
            await _reject(send, 422, detail)
            return
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if replayed:
                return await receive()
            replayed = True
            return {"type": "http.request", "body": body, "more_body": False}

        await self.app(scope, replay, send)

    async def _read(self, receive: Receive) -> bytes | None:
        chunks, size = [], 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return None
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_bytes:
                raise _TooLarge(size)
            chunks.append(chunk)
            if not message.get("more_body", False):
                return b"".join(chunks)

    def _message(self, size: int, streamed: bool = False) -> str:
        what = "more than" if streamed else ""
        return (
            f"request body of {what} {size} bytes is over the limit of {self.max_bytes} bytes "
            "(PERFCAST_MAX_BODY_MB); send fewer rows per request"
        ).replace("  ", " ")


class _TooLarge(Exception):
    def __init__(self, size: int) -> None:
        self.size = size


class AdmissionMiddleware:
    """At most `max_in_flight` requests under `prefix` (the work routes) at once; the next
    is answered 503 with Retry-After at once, instead of queueing without bound. Health,
    readiness and metrics are always answered."""

    def __init__(self, app: ASGIApp, max_in_flight: int, prefix: str = "/v1/") -> None:
        self.app, self.max_in_flight, self.prefix = app, max_in_flight, prefix
        self.in_flight = 0

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not scope["path"].startswith(self.prefix):
            await self.app(scope, receive, send)
            return
        if self.in_flight >= self.max_in_flight:
            detail = (
                f"the service is at its limit of {self.max_in_flight} requests in progress "
                "(PERFCAST_MAX_IN_FLIGHT); retry after the Retry-After seconds"
            )
            await _reject(send, 503, detail, retry_after=RETRY_AFTER_S)
            return
        self.in_flight += 1
        try:
            await self.app(scope, receive, send)
        finally:
            self.in_flight -= 1


RETRY_AFTER_S = 1


async def _reject(
    send: Send,
    status: int,
    detail: object,
    *,
    close: bool = False,
    retry_after: int | None = None,
) -> None:
    """Answer without the app. `close` when the rest of the body is not read (the connection
    cannot carry another request then); otherwise it stays open."""
    body = json.dumps({"detail": detail}).encode()  # ASCII: a lone surrogate is escaped
    headers = [(b"content-type", b"application/json")]
    if close:
        headers.append((b"connection", b"close"))
    if retry_after is not None:
        headers.append((b"retry-after", str(retry_after).encode()))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
