"""The dashboard at `/` and the offline /docs, served by the API process.

`install_web(app)` adds the pages (`web.pages`; My jobs, a job's page and the actions on
jobs: `web.job_pages`; a lab's own page `web.lab_page`; the operator's
`web.operator_page`), the sign-in (`web.auth`), the dashboard's own static files at
`/static/web` (its CSS, its script and the vendored uPlot chart library, see
static/vendor/uplot/README.md) and Swagger UI from local assets (`web.docs`). Nothing is
fetched from another host, and no response may be framed by
another site (`web.framing`).
"""

from __future__ import annotations

import os
from pathlib import Path

from fastapi import FastAPI
from fastapi.responses import Response
from fastapi.staticfiles import StaticFiles

from jpushare.web import lab_page, operator_page
from jpushare.web.docs import install_offline_docs
from jpushare.web.error_pages import BrowserErrors
from jpushare.web.framing import NoFraming
from jpushare.web.job_pages import build_router as build_job_router
from jpushare.web.pages import WebConfig, build_router

STATIC_DIR = Path(__file__).parent / "static"
DEFAULT_REFRESH_S = 5.0


def refresh_from_env(env: dict[str, str] | None = None) -> float:
    """The dispatch cycle (JPUSHARE_CYCLE_S, default 5 s): how often the pages reload."""
    raw = (env if env is not None else dict(os.environ)).get("JPUSHARE_CYCLE_S", "")
    try:
        value = float(raw)
    except ValueError:
        return DEFAULT_REFRESH_S
    return value if 0 < value < 86400 else DEFAULT_REFRESH_S


def install_web(app: FastAPI, refresh_s: float | None = None) -> None:
    """Add the dashboard, its static files, a favicon and the offline /docs to `app`;
    forbid other sites to frame any of its responses (`web.framing`); answer a browser's
    failed page with a page, not JSON (`web.error_pages`)."""
    app.add_middleware(BrowserErrors)
    app.add_middleware(NoFraming)
    install_offline_docs(app)
    favicon = (STATIC_DIR / "favicon.svg").read_bytes()

    @app.get("/favicon.ico", include_in_schema=False)
    def _favicon() -> Response:  # browsers ask for it at this path, pages link the SVG
        return Response(
            favicon, media_type="image/svg+xml", headers={"Cache-Control": "max-age=86400"}
        )

    app.mount("/static/web", StaticFiles(directory=STATIC_DIR), name="web-static")
    config = WebConfig(refresh_s or refresh_from_env())
    app.include_router(build_router(config))
    app.include_router(build_job_router(config))  # My jobs, a job's page, its actions
    app.include_router(lab_page.build_router(config))
    app.include_router(operator_page.build_router(config))


__all__ = ["install_web"]
