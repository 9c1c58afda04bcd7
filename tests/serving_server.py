"""The service as the serving tests meet it: a real scaling champion (muri-scaling) and the
app on a real uvicorn server on loopback, for tests that need connections, timeouts and the
HTTP protocol (serving/server.py), not only the ASGI app."""

from __future__ import annotations

import threading
import time

import uvicorn

from perfcast.serving import server
from perfcast.serving.models import ServedModels
from perfcast.training import model_store, trainer

ROW = {"job": "resnet18", "gpu_type": "v100", "num_nodes": 1, "num_gpus": 4,
       "local_batch_size": 128}  # fmt: skip
PREDICT = "/v1/predict/scaling"


def served_scaling() -> ServedModels:
    """The scaling champion of the test home (trained on muri-scaling when there is none),
    loaded as the service loads it."""
    if model_store.load_champion("scaling") is None:
        trainer.train("scaling", "muri-scaling", model="gbm")
    served = ServedModels(("scaling",))
    served.reload()
    return served


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
