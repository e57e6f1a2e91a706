"""/docs without the internet: Swagger UI's assets served by the service itself.

FastAPI's default /docs page loads Swagger UI from a CDN, so on an offline head node it is
blank. The assets come from the `fastapi-offline` package (MIT; it ships Swagger UI's
`swagger-ui-bundle.js` and `swagger-ui.css`); only its static folder is used, mounted at
`/static/docs`. Swagger UI's online validator badge is turned off (it would call out).
"""

from __future__ import annotations

from pathlib import Path

import fastapi_offline
from fastapi import FastAPI
from fastapi.openapi.docs import get_swagger_ui_html, get_swagger_ui_oauth2_redirect_html
from fastapi.responses import HTMLResponse
from fastapi.staticfiles import StaticFiles

DOCS_ASSETS = Path(fastapi_offline.__file__).parent / "static"
DOCS_STATIC_URL = "/static/docs"


def install_offline_docs(app: FastAPI, docs_url: str = "/docs") -> None:
    """Serve Swagger UI at `docs_url` from local assets (create the app with docs_url=None)."""
    app.mount(DOCS_STATIC_URL, StaticFiles(directory=DOCS_ASSETS), name="docs-assets")
    openapi_url = app.openapi_url or "/openapi.json"
    oauth2_redirect = app.swagger_ui_oauth2_redirect_url or "/docs/oauth2-redirect"

    @app.get(docs_url, include_in_schema=False)
    async def swagger_ui() -> HTMLResponse:
        return get_swagger_ui_html(
            openapi_url=openapi_url,
            title=f"{app.title} - API docs",
            oauth2_redirect_url=oauth2_redirect,
            swagger_js_url=f"{DOCS_STATIC_URL}/swagger-ui-bundle.js",
            swagger_css_url=f"{DOCS_STATIC_URL}/swagger-ui.css",
            swagger_favicon_url=f"{DOCS_STATIC_URL}/favicon.png",
            swagger_ui_parameters={"validatorUrl": None},
        )

    @app.get(oauth2_redirect, include_in_schema=False)
    async def swagger_ui_redirect() -> HTMLResponse:
        return get_swagger_ui_oauth2_redirect_html()
