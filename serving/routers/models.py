"""`GET /v1/models` and `POST /v1/models/reload`."""

from __future__ import annotations

from fastapi import APIRouter, Depends
from starlette.concurrency import run_in_threadpool

from perfcast.serving import service
from perfcast.serving.dependencies import Models, require_api_key
from perfcast.serving.schemas import ModelsResponse

router = APIRouter(prefix="/v1/models", tags=["models"])


@router.get("", response_model=ModelsResponse)
def list_models(models: Models) -> ModelsResponse:
    """Per task: model family, MLflow run and version, trained-at and validation metrics."""
    return service.models_info(models)


@router.post(
    "/reload",
    response_model=ModelsResponse,
    dependencies=[Depends(require_api_key)],
    responses={
        401: {"description": "X-API-Key is missing or wrong"},
        403: {"description": "the service runs without PERFCAST_API_KEY: reload is closed"},
    },
)
async def reload_models(models: Models) -> ModelsResponse:
    """Load the current `champion` of every task from the MLflow registry."""
    await run_in_threadpool(models.reload)
    return service.models_info(models)
