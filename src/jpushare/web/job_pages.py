"""My jobs and a job's page: what a lab member opens to see where their jobs stand.

As every page (`web.pages`), these call the API's route functions as the signed-in user
(`jobs.list_jobs`, `get_job`, `why`, `job_attempts_route`, `job_log`, `cluster.tiers`) and
lay their answers out, adding only clock arithmetic (`web.job_figures`: elapsed, time
left, the bill so far). A job's page shows its start estimate and what it rests on, every
attempt and reservation, its costs, its output (where the API lets this viewer read it),
an array task's sibling tasks (`GET /v1/jobs?array=ID`) and the actions the viewer may
take (`web.actions`, behind a confirmation).
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Request
from fastapi.responses import HTMLResponse, Response
from sqlalchemy.orm import Session

from jpushare import store
from jpushare.api.deps import ContextDep, SessionDep
from jpushare.api.errors import ApiError
from jpushare.api.routes import cluster, jobs
from jpushare.api.schemas.common import INT64_MAX
from jpushare.store.errors import NotFound
from jpushare.store.jobs import Shown
from jpushare.store.records import UserRecord
from jpushare.vocabulary import ReleaseReason
from jpushare.web import actions
from jpushare.web.auth import cookie_user
from jpushare.web.job_figures import bill_so_far, elapsed_s, time_left_s
from jpushare.web.pages import WebConfig, page_response, to_signin

LOG_TAIL_LINES = 200
MY_JOBS_LIMIT = 100
ARRAY_TASKS_SHOWN = 1000  # one page of `GET /v1/jobs?array=ID`


def tier_tflops(session: Session, user: UserRecord) -> dict[str, float]:
    """Each tier's TFLOPS, as `GET /v1/tiers` answers: what a GPU-second of it costs."""
    return {t.name: t.tflops for t in cluster.tiers(session=session, user=user).data}


def build_router(config: WebConfig) -> APIRouter:
    """My jobs (`/jobs`) and a job's page (`/jobs/{id}`), and the actions' routes."""
    router = APIRouter(include_in_schema=False)

    @router.get("/jobs", response_class=HTMLResponse)
    def my_jobs_page(request: Request, session: SessionDep, ctx: ContextDep) -> Response:
        user = cookie_user(session, request)
        if user is None:
            return to_signin(request)
        answer = jobs.list_jobs(
            session=session,
            user=user,
            ctx=ctx,
            state=None,
            lab=None,
            mine=True,
            before_id=None,
            limit=MY_JOBS_LIMIT,
        )
        now = ctx.clock()
        tflops = tier_tflops(session, user)
        # The bills need what the API does not show (when a reservation was last accrued):
        # the same jobs' records, read lean (no private column).
        filters = store.JobFilter(user_id=user.id, limit=MY_JOBS_LIMIT)
        records = {r.id: r for r in store.list_jobs(session, filters, shown=Shown())}
        rows = [
            (
                j,
                elapsed_s(j, now),
                time_left_s(j, now),
                bill_so_far(records[j.id], tflops, now) if j.id in records else None,
                # Only the viewer's own jobs are listed; the API decides again on the post.
                [a for a in actions.ACTIONS.values() if a.applies_to(j)],
            )
            for j in answer.data
        ]
        return page_response(
            request,
            user,
            "jobs",
            "jobs.html",
            config.refresh_s,
            jobs=answer,
            rows=rows,
            notice=actions.done_notice(request, {j.id: j.display_id for j in answer.data}),
        )

    @router.get("/jobs/{job_id}", response_class=HTMLResponse)
    def job_page(
        request: Request,
        session: SessionDep,
        ctx: ContextDep,
        job_id: Annotated[int, Path(ge=1, le=INT64_MAX)],
    ) -> Response:
        user = cookie_user(session, request)
        if user is None:
            return to_signin(request)
        try:
            record = store.get_job(session, job_id)
        except NotFound:
            missing = f"No job {job_id}."
            return page_response(
                request, user, "jobs", "error.html", config.refresh_s, status=404, message=missing
            )
        job = jobs.get_job(job_id=job_id, session=session, user=user)
        why = jobs.why(job_id=job_id, session=session, user=user, ctx=ctx)
        history = jobs.job_attempts_route(job_id=job_id, session=session, user=user)
        log_text: str | None = None
        try:
            log = jobs.job_log(job_id=job_id, session=session, user=user, ctx=ctx, attempt=None)
        except ApiError as exc:  # not yours (403), or no executor in this process (503)
            log_note = exc.message
        else:
            lines = log.log.splitlines()
            log_text = "\n".join(lines[-LOG_TAIL_LINES:])
            log_note = f"attempt {log.attempt}" if log.attempt else "no attempt has started yet"
            if len(lines) > LOG_TAIL_LINES:
                log_note += f": the last {LOG_TAIL_LINES} of {len(lines)} lines"
        siblings = None
        if job.array_job_id is not None:  # its array's every task, as `jobs -j ID` lists them
            siblings = jobs.list_jobs(
                session=session,
                user=user,
                ctx=ctx,
                state=None,
                lab=None,
                mine=False,
                before_id=None,
                limit=ARRAY_TASKS_SHOWN,
                array=job.array_job_id,
            )
        now = ctx.clock()
        return page_response(
            request,
            user,
            "jobs" if record.user_id == user.id else None,  # another's job: not "My jobs"
            "job.html",
            config.refresh_s,
            job=job,
            why=why,
            attempts=history.data,
            reservations=history.reservations,
            released={r.value: r.sentence_then for r in ReleaseReason},
            elapsed=elapsed_s(job, now),
            time_left=time_left_s(job, now),
            bill=bill_so_far(record, tier_tflops(session, user), now),
            actions=actions.offered(user, record),
            notice=actions.done_notice(request, {job.id: job.display_id}),
            siblings=siblings,
            log=log_text,
            log_note=log_note,
        )

    router.include_router(actions.build_router(config))
    return router
