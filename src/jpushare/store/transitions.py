"""Guarded job transitions and the bookkeeping that goes with each one.

Every state change is `UPDATE jobs … WHERE id = :id AND state = :expected` (plus whatever
else must still hold), and is followed, only if it matched a row, by its `job_events` row.
A stale caller therefore changes nothing: the guard simply matches no row. Callers read
the row first with `lock_job` (SELECT … FOR UPDATE on PostgreSQL; SQLite transactions
already hold the write lock from BEGIN IMMEDIATE) so what they compute from it stays true.

What a transition costs and charges is the ledger's to say (`jpushare.ledger`); the
store writes its results with `ledger_writes`.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Result, insert, select, update
from sqlalchemy.engine import CursorResult
from sqlalchemy.orm import Session

from jpushare.store.schema import EventKind, GpuTier, Job, JobEvent

# C0 control characters but tab and newline: PostgreSQL refuses NUL in text and JSON (psycopg
# raises DataError and the whole transaction is lost), and the rest only garbles a reason.
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f]")
REPLACEMENT = "\ufffd"


def clean_text(text: str) -> str:
    """`text` with NUL and the other C0 control characters but \\n and \\t replaced by U+FFFD.

    Every free text the store writes into a job or its events passes here (`guarded_update`,
    `event_row`): reasons and details come from outside (an executor's reason, a line of a
    job's log such as a CUDA out-of-memory message), and one NUL in them must not stop the
    dispatcher's transaction on PostgreSQL.
    """
    return _CONTROL.sub(REPLACEMENT, text)


def _clean(value: Any) -> Any:
    if isinstance(value, str):
        return clean_text(value)
    if isinstance(value, dict):
        return {_clean(k): _clean(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_clean(v) for v in value]
    return value


def rowcount(result: Result[Any]) -> int:
    """Rows an UPDATE/DELETE matched."""
    assert isinstance(result, CursorResult)
    return result.rowcount


@dataclass(frozen=True, slots=True)
class LockedJob:
    """The columns transitions decide on, read under the row lock."""

    id: int
    lab_id: int
    state: str
    num_gpus: int
    attempts: int
    node_name: str | None
    tier_id: uuid.UUID | None
    executor_id: str | None
    started_at: datetime | None
    run_cost: float
    charged_tflop_s: float
    reserved_gpus: int
    reserved_node_name: str | None
    reserved_tier_id: uuid.UUID | None
    reservation_since: datetime | None
    reservation_last_accrued_at: datetime | None
    reservation_gpu_seconds: float
    waiting: str | None = None  # not None: held or waiting, not in the policy's queue
    lent_from_job_id: int | None = None  # its run is on GPUs lent from this job's reservation


_LOCK_COLUMNS = (
    Job.id,
    Job.lab_id,
    Job.state,
    Job.num_gpus,
    Job.attempts,
    Job.node_name,
    Job.tier_id,
    Job.executor_id,
    Job.started_at,
    Job.run_cost,
    Job.charged_tflop_s,
    Job.reserved_gpus,
    Job.reserved_node_name,
    Job.reserved_tier_id,
    Job.reservation_since,
    Job.reservation_last_accrued_at,
    Job.reservation_gpu_seconds,
    Job.waiting,
    Job.lent_from_job_id,
)


def id_chunks(job_ids: Iterable[int], size: int = 1000) -> Iterator[list[int]]:
    """The distinct ids in order, `size` at a time: one bounded `IN (…)` list each."""
    ids = sorted(set(job_ids))
    for start in range(0, len(ids), size):
        yield ids[start : start + size]


def lock_jobs(session: Session, job_ids: Iterable[int]) -> dict[int, LockedJob]:
    """Read and lock these jobs' rows (in id order, so two lockers cannot deadlock)."""
    out: dict[int, LockedJob] = {}
    for chunk in id_chunks(job_ids):
        rows: list[Any] = list(
            session.execute(
                select(*_LOCK_COLUMNS).where(Job.id.in_(chunk)).order_by(Job.id).with_for_update()
            )
        )
        for row in rows:
            job = LockedJob(*row)
            out[job.id] = job
    return out


def lock_job(session: Session, job_id: int) -> LockedJob | None:
    return lock_jobs(session, [job_id]).get(job_id)


def guarded_update(
    session: Session, job_id: int, expected_state: str, *conditions: Any, **values: Any
) -> bool:
    """UPDATE the job only if it is still in `expected_state` (and `conditions` hold).

    Text values are cleaned of control characters (`clean_text`)."""
    cleaned = {k: clean_text(v) if isinstance(v, str) else v for k, v in values.items()}
    result = session.execute(
        update(Job)
        .where(Job.id == job_id, Job.state == expected_state, *conditions)
        .values(**cleaned)
        .execution_options(synchronize_session=False)
    )
    return rowcount(result) == 1


def event_row(
    job_id: int,
    at: datetime,
    kind: EventKind,
    from_state: str | None = None,
    to_state: str | None = None,
    detail: dict[str, Any] | None = None,
) -> dict[str, Any]:
    return {
        "job_id": job_id,
        "at": at,
        "kind": kind.value,
        "from_state": from_state,
        "to_state": to_state,
        "detail": _clean(detail),  # texts from outside: see clean_text
    }


def add_events(session: Session, rows: list[dict[str, Any]]) -> None:
    if rows:
        session.execute(insert(JobEvent), rows)


# A queued job's reservation fields once it holds none (a release, a cancel, a hold).
NO_RESERVATION: Mapping[str, Any] = {
    "reserved_gpus": 0,
    "reserved_node_name": None,
    "reserved_tier_id": None,
    "reservation_since": None,
    "reservation_last_accrued_at": None,
}


def tier_tflops(session: Session, tier_id: uuid.UUID | None) -> float:
    if tier_id is None:
        return 0.0
    value = session.scalars(select(GpuTier.tflops).where(GpuTier.id == tier_id)).one_or_none()
    return float(value or 0.0)


def tier_name(session: Session, tier_id: uuid.UUID | None) -> str | None:
    if tier_id is None:
        return None
    return session.scalars(select(GpuTier.name).where(GpuTier.id == tier_id)).one_or_none()
