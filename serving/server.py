"""The uvicorn server of `perfcast serve`: its configuration, and an HTTP protocol that bounds
what a connection can hold before it has sent a whole request.

uvicorn bounds neither: a client that connects and sends nothing, or half a request line, or
headers without their blank line, holds its connection for as long as it likes, and its
`limit_concurrency` counts connections, so 256 idle ones answered every request (health
included) with a plain-text 503. The protocol here instead:

- answers 408 and closes a connection whose request line and headers are not complete
  `header_timeout_s` after it opened or after the first byte of its next request;
- answers 431 and closes one whose request line and headers pass `max_header_bytes`;
- keeps at most `max_connections` open in total and `max_connections_per_client` per client
  address: past either, the connection idle longest (no request being answered on it, and
  nothing received for `IDLE_S`) is closed to make room; only when none is is the new one
  refused. Either way the connection gets a JSON 503 with Retry-After and is read to its end
  before it closes (a close with unread data resets it, and the client never reads the 503).
  Idle connections therefore cost a socket, never a request's place.

Requests, once their headers are in, are admitted by `ServiceMiddleware` (serving/middleware.py),
which counts only requests whose body is complete.
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol

try:  # uvicorn's default parser when installed (uvicorn[standard]), else h11
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol as _Default
except ImportError:  # pragma: no cover
    _Default = H11Protocol  # type: ignore[assignment,misc]

from perfcast.serving.settings import Settings

RETRY_AFTER_S = 1
IDLE_S = 1.0  # an open connection silent this long may be closed to make room for a new one
LINGER_S = 2.0  # a refused connection is read (and dropped) this long for its client to leave


def _answer(status: str, detail: str, retry_after: int | None = None) -> bytes:
    """A whole HTTP/1.1 answer with a JSON body that closes the connection."""
    body = json.dumps({"detail": detail}).encode()
    head = [f"HTTP/1.1 {status}", "content-type: application/json", "connection: close",
            f"content-length: {len(body)}"]  # fmt: skip
    if retry_after is not None:
        head.append(f"retry-after: {retry_after}")
    return ("\r\n".join(head) + "\r\n\r\n").encode() + body


_TIMED_OUT = _answer("408 Request Timeout", "request headers did not arrive in time")
_FULL = _answer(
    "503 Service Unavailable",
    "the service has as many connections as it keeps open, all answering requests; retry "
    "after the Retry-After seconds",
    RETRY_AFTER_S,
)


class ConnectionLimits:
    """The open connections of one server, least recently active first, in total and by
    client address. `admit` makes room for a new one by closing the least recently active
    idle connection (of the same client when the client is over its own limit)."""

    def __init__(self, total: int, per_client: int, idle_s: float = IDLE_S) -> None:
        self.total, self.per_client, self.idle_s = total, per_client, idle_s
        self._all: dict[Any, None] = {}  # dicts keep insertion order: oldest activity first
        self._by_client: dict[str, dict[Any, None]] = {}
        self.evicted = 0

    def admit(self, connection: Any, client: str) -> bool:
        """Register `connection`; False (nothing registered) when no room can be made."""
        mine = self._by_client.setdefault(client, {})
        if len(mine) >= self.per_client and not self._evict(mine):
            return False
        if len(self._all) >= self.total and not self._evict(self._all):
            return False
        self._all[connection] = None
        mine[connection] = None
        return True

    def active(self, connection: Any, client: str) -> None:
        """`connection` received data: it is now the most recently active."""
        if connection in self._all:  # re-inserted: dicts keep insertion order
            del self._all[connection]
            self._all[connection] = None
            mine = self._by_client[client]
            del mine[connection]
            mine[connection] = None

    def closed(self, connection: Any, client: str) -> None:
        if connection in self._all:
            del self._all[connection]
            mine = self._by_client[client]
            del mine[connection]
            if not mine:
                del self._by_client[client]

    def __len__(self) -> int:
        return len(self._all)

    def _evict(self, connections: dict[Any, None]) -> bool:
        recent = time.monotonic() - self.idle_s
        for connection in connections:  # oldest activity first; usually the first one
            if connection.last_active > recent:
                return False  # this one and every later one was active within idle_s
            if connection.idle():
                connection.evict()  # unregisters it
                self.evicted += 1
                return True
        return False


def guarded_protocol(
    settings: Settings, base: type = _Default, limits: ConnectionLimits | None = None
) -> type[asyncio.Protocol]:
    """uvicorn's HTTP protocol `base` with the settings' limits on each request's headers and
    on the connections kept open (`limits`, one per server).

    Works with either of uvicorn's protocols: both set `self.cycle` to a new request cycle when
    a request's headers are complete, and mark it `response_complete` when it is answered."""
    limits = limits or ConnectionLimits(
        settings.max_connections, settings.max_connections_per_client
    )

    class GuardedProtocol(base):  # type: ignore[misc,valid-type]
        header_timeout_s = settings.header_timeout_s
        max_header_bytes = settings.max_header_bytes
        connection_limits = limits

        def connection_made(self, transport: Any) -> None:
            self._header_timer: asyncio.TimerHandle | None = None
            self._cycle_before: object = None
            self._header_bytes = 0
            peer = transport.get_extra_info("peername")
            self._peer = str(peer[0]) if isinstance(peer, tuple) and peer else ""
            self._registered = self._refused = False
            self.last_active = time.monotonic()
            super().connection_made(transport)
            self.transport = OneWriteTransport(transport, self.loop)  # request cycles too
            if not limits.admit(self, self._peer):
                self._refuse()
                return
            self._registered = True
            self._arm()

        def data_received(self, data: bytes) -> None:
            if self._refused:
                return  # read and dropped until the client leaves
            self.last_active = time.monotonic()
            if self._registered:
                limits.active(self, self._peer)
            if self._header_timer is None and self._between_requests():
                self._arm()  # the first bytes of the next request on a kept connection
            super().data_received(data)
            if self._header_timer is None:
                return
            if self.cycle is not self._cycle_before:
                self._disarm()  # the headers are complete: a request cycle has started
                return
            self._header_bytes += len(data)
            if self._header_bytes > self.max_header_bytes and not self.transport.is_closing():
                self._disarm()
                self.transport.write(_answer(
                    "431 Request Header Fields Too Large",
                    f"the request line and headers passed {self.max_header_bytes} bytes "
                    "(PERFCAST_MAX_HEADER_BYTES)",
                ))  # fmt: skip
                self.transport.close()

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            self._unregister()
            super().connection_lost(exc)

        def idle(self) -> bool:
            """No request is being answered on this connection (it may be sending one)."""
            return self._between_requests()

        def evict(self) -> None:
            """Close to make room: with the 503 a refused connection gets, since the client
            may be about to send (or be sending) its next request on it."""
            self._disarm()
            self._unregister()
            self._refuse()

        def _refuse(self) -> None:
            self._refused = True
            self.transport.write(_FULL)
            if self.transport.can_write_eof():
                self.transport.write_eof()
            self.loop.call_later(LINGER_S, self.transport.close)

        def _unregister(self) -> None:
            if self._registered:
                self._registered = False
                limits.closed(self, self._peer)

        def _between_requests(self) -> bool:
            return self.cycle is None or self.cycle.response_complete

        def _arm(self) -> None:
            self._cycle_before = self.cycle
            self._header_bytes = 0
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

    return GuardedProtocol


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
        if self._transport.is_closing():
            # the client reset the connection: uvicorn's late writes go nowhere (uvloop raises
            # RuntimeError on them, which the app would log as a crash)
            self._held = None
            return
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
    proxies = ",".join(settings.trusted_proxies)
    return uvicorn.Config(
        app,
        host=host,
        port=port,
        http=guarded_protocol(settings),
        access_log=False,  # serving/middleware.py logs each request as JSON
        timeout_keep_alive=5,  # idle keep-alive connections are closed after 5 s
        # connections are bounded by the protocol (idle ones make room), requests by the
        # middleware: uvicorn's own limit counts connections and answers plain-text 503s
        limit_concurrency=None,
        backlog=2048,
        # X-Forwarded-For is believed only from the proxies named in PERFCAST_TRUSTED_PROXIES
        # (uvicorn believes 127.0.0.1 by default: any local process could rewrite the log)
        proxy_headers=bool(proxies),
        forwarded_allow_ips=proxies or None,
        server_header=False,
        **options,
    )
