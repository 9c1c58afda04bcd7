"""`POST /v1/predict/<task>`: contract rows in, predictions with p10/p90 out. One route per
task, so that each has its own typed rows in the OpenAPI schema (`serving/rows.py`)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from fastapi import APIRouter, Request, Response

from perfcast.predictor.backend import TASK_TABLES
from perfcast.serving import service
from perfcast.serving.dependencies import AppSettings, Batcher, Models
from perfcast.serving.schemas import PREDICT_MODELS

router = APIRouter(prefix="/v1/predict", tags=["predict"])

ERRORS = {
    413: {"description": "The body, or the work it asks for, is over a limit (named)"},
    422: {"description": "A row breaks the data contract (the detail names row and column)"},
    503: {
        "description": "No model is loaded for the task, or the service is full (see Retry-After)"
    },
}
SUMMARIES = {
    "scaling": "Step time of a job on a configuration",
    "interference": "Speed of two jobs sharing one accelerator",
    "runtime": "Iteration latency from an operator graph (one answer per sample_id)",
    "duration": "Run time of a job of a cluster trace",
}


def _endpoint(task: str) -> Callable[..., Awaitable[Response]]:
    request_model, _ = PREDICT_MODELS[task]

    async def predict(
        body: request_model,  # type: ignore[valid-type]
        models: Models,
        batcher: Batcher,
        settings: AppSettings,
        request: Request,
    ) -> Response:  # the JSON of PREDICT_MODELS[task][1] (response_model: the documentation)
        return await service.predict(
            models, batcher, task, body.rows, settings, gone=request.is_disconnected
        )

    # FastAPI reads the body's model from the signature: the task's own, not a string
    predict.__annotations__["body"] = request_model
    predict.__doc__ = f"Predict {', '.join(TASK_TABLES[task][1])} for up to 10,000 rows."
    return predict


for _task in SUMMARIES:  # query has its own router (its recommendation shares the plan rows)
    router.add_api_route(
        f"/{_task}",
        _endpoint(_task),
        methods=["POST"],
        response_model=PREDICT_MODELS[_task][1],
        responses=ERRORS,
        summary=SUMMARIES[_task],
        name=f"predict_{_task}",
    )
