"""`POST /v1/predict/<task>`: contract rows in, predictions with p10/p90 out. One route per
task, so that each has its own typed rows in the OpenAPI schema (`serving/rows.py`)."""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable

from fastapi import APIRouter, FastAPI, Request, Response
from starlette.types import Receive, Scope, Send

from perfcast.predictor.backend import TASK_TABLES
from perfcast.predictor.tasks import TASK_SPECS
from perfcast.serving import service
from perfcast.serving.dependencies import AppSettings, Batcher, Models
from perfcast.serving.middleware import disconnected
from perfcast.serving.schemas import PREDICT_MODELS

router = APIRouter(prefix="/v1/predict", tags=["predict"])

ERRORS = {
    413: {"description": "The body, or the work it asks for, is over a limit (named)"},
    422: {"description": "A row breaks the data contract (the detail names row and column)"},
    503: {
        "description": "No model is loaded for the task, or the service is full (see Retry-After)"
    },
}
SUMMARIES = {name: spec.summary for name, spec in TASK_SPECS.items() if not spec.own_router}


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


class FastPredict:
    """`POST /v1/predict/<task>` as plain ASGI, for `ServiceMiddleware` (`fast_paths`): the
    route's own answer without FastAPI's request machinery (routing, dependency resolution,
    `Request` objects; ~40% of the service's CPU of a single-row request). The body is parsed
    and validated against the same request model, then `service.predict_json` answers as the
    route does, and its errors go to the app's own exception handlers. Whatever it would not
    answer exactly as the route does returns None and goes through FastAPI unchanged: a body
    that is not JSON or that the model refuses (FastAPI words those 422s), any content type
    but application/json. Its answers are the route's byte for byte (a test checks)."""

    def __init__(self, app: FastAPI, task: str) -> None:
        self.app, self.task = app, task
        self.request_model = PREDICT_MODELS[task][0]

    async def __call__(self, scope: Scope, receive: Receive, send: Send, body: bytes) -> int | None:
        if _content_type(scope) != "application/json":
            return None
        try:  # parsed and validated at once, in pydantic's Rust
            rows = self.request_model.model_validate_json(body).rows
        except (ValueError, RecursionError):  # not JSON, or refused: ValidationError too
            return None
        state = self.app.state
        try:
            answer = await service.predict_json(
                state.models, state.batcher, self.task, rows, state.settings,
                gone=disconnected(receive),
            )  # fmt: skip
        except Exception as err:
            handler = _handler(self.app, err)
            if handler is None:
                raise  # to ServerErrorMiddleware: the 500 with its error id, as from the route
            response = handler(Request(scope, receive), err)
            if inspect.isawaitable(response):
                response = await response
            await response(scope, receive, send)
            return response.status_code
        headers = [(b"content-length", str(len(answer)).encode()),
                   (b"content-type", b"application/json")]  # fmt: skip
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": answer})
        return 200


def fast_paths(app: FastAPI) -> dict[str, FastPredict]:
    """The fast path of each task's predict route, by path."""
    return {f"{router.prefix}/{task}": FastPredict(app, task) for task in SUMMARIES}


def _content_type(scope: Scope) -> str | None:
    for name, value in scope["headers"]:
        if name == b"content-type":
            return value.decode("latin-1").split(";", 1)[0].strip().lower()
    return None


def _handler(app: FastAPI, err: Exception):
    """The app's handler of `err`, as Starlette's ExceptionMiddleware finds it (by the error's
    classes, nearest first); None for those only ServerErrorMiddleware handles (500)."""
    for cls in type(err).__mro__:
        if cls is Exception:
            return None
        handler = app.exception_handlers.get(cls)
        if handler is not None:
            return handler
    return None
