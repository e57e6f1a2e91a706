"""The store's one writer of the ledger's results (`jpushare.ledger`): a job's new values
under its state guard, its lab's charge and the events, for a batch of jobs in a fixed
number of statements (a list of one is the single case).

The caller has locked the jobs (`transitions.lock_jobs`) and computed with the ledger from
the locked values, so every guarded UPDATE matches: one that does not is a bug, and raises
ConcurrentUpdate so the caller's transaction (or savepoint) is rolled back whole.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from operator import attrgetter
from typing import Any, cast

from sqlalchemy import Table, bindparam, func, select, update
from sqlalchemy.orm import Session

from jpushare.ledger import Account, AttemptEnd, Charge, LedgerEvent, settle
from jpushare.ledger import accrue_reservation as ledger_accrue
from jpushare.store.errors import ConcurrentUpdate
from jpushare.store.schema import ACTIVE_STATES, EventKind, Job, JobState, Lab
from jpushare.store.times import to_epoch
from jpushare.store.transitions import (
    LockedJob,
    add_events,
    clean_text,
    event_row,
    guarded_update,
    lock_job,
    rowcount,
    tier_name,
    tier_tflops,
)
from jpushare.vocabulary import ReleaseReason

_JOBS = cast(Table, Job.__table__)
_LABS = cast(Table, Lab.__table__)
_QUEUED = JobState.GLOBAL_QUEUE_WAIT.value
_ACTIVE = [s.value for s in ACTIVE_STATES]
_LENDER = _JOBS.alias("lender")
_AT = attrgetter("at")

_CHARGE_LAB = (
    update(_LABS)
    .where(_LABS.c.id == bindparam("b_lab"))
    .values(cumulative_usage=_LABS.c.cumulative_usage + bindparam("b_due"))
)


def account_of(job: LockedJob) -> Account:
    """The ledger's account of a locked job."""
    return Account(job.run_cost, job.reservation_gpu_seconds, job.charged_tflop_s)


@dataclass(frozen=True, slots=True)
class AppliedEnd:
    """An attempt's end to write: the locked job, what the ledger made of it, when, and the
    further columns the end sets (times, exit code, reason, a requeue's cleared placement)."""

    job: LockedJob
    end: AttemptEnd
    at: datetime
    values: Mapping[str, Any] = field(default_factory=dict)


def ledger_events(job_id: int, at: datetime, events: Sequence[LedgerEvent]) -> list[dict[str, Any]]:
    """The `job_events` rows of the ledger's events."""
    return [
        event_row(
            job_id,
            at,
            e.kind,
            e.from_state.value if e.from_state is not None else None,
            e.to_state.value if e.to_state is not None else None,
            dict(e.detail),
        )
        for e in events
    ]


def write_attempt_ends(session: Session, ends: Sequence[AppliedEnd]) -> None:
    """Each job moves to its end's state with its settled account, guarded on the state
    and attempt it was locked in; then the labs' charges (one UPDATE per charged job, in
    the given order, so a lab's usage gains the same additions in the same order as one
    by one) and every event in one INSERT."""
    end_loans(session, ends)
    groups: dict[tuple[str, ...], list[dict[str, Any]]] = {}
    labs: list[dict[str, Any]] = []
    events: list[dict[str, Any]] = []
    for a in ends:
        values = {
            "state": a.end.to_state.value,
            "run_cost": a.end.account.run_cost,
            "charged_tflop_s": a.end.account.charged,
            **a.values,
        }
        params = {"b_id": a.job.id, "b_state": a.job.state, "b_attempt": a.job.attempts}
        for name, value in values.items():
            params["v_" + name] = clean_text(value) if isinstance(value, str) else value
        groups.setdefault(tuple(values), []).append(params)
        if a.end.due != 0:
            labs.append({"b_lab": a.job.lab_id, "b_due": a.end.due})
        events.extend(ledger_events(a.job.id, a.at, a.end.events))
    for columns, batch in groups.items():
        statement = (
            update(_JOBS)
            .where(
                _JOBS.c.id == bindparam("b_id"),
                _JOBS.c.state == bindparam("b_state"),
                _JOBS.c.attempts == bindparam("b_attempt"),
            )
            .values({name: bindparam("v_" + name) for name in columns})
        )
        execute_all(session, statement, batch, "end attempt")
    execute_all(session, _CHARGE_LAB, labs, "charge")
    add_events(session, events)


def write_charge(session: Session, job_id: int, lab_id: int, charge: Charge, at: datetime) -> None:
    """A settlement outside an attempt's end (a queued job cancelled, a cancelled run
    settled): the job's charged total, its lab's usage, the `charged` event."""
    if charge.due != 0:
        session.execute(
            update(_JOBS)
            .where(_JOBS.c.id == job_id)
            .values(charged_tflop_s=charge.account.charged)
            .execution_options(synchronize_session=False)
        )
        execute_all(session, _CHARGE_LAB, [{"b_lab": lab_id, "b_due": charge.due}], "charge")
    add_events(session, ledger_events(job_id, at, charge.events))


def execute_all(session: Session, statement: Any, params: list[dict[str, Any]], what: str) -> None:
    """Run a guarded statement for every parameter set; each must match one row."""
    if not params:
        return
    matched = rowcount(session.execute(statement, params))
    if matched != len(params):  # impossible under the row locks
        raise ConcurrentUpdate(f"{what}: {matched} of {len(params)} guarded updates matched")


def accrue_reservation(
    session: Session, job: LockedJob, now: datetime, tflops: float, lent: int = 0
) -> float:
    """Accrue the locked job's reservation cost up to `now` into the job (SPEC §4: the lab
    is not charged); the cost added. Nothing unless the job is queued with GPUs reserved,
    guarded on the reservation it was locked with. `lent`: its GPUs lent out meanwhile
    (lending), which their borrowers pay for as their run, so the reservation does not."""
    last = job.reservation_last_accrued_at
    if job.state != _QUEUED or last is None:
        return 0.0
    gpus = max(0, job.reserved_gpus - lent)
    accrual = ledger_accrue(account_of(job), gpus, to_epoch(last), to_epoch(now), tflops)
    if accrual.accrued_to is None:
        return 0.0
    ok = guarded_update(
        session,
        job.id,
        _QUEUED,
        Job.reserved_gpus == job.reserved_gpus,
        Job.reservation_last_accrued_at == last,
        reservation_gpu_seconds=accrual.account.reservation_cost,
        reservation_last_accrued_at=now,
    )
    return accrual.cost if ok else 0.0


def release_queued_reservation(
    session: Session, job: LockedJob, now: datetime, reason: ReleaseReason, **extra: Any
) -> dict[str, Any]:
    """The locked queued job's reservation accrued up to `now`, and its RELEASED event (a
    cancel, a hold); the caller's update then clears it (`NO_RESERVATION`)."""
    accrue_reservation(session, job, now, tier_tflops(session, job.reserved_tier_id))
    since = job.reservation_since
    detail = {
        "reason": reason.value,
        **extra,
        "node": job.reserved_node_name,
        "tier": tier_name(session, job.reserved_tier_id),
        "gpus": job.reserved_gpus,
        "since": since.isoformat() if since else None,
    }
    return event_row(job.id, now, EventKind.RELEASED, detail=detail)


def lent_gpus(session: Session, lenders: Iterable[int]) -> dict[int, int]:
    """GPUs of each of these queued jobs' reservations lent out now: their DISPATCHED and
    RUNNING borrowers on the same placement (`reserved_gpus: lend-by-limit`)."""
    ids = sorted(set(lenders))
    if not ids:
        return {}
    rows = session.execute(
        select(Job.lent_from_job_id, func.sum(Job.num_gpus))
        .join(_LENDER, _LENDER.c.id == Job.lent_from_job_id)
        .where(
            Job.lent_from_job_id.in_(ids),
            Job.state.in_(_ACTIVE),
            _LENDER.c.reserved_node_name == Job.node_name,
            _LENDER.c.reserved_tier_id == Job.tier_id,
        )
        .group_by(Job.lent_from_job_id)
    )
    return {int(lender): int(n) for lender, n in rows if lender is not None}


def end_loans(session: Session, ends: Sequence[AppliedEnd]) -> None:
    """Runs on lent GPUs that end give them back to their lender's reservation: accrue it
    up to each end with the GPUs lent until then, so that the next accrual, without
    them, charges the reservation for them only from the end on (never twice)."""
    returned: dict[int, int] = {}  # lender -> GPUs given back by the ends before this one
    for a in sorted((a for a in ends if a.job.lent_from_job_id is not None), key=_AT):
        lender_id = a.job.lent_from_job_id
        assert lender_id is not None
        lender = lock_job(session, lender_id)
        if (
            lender is None
            or lender.reserved_tier_id is None
            or (lender.reserved_node_name, lender.reserved_tier_id)
            != (a.job.node_name, a.job.tier_id)
        ):
            continue  # its reservation is gone or elsewhere: nothing was lent from it
        lent = lent_gpus(session, [lender_id]).get(lender_id, 0) - returned.get(lender_id, 0)
        tflops = tier_tflops(session, lender.reserved_tier_id)
        accrue_reservation(session, lender, a.at, tflops, lent)
        returned[lender_id] = returned.get(lender_id, 0) + a.job.num_gpus


def charge_lab(
    session: Session, job_id: int, at: datetime, detail: dict[str, Any] | None = None
) -> float:
    """Settle the job as it is in the database now (`ledger.settle`); the amount charged.
    `detail` is added to the `charged` event's."""
    lab_id, run_total, reservation_total, charged = session.execute(
        select(Job.lab_id, Job.run_cost, Job.reservation_gpu_seconds, Job.charged_tflop_s).where(
            Job.id == job_id
        )
    ).one()
    charge = settle(Account(run_total, reservation_total, charged), detail)
    write_charge(session, job_id, lab_id, charge, at)
    return charge.due
