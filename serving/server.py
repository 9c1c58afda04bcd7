"""The uvicorn server of `perfcast serve`: its configuration, and an HTTP protocol that closes
connections whose request line and headers do not arrive in time.

uvicorn times out idle keep-alive connections but not a request in the making: a client that
connects and sends nothing, or half a request line, or headers without their blank line, holds
its connection (and a place under uvicorn's concurrency limit) for as long as it likes; 3000
such connections were held more than 65 s. The protocol here answers 408 and closes the
connection when the request line and headers are not complete `header_timeout_s` after the
connection opened or after the first byte of the next request on a kept connection. The body
has its own limit (`RequestBodyMiddleware`, `read_timeout_s`).
"""

from __future__ import annotations

import asyncio
from typing import Any

import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol

try:  # uvicorn's default parser when installed (uvicorn[standard]), else h11
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol as _Default
except ImportError:  # pragma: no cover
    _Default = H11Protocol  # type: ignore[assignment,misc]

from perfcast.serving.settings import Settings

_TIMED_OUT = (
    b"HTTP/1.1 408 Request Timeout\r\ncontent-type: text/plain; charset=utf-8\r\n"
    b"connection: close\r\ncontent-length: 40\r\n\r\nrequest headers did not arrive in time\r\n"
)


def header_timeout_protocol(seconds: float, base: type = _Default) -> type[asyncio.Protocol]:
    """uvicorn's HTTP protocol `base` with a limit of `seconds` on each request's headers.

    Works with either of uvicorn's protocols: both set `self.cycle` to a new request cycle when
    a request's headers are complete, and mark it `response_complete` when it is answered."""

    class HeaderTimeoutProtocol(base):  # type: ignore[misc,valid-type]
        header_timeout_s = seconds

        def connection_made(self, transport: Any) -> None:
            self._header_timer: asyncio.TimerHandle | None = None
            self._cycle_before: object = None
            super().connection_made(transport)
            self.transport = OneWriteTransport(transport, self.loop)  # request cycles too
            self._arm()

        def data_received(self, data: bytes) -> None:
            if self._header_timer is None and self._between_requests():
                self._arm()  # the first bytes of the next request on a kept connection
            super().data_received(data)
            if self._header_timer is not None and self.cycle is not self._cycle_before:
                self._disarm()  # the headers are complete: a request cycle has started

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            super().connection_lost(exc)

        def _between_requests(self) -> bool:
            return self.cycle is None or self.cycle.response_complete

        def _arm(self) -> None:
            self._cycle_before = self.cycle
            self._header_timer = self.loop.call_later(self.header_timeout_s, self._timed_out)

        def _disarm(self) -> None:
            if self._header_timer is not None:
                self._header_timer.cancel()
                self._header_timer = None

        def _timed_out(self) -> None:
            self._header_timer = None
            if self.transport.is_closing():
                return
            if self._between_requests():  # nothing is being answered on this connection
                self.transport.write(_TIMED_OUT)
            self.transport.close()

    return HeaderTimeoutProtocol


class OneWriteTransport:
    """A connection's transport that sends a response's head and body in one write.

    uvicorn writes the status line and headers when the app starts its answer, then the body:
    two writes, so two TCP segments (its sockets are TCP_NODELAY) and two wake-ups of the
    client for one small JSON answer. A write that is a head (`HTTP/...` to the blank line) is
    held and goes out with the next write, the body, which the app sends at once; a held head
    is sent at the latest at the event loop's next step (a HEAD answer has no body write; a
    stream may send its body later) and before the connection closes."""

    __slots__ = ("_held", "_loop", "_transport")

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        self._transport, self._loop = transport, loop
        self._held: bytes | None = None

    def write(self, data: bytes) -> None:
        if self._held is not None:
            data, self._held = self._held + data, None
        elif data[:5] == b"HTTP/" and data[-4:] == b"\r\n\r\n":
            self._held = data
            self._loop.call_soon(self.flush)
            return
        self._transport.write(data)

    def flush(self) -> None:
        if self._held is not None:
            data, self._held = self._held, None
            if not self._transport.is_closing():
                self._transport.write(data)

    def close(self) -> None:
        self.flush()
        self._transport.close()

    def abort(self) -> None:
        self._held = None
        self._transport.abort()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)


def config(
    app: Any, settings: Settings, host: str = "127.0.0.1", port: int = 8000, **options: Any
) -> uvicorn.Config:
    """How `perfcast serve` runs `app` (tests run the same configuration on port 0)."""
    return uvicorn.Config(
        app,
        host=host,
        port=port,
        http=header_timeout_protocol(settings.header_timeout_s),
        access_log=False,  # serving/middleware.py logs each request as JSON
        timeout_keep_alive=5,  # idle keep-alive connections are closed after 5 s
        # past this many connections and requests uvicorn answers 503 itself
        limit_concurrency=4 * settings.max_in_flight,
        backlog=256,
        **options,
    )
