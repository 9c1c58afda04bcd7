"""The FastAPI app: routers, middleware and the error contract.

Errors are JSON `{"detail": ...}`: 422 for bad input (FastAPI's field paths, at most
`MAX_ERRORS` of them and never the input echoed back; a data-contract break names
`["body", "rows", <row index>, <column>]`), 413 for oversized bodies and for requests over a
work limit of the settings (`limit` names it), 503 when a task has no model or the service is
at its limit of requests in progress (with Retry-After). Anything unexpected is logged with
its traceback and answered 500 with an error id to find it in the log.
"""

from __future__ import annotations

import json
import logging
import uuid
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse

from perfcast.errors import ContractError, PerfcastError
from perfcast.serving import docs
from perfcast.serving.batching import PredictionBatcher
from perfcast.serving.errors import JobColumnError
from perfcast.serving.limits import RequestLimitError
from perfcast.serving.metrics import ServiceMetrics
from perfcast.serving.middleware import ServiceMiddleware
from perfcast.serving.models import ModelUnavailableError, ServedModels
from perfcast.serving.routers import decide, health, observe, predict, query
from perfcast.serving.routers import models as models_routes
from perfcast.serving.settings import Settings
from perfcast.serving.ui import routes as ui

log = logging.getLogger("perfcast.serving")


def create_app(settings: Settings | None = None, models: ServedModels | None = None) -> FastAPI:
    """The service app. Loads the served tasks' champions now unless `models` is given."""
    settings = settings or Settings.from_env()
    metrics = ServiceMetrics()
    if models is None:
        models = ServedModels(settings.tasks, metrics)
        models.reload()
    else:
        models.metrics = metrics
        metrics.served(models.champions())
    app = FastAPI(
        title="perfcast",
        summary="Predictions and recommendations for deep-learning jobs on GPU clusters",
        version="1",
        docs_url=None,  # served from local assets by serving/docs.py
        redoc_url=None,
        # the service's telemetry is its Prometheus metrics (serving/metrics.py); FastAPI's
        # OpenTelemetry hooks asked the global OTel providers on every request (none is set)
        telemetry={"tracing": False, "metrics": False, "logs": False},
    )
    docs.install(app)
    app.state.settings, app.state.models, app.state.metrics = settings, models, metrics
    app.state.batcher = PredictionBatcher(models)
    for router in (
        query.router,
        predict.router,
        decide.router,
        observe.router,
        models_routes.router,
        health.router,
        ui.router,
    ):
        app.include_router(router)
    app.add_exception_handler(RequestValidationError, _invalid)
    app.add_exception_handler(RequestLimitError, _over_limit)
    app.add_exception_handler(ModelUnavailableError, _unavailable)
    app.add_exception_handler(ContractError, _contract_error)
    app.add_exception_handler(PerfcastError, _perfcast_error)
    app.add_exception_handler(Exception, _unexpected)
    # one plain ASGI layer: metrics, admission (a full service answers 503 before reading a
    # body), the body checks, and the predict routes' fast paths
    app.add_middleware(
        ServiceMiddleware,
        metrics=metrics,
        max_in_flight=settings.max_in_flight,
        max_bytes=settings.max_body_bytes,
        read_timeout_s=settings.read_timeout_s,
        fast_paths=predict.fast_paths(app),
        allowed_hosts=settings.allowed_hosts,
    )
    return app


MAX_ERRORS = 10  # problems listed in a 422; a 10,001-row body gets no 10,001-row answer


class SafeJSONResponse(JSONResponse):
    """ASCII JSON: text the client sent (a lone surrogate in a key) can never fail to encode."""

    def render(self, content: Any) -> bytes:
        return json.dumps(content, ensure_ascii=True, allow_nan=False).encode()


async def _invalid(request: Request, err: RequestValidationError) -> JSONResponse:
    errors = err.errors()
    detail = [
        {"loc": list(e["loc"]), "msg": str(e["msg"]), "type": str(e["type"])}
        for e in errors[:MAX_ERRORS]
    ]
    if len(errors) > MAX_ERRORS:
        more = f"and {len(errors) - MAX_ERRORS} more problems"
        detail.append({"loc": ["body"], "msg": more, "type": "truncated"})
    log.info("422 on %s %s: %s", request.method, request.url.path, detail[0]["msg"])
    return SafeJSONResponse({"detail": detail}, status_code=422)


async def _over_limit(request: Request, err: RequestLimitError) -> JSONResponse:
    log.info("413 on %s %s: %s", request.method, request.url.path, err)
    return SafeJSONResponse(
        {
            "detail": [{"loc": ["body"], "msg": str(err), "type": "limit"}],
            "limit": err.limit,
            "allowed": err.allowed,
            "value": err.value,
        },
        status_code=413,
    )


async def _unavailable(request: Request, err: ModelUnavailableError) -> JSONResponse:
    return JSONResponse(
        {"detail": str(err), "task": err.task, "reason": err.reason},
        status_code=503,
        headers={"Retry-After": "60"},
    )


async def _contract_error(request: Request, err: ContractError) -> JSONResponse:
    loc: list[str | int] = ["body", "job" if isinstance(err, JobColumnError) else "rows"]
    if err.row is not None:
        loc.append(err.row - 1)  # the contract counts rows from 1; JSON lists from 0
    if err.column:
        loc.append(err.column)
    first = str(err).split("\n")[0]  # later lines repeat err.details
    detail = [{"loc": loc, "msg": first, "type": "data_contract"}]
    detail += [
        {"loc": ["body", "rows"], "msg": d, "type": "data_contract"} for d in err.details[1:]
    ]
    log.info("422 on %s %s: %s", request.method, request.url.path, first)
    return SafeJSONResponse({"detail": detail[:MAX_ERRORS]}, status_code=422)


async def _perfcast_error(request: Request, err: PerfcastError) -> JSONResponse:
    log.info("422 on %s %s: %s", request.method, request.url.path, err)
    return SafeJSONResponse(
        {"detail": [{"loc": ["body"], "msg": str(err), "type": "value_error"}]}, status_code=422
    )


async def _unexpected(request: Request, err: Exception) -> JSONResponse:
    error_id = uuid.uuid4().hex[:12]
    log.exception("unexpected error %s on %s %s", error_id, request.method, request.url.path)
    return JSONResponse(
        {"detail": f"internal error {error_id}: {type(err).__name__}; see the server log"},
        status_code=500,
    )
