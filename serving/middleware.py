"""One plain ASGI middleware around the app (each layer of middleware is a coroutine, a send
wrapper and a frame per request; these were three): request metrics and the access log,
admission control, the request body (size, read timeout, JSON safety), and the hot routes'
fast paths (`POST /v1/predict/<task>` without FastAPI's request machinery: see
`serving/routers/predict.py` `FastPredict`)."""

from __future__ import annotations

import asyncio
import inspect
import json
import logging
import time
from collections.abc import Awaitable, Callable, Mapping

import anyio
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from perfcast.serving.json_safety import find_unsafe
from perfcast.serving.metrics import ServiceMetrics

access_log = logging.getLogger("perfcast.access")  # one JSON line per request (`perfcast serve`)

RETRY_AFTER_S = 1
CLIENT_LEFT = 499  # counted for a request whose client went away before it was answered

# on every answer: no MIME sniffing, no framing (clickjacking), no referrer to other sites
_ALWAYS = [(b"x-content-type-options", b"nosniff"), (b"x-frame-options", b"DENY"),
           (b"referrer-policy", b"no-referrer")]  # fmt: skip
# the pages load only the service's own assets; Swagger UI and ReDoc start from an inline
# script and ReDoc renders in a blob: worker
_CSP = (
    b"default-src 'self'; img-src 'self' data:; style-src 'self' 'unsafe-inline'; "
    b"script-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'"
)
_CSP_DOCS = (b"default-src 'self'; img-src 'self' data:; style-src 'self' 'unsafe-inline'; "
             b"script-src 'self' 'unsafe-inline'; worker-src 'self' blob:; "
             b"frame-ancestors 'none'; base-uri 'none'")  # fmt: skip
SECURITY_HEADERS = [*_ALWAYS, (b"content-security-policy", _CSP)]
_DOCS_HEADERS = [*_ALWAYS, (b"content-security-policy", _CSP_DOCS)]


def _security_headers(path: str) -> list[tuple[bytes, bytes]]:
    return _DOCS_HEADERS if path in ("/docs", "/redoc") else SECURITY_HEADERS


def _host(scope: Scope) -> str:
    """The Host header's name, lower case, without its port (an IPv6 address unbracketed)."""
    for name, value in scope["headers"]:
        if name == b"host":
            host = value.decode("latin-1").strip().lower()
            if host.startswith("["):
                return host[1 : host.find("]")] if "]" in host else host
            return host.rsplit(":", 1)[0] if host.count(":") == 1 else host
    return ""


# (scope, receive, send, body) -> the status it answered, or None: not for it, the app answers
FastPath = Callable[[Scope, Receive, Send, bytes], Awaitable[int | None]]


class ServiceMiddleware:
    """Every HTTP request, in this order:

    - the Host header, against `allowed_hosts` (a browser tricked by DNS rebinding sends
      another site's name to a loopback service) -> 400 when not allowed;
    - the body, read whole before the app sees it, then replayed: over `max_bytes` -> 413 (at
      once from Content-Length, else once the stream passes it); not complete within
      `read_timeout_s` -> 408 (a client that sends half a body and waits holds no worker for
      long); holding a value JSON cannot answer for (NaN, Infinity, 1e999, a lone surrogate)
      -> 422 naming the field, the connection staying open for the client's next request;
    - admission: at most `max_in_flight` requests under `prefixes` (the work routes and the
      pages that do work) at once, counted from when the body is complete, so a slow or
      half-sent body holds no place; the next is answered 503 with Retry-After instead of
      queueing without bound. Health, readiness and metrics are always answered;
    - a fast path of its route (`fast_paths`, by path) when one answers it, else the app;
    - security headers on every answer (`SECURITY_HEADERS`);
    - metrics: counted and timed, labelled by the matched route's template (never the raw
      path, so labels stay few), and one access-log line when that logger is on. A client
      that leaves before it is answered is counted as 499, not as a server error.
    """

    def __init__(
        self,
        app: ASGIApp,
        metrics: ServiceMetrics,
        max_in_flight: int,
        max_bytes: int,
        read_timeout_s: float,
        prefixes: tuple[str, ...] = ("/v1/", "/ui/"),
        fast_paths: Mapping[str, FastPath] | None = None,
        allowed_hosts: tuple[str, ...] = ("*",),
    ) -> None:
        self.app, self.metrics, self.prefixes = app, metrics, prefixes
        self.max_in_flight, self.max_bytes, self.read_timeout_s = (
            max_in_flight,
            max_bytes,
            read_timeout_s,
        )
        self.fast_paths = dict(fast_paths or {})
        self.allowed_hosts = None if "*" in allowed_hosts else frozenset(allowed_hosts)
        self.in_flight = 0

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        path = scope["path"]
        answered = [CLIENT_LEFT, None]  # status, and the route template when a fast path did
        security = _security_headers(path)

        async def send_with_status(message: Message) -> None:
            if message["type"] == "http.response.start":
                answered[0] = message["status"]
                message["headers"] = [*message.get("headers", ()), *security]
            await send(message)

        admitted = False
        try:
            if self.allowed_hosts is not None and _host(scope) not in self.allowed_hosts:
                detail = (
                    "the Host header names a host this service does not answer for; "
                    "set PERFCAST_ALLOWED_HOSTS to the names clients use"
                )
                await _reject(send_with_status, 400, detail)
                return
            body = await self._body(scope, receive, send_with_status)
            if body is None:
                return
            if path.startswith(self.prefixes):
                if self.in_flight >= self.max_in_flight:
                    detail = (
                        f"the service is at its limit of {self.max_in_flight} requests in "
                        "progress (PERFCAST_MAX_IN_FLIGHT); retry after the Retry-After seconds"
                    )
                    await _reject(send_with_status, 503, detail, retry_after=RETRY_AFTER_S)
                    return
                admitted = True
                self.in_flight += 1
            await self._app(scope, receive, send_with_status, body, answered)
        except Exception:
            answered[0] = 500  # the app's error handlers answer; this counts what escaped
            raise
        finally:
            if admitted:
                self.in_flight -= 1
            template = answered[1]
            if template is None:
                route = scope.get("route")  # set by FastAPI's router on a match
                template = getattr(route, "path", "unmatched")
            self.metrics.record(scope["method"], template, answered[0], time.perf_counter() - start)
            if access_log.isEnabledFor(logging.INFO):
                self._log(scope, template, answered[0], time.perf_counter() - start)

    async def _body(self, scope: Scope, receive: Receive, send: Send) -> bytes | None:
        """The request's whole body, checked; None when it was answered (or the client left)."""
        declared = None
        for name, value in scope["headers"]:
            if name == b"content-length":
                declared = value  # the last one, as dict(headers) took it
        if declared is not None:
            try:
                too_big = int(declared) > self.max_bytes
            except ValueError:
                await _reject(send, 400, "Content-Length is not a number", close=True)
                return None
            if too_big:
                await _reject(send, 413, self._message(int(declared)), close=True)
                return None
        # uvicorn has usually parsed a small request's body with its headers, before the app
        # starts: then no timer is needed to read it
        ready, first = _ready(receive)
        try:
            if ready and first is not None and not first.get("more_body", False):
                body = await self._read(receive, first)
            else:
                async with asyncio.timeout(self.read_timeout_s):
                    body = await self._read(receive, first)
        except TimeoutError:
            message = f"the request body did not arrive within {self.read_timeout_s:g} s"
            await _reject(send, 408, message, close=True)
            return None
        except _TooLarge as err:
            await _reject(send, 413, self._message(err.size, streamed=True), close=True)
            return None
        if body is None:  # the client went away mid-body
            return None
        unsafe = find_unsafe(body) if body else None
        if unsafe is not None:
            path, message = unsafe
            detail = [{"loc": ["body", *path], "msg": message, "type": "json_invalid"}]
            await _reject(send, 422, detail)
            return None
        return body

    async def _app(
        self, scope: Scope, receive: Receive, send: Send, body: bytes, answered: list
    ) -> None:
        fast = self.fast_paths.get(scope["path"]) if scope["method"] == "POST" else None
        if fast is not None:
            status = await fast(scope, receive, send, body)
            if status is not None:
                answered[0], answered[1] = status, scope["path"]
                return
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if replayed:
                return await receive()
            replayed = True
            return {"type": "http.request", "body": body, "more_body": False}

        await self.app(scope, replay, send)

    async def _read(self, receive: Receive, first: Message | None = None) -> bytes | None:
        """The whole body, `first` its first message when already received; None when the
        client went away mid-body."""
        chunks, size, message = [], 0, first
        while True:
            if message is None:
                message = await receive()
            if message["type"] == "http.disconnect":
                return None
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_bytes:
                raise _TooLarge(size)
            chunks.append(chunk)
            if not message.get("more_body", False):
                return chunks[0] if len(chunks) == 1 else b"".join(chunks)
            message = None

    def _message(self, size: int, streamed: bool = False) -> str:
        what = "more than" if streamed else ""
        return (
            f"request body of {what} {size} bytes is over the limit of {self.max_bytes} bytes "
            "(PERFCAST_MAX_BODY_MB); send fewer rows per request"
        ).replace("  ", " ")

    @staticmethod
    def _log(scope: Scope, template: str, status: int, seconds: float) -> None:
        client = scope.get("client") or ("", 0)
        access_log.info(
            "access",
            extra={"method": scope["method"], "path": scope["path"], "route": template,
                   "status": status, "ms": round(seconds * 1000, 2), "client": client[0]},
        )  # fmt: skip


class _TooLarge(Exception):
    def __init__(self, size: int) -> None:
        self.size = size


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
    headers = [(b"content-type", b"application/json"),
               (b"content-length", str(len(body)).encode())]  # fmt: skip
    if close:
        headers.append((b"connection", b"close"))
    if retry_after is not None:
        headers.append((b"retry-after", str(retry_after).encode()))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def _ready(receive: Receive) -> tuple[bool, Message | None]:
    """(True, the message) when `receive` has one ready now; (False, None) when it would wait,
    and nothing is consumed (the call is abandoned before it takes a message; a `receive`
    that is not a coroutine function is not called at all)."""
    if not inspect.iscoroutinefunction(receive):
        return False, None
    pending = receive()
    try:
        pending.send(None)
    except StopIteration as ready:
        return True, ready.value
    pending.close()  # it waits for the next message
    return False, None


def disconnected(receive: Receive) -> Callable[[], Awaitable[bool]]:
    """`gone()`: whether the client has left, from a message `receive` has ready now (as
    Starlette's `Request.is_disconnected`, which gets it under a cancelled anyio scope: a tenth
    of the cost here). A `receive` that would wait means the client is still there."""
    left = False

    async def gone() -> bool:
        nonlocal left
        if not left:
            if inspect.iscoroutinefunction(receive):
                message = _ready(receive)[1]
            else:  # Starlette's way
                message = None
                with anyio.CancelScope() as cancelled:
                    cancelled.cancel()
                    message = await receive()
            left = isinstance(message, dict) and message.get("type") == "http.disconnect"
        return left

    return gone
