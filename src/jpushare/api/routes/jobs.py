"""/v1/jobs: submit, list, read, cancel, hold, release, update, why, log."""

from __future__ import annotations

import logging
from typing import Annotated, Literal

from fastapi import APIRouter, BackgroundTasks, Depends, Path, Query, Request, Response
from fastapi.concurrency import run_in_threadpool
from sqlalchemy.orm import Session

from jpushare import store
from jpushare.api.deps import ApiContext, ContextDep, CurrentUser, SessionDep
from jpushare.api.errors import ApiError, ErrorCode
from jpushare.api.job_attempts import job_attempts
from jpushare.api.permissions import managed_by, require_manage
from jpushare.api.privacy import for_viewer
from jpushare.api.schemas.common import (
    INT64_MAX,
    MAX_LIST_LIMIT,
    SIGNED_IN_ERRORS,
    Name,
    error_responses,
)
from jpushare.api.schemas.jobs import (
    AttemptsPublic,
    JobCreate,
    JobPublic,
    JobsPublic,
    JobUpdate,
    LogPublic,
    job_public,
)
from jpushare.api.schemas.queue import WhyPublic
from jpushare.api.time_window import parse_when
from jpushare.api.why import QueueView, queued_why
from jpushare.api.why_history import history_why, waiting_why
from jpushare.config import UserQuotas
from jpushare.executors.base import Executor
from jpushare.executors.output_files import (
    LOG_TAIL_BYTES,
    OutputUnreadable,
    output_paths,
    read_tail,
)
from jpushare.mail_types import MailType
from jpushare.store.inventory import tier_names_by_sort_order
from jpushare.store.notifications import job_mail, set_job_mail
from jpushare.store.records import JobRecord, UserRecord
from jpushare.unix_accounts import UnknownAccount, can_switch_accounts, resolve_account
from jpushare.vocabulary import JobState

log = logging.getLogger(__name__)

router = APIRouter(prefix="/v1/jobs", tags=["jobs"])

_SINCE = "window start: a duration back from now (7d, 12h) or an ISO time (2026-01-01)"
_UNTIL = "window end (excluded): a duration back from now or an ISO time; default now"

JobIdPath = Annotated[int, Path(ge=1, le=INT64_MAX, description="the job id")]

_ERRORS = SIGNED_IN_ERRORS
_JOB_ERRORS = {**_ERRORS, **error_responses({404: "NOT_FOUND"})}


def user_quotas(request: Request) -> UserQuotas:
    """The app's per-user quotas (`create_app(user_quotas=...)`)."""
    quotas = getattr(request.app.state, "user_quotas", None)
    return quotas if isinstance(quotas, UserQuotas) else UserQuotas()


@router.post(
    "",
    status_code=201,
    response_model=JobPublic,
    responses={
        **_ERRORS,
        **error_responses(
            {
                422: "VALIDATION_ERROR (e.g. no absolute workdir) or NO_FIT_PLACEMENT",
                429: "QUOTA_EXCEEDED: the user's active jobs, or their bytes, are at "
                "the per-user limit (`details`: limit, maximum, current, adding)",
            }
        ),
    },
)
async def submit_job(
    body: JobCreate,
    session: SessionDep,
    user: CurrentUser,
    ctx: ContextDep,
    quotas: Annotated[UserQuotas, Depends(user_quotas)],
) -> Response:
    """Queue a job (SPEC §2) in its absolute `workdir`. 422 NO_FIT_PLACEMENT (nothing
    stored) when no placement could ever hold it; `details.alternatives` says what could be
    asked instead. 429 QUOTA_EXCEEDED (nothing stored) when its user already has the most
    active jobs, or bytes of command and environment, one user may have."""
    # The hot path: the store work, the commit and the JSON in one trip to the thread pool
    # (get_session then has nothing left to do in a thread).
    content = await run_in_threadpool(_submit, session, user, body, ctx, quotas)
    return Response(content, status_code=201, media_type="application/json")


def _submit(
    session: Session, user: UserRecord, body: JobCreate, ctx: ApiContext, quotas: UserQuotas
) -> bytes:
    done = store.submit(
        session,
        user_id=user.id,
        name=body.name,
        command=body.command,
        num_gpus=body.num_gpus,
        now=ctx.clock(),
        min_tier=body.min_tier,
        time_limit_s=body.limit_s(),
        run=body.run(),
        max_active_jobs=quotas.max_active_jobs,
        max_job_bytes=quotas.max_job_bytes,
        eligibility=body.eligibility(),
    )
    if body.mail_type:  # sbatch --mail-type / --mail-user, for the notifier (every task)
        for task in done.tasks or (done.job,):
            set_job_mail(session, task.id, body.mail_types(), body.mail_user)
    public = job_public(done.job, done.tier_names_by_sort_order)
    if done.job.array_job_id is not None:
        public.array_task_ids = [t.id for t in done.tasks]
    public.mail_type = [t.value for t in MailType if t in body.mail_types()]
    public.mail_user = body.mail_user if public.mail_type else None
    content = public.model_dump_json()
    session.commit()  # before the response goes out, as for every other route
    return content.encode()


@router.get("", responses=_ERRORS)
def list_jobs(
    session: SessionDep,
    user: CurrentUser,
    ctx: ContextDep,
    state: Annotated[list[JobState] | None, Query(description="repeat for several")] = None,
    lab: Annotated[Name | None, Query(description="lab name")] = None,
    mine: Annotated[bool, Query(description="only my jobs")] = False,
    before_id: Annotated[int | None, Query(ge=1, le=INT64_MAX)] = None,
    limit: Annotated[
        int, Query(ge=1, le=MAX_LIST_LIMIT, description=f"at most {MAX_LIST_LIMIT}")
    ] = 100,
    user_name: Annotated[Name | None, Query(alias="user", description="user name")] = None,
    name: Annotated[str | None, Query(max_length=200, description="job name, exactly")] = None,
    since: Annotated[str | None, Query(max_length=64, description=_SINCE)] = None,
    until: Annotated[str | None, Query(max_length=64, description=_UNTIL)] = None,
    array: Annotated[
        int | None, Query(ge=1, le=INT64_MAX, description="the tasks of this array only")
    ] = None,
    waiting: Annotated[
        bool | None,
        Query(description="true: only queued jobs held or waiting outside the queue; false: none"),
    ] = None,
) -> JobsPublic:
    """Jobs, newest first; every filter narrows. Page with `before_id`. Other users' jobs
    come without their private fields (null, named in `hidden`), as `squeue` shows them.
    `since`/`until` select as sacct's -S/-E do: the jobs that had been submitted and had
    not ended at some moment of the window. At most 1000 a page (`limit`; 422 above)."""
    now = ctx.clock()
    jobs = store.list_jobs(
        session,
        store.JobFilter(
            states=tuple(state) if state else None,
            lab=lab,
            user_id=user.id if mine else None,
            before_id=before_id,
            limit=limit,
            user=user_name,
            name=name,
            since=parse_when(since, now, "since") if since is not None else None,
            until=parse_when(until, now, "until") if until is not None else None,
            array_job_id=array,
            waiting=waiting,
        ),
        shown=managed_by(user),  # only the private columns this viewer is shown
    )
    tiers = tier_names_by_sort_order(session)
    return JobsPublic(
        data=[for_viewer(job_public(j, tiers), j, user) for j in jobs],
        count=len(jobs),
        next_before_id=jobs[-1].id if len(jobs) == limit else None,
    )


@router.get("/{job_id}", responses=_JOB_ERRORS)
def get_job(job_id: JobIdPath, session: SessionDep, user: CurrentUser) -> JobPublic:
    """The job; its private fields are null unless it is yours, your lab's (pi) or you are
    an admin (see `hidden`)."""
    job = store.get_job(session, job_id)
    tiers = tier_names_by_sort_order(session)
    public = job_public(job, tiers, environment=True)
    types, public.mail_user = job_mail(session, job_id)
    public.mail_type = [t.value for t in MailType if t in types]
    return for_viewer(public, job, user)


def _stop_run(executor: Executor, job_id: int, attempt: int, executor_id: str | None) -> None:
    """After a cancel commits: stop the run (idempotent; a failure is only logged, since
    the dispatcher's next observation sees the run of a cancelled job and stops it)."""
    try:
        run_id = executor_id
        if run_id is None:
            run = executor.find(store.policy_job_id(job_id), attempt)
            run_id = run.executor_id if run is not None else None
        if run_id is not None:
            executor.cancel(run_id)
    except Exception:
        log.exception("cancel of job %s: could not stop attempt %s", job_id, attempt)


@router.get("/{job_id}/attempts", responses=_JOB_ERRORS)
def job_attempts_route(job_id: JobIdPath, session: SessionDep, user: CurrentUser) -> AttemptsPublic:
    """Every attempt of the job (placement, times, outcome, exit code, reason, run cost)
    and every reservation it held, from its events. Open to all, as `squeue` is: no
    private field is among them."""
    history = store.job_history(session, job_id)
    attempts, reservations = job_attempts(history)
    return AttemptsPublic(job_id=job_id, data=attempts, reservations=reservations)


@router.post(
    "/{job_id}/cancel",
    responses={
        **_JOB_ERRORS,
        **error_responses({403: "FORBIDDEN", 409: "CONFLICT: the job has ended"}),
    },
)
def cancel_job(
    job_id: JobIdPath,
    session: SessionDep,
    user: CurrentUser,
    ctx: ContextDep,
    background: BackgroundTasks,
) -> JobPublic:
    """Cancel a job (a student their own, a pi their lab's, an admin any). Its lab is charged
    what it held; a reservation is released (S11); a running job's run is stopped."""
    job = store.get_job(session, job_id)
    require_manage(user, job, "cancel")
    done = store.cancel_job(session, job_id, ctx.clock(), reason=f"cancelled by {user.name}")
    if done.stop_attempt is not None and ctx.executor is not None:
        # Runs after the commit and after the response: the executor may block a little.
        background.add_task(
            _stop_run, ctx.executor, job_id, done.stop_attempt, done.stop_executor_id
        )
    public = job_public(done.job, tier_names_by_sort_order(session))
    return public.model_copy(update={"charge_provisional": done.provisional})


_MANAGE_ERRORS = {
    **_JOB_ERRORS,
    **error_responses({403: "FORBIDDEN", 409: "CONFLICT: the job has left the queue"}),
}


@router.post("/{job_id}/hold", responses=_MANAGE_ERRORS)
def hold_job(
    job_id: JobIdPath, session: SessionDep, user: CurrentUser, ctx: ContextDep
) -> JobPublic:
    """Hold a queued job (scontrol hold; the same permission as cancel): it leaves the
    policy's queue, a reservation it holds is released, until `release`."""
    require_manage(user, store.get_job(session, job_id), "hold")
    job = store.hold_job(session, job_id, ctx.clock(), by=user.name)
    return for_viewer(job_public(job, tier_names_by_sort_order(session)), job, user)


@router.post("/{job_id}/release", responses=_MANAGE_ERRORS)
def release_job(
    job_id: JobIdPath, session: SessionDep, user: CurrentUser, ctx: ContextDep
) -> JobPublic:
    """Release a held job (scontrol release): judged at once, it enters the queue now (its
    queue entry time) unless its dependency or its array's limit still holds it back."""
    require_manage(user, store.get_job(session, job_id), "release")
    job = store.release_job(session, job_id, ctx.clock(), by=user.name)
    return for_viewer(job_public(job, tier_names_by_sort_order(session)), job, user)


@router.patch("/{job_id}", responses=_MANAGE_ERRORS)
def update_job(
    job_id: JobIdPath, body: JobUpdate, session: SessionDep, user: CurrentUser, ctx: ContextDep
) -> JobPublic:
    """Change a queued job's name or time limit (scontrol update; as cancel's permission)."""
    require_manage(user, store.get_job(session, job_id), "update")
    job = store.update_job(
        session, job_id, ctx.clock(), by=user.name, name=body.name, time_limit_s=body.limit_s()
    )
    return for_viewer(job_public(job, tier_names_by_sort_order(session)), job, user)


@router.get("/{job_id}/why", responses=_JOB_ERRORS)
def why(job_id: JobIdPath, session: SessionDep, user: CurrentUser, ctx: ContextDep) -> WhyPublic:
    """Why the job is not running (SPEC §8), or what happened to it. For a queued job: what
    is recorded now as fact, and what the next cycle would do as a projection."""
    job = store.get_job(session, job_id)
    history = store.job_history(session, job_id)
    tiers = tier_names_by_sort_order(session)
    now = ctx.clock()
    if job.state is JobState.GLOBAL_QUEUE_WAIT and job.waiting is not None:
        waiting = store.waiting_verdict(session, job_id)
        if waiting is not None:
            return for_viewer(waiting_why(job, waiting, history, tiers), job, user)
    if job.state is JobState.GLOBAL_QUEUE_WAIT:
        snapshot = store.load_snapshot(session, now, ctx.busy(session))
        view = QueueView.of(snapshot, ctx.placement_order, ctx.policy)
        if job.policy_id in view.queued:
            estimates = ctx.estimates(session, snapshot)
            return for_viewer(queued_why(view, job, history, tiers, estimates), job, user)
        # A cycle dispatched (or a cancel ended) it between the two reads (PostgreSQL's
        # READ COMMITTED): answer from its new state.
        job, history = store.get_job(session, job_id), store.job_history(session, job_id)
    return for_viewer(history_why(job, history, tiers, now), job, user)


@router.get(
    "/{job_id}/log",
    responses={
        **_JOB_ERRORS,
        **error_responses({403: "FORBIDDEN", 503: "UNAVAILABLE: no executor here"}),
    },
)
def job_log(
    job_id: JobIdPath,
    session: SessionDep,
    user: CurrentUser,
    ctx: ContextDep,
    attempt: Annotated[int | None, Query(ge=1, le=10_000)] = None,
    stderr: Annotated[bool, Query(description="the error file (--error) instead")] = False,
    offset: Annotated[int, Query(ge=0, le=INT64_MAX, description="from this byte on")] = 0,
) -> LogPublic:
    """The output of the job's last attempt (or `attempt`): for a job with a working
    directory its output (or `stderr`: error) file, read as its owner, at most the last
    8 MiB from `offset` on; else the executor's log. Same permission as cancel: a student
    their own jobs, a pi their lab's, an admin any."""
    job = store.get_job(session, job_id)
    require_manage(user, job, "read the log of")
    which = attempt if attempt is not None else job.attempts
    stream: Literal["output", "error"] = "error" if stderr else "output"
    if which == 0:
        return LogPublic(job_id=job.id, attempt=0, log="", stream=stream, state=job.state)
    if which > job.attempts:
        raise ApiError(
            404,
            ErrorCode.NOT_FOUND,
            f"job {job.id} has had {job.attempts} attempts, not {which}",
            {"job_id": job.id, "attempts": job.attempts},
        )
    if job.workdir is not None:
        return _owner_file(job, which, stream, offset, store.unix_user_of(session, job.user_id))
    if ctx.executor is None:
        raise ApiError(503, ErrorCode.UNAVAILABLE, "this API process has no executor to ask")
    text = "" if stderr else ctx.executor.log(store.policy_job_id(job.id), which)
    return LogPublic(job_id=job.id, attempt=which, log=text, stream=stream, state=job.state)


def _owner_file(
    job: JobRecord, attempt: int, stream: Literal["output", "error"], offset: int, owner: str
) -> LogPublic:
    """The job's own output or error file, read as its owner (see `output_files`)."""
    assert job.workdir is not None
    files = output_paths(
        job.workdir, job.output_path, job.error_path, store.policy_job_id(job.id), attempt
    )
    path = files.output if stream == "output" else files.error
    base = LogPublic(job_id=job.id, attempt=attempt, log="", stream=stream, state=job.state)
    if path is None:  # stderr goes with stdout
        return base.model_copy(update={"path": files.output})
    account = None
    if can_switch_accounts():
        try:
            account = resolve_account(owner)
        except UnknownAccount as exc:
            raise ApiError(404, ErrorCode.NOT_FOUND, f"the output of job {job.id}: {exc}") from exc
    try:
        tail = read_tail(path, account, LOG_TAIL_BYTES, offset)
    except OutputUnreadable as exc:
        raise ApiError(
            403, ErrorCode.FORBIDDEN, f"the output of job {job.id} cannot be read: {exc}"
        ) from exc
    if tail is None:
        return base.model_copy(update={"path": path, "offset": offset, "next_offset": offset})
    return base.model_copy(
        update={
            "path": path,
            "log": tail.data.decode("utf-8", errors="replace"),
            "offset": tail.begin,
            "next_offset": tail.begin + len(tail.data),
        }
    )
