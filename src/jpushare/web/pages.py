"""The dashboard's pages: queue, placements, labs, the watch-list (a job's pages, My jobs
and the actions on jobs: `web.job_pages`, `web.actions`).

Server-rendered, signed in with the API's tokens (`web.auth`). Every figure is what the
JSON API answers for the same state because each page *calls the API's route functions*
(`api.routes.cluster.queue`, `.placements`, `.labs`, `jobs.list_jobs`, `stats.watch`) with
the signed-in user, in the request's read-only session, and only lays their answers out:
privacy (`api.privacy.for_viewer`) applies unchanged. Each page reloads itself every
dispatch cycle."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from jpushare.api.deps import ContextDep, SessionDep, get_context
from jpushare.api.errors import ErrorCode, error_response
from jpushare.api.routes import cluster, jobs, stats
from jpushare.api.schemas.common import MAX_LIST_LIMIT
from jpushare.api.schemas.jobs import JobPublic
from jpushare.api.schemas.queue import PlacementPublic, QueueEntryPublic
from jpushare.store.records import UserRecord
from jpushare.vocabulary import ACTIVE_STATES, JobState
from jpushare.web import history
from jpushare.web.auth import (
    COOKIE,
    cookie_user,
    cross_site,
    parse_form,
    safe_next,
    signin_url,
    token_user,
)
from jpushare.web.job_figures import holders_by_placement
from jpushare.web.render import render

# No inline script runs: the pages' code is /static/web/dashboard.js, their data is JSON in
# non-executed <script type="application/json"> elements.
SECURITY_HEADERS = {
    "Content-Security-Policy": "default-src 'self'; img-src 'self' data:; "
    "style-src 'self' 'unsafe-inline'; frame-ancestors 'none'; form-action 'self'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
    "Cache-Control": "no-store",
}


@dataclass(frozen=True, slots=True)
class WebConfig:
    """`refresh_s`: how often a page reloads itself (the dispatch cycle)."""

    refresh_s: float


def build_router(config: WebConfig) -> APIRouter:
    """The pages, reloading every `config.refresh_s` seconds."""
    router = APIRouter(include_in_schema=False)

    def page(request: Request, user: UserRecord, name: str, template: str, **data: Any) -> Response:
        return page_response(
            request, user, name, template, data.pop("refresh_s", config.refresh_s), **data
        )

    @router.get("/", response_class=HTMLResponse)
    def queue_page(request: Request, session: SessionDep, ctx: ContextDep) -> Response:
        user = cookie_user(session, request)
        if user is None:
            return to_signin(request)
        answer = cluster.queue(session=session, user=user, ctx=ctx, offset=0, limit=500)
        rows = [(e, estimated_start(e)) for e in answer.data]
        # The queued jobs as `GET /v1/jobs` shows them: the held and waiting ones (listed
        # after the queue, as squeue does) and an array task's `ID_TASK` (a queue entry
        # has only the job's id).
        queued = jobs.list_jobs(
            session=session,
            user=user,
            ctx=ctx,
            state=[JobState.GLOBAL_QUEUE_WAIT],
            lab=None,
            mine=False,
            before_id=None,
            limit=MAX_LIST_LIMIT,
        ).data
        waiting = sorted((j for j in queued if j.waiting is not None), key=lambda j: j.id)
        return page(
            request,
            user,
            "queue",
            "queue.html",
            queue=answer,
            rows=rows,
            waiting=waiting,
            shown_ids=shown_ids(queued),
        )

    @router.get("/placements", response_class=HTMLResponse)
    def placements_page(request: Request, session: SessionDep, ctx: ContextDep) -> Response:
        user = cookie_user(session, request)
        if user is None:
            return to_signin(request)
        answer = cluster.placements(session=session, user=user, ctx=ctx)
        tiers = [t.name for t in cluster.tiers(session=session, user=user).data]
        grid: dict[str, dict[str, PlacementPublic]] = defaultdict(dict)
        for p in answer.data:
            grid[p.node][p.tier] = p
        used_tiers = [t for t in tiers if any(t in row for row in grid.values())]
        nodes = [
            (name, next(iter(row.values())), [(t, row.get(t)) for t in used_tiers])
            for name, row in sorted(grid.items())
        ]
        totals = {
            k: sum(getattr(p, k) for p in answer.data)
            for k in ("capacity", "busy", "reserved", "idle", "llm_backfill_gpus")
        }
        totals["unavailable"] = sum(p.capacity - p.busy for p in answer.data if not p.schedulable)
        active = jobs.list_jobs(
            session=session,
            user=user,
            ctx=ctx,
            state=list(ACTIVE_STATES),
            lab=None,
            mine=False,
            before_id=None,
            limit=MAX_LIST_LIMIT,
        )  # who holds the busy GPUs: what squeue shows of a job, no private field
        reserving = {r.job_id for p in answer.data for r in p.reservations}
        reserved_for = [jobs.get_job(job_id=i, session=session, user=user) for i in reserving]
        return page(
            request,
            user,
            "placements",
            "placements.html",
            placements=answer,
            tiers=used_tiers,
            nodes=nodes,
            totals=totals,
            holders=holders_by_placement(active.data),
            shown_ids=shown_ids([*active.data, *reserved_for]),
        )

    @router.get("/labs", response_class=HTMLResponse)
    def labs_page(request: Request, session: SessionDep, ctx: ContextDep) -> Response:
        user = cookie_user(session, request)
        if user is None:
            return to_signin(request)
        answer = cluster.labs(session=session, user=user, ctx=ctx)
        total = sum(lab.usage_tflop_s for lab in answer.data)
        shares = {
            lab.name: (lab.usage_tflop_s / total if total > 0 else None) for lab in answer.data
        }
        usage_now = {lab.name: lab.usage_tflop_s for lab in answer.data}
        now = ctx.clock()
        first = min((lab.created_at for lab in answer.data), default=None)
        start = history.usage_window_start(now, first)
        series = history.usage_series(session, usage_now, now, start)
        return page(
            request,
            user,
            "labs",
            "labs.html",
            labs=answer,
            total=total,
            shares=shares,
            chart=series.as_json(),
            chart_since=start,
        )

    @router.get("/watch", response_class=HTMLResponse)
    def watch_page(
        request: Request,
        session: SessionDep,
        ctx: ContextDep,
        since: Annotated[str, Query(max_length=64)] = stats.DEFAULT_SINCE,
        until: Annotated[str | None, Query(max_length=64)] = None,
    ) -> Response:
        user = cookie_user(session, request)
        if user is None:
            return to_signin(request)
        answer = stats.watch(session=session, user=user, ctx=ctx, since=since, until=until)
        days = history.watch_days(session, answer.until, history.days_in(answer))
        return page(
            request,
            user,
            "watch",
            "watch.html",
            watch=answer,
            request_since=since,
            request_until=until,
            refresh_s=None,  # its window form would be wiped by a reload; figures move slowly
            days=days,
            chart=history.watch_series(days).as_json(),
        )

    @router.get("/signin", response_class=HTMLResponse)
    def signin_form(next: str = "/") -> Response:
        return _signin_page(next, None, 200)

    @router.post("/signin", response_class=HTMLResponse)
    async def signin(request: Request) -> Response:
        refused = _refuse_cross_site(request, "sign in")  # nor into an account it chose
        if refused is not None:
            return refused
        form = parse_form(await request.body())
        target = safe_next(form.get("next"))
        token = form.get("token", "").strip()
        with get_context(request).read_sessions.begin() as session:
            user = token_user(session, token)
        if user is None:
            return _signin_page(target, "That token is not valid (or it was revoked).", 401)
        response = RedirectResponse(target, status_code=303)
        response.set_cookie(
            COOKIE,
            token,
            httponly=True,
            samesite="strict",
            secure=request.url.scheme == "https",
            path="/",
        )
        return response

    @router.post("/signout")
    def signout(request: Request) -> Response:
        refused = _refuse_cross_site(request, "sign out")
        if refused is not None:
            return refused
        response = RedirectResponse("/signin", status_code=303)
        response.delete_cookie(COOKIE, path="/", httponly=True, samesite="strict")
        return response

    return router


def _refuse_cross_site(request: Request, action: str) -> Response | None:
    """403 CROSS_SITE_REQUEST when another site posted the form (`auth.cross_site`)."""
    why = cross_site(request)
    if why is None:
        return None
    return error_response(
        403,
        ErrorCode.CROSS_SITE_REQUEST,
        f"another site may not {action} this browser ({why}): use this site's own page",
        {"action": action.replace(" ", "_")},
        SECURITY_HEADERS,
    )


def page_response(
    request: Request,
    user: UserRecord,
    active: str | None,
    template: str,
    refresh_s: float | None,
    **data: Any,
) -> Response:
    """A page for the signed-in `user`, `active` lit in the menu (None: no entry), reloading
    every `refresh_s` (None: a page with a form to fill in, which a reload would wipe);
    `data["status"]`, when given, is its HTTP status."""
    html = render(
        template,
        user=user,
        active=active,
        now=get_context(request).clock(),
        refresh_s=refresh_s,
        **data,
    )
    return HTMLResponse(html, status_code=data.get("status", 200), headers=SECURITY_HEADERS)


def to_signin(request: Request) -> Response:
    """To the sign-in page, coming back to this page once signed in."""
    return RedirectResponse(signin_url(request.url.path), status_code=303)


def _signin_page(next_path: str, error: str | None, status: int) -> Response:
    html = render("signin.html", next=safe_next(next_path), error=error, user=None)
    return HTMLResponse(html, status_code=status, headers=SECURITY_HEADERS)


def shown_ids(listed: Iterable[JobPublic]) -> dict[int, str]:
    """The id a person reads for each listed job that is an array task (`ID_TASK`, the
    API's `display_id`); a page shows any other job by its number."""
    return {j.id: j.display_id for j in listed if j.display_id and j.display_id != str(j.id)}


def estimated_start(entry: QueueEntryPublic) -> datetime | None:
    """The queue entry's `estimated_start`, when the API gives one; otherwise the page
    shows "—"."""
    value = getattr(entry, "estimated_start", None)
    return value if isinstance(value, datetime) else None
