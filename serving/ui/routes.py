"""`/ui`: server-rendered pages over what the service already knows. The ask page calls
`service.recommend`, the function behind `POST /v1/recommend`; the models page starts from
`service.models_info`, the one behind `GET /v1/models`."""

from __future__ import annotations

from pathlib import Path

from fastapi import APIRouter, Request
from fastapi.responses import (
    FileResponse,
    HTMLResponse,
    JSONResponse,
    RedirectResponse,
    Response,
)
from fastapi.templating import Jinja2Templates
from starlette.concurrency import run_in_threadpool

from perfcast.errors import PerfcastError
from perfcast.serving import service
from perfcast.serving.dependencies import AppSettings, Models
from perfcast.serving.live_error import TASK as LIVE_TASK
from perfcast.serving.live_error import default_store_path, live_error
from perfcast.serving.models import ModelUnavailableError
from perfcast.serving.ui.ask import AskForm, plot_axes
from perfcast.serving.ui.champions import trained_on
from perfcast.serving.ui.charts import pareto_ranks, scatter_svg
from perfcast.serving.ui.live import live_state

HERE = Path(__file__).parent
STATIC = {"style.css": "text/css", "live.js": "text/javascript"}
templates = Jinja2Templates(directory=HERE / "templates")

router = APIRouter(prefix="/ui", include_in_schema=False)


@router.get("")
def home() -> RedirectResponse:
    return RedirectResponse("/ui/models")


@router.get("/static/{name}")
def static(name: str) -> Response:
    if name not in STATIC:  # only the shipped files: no path ever reaches the file system
        return JSONResponse({"detail": f"no static file {name!r}"}, status_code=404)
    return FileResponse(HERE / "static" / name, media_type=STATIC[name])


@router.get("/models", response_class=HTMLResponse)
async def models_page(request: Request, models: Models) -> HTMLResponse:
    info = service.models_info(models)
    rows = []
    for m in info.models:
        details = (
            await run_in_threadpool(trained_on, m.task, m.run_id, models.champion(m.task).predictor)
            if m.loaded and m.run_id
            else None
        )
        live = (
            await run_in_threadpool(live_error, default_store_path(), models.champion(m.task))
            if m.loaded and m.task == LIVE_TASK
            else None
        )
        rows.append({"info": m, "trained": details, "live": live})
    context = {"page": "models", "rows": rows, "store": str(default_store_path())}
    return templates.TemplateResponse(request, "models.html", context)


@router.get("/ask", response_class=HTMLResponse)
async def ask_page(request: Request, models: Models, settings: AppSettings) -> HTMLResponse:
    query = dict(request.query_params)
    form = AskForm.from_query(query) if query else AskForm()
    context: dict = {"page": "ask", "form": form.fields(), "asked": bool(query)}
    status = 200
    if query:
        try:
            body = form.request_body()
            answer = await run_in_threadpool(
                service.recommend, models, form.request(), settings=settings
            )
        except ModelUnavailableError as err:
            context["error"], status = str(err), 503
        except PerfcastError as err:  # FormError, the limits and "no configuration fits"
            context["error"], status = str(err), 422
        else:
            points, x_label, y_label = plot_axes(answer)
            context |= {
                "answer": answer,
                "body": body,
                "pareto": pareto_ranks(points),
                "chart": scatter_svg(points, x_label, y_label),
            }
    return templates.TemplateResponse(request, "ask.html", context, status_code=status)


@router.get("/live", response_class=HTMLResponse)
def live_page(request: Request) -> HTMLResponse:
    return templates.TemplateResponse(
        request, "live.html", {"page": "live", "store": str(default_store_path())}
    )


@router.get("/live/state.json")
async def live_json(models: Models) -> JSONResponse:
    champion = models.champions().get(LIVE_TASK)  # None: the jobs without its prediction
    return JSONResponse(await run_in_threadpool(live_state, default_store_path(), champion))
