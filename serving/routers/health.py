"""`GET /healthz` (the process answers), `/readyz` (models loaded), `/metrics` (Prometheus)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Response
from fastapi.responses import JSONResponse
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from perfcast.serving.dependencies import Models, get_metrics
from perfcast.serving.metrics import ServiceMetrics
from perfcast.serving.schemas import Health, Readiness

router = APIRouter(tags=["health"])


@router.get("/healthz", response_model=Health)
def healthz() -> Health:
    return Health(status="ok")


@router.get(
    "/readyz",
    response_model=Readiness,
    responses={503: {"model": Readiness, "description": "some served task has no model"}},
)
def readyz(models: Models) -> Response:
    champions = models.champions()
    loaded = sorted(champions)
    missing = [t for t in models.tasks if t not in loaded]
    reason = "; ".join(f"{t}: {models.reason(t)}" for t in missing) if missing else None
    trained_on = {t: _data(champions[t]) for t in loaded}
    body = Readiness(
        ready=not missing, loaded=loaded, missing=missing, reason=reason, trained_on=trained_on
    )
    return JSONResponse(body.model_dump(), status_code=503 if missing else 200)


def _data(champion: object) -> str:
    """A champion's training data as an answer may show it: a file by its name only."""
    data = str(getattr(champion, "data", "unknown")).rsplit("/", 1)[-1]
    origin = getattr(champion, "data_origin", None)
    return f"{data} ({origin})" if origin else data


@router.get("/metrics", response_class=Response, responses={200: {"content": {"text/plain": {}}}})
def metrics(service_metrics: Annotated[ServiceMetrics, Depends(get_metrics)]) -> Response:
    body = generate_latest(service_metrics.registry)
    return Response(body, media_type=CONTENT_TYPE_LATEST)
