"""`GET /docs` (Swagger UI) and `GET /redoc` (ReDoc) from assets the app serves itself, so both
pages work on a network without the internet (FastAPI's default pages load them, and fonts,
from CDNs). Swagger UI 5 comes from `swagger-ui-py`, ReDoc 2.5 from `fastapi-standalone-docs`;
both read OpenAPI 3.1. The packages are only located, not imported (their web-framework glue is
not used)."""

from __future__ import annotations

from importlib.util import find_spec
from pathlib import Path

from fastapi import FastAPI
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html
from fastapi.responses import HTMLResponse
from fastapi.staticfiles import StaticFiles

ASSETS_URL = "/docs/assets"
REDOC_ASSETS_URL = "/redoc/assets"


def _package_dir(package: str) -> Path:
    spec = find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError(f"{package} is not installed (pyproject.toml pins it)")
    return Path(next(iter(spec.submodule_search_locations)))


def install(app: FastAPI) -> None:
    """Serve Swagger UI at /docs, ReDoc at /redoc, and their assets under /docs/assets and
    /redoc/assets."""
    app.mount(
        ASSETS_URL, StaticFiles(directory=_package_dir("swagger_ui") / "static"), name="docs-assets"
    )
    redoc = _package_dir("fastapi_standalone_docs") / "static" / "redoc"
    app.mount(REDOC_ASSETS_URL, StaticFiles(directory=redoc), name="redoc-assets")
    title = f"{app.title} API"

    @app.get("/docs", include_in_schema=False)
    def docs() -> HTMLResponse:
        return get_swagger_ui_html(
            openapi_url=app.openapi_url or "/openapi.json",
            title=title,
            swagger_js_url=f"{ASSETS_URL}/swagger-ui-bundle.js",
            swagger_css_url=f"{ASSETS_URL}/swagger-ui.css",
            swagger_favicon_url=f"{ASSETS_URL}/favicon-32x32.png",
        )

    @app.get("/redoc", include_in_schema=False)
    def redoc_page() -> HTMLResponse:
        return get_redoc_html(
            openapi_url=app.openapi_url or "/openapi.json",
            title=title,
            redoc_js_url=f"{REDOC_ASSETS_URL}/redoc.standalone.js",
            redoc_favicon_url=f"{ASSETS_URL}/favicon-32x32.png",
            with_google_fonts=False,
        )
