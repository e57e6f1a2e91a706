"""Unauthenticated service endpoints: /healthz for load balancers, /metrics for Prometheus."""

from __future__ import annotations

import logging

from fastapi import APIRouter, Response
from prometheus_client import CONTENT_TYPE_LATEST
from sqlalchemy.exc import SQLAlchemyError

from jpushare.api import queries
from jpushare.api.deps import ContextDep
from jpushare.api.errors import first_line
from jpushare.api.schemas import HealthPublic

log = logging.getLogger(__name__)

router = APIRouter(tags=["service"])


@router.get("/healthz", responses={503: {"model": HealthPublic}})
def healthz(ctx: ContextDep, response: Response) -> HealthPublic:
    """200 when the database answers, else 503 (no token needed)."""
    try:
        with ctx.read_sessions.begin() as session:  # not behind a writer on SQLite
            queries.ping(session)
    except SQLAlchemyError as exc:
        log.warning("healthz: the database does not answer: %s", first_line(exc))
        response.status_code = 503
        return HealthPublic(status="degraded", database="unreachable", time=ctx.clock())
    return HealthPublic(status="ok", database="ok", time=ctx.clock())


@router.get("/metrics", response_class=Response)
def metrics(ctx: ContextDep) -> Response:
    """Prometheus text format, read from the database at scrape time (no token needed);
    see `jpushare.metrics` for the names."""
    return Response(ctx.metrics.exposition(), media_type=CONTENT_TYPE_LATEST)
