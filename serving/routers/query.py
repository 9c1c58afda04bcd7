"""Big-data jobs from their DAG: `POST /v1/predict/query` (run time of each plan, one answer
per sample_id) and `POST /v1/recommend/query` (threads/executors and memory that meet a
deadline at the least cost). Prediction rows are the typed `plan` rows of `serving/rows.py`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import pandas as pd
from fastapi import APIRouter
from pydantic import Field, StrictInt, ValidationError

from perfcast.errors import PerfcastError
from perfcast.optimizer.query import QueryPrices, recommend_query
from perfcast.predictor.backend import TASK_TABLES
from perfcast.serving import limits, service
from perfcast.serving.dependencies import AppSettings, Models
from perfcast.serving.models import ServedModels
from perfcast.serving.rows import ROW_TYPES
from perfcast.serving.schemas import (
    MAX_ROWS,
    PREDICT_MODELS,
    ModelRef,
    NonNegative,
    Positive,
    PredictResponse,
    _Model,
)

router = APIRouter(prefix="/v1", tags=["query"])

ERRORS = {
    413: {"description": "The work the request asks for is over a limit (named)"},
    422: {"description": "A row breaks the plan contract, or no configuration meets the deadline"},
    503: {"description": "No query model is loaded"},
}


PlanRow = ROW_TYPES["query"]


class QueryRecommendRequest(_Model):
    rows: Annotated[list[PlanRow], Field(min_length=1, max_length=MAX_ROWS, fail_fast=True)] = (
        Field(description="One job's plan rows (operators or stages, one sample_id), no target.")
    )
    parallelism: Annotated[
        list[Annotated[StrictInt, Field(ge=1, le=10_000)]], Field(min_length=1, max_length=64)
    ] = Field(description="Thread or executor counts to try.")
    memory_limits_mb: Annotated[list[Positive | None], Field(min_length=1, max_length=16)] = Field(
        default=[None], description="Memory limits to try (MB); null: the default."
    )
    deadline_s: Positive | None = None
    price_per_unit_hour: NonNegative = Field(
        default=1.0,
        description="price of one thread/executor for one hour, in any currency (costs are in "
        "that currency)",
        json_schema_extra={"x-unit": "currency/unit-hour"},
    )
    price_per_gb_hour: NonNegative = Field(
        default=0.0,
        description="price of one GB of memory for one hour, same currency",
        json_schema_extra={"x-unit": "currency/GB-hour"},
    )
    default_memory_gb: NonNegative = Field(
        default=0.0, description="memory priced for a run without a memory limit (GB)"
    )
    top_k: Annotated[StrictInt, Field(ge=1, le=50)] = 5


class QueryCandidate(_Model):
    rank: int
    parallelism: int
    memory_limit_mb: float | None
    time_s: float = Field(description="predicted run time (median), seconds")
    time_s_p10: float
    time_s_p90: float
    cost: float = Field(
        description="time × (units × price_per_unit_hour + memory GB × price_per_gb_hour), "
        "in the currency of the prices",
        json_schema_extra={"x-unit": "currency"},
    )
    reason: str


class QueryRecommendResponse(_Model):
    model: ModelRef
    candidates: int
    top: list[QueryCandidate]


QueryPredictRequest, QueryPredictResponse = PREDICT_MODELS["query"]


@router.post("/predict/query", response_model=QueryPredictResponse, responses=ERRORS)
def predict_query(
    body: QueryPredictRequest,  # type: ignore[valid-type]
    models: Models,
    settings: AppSettings,
) -> PredictResponse:
    """Run time (ms, with p10/p90) of each plan in the rows: one answer per sample_id."""
    limits.check_predict(body.rows, settings)
    ref = service.model_ref(models, "query")
    out = models.predict("query", pd.DataFrame.from_records(body.rows)).reset_index()
    return PredictResponse(
        task="query",
        model=ref,
        targets=list(TASK_TABLES["query"][1]),
        predictions=service.prediction_records(out),
    )


@router.post("/recommend/query", response_model=QueryRecommendResponse, responses=ERRORS)
def recommend(
    body: QueryRecommendRequest, models: Models, settings: AppSettings
) -> QueryRecommendResponse:
    """The cheapest threads/executors and memory limits whose p90 run time meets the deadline
    (bounded by PERFCAST_MAX_QUERY_ROWS: plan rows × parallelisms × memory limits)."""
    tried = len(body.parallelism) * len(body.memory_limits_mb)
    limits.check_query_recommend(len(body.rows), tried, settings)
    limits.check_predict(body.rows, settings)
    return answer(models, body)


def answer(models: ServedModels, body: QueryRecommendRequest) -> QueryRecommendResponse:
    """The recommendation for `body` with the served query champion (route and CLI)."""
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


def is_query_job(data: object) -> bool:
    """Whether a `perfcast recommend` YAML describes a query job (it names a `plan`)."""
    return isinstance(data, dict) and "plan" in data


def request_from_yaml(data: dict, path: Path) -> QueryRecommendRequest:
    """A query job YAML: `plan: {dataset: NAME | file: PATH, sample_id: ID}` (the DAG to
    configure) and the request's other fields (parallelism, memory_limits_mb, deadline_s, ...)."""
    from perfcast import datasets
    from perfcast.datasets.io import read_table

    plan = data.get("plan")
    if (
        not isinstance(plan, dict)
        or "sample_id" not in plan
        or not ("dataset" in plan or "file" in plan)
    ):
        raise PerfcastError(f"{path}: plan needs sample_id and one of dataset or file")
    if "dataset" in plan:
        rows = datasets.load(str(plan["dataset"]))
    else:
        rows = read_table(path.parent / str(plan["file"]), kind="plan")
    job = rows[rows["sample_id"] == str(plan["sample_id"])]
    if job.empty:
        raise PerfcastError(f"{path}: no plan rows with sample_id {plan['sample_id']!r}")
    job = job.drop(columns=["e2e_latency_ms"])
    records = job.astype(object).where(job.notna(), None).to_dict("records")
    fields = {k: v for k, v in data.items() if k != "plan"}
    try:
        return QueryRecommendRequest.model_validate({"rows": records, **fields})
    except ValidationError as err:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in err.errors()[:5]
        )
        raise PerfcastError(f"{path}: {problems}") from None


def recommend_job(data: dict, path: Path, server: str | None) -> QueryRecommendResponse:
    """`perfcast recommend QUERY_JOB.yaml`: from a running server, or with the champion here."""
    body = request_from_yaml(data, path)
    if server:
        from perfcast.serving.client import PerfcastClient

        with PerfcastClient(server) as client:
            reply = client._request(
                "POST", "/v1/recommend/query", json=body.model_dump(mode="json")
            )
        return QueryRecommendResponse.model_validate(reply)
    models = ServedModels(("query",))
    models.reload()
    return answer(models, body)


def recommend_job_file(path: Path, server: str | None, as_json: bool) -> bool:
    """`perfcast recommend` for a query job: answer and print it, and say True; False when the
    YAML is not a query job (it has no `plan`), left to the GPU recommendation."""
    import yaml
    from rich.console import Console
    from rich.table import Table

    try:
        data = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError):
        return False  # the GPU recommendation reads it again and words the error
    if not is_query_job(data):
        return False
    reply = recommend_job(data, path, server)
    if as_json:
        print(reply.model_dump_json(indent=2))
        return True
    table = Table(title=f"{reply.candidates} candidates, cheapest first")
    for column in ("#", "threads/executors", "memory MB", "time s (p10-p90)", "cost"):
        table.add_column(column, justify="right")
    for c in reply.top:
        memory = "default" if c.memory_limit_mb is None else f"{c.memory_limit_mb:g}"
        times = f"{c.time_s:.3g} ({c.time_s_p10:.3g}-{c.time_s_p90:.3g})"
        table.add_row(str(c.rank), str(c.parallelism), memory, times, f"{c.cost:.3g}")
    console = Console()
    console.print(table)
    for c in reply.top:
        console.print(f"{c.rank}. {c.reason}", highlight=False)
    return True
