"""The service app on a real uvicorn server on loopback, for tests that need connections,
timeouts and the HTTP protocol (serving/server.py), not only the ASGI app."""

from __future__ import annotations

import threading
import time

import uvicorn

from perfcast.serving import server


class LoopbackServer:
    """`with LoopbackServer(app) as url:` serves `app` as `perfcast serve` does, on a free port
    of 127.0.0.1, in a thread. `http_base`: uvicorn's other HTTP protocol (h11 instead of
    httptools)."""

    def __init__(self, app, http_base: type | None = None) -> None:
        config = server.config(app, app.state.settings, port=0, log_level="error")
        if http_base is not None:
            config.http = server.guarded_protocol(app.state.settings, http_base)
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self) -> str:
        self.thread.start()
        deadline = time.monotonic() + 30
        while not (self.server.started and self.server.servers) and time.monotonic() < deadline:
            time.sleep(0.05)
        self.port = self.server.servers[0].sockets[0].getsockname()[1]
        return f"http://127.0.0.1:{self.port}"

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(10)
