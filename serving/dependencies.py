"""FastAPI dependencies: the app's settings and models, and the API key check."""

from __future__ import annotations

import secrets
from typing import Annotated

from fastapi import Depends, Header, HTTPException, Request

from perfcast.serving.batching import PredictionBatcher
from perfcast.serving.metrics import ServiceMetrics
from perfcast.serving.models import ServedModels
from perfcast.serving.settings import Settings


def get_settings(request: Request) -> Settings:
    return request.app.state.settings


def get_models(request: Request) -> ServedModels:
    return request.app.state.models


def get_batcher(request: Request) -> PredictionBatcher:
    return request.app.state.batcher


def get_metrics(request: Request) -> ServiceMetrics:
    return request.app.state.metrics


def require_api_key(
    settings: Annotated[Settings, Depends(get_settings)],
    x_api_key: Annotated[str | None, Header(description="needed when PERFCAST_API_KEY is set")] = (
        None
    ),
) -> None:
    if settings.api_key is None:
        return
    if x_api_key is None or not secrets.compare_digest(x_api_key, settings.api_key):
        raise HTTPException(
            status_code=401,
            detail="missing or wrong X-API-Key header (the server has PERFCAST_API_KEY set)",
            headers={"WWW-Authenticate": "X-API-Key"},
        )


Models = Annotated[ServedModels, Depends(get_models)]
Batcher = Annotated[PredictionBatcher, Depends(get_batcher)]
