"""One job's life after dispatch (SPEC §5): confirm, start, end, requeue, fail, cancel, and
the settlement of a cancelled job's run once the executor says when it really ended.

Each function is one guarded transition (see `transitions.py`) and is idempotent: if the
job is no longer where the caller thinks (another process got there first, or the report
is about an older attempt), it changes nothing and returns None / False. Pass `attempt`
whenever the report comes from the executor, so a late report about attempt 1 cannot end
attempt 2. Whatever ends an attempt charges the lab in the same transaction (SPEC §4).

The caller owns the transaction: nothing here commits.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Any, cast

from sqlalchemy import Table, bindparam, select, update
from sqlalchemy.orm import Session

from jpushare.ledger import END_EVENTS, EventKind, Run, end_attempt, resettle_run
from jpushare.policy.accounting import run_cost
from jpushare.policy.oom import escalate
from jpushare.store.batched_runs import RunStart, mark_running_many
from jpushare.store.errors import ConcurrentUpdate, InvalidRequest, InvalidTransition, NotFound
from jpushare.store.inventory import placements, policy_tiers
from jpushare.store.jobs import get_job
from jpushare.store.ledger_writes import (
    AppliedEnd,
    account_of,
    charge_lab,
    release_queued_reservation,
    write_attempt_ends,
    write_charge,
)
from jpushare.store.records import AttemptEnded, Cancelled
from jpushare.store.schema import ACTIVE_STATES, Job, JobState
from jpushare.store.times import same_instant, to_epoch
from jpushare.store.transitions import (
    NO_RESERVATION,
    LockedJob,
    add_events,
    clean_text,
    event_row,
    guarded_update,
    lock_job,
    lock_jobs,
    rowcount,
    tier_name,
    tier_tflops,
)
from jpushare.vocabulary import ReleaseReason

_ACTIVE = {s.value for s in ACTIVE_STATES}
_JOBS = cast(Table, Job.__table__)

# What a requeued job forgets about its last attempt (the events keep it).
_CLEARED_PLACEMENT: dict[str, Any] = {
    "node_name": None,
    "tier_id": None,
    "executor_id": None,
    "dispatched_at": None,
    "started_at": None,
    "ended_at": None,
    "lent_from_job_id": None,
    "lent_until": None,
}


def _active(session: Session, job_id: int, attempt: int | None) -> LockedJob | None:
    """The locked job if it is DISPATCHED or RUNNING (and on `attempt`, if given)."""
    job = lock_job(session, job_id)
    if job is None or job.state not in _ACTIVE:
        return None
    if attempt is not None and job.attempts != attempt:
        return None
    return job


def confirm_dispatch(
    session: Session, job_id: int, executor_id: str, now: datetime, *, attempt: int | None = None
) -> bool:
    """The executor accepted the run: remember its id (the job stays DISPATCHED).
    `confirm_dispatches` with a list of one."""
    job = _active(session, job_id, attempt)
    if job is None:
        return False
    return bool(confirm_dispatches(session, [(job_id, job.attempts, executor_id)], now))


_CONFIRM = (
    update(_JOBS)
    .where(
        _JOBS.c.id == bindparam("b_id"),
        _JOBS.c.state == JobState.DISPATCHED.value,
        _JOBS.c.attempts == bindparam("b_attempt"),
    )
    .values(executor_id=bindparam("b_executor_id"))
)


def confirm_dispatches(
    session: Session, accepted: Iterable[tuple[int, int, str]], now: datetime
) -> set[int]:
    """`confirm_dispatch` for many (job id, attempt, executor id) at once: the job ids that
    are DISPATCHED on that attempt with that executor id now (a cycle's starts).

    Three statements whatever their number (lock, one batched guarded UPDATE, the events)
    instead of three per job: confirming 173 starts one by one was most of such a cycle.
    """
    wanted = {job_id: (attempt, executor_id) for job_id, attempt, executor_id in accepted}
    locked = lock_jobs(session, wanted)
    confirmed: set[int] = set()
    params: list[dict[str, Any]] = []
    events: list[dict[str, Any]] = []
    for job_id, (attempt, executor_id) in sorted(wanted.items()):
        job = locked.get(job_id)
        if job is None or job.state != JobState.DISPATCHED.value or job.attempts != attempt:
            continue
        confirmed.add(job_id)
        if job.executor_id == executor_id:
            continue
        executor_id = clean_text(executor_id)
        params.append({"b_id": job_id, "b_attempt": attempt, "b_executor_id": executor_id})
        events.append(
            event_row(
                job_id,
                now,
                EventKind.DISPATCH_CONFIRMED,
                detail={"executor_id": executor_id, "attempt": attempt},
            )
        )
    if params:
        matched = rowcount(session.execute(_CONFIRM, params))
        if matched != len(params):  # impossible under the row locks
            raise ConcurrentUpdate(f"confirm: {matched} of {len(params)} guarded updates matched")
    add_events(session, events)
    return confirmed


def mark_running(
    session: Session,
    job_id: int,
    started_at: datetime,
    executor_id: str | None = None,
    *,
    attempt: int | None = None,
) -> bool:
    """DISPATCHED -> RUNNING: the run really started at `started_at` (run cost counts from
    there). False if the job is not DISPATCHED (already running, ended, or requeued).
    `mark_running_many` with a list of one."""
    job = _active(session, job_id, attempt)
    if job is None:
        return False
    start = RunStart(job_id, job.attempts, started_at, executor_id)
    return bool(mark_running_many(session, [start]))


# In the end and charged events of a cancelled run: charged up to the cancel, not yet final.
_PROVISIONAL: dict[str, Any] = {
    "provisional": True,
    "final_when": "the executor reports when the run really ended",
}


def end_job(
    session: Session,
    job_id: int,
    state: JobState,
    ended_at: datetime,
    *,
    exit_code: int | None = None,
    reason: str | None = None,
    attempt: int | None = None,
    started_at: datetime | None = None,
    provisional: bool = False,
) -> AttemptEnded | None:
    """A DISPATCHED or RUNNING job ends COMPLETED, FAILED or CANCELLED, and its lab is
    charged in this transaction: this attempt's run cost plus every reservation cost not
    yet charged (SPEC §4).

    `started_at` is used when the job was never marked running (it started and ended
    between two polls). None if the job was not active (or not on `attempt`).
    `provisional`: `ended_at` is not the run's real end (a cancel); the end and charged
    events say so, and `settle_cancelled_run` makes it final.
    """
    if state not in END_EVENTS:
        raise InvalidRequest(f"end_job takes COMPLETED, FAILED or CANCELLED, not {state}")
    job = _active(session, job_id, attempt)
    if job is None:
        return None
    return _close_attempt(
        session,
        job,
        ended_at,
        started_at,
        END_EVENTS[state],
        {
            "ended_at": ended_at,
            "started_at": job.started_at or started_at,
            "exit_code": exit_code,
            "reason": reason,
        },
        {"exit_code": exit_code, "reason": reason, **(_PROVISIONAL if provisional else {})},
        _PROVISIONAL if provisional else None,
    )


def fail_dispatch(
    session: Session, job_id: int, now: datetime, reason: str, *, attempt: int | None = None
) -> AttemptEnded | None:
    """The executor refused the run for good: DISPATCHED -> FAILED with the reason.

    Its accrued reservation cost is charged (it never ran, so no run cost).
    """
    job = lock_job(session, job_id)
    if job is None or job.state != JobState.DISPATCHED.value:
        return None
    return end_job(session, job_id, JobState.FAILED, now, reason=reason, attempt=attempt)


def requeue_after_oom(
    session: Session,
    job_id: int,
    ended_at: datetime,
    *,
    attempt: int | None = None,
    started_at: datetime | None = None,
    exit_code: int | None = None,
    reason: str | None = None,
) -> AttemptEnded | None:
    """SPEC §5 / S10: the attempt ran out of memory. Charge it; raise the minimum tier to
    the next auto-assign tier above the one it ran on and requeue it keeping
    queue_entered_at — or, if nothing fits at that minimum, FAILED with the reason.
    """
    job = _active(session, job_id, attempt)
    if job is None:
        return None
    ran_on = tier_name(session, job.tier_id)
    escalation = escalate(job.num_gpus, ran_on or "", policy_tiers(session), placements(session))
    why = escalation.reason if reason is None else f"{reason}; {escalation.reason}"
    if not escalation.requeue:
        return end_job(
            session,
            job_id,
            JobState.FAILED,
            ended_at,
            exit_code=exit_code,
            reason=why,
            attempt=job.attempts,
            started_at=started_at,
        )
    assert escalation.min_sort_order is not None
    return _requeue(
        session,
        job,
        ended_at,
        started_at,
        EventKind.OOM_REQUEUED,
        why,
        exit_code,
        {
            "minimum_tier_sort_order": escalation.min_sort_order,
        },
        {"ran_on": ran_on, "next_tier": escalation.next_tier},
    )


def requeue_after_node_failure(
    session: Session,
    job_id: int,
    ended_at: datetime,
    *,
    attempt: int | None = None,
    started_at: datetime | None = None,
    reason: str | None = None,
) -> AttemptEnded | None:
    """SPEC §5: the node died under the job. Charge the attempt and requeue it keeping
    queue_entered_at and its minimum tier (no escalation)."""
    job = _active(session, job_id, attempt)
    if job is None:
        return None
    why = reason or f"node {job.node_name} failed under the job; requeued"
    return _requeue(
        session, job, ended_at, started_at, EventKind.NODE_FAIL_REQUEUED, why, None, {}, {}
    )


def _requeue(
    session: Session,
    job: LockedJob,
    ended_at: datetime,
    started_at: datetime | None,
    kind: EventKind,
    reason: str,
    exit_code: int | None,
    values: dict[str, Any],
    detail: dict[str, Any],
) -> AttemptEnded | None:
    return _close_attempt(
        session,
        job,
        ended_at,
        started_at,
        kind,
        {"reason": reason, "exit_code": exit_code, **_CLEARED_PLACEMENT, **values},
        {
            "reason": reason,
            "node": job.node_name,
            "tier": tier_name(session, job.tier_id),
            "exit_code": exit_code,
            **values,
            **detail,
        },
    )


def _close_attempt(
    session: Session,
    job: LockedJob,
    ended_at: datetime,
    started_at: datetime | None,
    kind: EventKind,
    values: dict[str, Any],
    detail: dict[str, Any],
    charge_detail: dict[str, Any] | None = None,
) -> AttemptEnded:
    """End the job's current attempt by `kind` as the ledger says (its run cost, its next
    state, the charge) and write that, all in this transaction."""
    started = job.started_at or started_at
    run = Run(
        job.attempts,
        job.num_gpus,
        to_epoch(started) if started is not None else None,
        tier_tflops(session, job.tier_id),
    )
    end = end_attempt(
        job.state, kind, account_of(job), run, to_epoch(ended_at), detail, charge_detail
    )
    write_attempt_ends(session, [AppliedEnd(job, end, ended_at, values)])
    requeued = end.to_state is JobState.GLOBAL_QUEUE_WAIT
    return AttemptEnded(get_job(session, job.id), end.due, requeued=requeued)


def cancel_job(
    session: Session, job_id: int, now: datetime, *, reason: str | None = None
) -> Cancelled:
    """Cancel the job, whatever it is doing, and charge its lab (SPEC §4, S11).

    A queued job's reservation is accrued up to now and released (reason `cancel`). A
    DISPATCHED or RUNNING job is charged its run up to now; the result's `stop_attempt` /
    `stop_executor_id` tell the caller which run to stop (the executor's own end report
    will then find the job ended and change nothing, but for `settle_cancelled_run`,
    which charges the run up to when it really ended).
    Raises NotFound, or InvalidTransition if the job has ended already.
    """
    job = lock_job(session, job_id)
    if job is None:
        raise NotFound("job", job_id)
    state = JobState(job.state)
    if state.ended:
        raise InvalidTransition(job_id, job.state, "cancel")
    why = reason or "cancelled"
    if state in ACTIVE_STATES:
        # The run goes on until the dispatcher has stopped it: charged up to now, but
        # provisionally, until the executor says when it really ended.
        ended = end_job(
            session,
            job_id,
            JobState.CANCELLED,
            now,
            reason=why,
            attempt=job.attempts,
            provisional=True,
        )
        assert ended is not None  # the row is locked and active
        return Cancelled(
            ended.job,
            JobState(job.state),
            ended.charged_tflop_s,
            None,
            job.attempts,
            job.executor_id,
            provisional=True,
        )
    # Queued: accrue and release the reservation first (S11).
    released: ReleaseReason | None = None
    events: list[dict[str, Any]] = []
    if job.reserved_gpus > 0:
        released = ReleaseReason.CANCEL
        events.append(release_queued_reservation(session, job, now, released))
    ok = guarded_update(
        session,
        job_id,
        JobState.GLOBAL_QUEUE_WAIT.value,
        state=JobState.CANCELLED.value,
        ended_at=now,
        reason=why,
        **NO_RESERVATION,
    )
    assert ok  # the row is locked and queued
    events.append(
        event_row(
            job_id,
            now,
            EventKind.CANCELLED,
            JobState.GLOBAL_QUEUE_WAIT.value,
            JobState.CANCELLED.value,
            {"reason": why},
        )
    )
    add_events(session, events)
    charged = charge_lab(session, job_id, now)
    return Cancelled(get_job(session, job_id), JobState(job.state), charged, released, None, None)


def settle_cancelled_run(
    session: Session, job_id: int, attempt: int, started_at: datetime, ended_at: datetime
) -> float:
    """Charge a cancelled job's last run for the time it really held its GPUs (SPEC §4).

    `cancel_job` charges what the database knows: the run from its recorded start to the
    cancel (nothing for a DISPATCHED job whose process had already started); the run then
    goes on until the dispatcher has stopped it. Once the executor reports the run of
    `attempt` ended, from `started_at` to `ended_at`, this recomputes that attempt's run
    cost from them, adds the difference to the job's run cost (less when the run had ended
    before the cancel) and charges the lab only what it was not charged yet. The job keeps
    those times as its `started_at` / `ended_at`, so a second call finds nothing to do:
    idempotent. Returns what was charged (0.0 when nothing changed, or the job is not
    CANCELLED on `attempt`). Its `charged` event says `provisional: false`: the cancel's
    charge, marked provisional, is final now (also when the difference is zero).
    """
    job = lock_job(session, job_id)
    if job is None or job.state != JobState.CANCELLED.value or job.attempts != attempt:
        return 0.0
    if job.tier_id is None:
        return 0.0  # never placed: no run
    row = session.execute(select(Job.ended_at).where(Job.id == job_id)).one()
    tflops = tier_tflops(session, job.tier_id)
    recorded_start, recorded_end = job.started_at, row.ended_at
    if recorded_start is not None and recorded_end is not None:
        if same_instant(recorded_start, started_at) and same_instant(recorded_end, ended_at):
            return 0.0  # settled already (or ended by the executor's own report)
        recorded = run_cost(job.num_gpus, to_epoch(recorded_start), to_epoch(recorded_end), tflops)
    else:
        recorded = 0.0  # cancelled before the database knew it had started
    real = run_cost(job.num_gpus, to_epoch(started_at), to_epoch(ended_at), tflops)
    detail = {
        "settled_run": {"attempt": attempt, "run_cost": real, "charged_before": recorded},
        "provisional": False,  # the cancel's provisional charge is final now
    }
    charge = resettle_run(account_of(job), recorded, real, detail)
    ok = guarded_update(
        session,
        job_id,
        JobState.CANCELLED.value,
        Job.attempts == attempt,
        started_at=started_at,
        ended_at=ended_at,
        run_cost=charge.account.run_cost,
    )
    if not ok:
        return 0.0
    write_charge(session, job_id, job.lab_id, charge, ended_at)
    return charge.due
