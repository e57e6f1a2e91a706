"""Queued jobs that are not in the policy's queue yet: held, waiting on a dependency or on
their array's throttle (`ledger.eligibility` decides; this module reads and writes).

`refresh_waiting` runs at the start of every dispatcher cycle, in its transaction, with a
fixed number of set-based statements whatever the queue holds: the waiting jobs (one
partial index), the states of the jobs they name, the singletons' and the arrays' active
counts, then one UPDATE per outcome and the events. A job that becomes eligible enters
the queue then: `queue_entered_at` is that moment (docs/policy.md, "Eligibility").
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import func, select, update
from sqlalchemy.orm import Session

from jpushare.ledger.eligibility import Met, Verdict, parse_dependency, verdict
from jpushare.ledger.eligibility import dependency_status as _dependency_status
from jpushare.store.errors import InvalidRequest, InvalidTransition, NotFound
from jpushare.store.jobs import get_job
from jpushare.store.ledger_writes import release_queued_reservation
from jpushare.store.lifecycle import cancel_job
from jpushare.store.records import JobRecord
from jpushare.store.schema import ACTIVE_STATES, EventKind, Job, JobState
from jpushare.store.transitions import (
    NO_RESERVATION,
    add_events,
    event_row,
    guarded_update,
    id_chunks,
    lock_job,
    rowcount,
)
from jpushare.vocabulary import ReleaseReason, Waiting

_Q = JobState.GLOBAL_QUEUE_WAIT.value
_IN_FLIGHT = [_Q, *(s.value for s in ACTIVE_STATES)]
# What a cycle looks at again: a hold changes only by `release`, a never-met dependency
# never changes (ended jobs stay ended).
_REVISITED = (Waiting.DEPENDENCY.value, Waiting.ARRAY_LIMIT.value)


@dataclass(frozen=True, slots=True)
class Refreshed:
    """What one refresh changed: jobs now eligible, jobs whose reason changed, and the
    jobs to cancel (a dependency never met, with --kill-on-invalid-dep) with the reason."""

    eligible: tuple[int, ...] = ()
    changed: tuple[int, ...] = ()
    to_cancel: tuple[tuple[int, str], ...] = ()


_COLUMNS = (
    Job.id,
    Job.user_id,
    Job.name,
    Job.waiting,
    Job.held,
    Job.dependency,
    Job.kill_on_invalid_dep,
    Job.array_job_id,
    Job.array_limit,
)


def refresh_waiting(
    session: Session, now: datetime, job_ids: Iterable[int] | None = None
) -> Refreshed:
    """Judge the waiting jobs again (or only `job_ids`, queued, whatever their `waiting`)
    and write the outcome; the caller cancels `to_cancel` (it owns the cancel path)."""
    if job_ids is None:
        stmt = select(*_COLUMNS).where(Job.waiting.in_(_REVISITED), Job.state == _Q)
        rows = list(session.execute(stmt.order_by(Job.id)))
    else:
        rows = []
        for chunk in id_chunks(job_ids):
            stmt = select(*_COLUMNS).where(Job.id.in_(chunk), Job.state == _Q)
            rows.extend(session.execute(stmt.order_by(Job.id)))
    if not rows:
        return Refreshed()

    deps = {row.id: parse_dependency(row.dependency) for row in rows if row.dependency}
    named = {int(i) for d in deps.values() for t in d.terms for i in t.ids}
    states = _states(session, named)
    singles = {(row.user_id, row.name) for row in rows if row.id in deps and deps[row.id].singleton}
    busy = _singleton_busy(session, singles)
    arrays = {row.array_job_id for row in rows if row.array_limit is not None}
    active = _array_active(session, arrays)

    eligible: list[int] = []
    by_code: dict[str, list[int]] = defaultdict(list)
    events: list[dict[str, Any]] = []
    to_cancel: list[tuple[int, str]] = []
    for row in rows:
        v = judge(row, deps, states, busy, active)
        if v.waiting is None:
            eligible.append(row.id)
            if row.array_job_id is not None:
                active[row.array_job_id] = active.get(row.array_job_id, 0) + 1
            if row.id in deps and deps[row.id].singleton:
                busy[(row.user_id, row.name)] = row.id
            events.append(event_row(row.id, now, EventKind.ELIGIBLE))
            continue
        if v.waiting is Waiting.DEPENDENCY_NEVER_SATISFIED and row.kill_on_invalid_dep:
            to_cancel.append((row.id, v.waits_for))
            continue
        if v.waiting.value != row.waiting:
            by_code[v.waiting.value].append(row.id)
            detail = {"waiting": v.waiting.value, "waits_for": v.waits_for}
            events.append(event_row(row.id, now, EventKind.WAITING, detail=detail))

    done: list[int] = []
    for chunk in id_chunks(eligible):  # in id order already
        result = session.execute(
            update(Job)
            .where(Job.id.in_(chunk), Job.state == _Q, Job.held.is_(False))
            .values(waiting=None, queue_entered_at=now)
            .execution_options(synchronize_session=False)
        )
        if rowcount(result) == len(chunk):
            done.extend(chunk)
        else:  # a hold came between: only the rows still unheld moved (read them back)
            done.extend(
                session.scalars(select(Job.id).where(Job.id.in_(chunk), Job.waiting.is_(None)))
            )
    changed: list[int] = []
    for code, ids in by_code.items():
        session.execute(
            update(Job)
            .where(Job.id.in_(ids), Job.state == _Q, Job.held.is_(False))
            .values(waiting=code)
            .execution_options(synchronize_session=False)
        )
        changed.extend(ids)
    add_events(session, events)
    return Refreshed(tuple(done), tuple(sorted(changed)), tuple(to_cancel))


def judge(
    row: Any,
    deps: dict[int, Any],
    states: dict[int, JobState],
    busy: dict[tuple[int, str], int],
    active: dict[int, int],
) -> Verdict:
    """One job's verdict from what the refresh read (a row of `_COLUMNS`)."""
    dep = deps.get(row.id)
    status: tuple[Met, str] = (Met.MET, "")
    single: int | None = None
    if dep is not None:
        status = dependency_status(dep, states)
        owner = busy.get((row.user_id, row.name))
        if dep.singleton and owner is not None and owner != row.id:
            single = owner
    in_flight = active.get(row.array_job_id, 0) if row.array_limit is not None else None
    return verdict(
        held=bool(row.held),
        dependency=status,
        singleton_busy=single,
        array_active=in_flight,
        array_limit=row.array_limit,
    )


def dependency_status(dep: Any, states: dict[int, JobState]) -> tuple[Met, str]:
    """A stored dependency (its ids already the jobs' own) against the jobs' states."""
    resolved = {i: (int(i),) for t in dep.terms for i in t.ids}
    return _dependency_status(resolved, dep, states)


def _states(session: Session, ids: set[int]) -> dict[int, JobState]:
    out: dict[int, JobState] = {}
    for chunk in id_chunks(ids):
        for jid, state in session.execute(select(Job.id, Job.state).where(Job.id.in_(chunk))):
            out[jid] = JobState(state)
    return out


def _singleton_busy(session: Session, pairs: set[tuple[int, str]]) -> dict[tuple[int, str], int]:
    """For each (user, name): a job of theirs by that name in the policy's queue or running
    (the first such; waiting jobs do not count)."""
    if not pairs:
        return {}
    users = {u for u, _ in pairs}
    names = {n for _, n in pairs}
    rows = session.execute(
        select(Job.user_id, Job.name, func.min(Job.id))
        .where(
            Job.user_id.in_(users),
            Job.name.in_(names),
            Job.state.in_(_IN_FLIGHT),
            Job.waiting.is_(None),
        )
        .group_by(Job.user_id, Job.name)
    )
    return {(u, n): jid for u, n, jid in rows if (u, n) in pairs}


def _array_active(session: Session, arrays: set[int | None]) -> dict[int, int]:
    """Per array: its tasks in the policy's queue or running (what `%K` limits)."""
    ids = sorted(a for a in arrays if a is not None)
    if not ids:
        return {}
    rows = session.execute(
        select(Job.array_job_id, func.count())
        .where(Job.array_job_id.in_(ids), Job.state.in_(_IN_FLIGHT), Job.waiting.is_(None))
        .group_by(Job.array_job_id)
    )
    return {a: int(n) for a, n in rows if a is not None}


def waiting_verdict(session: Session, job_id: int) -> Verdict | None:
    """What a waiting job waits for now, in words (for `why`); None if it is not waiting."""
    row = session.execute(select(*_COLUMNS).where(Job.id == job_id, Job.state == _Q)).one_or_none()
    if row is None or row.waiting is None:
        return None
    deps = {row.id: parse_dependency(row.dependency)} if row.dependency else {}
    named = {int(i) for d in deps.values() for t in d.terms for i in t.ids}
    singles = {(row.user_id, row.name)} if row.id in deps and deps[row.id].singleton else set()
    active = _array_active(session, {row.array_job_id} if row.array_limit is not None else set())
    v = judge(row, deps, _states(session, named), _singleton_busy(session, singles), active)
    if v.waiting is None:  # eligible now: the next cycle puts it in the queue
        return Verdict(Waiting(row.waiting), "nothing any more: it enters the queue next cycle")
    return v


def hold_job(session: Session, job_id: int, now: datetime, *, by: str) -> JobRecord:
    """`jpushare hold` (scontrol hold): a queued job leaves the policy's queue until
    released. A reservation it holds is accrued and released (R3: it is no longer the top
    job, nor in the queue). Holding a held job changes nothing. NotFound, or
    InvalidTransition for a job that has left the queue."""
    job = lock_job(session, job_id)
    if job is None:
        raise NotFound("job", job_id)
    if job.state != _Q:
        raise InvalidTransition(job_id, job.state, "hold")
    if job.waiting == Waiting.HELD.value:
        return get_job(session, job_id)
    events: list[dict[str, Any]] = []
    if job.reserved_gpus > 0:
        events.append(release_queued_reservation(session, job, now, ReleaseReason.R3, held=True))
    ok = guarded_update(
        session, job_id, _Q, held=True, waiting=Waiting.HELD.value, **NO_RESERVATION
    )
    assert ok  # the row is locked and queued
    events.append(event_row(job_id, now, EventKind.HELD, detail={"by": by}))
    add_events(session, events)
    return get_job(session, job_id)


def release_job(session: Session, job_id: int, now: datetime, *, by: str) -> JobRecord:
    """`jpushare release` (scontrol release): the hold ends and the job is judged at once
    (its dependency, its array's throttle); if eligible it enters the queue now. A job not
    held is left as it is. NotFound, or InvalidTransition for a job that has left the
    queue."""
    job = lock_job(session, job_id)
    if job is None:
        raise NotFound("job", job_id)
    if job.state != _Q:
        raise InvalidTransition(job_id, job.state, "release")
    if job.waiting != Waiting.HELD.value:
        return get_job(session, job_id)
    ok = guarded_update(session, job_id, _Q, held=False, waiting=Waiting.DEPENDENCY.value)
    assert ok
    add_events(session, [event_row(job_id, now, EventKind.HOLD_RELEASED, detail={"by": by})])
    done = refresh_waiting(session, now, [job_id])
    for cancel_id, why in done.to_cancel:
        cancel_job(session, cancel_id, now, reason=why)
    return get_job(session, job_id)


def update_job(
    session: Session,
    job_id: int,
    now: datetime,
    *,
    by: str,
    name: str | None = None,
    time_limit_s: float | None = None,
) -> JobRecord:
    """`jpushare update` (scontrol update): a queued job's name or time limit. NotFound;
    InvalidTransition once it has left the queue; InvalidRequest for a bad value."""
    if name is not None and not name.strip():
        raise InvalidRequest("a job's name cannot be empty")
    if time_limit_s is not None and time_limit_s <= 0:
        raise InvalidRequest(f"time_limit_s must be positive, got {time_limit_s}")
    job = lock_job(session, job_id)
    if job is None:
        raise NotFound("job", job_id)
    if job.state != _Q:
        raise InvalidTransition(job_id, job.state, "update")
    before = get_job(session, job_id)
    values: dict[str, Any] = {}
    detail: dict[str, Any] = {"by": by}
    if name is not None and name.strip() != before.name:
        values["name"] = name.strip()
        detail["name"] = [before.name, name.strip()]
    if time_limit_s is not None and time_limit_s != before.time_limit_s:
        values["time_limit_s"] = time_limit_s
        detail["time_limit_s"] = [before.time_limit_s, time_limit_s]
    if not values:
        return before
    ok = guarded_update(session, job_id, _Q, **values)
    assert ok
    add_events(session, [event_row(job_id, now, EventKind.UPDATED, detail=detail)])
    return get_job(session, job_id)
