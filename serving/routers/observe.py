"""`POST /v1/observe`: measured scaling rows for the served scaling champion."""

from __future__ import annotations

from fastapi import APIRouter, Depends
from starlette.concurrency import run_in_threadpool

from perfcast.serving import service
from perfcast.serving.dependencies import AppSettings, Models, require_api_key
from perfcast.serving.schemas import ObserveRequest, ObserveResponse

router = APIRouter(prefix="/v1", tags=["models"])

ERRORS = {
    401: {"description": "X-API-Key is missing or wrong"},
    403: {"description": "the service runs without PERFCAST_API_KEY: observe is closed"},
    413: {"description": "The body, or its distinct columns, is over a limit (named)"},
    422: {"description": "A row breaks the data contract (the detail names row and column)"},
    503: {"description": "No scaling model is loaded, or the service is full (see Retry-After)"},
}


@router.post(
    "/observe",
    response_model=ObserveResponse,
    dependencies=[Depends(require_api_key)],
    responses=ERRORS,
    summary="Add measured step times to the scaling model",
)
async def observe(body: ObserveRequest, models: Models, settings: AppSettings) -> ObserveResponse:
    """Add measured scaling rows (with `step_time_s`) to the served scaling champion: its
    next answers (`/v1/predict/scaling`, `/v1/recommend`, ...) for those jobs on those GPU
    types and clusters use them. In memory only: a reload or a restart serves the registry's
    champion without them; nothing is written to the registry."""
    return await run_in_threadpool(service.observe, models, body.rows, settings)
