"""Choose the prediction backend the scheduler decides with: `inprocess` (champion models in
memory), `http` (the prediction service) or `oracle` (true values, to measure what perfect
predictions would give)."""

from __future__ import annotations

from typing import Literal

from perfcast.errors import PerfcastError
from perfcast.predictor.backend import PredictionBackend
from perfcast.scheduler.oracle import OracleBackend
from perfcast.scheduler.sim.workload import Workload

BackendName = Literal["inprocess", "http", "oracle"]
BACKENDS: tuple[str, ...] = ("inprocess", "http", "oracle")


def make_backend(
    name: str, workload: Workload, url: str = "http://127.0.0.1:8000"
) -> PredictionBackend:
    if name == "oracle":
        return OracleBackend(workload.scaling, workload.interference, workload.jobs)
    if name == "inprocess":
        try:
            from perfcast.training.inprocess import InProcessBackend
        except ImportError as err:
            raise PerfcastError(
                f"the in-process predictors are not available ({err}); use --predictor oracle"
            ) from None
        return InProcessBackend()
    if name == "http":
        try:
            from perfcast.serving.client import PerfcastClient
        except ImportError as err:
            raise PerfcastError(
                f"the HTTP client is not available ({err}); use --predictor inprocess or oracle"
            ) from None
        return PerfcastClient(url)
    raise PerfcastError(f"unknown predictor {name!r}; choose one of {', '.join(BACKENDS)}")
