"""The FastAPI application factory: `create_app(sessions, ...)`; nothing is built at import.

    create_app(
        sessionmaker,                       # sessions on a migrated database
        *,
        executor: Executor | None = None,   # for GET /v1/jobs/{id}/log and stopping runs on cancel
        clock: Callable[[], datetime] = utc_now,
        observed_busy: Callable[[Session], Mapping[(node, tier), int]] | None = None,
        metrics: ServiceMetrics | None = None,
        munge: MungeSignIn | None | "auto" = "auto",
        max_body_bytes: int = 1 MiB,
        body_timeout_s: float = 10.0,
        only_unix_user: str | None = None,
        placement_order: PlacementOrder = PlacementOrder.PACK,
        policy: NamedPolicy = decide,
        user_quotas: UserQuotas | None = None,
    ) -> FastAPI

- `observed_busy(session)`: GPUs research jobs use now per (node, tier name), as the
  dispatcher last observed them. It feeds "why", the queue, placements and /metrics.
  Default: `store.held_by_jobs` (GPUs of JPU-Share's own DISPATCHED and RUNNING jobs).
- `metrics`: share one `ServiceMetrics` with a dispatcher in the same process so its
  `jpushare_dispatch_cycle_seconds` is exported too; default: a new one (`metrics_of(app)`
  returns it).
- `munge`: how `Authorization: MUNGE <credential>` is decoded (`api.munge_auth`); "auto":
  libmunge or the munge commands when this host has them, else MUNGE is refused (401
  MUNGE_UNAVAILABLE) and tokens still work; None: refused.
- `max_body_bytes`, `body_timeout_s`: the body is read whole before the app runs: over the
  limit 413, slower than the deadline 408 (`api.body_limit`).
- `only_unix_user`: a service that is not root runs jobs as its own account only
  (`service.account_rule`): new users of any other account get 422 ACCOUNT_NOT_SERVED.
- `placement_order`: the dispatcher's dispatch order (`JPUSHARE_PLACEMENT`), so that "why"
  and the queue answer with the placements the next cycle will choose.
- `policy`: the dispatcher's policy (`JPUSHARE_POLICY`), which "why", the queue and the
  start estimates project.
- `user_quotas`: the per-user limits POST /v1/jobs enforces (429 QUOTA_EXCEEDED);
  None: `JPUSHARE_MAX_ACTIVE_JOBS_PER_USER` / `JPUSHARE_MAX_JOB_BYTES_PER_USER` from the
  environment (`config.load_user_quotas`), read once here.
- `executor`: without one, cancel still cancels in the database (the dispatcher stops the
  run when it observes it) and the log endpoint answers 503 UNAVAILABLE.

The app has no startup work and opens no connection until a request comes; serving it
(uvicorn) and running the dispatcher are the caller's business (`jpushare serve`).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from functools import partial
from typing import Literal

from fastapi import FastAPI
from sqlalchemy.orm import Session, sessionmaker

from jpushare import store
from jpushare.api.body_limit import BodyLimit
from jpushare.api.deps import ApiContext, BusySource, db_slots_for, get_context
from jpushare.api.errors import install_error_handlers
from jpushare.api.estimates import StartEstimateCache
from jpushare.api.metric_figures import metric_figures
from jpushare.api.munge_auth import MungeSignIn
from jpushare.api.routes import admin, backfill, cluster, jobs, service, stats
from jpushare.api.schemas.common import error_responses
from jpushare.config import (
    DEFAULT_BODY_TIMEOUT_S,
    DEFAULT_MAX_BODY_BYTES,
    UserQuotas,
    load_user_quotas,
)
from jpushare.executors.base import Executor
from jpushare.metrics import MetricFigures, ServiceMetrics
from jpushare.munge import default_munge
from jpushare.policy import PlacementOrder, decide
from jpushare.policy.peers import NamedPolicy
from jpushare.store.times import utc_now

API_VERSION = "1"

DESCRIPTION = """\
JPU-Share: one fair-share queue in front of a shared multi-GPU cluster.

Authenticate with `Authorization: Bearer <token>` (ask an admin for a token), or, from a
host of the cluster, with `Authorization: MUNGE <credential>`: a fresh credential of the
cluster's munged per request, whose payload is `jpushare-v1 METHOD PATH[?QUERY]
sha256=<hex SHA-256 of the body>` and whose uid is the Unix account of exactly one
user. A credential is good for one request, for that request only, and for a minute. A
401 says why in `details.reason`: NO_CREDENTIALS, or MUNGE_UNAVAILABLE, MUNGE_INVALID,
MUNGE_EXPIRED, MUNGE_REPLAYED, MUNGE_WRONG_REQUEST, MUNGE_UNMAPPED, MUNGE_AMBIGUOUS
(several users share the account: use a token).

Privacy: a job's command, working directory, environment and output files are shown to
its owner, its lab's PIs and admins; to everyone else they are null and named in the job's
`hidden` list (what `squeue` shows stays visible: id, name, user, lab, GPUs, state,
placement, times).

Every error is `{"error": {"code", "message", "details"}}` with code one of
VALIDATION_ERROR (422; 400 for a body that cannot be parsed at all, e.g. not UTF-8, or a
Content-Length that is not a number), NO_FIT_PLACEMENT, UNKNOWN_UNIX_ACCOUNT,
ACCOUNT_NOT_SERVED (422), UNAUTHENTICATED (401), FORBIDDEN (403), NOT_FOUND (404), CONFLICT
(409), REQUEST_TIMEOUT (408: headers or body not sent whole in time), PAYLOAD_TOO_LARGE
(413: bodies over the service's limit, 1 MiB by default),
QUOTA_EXCEEDED (429: the user already has the most active jobs, or bytes of command and
environment in them, one user may have; `details` names the limit, its maximum and the
current value; nothing was stored), ROOT_ACCOUNT (422: a user may not run as uid 0),
CROSS_SITE_REQUEST (403: a dashboard form posted from another site), CSRF_TOKEN_INVALID
(403: a dashboard form that acts, without its page's token for this session),
UNAVAILABLE (503), TOO_MANY_CONNECTIONS (503, with Retry-After: the client's address holds
enough connections), DATABASE_UNAVAILABLE (503,
with Retry-After: the database cannot be reached now; nothing was changed), INTERNAL (500).
Request bodies are strict: numbers are JSON numbers (not strings or booleans), within the
bounds each field's schema states.
"""

# What any route may answer besides its own responses (the body guard and the database
# sit in front of every route).
COMMON_RESPONSES = error_responses(
    {
        400: "VALIDATION_ERROR: the body cannot be parsed (e.g. not UTF-8), "
        "or Content-Length is not a number",
        408: "REQUEST_TIMEOUT: the body came too slowly",
        413: "PAYLOAD_TOO_LARGE: the body is over the limit",
        503: "DATABASE_UNAVAILABLE (with Retry-After) or UNAVAILABLE",
    }
)


def create_app(
    sessions: sessionmaker[Session],
    *,
    executor: Executor | None = None,
    clock: Callable[[], datetime] = utc_now,
    observed_busy: BusySource | None = None,
    metrics: ServiceMetrics | None = None,
    munge: MungeSignIn | Literal["auto"] | None = "auto",
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    body_timeout_s: float = DEFAULT_BODY_TIMEOUT_S,
    only_unix_user: str | None = None,
    placement_order: PlacementOrder = PlacementOrder.PACK,
    policy: NamedPolicy = decide,
    cycle_s: float = 5.0,
    user_quotas: UserQuotas | None = None,
) -> FastAPI:
    """The JPU-Share REST API on `sessions` (see the module docstring)."""
    if munge == "auto":
        found = default_munge()
        munge = MungeSignIn(found) if found is not None else None
    busy: BusySource = observed_busy if observed_busy is not None else store.held_by_jobs
    service_metrics = metrics if metrics is not None else ServiceMetrics()
    read_sessions = store.read_only_sessions(sessions)

    def read_figures() -> MetricFigures:  # a scrape only reads: no write lock on SQLite
        with read_sessions.begin() as session:
            placements = store.placements(session, busy(session))
            return metric_figures(session, placements, now=clock())

    service_metrics.collect_figures_from(read_figures)
    keeper_dir = backfill.keeper_dir_of(executor)
    if keeper_dir is not None:  # the LLM backfill figures (issue 22)
        service_metrics.collect_backfill_from(partial(backfill.backfill_figures, keeper_dir))

    app = FastAPI(
        title="JPU-Share",
        version=API_VERSION,
        description=DESCRIPTION,
        docs_url=None,  # /docs and the dashboard: jpushare.web (no CDN)
        redoc_url=None,
        openapi_url="/openapi.json",
        responses=COMMON_RESPONSES,
    )
    app.state.jpushare = ApiContext(
        sessions=sessions,
        read_sessions=read_sessions,
        executor=executor,
        clock=clock,
        observed_busy=busy,
        metrics=service_metrics,
        db_slots=db_slots_for(sessions),
        munge=munge,
        only_unix_user=only_unix_user,
        placement_order=placement_order,
        policy=policy,
        start_estimates=StartEstimateCache(cycle_s, placement_order, policy=policy),
    )
    app.state.user_quotas = user_quotas if user_quotas is not None else load_user_quotas()
    install_error_handlers(app)

    app.add_middleware(BodyLimit, limit=max_body_bytes, timeout_s=body_timeout_s)
    for router in (jobs.router, cluster.router, stats.router, admin.router, service.router):
        app.include_router(router)
    app.include_router(backfill.router)  # GET /v1/backfill (issue 22)
    from jpushare.web import install_web  # here: jpushare.web imports the API's routes

    install_web(app)
    return app


def metrics_of(app: FastAPI) -> ServiceMetrics:
    """The app's `ServiceMetrics` (e.g. to hand to a dispatcher in the same process)."""
    context = app.state.jpushare
    assert isinstance(context, ApiContext)
    return context.metrics


__all__ = ["create_app", "get_context", "metrics_of"]
