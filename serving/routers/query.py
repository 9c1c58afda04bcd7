"""Big-data jobs from their DAG: `POST /v1/predict/query` (run time of each plan, one answer
per sample_id) and `POST /v1/recommend/query` (threads/executors and memory that meet a
deadline at the least cost). Registered before `/v1/predict/{task}` so that the query answer
says which sample_id each prediction is for."""

from __future__ import annotations

from typing import Annotated

import pandas as pd
from fastapi import APIRouter
from pydantic import Field

from perfcast.optimizer.query import QueryPrices, recommend_query
from perfcast.predictor.backend import TASK_TABLES
from perfcast.serving import service
from perfcast.serving.dependencies import Models
from perfcast.serving.schemas import (
    MAX_ROWS,
    ModelRef,
    PredictRequest,
    PredictResponse,
    Row,
    _Model,
)

router = APIRouter(prefix="/v1", tags=["query"])

ERRORS = {
    422: {"description": "A row breaks the plan contract, or no configuration meets the deadline"},
    503: {"description": "No query model is loaded"},
}


class QueryRecommendRequest(_Model):
    rows: Annotated[list[Row], Field(min_length=1, max_length=MAX_ROWS)] = Field(
        description="One job's plan rows (operators or stages, one sample_id), no target."
    )
    parallelism: Annotated[
        list[Annotated[int, Field(ge=1, le=10_000)]], Field(min_length=1, max_length=64)
    ] = Field(description="Thread or executor counts to try.")
    memory_limits_mb: Annotated[
        list[Annotated[float, Field(gt=0)] | None], Field(min_length=1, max_length=16)
    ] = Field(default=[None], description="Memory limits to try (MB); null: the default.")
    deadline_s: Annotated[float, Field(gt=0)] | None = None
    price_per_unit_hour: Annotated[float, Field(ge=0)] = 1.0
    price_per_gb_hour: Annotated[float, Field(ge=0)] = 0.0
    default_memory_gb: Annotated[float, Field(ge=0)] = 0.0
    top_k: Annotated[int, Field(ge=1, le=50)] = 5


class QueryCandidate(_Model):
    rank: int
    parallelism: int
    memory_limit_mb: float | None
    time_s: float
    time_s_p10: float
    time_s_p90: float
    cost: float
    reason: str


class QueryRecommendResponse(_Model):
    model: ModelRef
    candidates: int
    top: list[QueryCandidate]


@router.post("/predict/query", response_model=PredictResponse, responses=ERRORS)
def predict_query(body: PredictRequest, models: Models) -> PredictResponse:
    """Run time (ms, with p10/p90) of each plan in the rows: one answer per sample_id."""
    ref = service.model_ref(models, "query")
    out = models.predict("query", pd.DataFrame.from_records(body.rows)).reset_index()
    return PredictResponse(
        task="query",
        model=ref,
        targets=list(TASK_TABLES["query"][1]),
        predictions=service._finite_or_none(out),
    )


@router.post("/recommend/query", response_model=QueryRecommendResponse, responses=ERRORS)
def recommend(body: QueryRecommendRequest, models: Models) -> QueryRecommendResponse:
    """The cheapest threads/executors and memory limits whose p90 run time meets the deadline."""
    ref = service.model_ref(models, "query")
    top = recommend_query(
        pd.DataFrame.from_records(body.rows),
        models,
        body.parallelism,
        body.memory_limits_mb,
        deadline_s=body.deadline_s,
        prices=QueryPrices(body.price_per_unit_hour, body.price_per_gb_hour),
        default_memory_gb=body.default_memory_gb,
        top_k=body.top_k,
    )
    top = top.astype(object).where(top.notna(), None)
    return QueryRecommendResponse(
        model=ref,
        candidates=len(body.parallelism) * len(body.memory_limits_mb),
        top=[QueryCandidate(**{k: v for k, v in r.items() if k in QueryCandidate.model_fields})
             for r in top.to_dict("records")],
    )  # fmt: skip
