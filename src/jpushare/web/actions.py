"""What a person may do to a job from the dashboard: cancel, hold or release it (one
`JobAction` each), always behind a confirmation page and a CSRF check.

`GET /jobs/{id}/{action}` asks ("Cancel job 7?", with what that does) and changes nothing;
its form posts to `POST /jobs/{id}/{action}`, which checks the form (`csrf.check_csrf`:
this site's page, this session's token) and then *calls the API's route function* (for
cancel `api.routes.jobs.cancel_job`, hold `hold_job`, release `release_job`) as the
signed-in user, in the request's writing
session: the permission (`api.permissions.require_manage`), the state rules and the bill
are the API's, unchanged, and a refusal is the API's code and sentence on a page. After it
the browser goes back where it came from (`next`, a path of this site) with a notice.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Annotated, Any

from fastapi import APIRouter, BackgroundTasks, Path, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import RedirectResponse, Response
from sqlalchemy.orm import Session

from jpushare import store
from jpushare.api.deps import ApiContext, ContextDep, SessionDep
from jpushare.api.errors import ApiError, ErrorCode, store_error
from jpushare.api.permissions import may_manage, require_manage
from jpushare.api.routes import jobs
from jpushare.api.schemas.common import INT64_MAX
from jpushare.api.schemas.jobs import JobPublic
from jpushare.store.errors import NotFound, StoreError
from jpushare.store.records import JobRecord, UserRecord
from jpushare.vocabulary import JobState
from jpushare.web.auth import cookie_user, parse_form, safe_next
from jpushare.web.csrf import FIELD, check_csrf, csrf_token, refusal
from jpushare.web.pages import WebConfig, page_response, to_signin
from jpushare.web.render import state_text


@dataclass(frozen=True, slots=True)
class ActionCall:
    """What an action's API route function is called with."""

    job_id: int
    session: Session
    user: UserRecord
    ctx: ApiContext
    background: BackgroundTasks


@dataclass(frozen=True, slots=True)
class JobAction:
    """One thing a person may do to a job: `name` is its URL's last part (`cancel`);
    `applies(state, held)` says for which jobs it means anything, and `inapplicable` why
    not (`{job}`, `{state}`: shown when one asks anyway); `consequence` what it does, shown
    before the person confirms; `done` the notice after (`{job}`: the job's id as people
    type it); `perform` calls the API's route function for it; `danger`: it cannot be
    undone (its button is red)."""

    name: str
    label: str
    applies: Callable[[JobState, bool], bool]
    consequence: str
    done: str
    perform: Callable[[ActionCall], JobPublic]
    inapplicable: str = "job {job} has ended ({state})"
    danger: bool = False

    def applies_to(self, job: JobRecord | JobPublic) -> bool:
        """Whether the pages offer it for `job` (a record or the API's answer)."""
        return self.applies(job.state, job.held)


def _cancel(call: ActionCall) -> JobPublic:
    return jobs.cancel_job(
        job_id=call.job_id,
        session=call.session,
        user=call.user,
        ctx=call.ctx,
        background=call.background,
    )


CANCEL = JobAction(
    name="cancel",
    label="Cancel",
    applies=lambda state, held: not state.ended,
    consequence="A queued job leaves the queue and gives up its reservation; a running job's "
    "run is stopped. Its lab is charged for what it held until now. This cannot be undone.",
    done="Job {job} was cancelled.",
    perform=_cancel,
    danger=True,
)


def _hold(call: ActionCall) -> JobPublic:
    return jobs.hold_job(job_id=call.job_id, session=call.session, user=call.user, ctx=call.ctx)


def _release(call: ActionCall) -> JobPublic:
    return jobs.release_job(job_id=call.job_id, session=call.session, user=call.user, ctx=call.ctx)


HOLD = JobAction(
    name="hold",
    label="Hold",
    # As scontrol hold: a queued job; holding a held one would change nothing.
    applies=lambda state, held: state is JobState.GLOBAL_QUEUE_WAIT and not held,
    inapplicable="job {job} is not a queued job that is not held ({state})",
    consequence="It stays queued but leaves the fair-share queue: it is not started until "
    "someone releases it. A reservation it holds is given up (its lab is charged for what it "
    "held until now).",
    done="Job {job} is held.",
    perform=_hold,
)

RELEASE = JobAction(
    name="release",
    label="Release",
    applies=lambda state, held: state is JobState.GLOBAL_QUEUE_WAIT and held,
    inapplicable="job {job} is not held ({state})",
    consequence="It enters the fair-share queue now (waiting from now on), unless its "
    "dependency or its array's limit still holds it back.",
    done="Job {job} was released.",
    perform=_release,
)

ACTIONS: dict[str, JobAction] = {a.name: a for a in (HOLD, RELEASE, CANCEL)}


def offered(user: UserRecord, job: JobRecord) -> list[JobAction]:
    """The actions a page offers `user` for `job`: those that apply to its state, if the
    API's rule (`may_manage`) lets the user manage it. The API decides again on the post."""
    if not may_manage(user, job):
        return []
    return [a for a in ACTIONS.values() if a.applies_to(job)]


def done_notice(request: Request, shown_ids: Mapping[int, str] | None = None) -> str | None:
    """The notice a page shows after an action sent the browser back (`?done=cancel&job=7`);
    the job is named as the page shows it (`shown_ids`: an array task's `ID_TASK`)."""
    action = ACTIONS.get(request.query_params.get("done", ""))
    job = request.query_params.get("job", "")
    if action is None or not job.isdigit() or len(job) > 19:
        return None
    return action.done.format(job=(shown_ids or {}).get(int(job), int(job)))


def _back(target: str, action: JobAction, job_id: int) -> str:
    joiner = "&" if "?" in target else "?"
    return f"{target}{joiner}done={action.name}&job={job_id}"


def _unknown(name: str) -> str:
    known = ", ".join(ACTIONS)
    return f"the dashboard has no action {name[:40]!r} on a job (it has: {known})"


JobIdPath = Annotated[int, Path(ge=1, le=INT64_MAX)]


def build_router(config: WebConfig) -> APIRouter:
    """`GET` (the confirmation) and `POST` (the act) of `/jobs/{id}/{action}`."""
    router = APIRouter(include_in_schema=False)

    @router.get("/jobs/{job_id}/{name}")
    def confirm(
        request: Request, session: SessionDep, job_id: JobIdPath, name: str, next: str = ""
    ) -> Response:
        user = cookie_user(session, request)
        if user is None:
            return to_signin(request)
        action = ACTIONS.get(name)
        if action is None:
            raise ApiError(404, ErrorCode.NOT_FOUND, _unknown(name))
        try:
            job = store.get_job(session, job_id)
        except NotFound:
            raise ApiError(404, ErrorCode.NOT_FOUND, f"No job {job_id}.") from None
        require_manage(user, job, action.name)  # 403 page: the API's sentence
        data: dict[str, Any] = {}
        if not action.applies_to(job):
            state = state_text(job.state, job.reason, job.waiting)
            refused = action.inapplicable.format(job=job.display_id, state=state)
            data.update(status=409, refused=refused)
        return page_response(
            request,
            user,
            "jobs" if job.user_id == user.id else None,
            "job_action.html",
            config.refresh_s,
            job=job,
            action=action,
            next=safe_next(next or f"/jobs/{job_id}"),
            csrf_field=FIELD,
            csrf_token=csrf_token(request),
            **data,
        )

    @router.post("/jobs/{job_id}/{name}")
    async def act(
        request: Request,
        session: SessionDep,
        ctx: ContextDep,
        background: BackgroundTasks,
        job_id: JobIdPath,
        name: str,
    ) -> Response:
        action = ACTIONS.get(name)
        if action is None:
            return refusal(request, 404, ErrorCode.NOT_FOUND, _unknown(name))
        form = parse_form(await request.body())
        refused = check_csrf(request, form, f"{action.name} job {job_id}")
        if refused is not None:
            return refused
        target = safe_next(form.get("next") or f"/jobs/{job_id}")

        def perform() -> Response:
            user = cookie_user(session, request)
            if user is None:
                return to_signin(request)
            try:
                action.perform(ActionCall(job_id, session, user, ctx, background))
            except ApiError as exc:
                session.rollback()
                return refusal(request, exc.status, exc.code, exc.message, exc.details)
            except StoreError as exc:
                session.rollback()
                api = store_error(exc)
                return refusal(request, api.status, api.code, api.message, api.details)
            return RedirectResponse(_back(target, action, job_id), status_code=303)

        return await run_in_threadpool(perform)

    return router
