"""The API reference pages, /docs (Swagger UI) and /redoc, served with no network.

FastAPI's own pages load Swagger UI and ReDoc from a CDN; these load the same bundles from
the `fastapi-offline` package, served here as static files (FastAPI's documented recipe for
self-hosted docs assets).
"""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path
from typing import Any

from fastapi import APIRouter, FastAPI
from fastapi.openapi.docs import (
    get_redoc_html,
    get_swagger_ui_html,
    get_swagger_ui_oauth2_redirect_html,
)
from fastapi.responses import HTMLResponse
from fastapi.staticfiles import StaticFiles

ASSETS_URL = "/docs-assets"
ASSETS_DIR = Path(str(files("fastapi_offline") / "static"))
OAUTH2_REDIRECT_URL = "/docs/oauth2-redirect"


def install_docs(app: FastAPI, handlers: list[str]) -> None:
    """Serve /docs, /redoc and their scripts and styles from this process; the OpenAPI
    document names the handlers this deployment registered, the only ones a task may run."""
    generate = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            schemas = generate()["components"]["schemas"]
            schemas["HandlerJob"]["properties"]["name"]["enum"] = handlers
        return app.openapi_schema or generate()

    app.openapi = openapi  # type: ignore[method-assign]  # FastAPI's documented extension point
    app.mount(ASSETS_URL, StaticFiles(directory=ASSETS_DIR), name="docs-assets")
    openapi_url = app.openapi_url or "/openapi.json"
    router = APIRouter(include_in_schema=False)

    @router.get("/docs")
    async def swagger_ui() -> HTMLResponse:
        """Swagger UI over this API's OpenAPI document."""
        return get_swagger_ui_html(
            openapi_url=openapi_url,
            title=f"{app.title} - Swagger UI",
            oauth2_redirect_url=OAUTH2_REDIRECT_URL,
            swagger_js_url=f"{ASSETS_URL}/swagger-ui-bundle.js",
            swagger_css_url=f"{ASSETS_URL}/swagger-ui.css",
            swagger_favicon_url=f"{ASSETS_URL}/favicon.png",
        )

    @router.get(OAUTH2_REDIRECT_URL)
    async def swagger_ui_redirect() -> HTMLResponse:
        """The page Swagger UI's OAuth2 flow returns to."""
        return get_swagger_ui_oauth2_redirect_html()

    @router.get("/redoc")
    async def redoc() -> HTMLResponse:
        """ReDoc over this API's OpenAPI document."""
        return get_redoc_html(
            openapi_url=openapi_url,
            title=f"{app.title} - ReDoc",
            redoc_js_url=f"{ASSETS_URL}/redoc.standalone.js",
            redoc_favicon_url=f"{ASSETS_URL}/favicon.png",
            with_google_fonts=False,
        )

    app.include_router(router)
