"""Plain ASGI middleware (cheaper than BaseHTTPMiddleware): request metrics, body size limit."""

from __future__ import annotations

import json
import time

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from perfcast.serving.metrics import ServiceMetrics


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
            self.metrics.requests.labels(method, template, str(status)).inc()
            self.metrics.latency.labels(method, template).observe(time.perf_counter() - start)


class BodySizeLimitMiddleware:
    """Refuse request bodies over `max_bytes` with 413: at once from Content-Length, else while
    the body streams in (the body is buffered up to the limit and replayed to the app)."""

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app, self.max_bytes = app, max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope["headers"]).get(b"content-length")
        if declared is not None:
            try:
                too_big = int(declared) > self.max_bytes
            except ValueError:
                await _reject(send, 400, "Content-Length is not a number")
                return
            if too_big:
                await _reject(send, 413, self._message(int(declared)))
                return
            await self.app(scope, receive, send)
            return
        chunks, size = [], 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                break
            size += len(message.get("body", b""))
            if size > self.max_bytes:
                await _reject(send, 413, self._message(size, streamed=True))
                return
            chunks.append(message.get("body", b""))
            if not message.get("more_body", False):
                break
        body, replayed = b"".join(chunks), False

        async def replay() -> Message:
            nonlocal replayed
            if replayed:
                return await receive()
            replayed = True
            return {"type": "http.request", "body": body, "more_body": False}

        await self.app(scope, replay, send)

    def _message(self, size: int, streamed: bool = False) -> str:
        what = "more than" if streamed else ""
        return (
            f"request body of {what} {size} bytes is over the limit of {self.max_bytes} bytes "
            "(PERFCAST_MAX_BODY_MB); send fewer rows per request"
        ).replace("  ", " ")


async def _reject(send: Send, status: int, detail: str) -> None:
    body = json.dumps({"detail": detail}).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [(b"content-type", b"application/json"), (b"connection", b"close")],
        }
    )
    await send({"type": "http.response.body", "body": body})
