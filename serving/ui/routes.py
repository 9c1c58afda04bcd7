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
from perfcast.paths import shown
from perfcast.serving import service
from perfcast.serving.dependencies import AppSettings, Models
from perfcast.serving.live_error import TASK as LIVE_TASK
from perfcast.serving.live_error import default_store_path, live_error
from perfcast.serving.models import ModelUnavailableError
from perfcast.serving.ui.ask import AskForm, dollars, plot_axes
from perfcast.serving.ui.champions import compare_to_baseline, trained_on
from perfcast.serving.ui.charts import pareto_ranks, scatter_svg
from perfcast.serving.ui.live import live_state
from perfcast.units import duration, number, pct, percent

HERE = Path(__file__).parent
STATIC = {"style.css": "text/css", "live.js": "text/javascript"}
templates = Jinja2Templates(directory=HERE / "templates")
# every figure a page shows reads as the command line's: `3.1 h`, `5.1%`, `1,204`
templates.env.filters.update(
    duration=duration, pct=pct, percent=percent, number=number, dollars=dollars
)

# the paths are whole (no prefix) so that the service's root belongs here too
router = APIRouter(include_in_schema=False)


@router.get("/")
def root() -> RedirectResponse:
    """The service's address opened in a browser lands on the dashboard (it was a 404)."""
    return RedirectResponse("/ui")


@router.get("/ui")
def home() -> RedirectResponse:
    return RedirectResponse("/ui/models")


@router.get("/ui/static/{name}")
def static(name: str) -> Response:
    if name not in STATIC:  # only the shipped files: no path ever reaches the file system
        return JSONResponse({"detail": f"no static file {name!r}"}, status_code=404)
    return FileResponse(HERE / "static" / name, media_type=STATIC[name])


@router.get("/ui/models", response_class=HTMLResponse)
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
        comparison = compare_to_baseline(
            m.metrics.get("mape") if m.loaded else None,
            details.baseline_mape if details is not None else None,
        )
        by_source = compare_to_baseline(
            m.metrics.get("by_source_mape") if m.loaded else None,
            m.metrics.get("by_source_napkin_mape") if m.loaded else None,
            against="perfect scaling",
        )
        rows.append({"info": m, "trained": details, "live": live, "comparison": comparison,
                     "by_source": by_source})  # fmt: skip
    context = {"page": "models", "rows": rows, "store": shown(default_store_path())}
    return templates.TemplateResponse(request, "models.html", context)


@router.get("/ui/ask", response_class=HTMLResponse)
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
            points, x_label, y_label, x_format, y_format = plot_axes(answer)
            context |= {
                "answer": answer,
                "body": body,
                "pareto": pareto_ranks(points),
                "chart": scatter_svg(points, x_label, y_label, x_format, y_format),
            }
    return templates.TemplateResponse(request, "ask.html", context, status_code=status)


@router.get("/ui/live", response_class=HTMLResponse)
def live_page(request: Request) -> HTMLResponse:
    return templates.TemplateResponse(
        request, "live.html", {"page": "live", "store": shown(default_store_path())}
    )


@router.get("/ui/live/state.json")
async def live_json(models: Models) -> JSONResponse:
    champion = models.champions().get(LIVE_TASK)  # None: the jobs without its prediction
    return JSONResponse(await run_in_threadpool(live_state, default_store_path(), champion))
