"""FastAPI dependencies: the app's settings and models, and the API key check.

The getters are `async`: FastAPI runs a plain `def` dependency in a worker thread, three
thread hops per prediction for reading an attribute."""

from __future__ import annotations

import secrets
from typing import Annotated

from fastapi import Depends, HTTPException, Request, Security
from fastapi.security import APIKeyHeader

from perfcast.serving.batching import PredictionBatcher
from perfcast.serving.metrics import ServiceMetrics
from perfcast.serving.models import ServedModels
from perfcast.serving.settings import Settings


async def get_settings(request: Request) -> Settings:
    return request.app.state.settings


async def get_models(request: Request) -> ServedModels:
    return request.app.state.models


async def get_batcher(request: Request) -> PredictionBatcher:
    return request.app.state.batcher


async def get_metrics(request: Request) -> ServiceMetrics:
    return request.app.state.metrics


API_KEY = APIKeyHeader(
    name="X-API-Key",
    auto_error=False,
    description="The service's PERFCAST_API_KEY; without one set, the routes needing it are "
    "closed (403).",
)


def require_api_key(
    settings: Annotated[Settings, Depends(get_settings)],
    x_api_key: Annotated[str | None, Security(API_KEY)] = None,
) -> None:
    if settings.api_key is None:
        raise HTTPException(
            status_code=403,
            detail="this route is closed: the service runs without PERFCAST_API_KEY",
        )
    # bytes, compared in constant time: compare_digest refuses non-ASCII str (a 500 before);
    # header values arrive as latin-1, so every header encodes
    sent = (x_api_key or "").encode("latin-1", "replace")
    if x_api_key is None or not secrets.compare_digest(sent, settings.api_key.encode()):
        raise HTTPException(
            status_code=401,
            detail="missing or wrong X-API-Key header",
            headers={"WWW-Authenticate": "X-API-Key"},
        )


Models = Annotated[ServedModels, Depends(get_models)]
AppSettings = Annotated[Settings, Depends(get_settings)]
Batcher = Annotated[PredictionBatcher, Depends(get_batcher)]
