"""`GET /docs`: Swagger UI from assets the app serves itself, so the page works on a network
without the internet (FastAPI's default page loads them from a CDN). The assets come from the
`swagger-ui-py` package (Swagger UI 5, which reads OpenAPI 3.1)."""

from __future__ import annotations

from importlib.util import find_spec
from pathlib import Path

from fastapi import FastAPI
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import HTMLResponse
from fastapi.staticfiles import StaticFiles

ASSETS_URL = "/docs/assets"


def _assets() -> Path:
    spec = find_spec("swagger_ui")  # located, not imported (its web-framework glue is not used)
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("swagger-ui-py is not installed (pyproject.toml pins it)")
    return Path(next(iter(spec.submodule_search_locations))) / "static"


def install(app: FastAPI) -> None:
    """Serve the Swagger UI page at /docs and its assets under /docs/assets."""
    app.mount(ASSETS_URL, StaticFiles(directory=_assets()), name="docs-assets")

    @app.get("/docs", include_in_schema=False)
    def docs() -> HTMLResponse:
        return get_swagger_ui_html(
            openapi_url=app.openapi_url or "/openapi.json",
            title=f"{app.title} API",
            swagger_js_url=f"{ASSETS_URL}/swagger-ui-bundle.js",
            swagger_css_url=f"{ASSETS_URL}/swagger-ui.css",
            swagger_favicon_url=f"{ASSETS_URL}/favicon-32x32.png",
        )
