"""Decisions from predictions: `POST /v1/recommend`, `/v1/allocate`, `/v1/place`."""

from __future__ import annotations

from fastapi import APIRouter

from perfcast.serving import service
from perfcast.serving.dependencies import AppSettings, Models
from perfcast.serving.schemas import (
    AllocateRequest,
    AllocateResponse,
    PlaceRequest,
    PlaceResponse,
    RecommendRequest,
    RecommendResponse,
)

router = APIRouter(prefix="/v1", tags=["decide"])

ERRORS = {
    413: {"description": "The work the request asks for is over a limit (named)"},
    422: {"description": "Invalid request, or no configuration/allocation meets it"},
    503: {"description": "The scaling (or interference) model is not loaded"},
}


@router.post("/recommend", response_model=RecommendResponse, responses=ERRORS)
def recommend(body: RecommendRequest, models: Models, settings: AppSettings) -> RecommendResponse:
    """The top configurations of one job (GPU type, GPUs, nodes, local batch size) for an
    objective or a deadline, each with predicted times, cost, intervals and a reason."""
    return service.recommend(models, body, settings=settings)


@router.post("/allocate", response_model=AllocateResponse, responses=ERRORS)
def allocate(body: AllocateRequest, models: Models, settings: AppSettings) -> AllocateResponse:
    """GPUs and batch size for every job, maximizing total weighted throughput (exact DP over
    (total_gpus + 1) × the jobs' GPU-count choices, bounded by PERFCAST_MAX_ALLOCATION_CELLS)."""
    return service.allocate(models, body, settings=settings)


@router.post("/place", response_model=PlaceResponse, responses=ERRORS)
def place(body: PlaceRequest, models: Models, settings: AppSettings) -> PlaceResponse:
    """Nodes and GPUs for jobs in priority order; one-GPU jobs share a GPU only when the
    predicted combined speed exceeds 1 and memory fits (bounded by
    PERFCAST_MAX_PLACEMENT_PREDICTIONS)."""
    return service.place(models, body, settings=settings)
