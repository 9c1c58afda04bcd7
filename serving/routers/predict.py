"""`POST /v1/predict/{task}`: contract rows in, predictions with p10/p90 out."""

from __future__ import annotations

from fastapi import APIRouter, Request

from perfcast.predictor.backend import Task
from perfcast.serving import service
from perfcast.serving.dependencies import AppSettings, Batcher, Models
from perfcast.serving.schemas import PredictRequest, PredictResponse

router = APIRouter(prefix="/v1/predict", tags=["predict"])

ERRORS = {
    413: {"description": "The body, or the work it asks for, is over a limit (named)"},
    422: {"description": "A row breaks the data contract (the detail names row and column)"},
    503: {
        "description": "No model is loaded for the task, or the service is full (see Retry-After)"
    },
}


@router.post("/{task}", response_model=PredictResponse, responses=ERRORS)
async def predict(
    task: Task,
    body: PredictRequest,
    models: Models,
    batcher: Batcher,
    settings: AppSettings,
    request: Request,
) -> PredictResponse:
    """Predict `task` for up to 10,000 rows (runtime: graph node rows, one answer per
    sample_id)."""
    return await service.predict(
        models, batcher, task, body.rows, settings, gone=request.is_disconnected
    )
