"""How `record_decisions` applies each kind of policy action: one table, one entry a kind.

An entry holds everything that differs between kinds: the rank that orders one job's
actions so that every guard stays true, the guarded UPDATE (one per kind, run for all jobs
at once), the check against the locked row, the job event, and the row as the action
leaves it (for the same job's next action). A new kind of action is one new entry.
"""

from __future__ import annotations

import uuid
from dataclasses import replace
from datetime import datetime
from typing import Any, Generic, TypeVar, cast

from sqlalchemy import Table, bindparam, update

from jpushare.policy.model import (
    AbsorbReservation,
    Action,
    Dispatch,
    ReleaseReservation,
    StartReservation,
)
from jpushare.store.schema import EventKind, Job, JobState
from jpushare.store.times import from_epoch
from jpushare.store.transitions import NO_RESERVATION, LockedJob, event_row
from jpushare.vocabulary import store_job_id

_QUEUED = JobState.GLOBAL_QUEUE_WAIT.value
_JOBS = cast(Table, Job.__table__)
_C = _JOBS.c


def _guarded(*conditions: Any) -> Any:
    return update(_JOBS).where(_C.id == bindparam("b_id"), _C.state == _QUEUED, *conditions)


_RESERVATION_MATCHES = (
    _C.reserved_gpus == bindparam("b_gpus"),
    _C.reserved_node_name == bindparam("b_node"),
    _C.reserved_tier_id == bindparam("b_tier"),
)

_A = TypeVar("_A", AbsorbReservation, ReleaseReservation, StartReservation, Dispatch)


class ActionKind(Generic[_A]):
    """One kind of action's entry in `KINDS`.

    `rank`: per job, the order that keeps every guard true: grow, release, then start or
    dispatch (the policy emits a swap's Dispatch before its Release; R5's Release before
    a new Start). `statement`: its guarded UPDATE, run once for all jobs (executemany),
    with `params`' values. `valid`: whether the action still applies to the locked row.
    `event`: its job event. `after`: the locked row as the action leaves it, for the
    job's next action.
    """

    rank: int
    statement: Any

    def valid(self, job: LockedJob, a: _A, tier_id: uuid.UUID) -> bool:
        raise NotImplementedError

    def params(self, job: LockedJob, a: _A, tier_id: uuid.UUID, at: datetime) -> dict[str, Any]:
        raise NotImplementedError

    def event(self, job: LockedJob, a: _A, at: datetime) -> dict[str, Any]:
        raise NotImplementedError

    def after(self, job: LockedJob, a: _A, tier_id: uuid.UUID, at: datetime) -> LockedJob:
        raise NotImplementedError


class _Absorb(ActionKind[AbsorbReservation]):
    rank = 0
    statement = _guarded(*_RESERVATION_MATCHES).values(reserved_gpus=bindparam("b_total"))

    def valid(self, job: LockedJob, a: AbsorbReservation, tier_id: uuid.UUID) -> bool:
        return (
            job.reserved_gpus == a.total - a.added
            and job.reserved_node_name == a.node
            and job.reserved_tier_id == tier_id
            and a.added > 0
            and a.total <= job.num_gpus
        )

    def params(
        self, job: LockedJob, a: AbsorbReservation, tier_id: uuid.UUID, at: datetime
    ) -> dict[str, Any]:
        return _where(job, a, tier_id) | {"b_gpus": a.total - a.added, "b_total": a.total}

    def event(self, job: LockedJob, a: AbsorbReservation, at: datetime) -> dict[str, Any]:
        detail = {"node": a.node, "tier": a.tier, "added": a.added, "total": a.total}
        return event_row(job.id, at, EventKind.ABSORBED, detail=detail)

    def after(
        self, job: LockedJob, a: AbsorbReservation, tier_id: uuid.UUID, at: datetime
    ) -> LockedJob:
        return replace(job, reserved_gpus=a.total)


class _Release(ActionKind[ReleaseReservation]):
    rank = 1
    statement = _guarded(*_RESERVATION_MATCHES).values(**NO_RESERVATION)

    def valid(self, job: LockedJob, a: ReleaseReservation, tier_id: uuid.UUID) -> bool:
        return (
            job.reserved_gpus == a.gpus
            and a.gpus > 0
            and job.reserved_node_name == a.node
            and job.reserved_tier_id == tier_id
        )

    def params(
        self, job: LockedJob, a: ReleaseReservation, tier_id: uuid.UUID, at: datetime
    ) -> dict[str, Any]:
        return _where(job, a, tier_id) | {"b_gpus": a.gpus}

    def event(self, job: LockedJob, a: ReleaseReservation, at: datetime) -> dict[str, Any]:
        since = job.reservation_since
        detail = {
            "reason": a.reason.value,
            "node": a.node,
            "tier": a.tier,
            "gpus": a.gpus,
            "since": since.isoformat() if since is not None else None,
            "held_s": (at - since).total_seconds() if since is not None else None,
        }
        return event_row(job.id, at, EventKind.RELEASED, detail=detail)

    def after(
        self, job: LockedJob, a: ReleaseReservation, tier_id: uuid.UUID, at: datetime
    ) -> LockedJob:
        return replace(job, **NO_RESERVATION)


class _Start(ActionKind[StartReservation]):
    rank = 2
    statement = _guarded(_C.reserved_gpus == 0).values(
        reserved_gpus=bindparam("b_gpus"),
        reserved_node_name=bindparam("b_node"),
        reserved_tier_id=bindparam("b_tier"),
        reservation_since=bindparam("b_at"),
        reservation_last_accrued_at=bindparam("b_at"),
    )

    def valid(self, job: LockedJob, a: StartReservation, tier_id: uuid.UUID) -> bool:
        return job.reserved_gpus == 0 and 0 < a.gpus <= job.num_gpus

    def params(
        self, job: LockedJob, a: StartReservation, tier_id: uuid.UUID, at: datetime
    ) -> dict[str, Any]:
        return _where(job, a, tier_id) | {"b_gpus": a.gpus, "b_at": at}

    def event(self, job: LockedJob, a: StartReservation, at: datetime) -> dict[str, Any]:
        detail = {"node": a.node, "tier": a.tier, "gpus": a.gpus}
        return event_row(job.id, at, EventKind.RESERVATION_STARTED, detail=detail)

    def after(
        self, job: LockedJob, a: StartReservation, tier_id: uuid.UUID, at: datetime
    ) -> LockedJob:
        return replace(
            job,
            reserved_gpus=a.gpus,
            reserved_node_name=a.node,
            reserved_tier_id=tier_id,
            reservation_since=at,
            reservation_last_accrued_at=at,
        )


class _Dispatch(ActionKind[Dispatch]):
    rank = 3
    statement = _guarded(_C.reserved_gpus == 0, _C.attempts == bindparam("b_attempts")).values(
        state=JobState.DISPATCHED.value,
        node_name=bindparam("b_node"),
        tier_id=bindparam("b_tier"),
        attempts=bindparam("b_attempts") + 1,
        dispatched_at=bindparam("b_at"),
        executor_id=None,
        started_at=None,
        ended_at=None,
        exit_code=None,
        reason=None,
        lent_from_job_id=bindparam("b_lent_from"),
        lent_until=bindparam("b_lent_until"),
    )

    def valid(self, job: LockedJob, a: Dispatch, tier_id: uuid.UUID) -> bool:
        return job.reserved_gpus == 0 and a.num_gpus == job.num_gpus

    def params(
        self, job: LockedJob, a: Dispatch, tier_id: uuid.UUID, at: datetime
    ) -> dict[str, Any]:
        lent_from, lent_until = _loan(a)
        return _where(job, a, tier_id) | {
            "b_attempts": job.attempts,
            "b_at": at,
            "b_lent_from": lent_from,
            "b_lent_until": lent_until,
        }

    def event(self, job: LockedJob, a: Dispatch, at: datetime) -> dict[str, Any]:
        detail: dict[str, Any] = {
            "node": a.node,
            "tier": a.tier,
            "gpus": a.num_gpus,
            "attempt": job.attempts + 1,
        }
        lent_from, lent_until = _loan(a)
        if lent_from is not None and lent_until is not None:
            detail |= {"lent_from": lent_from, "lent_until": lent_until.isoformat()}
        return event_row(
            job.id, at, EventKind.DISPATCHED, _QUEUED, JobState.DISPATCHED.value, detail
        )

    def after(self, job: LockedJob, a: Dispatch, tier_id: uuid.UUID, at: datetime) -> LockedJob:
        return replace(
            job,
            state=JobState.DISPATCHED.value,
            attempts=job.attempts + 1,
            node_name=a.node,
            tier_id=tier_id,
        )


def _loan(a: Dispatch) -> tuple[int | None, datetime | None]:
    """A dispatch on lent GPUs: the lender's store id and the loan's end (else None, None)."""
    if a.lent_from is None or a.lent_until is None:
        return None, None
    return store_job_id(a.lent_from), from_epoch(a.lent_until)


def _where(job: LockedJob, a: Action, tier_id: uuid.UUID) -> dict[str, Any]:
    """The bound values every kind's guarded UPDATE shares."""
    return {"b_id": job.id, "b_node": a.node, "b_tier": tier_id}


KINDS: dict[type, ActionKind[Any]] = {
    AbsorbReservation: _Absorb(),
    ReleaseReservation: _Release(),
    StartReservation: _Start(),
    Dispatch: _Dispatch(),
}
