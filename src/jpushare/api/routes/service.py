"""Unauthenticated service endpoints: /healthz for load balancers, /metrics for Prometheus."""

from __future__ import annotations

import logging

from fastapi import APIRouter, Response
from prometheus_client import CONTENT_TYPE_LATEST
from sqlalchemy.exc import SQLAlchemyError

from jpushare.api.deps import ContextDep
from jpushare.api.errors import first_line
from jpushare.api.health import judge_dispatcher
from jpushare.api.schemas.health import DispatcherHealthPublic, HealthPublic
from jpushare.store.engine import ping
from jpushare.store.health import load_health
from jpushare.store.leadership import get_lease

log = logging.getLogger(__name__)

router = APIRouter(tags=["service"])


@router.get("/healthz", responses={503: {"model": HealthPublic}})
def healthz(ctx: ContextDep, response: Response) -> HealthPublic:
    """No token needed. 200 `ok`; 200 `degraded` with a `reason` when the dispatcher has not
    completed a cycle for a few cycle lengths (or never ran): this API still serves, so a
    load balancer should keep it, while monitoring alerts; 503 `degraded` when the database
    does not answer (this process cannot serve)."""
    now = ctx.clock()
    try:
        with ctx.read_sessions.begin() as session:  # not behind a writer on SQLite
            ping(session)
            verdict = judge_dispatcher(load_health(session), get_lease(session), now)
    except SQLAlchemyError as exc:
        log.warning("healthz: the database does not answer: %s", first_line(exc))
        response.status_code = 503
        return HealthPublic(
            status="degraded",
            database="unreachable",
            time=now,
            reason="the database cannot be reached",
        )
    dispatcher = DispatcherHealthPublic(
        state=verdict.state,
        last_success_at=verdict.last_success_at,
        holder=verdict.holder,
        stale_after_s=verdict.stale_after_s,
    )
    return HealthPublic(
        status="ok" if verdict.state == "ok" else "degraded",
        database="ok",
        time=now,
        reason=verdict.reason,
        dispatcher=dispatcher,
    )


@router.get("/metrics", response_class=Response)
def metrics(ctx: ContextDep) -> Response:
    """Prometheus text format, read from the database at scrape time (no token needed);
    see `jpushare.metrics` for the names."""
    return Response(ctx.metrics.exposition(), media_type=CONTENT_TYPE_LATEST)
