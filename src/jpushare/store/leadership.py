"""The dispatcher's lease: which process may dispatch, until when, under which epoch.

One row per lease name in `dispatcher_leases` (migration 0004). Its holder renews it every
cycle; another process takes it only once it has expired, and taking it adds one to the
`epoch`. Every writing transaction of a cycle ends with `renew_lease` for the epoch it was
given: if another process took the lease meanwhile, no row matches, `LeaseLost` is raised
and the transaction rolls back, so a leader that was frozen or cut off records nothing
once it wakes (fencing). The renewal's row lock makes a takeover wait for a transaction
that is committing under the old epoch, never interleave with it.

Times come from the database's clock (`clock_timestamp()` on PostgreSQL; on SQLite, one
machine by nature, the machine's), so processes on different machines compare one clock.
Like the rest of the store, nothing here commits.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, cast

from sqlalchemy import (
    BigInteger,
    ColumnElement,
    Interval,
    Table,
    Text,
    func,
    insert,
    literal,
    select,
    update,
)
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Mapped, Session, mapped_column

from jpushare.store.schema import Base
from jpushare.store.times import UtcDateTime, utc_now

DISPATCHER = "dispatcher"


class LeaseLost(Exception):
    """Another process took the lease: this one must record and start nothing more."""


class DispatcherLeaseRow(Base):
    """Who dispatches: the holder, its epoch, and when its lease runs out."""

    __tablename__ = "dispatcher_leases"

    name: Mapped[str] = mapped_column(Text, primary_key=True)
    holder: Mapped[str | None] = mapped_column(Text)
    epoch: Mapped[int] = mapped_column(BigInteger)
    acquired_at: Mapped[datetime | None]
    renewed_at: Mapped[datetime | None]
    expires_at: Mapped[datetime | None]


@dataclass(frozen=True, slots=True)
class LeaseRecord:
    name: str
    holder: str | None
    epoch: int
    acquired_at: datetime | None
    renewed_at: datetime | None
    expires_at: datetime | None


# Core, not ORM, statements on the table: an ORM-enabled UPDATE costs ~0.5 ms more, and
# every transaction of a cycle runs one.
_LEASES = cast(Table, DispatcherLeaseRow.__table__)


def database_now(session: Session) -> datetime:
    """The database's clock (the machine's for SQLite), aware UTC."""
    value = session.scalar(select(_now(session)))
    assert isinstance(value, datetime)
    return value


def _now(session: Session) -> ColumnElement[datetime]:
    """The database's clock in SQL, read when the statement runs (not when the transaction
    began, as `now()` would be): PostgreSQL's `clock_timestamp()`; on SQLite the machine's,
    bound as a value (one machine)."""
    if session.get_bind().dialect.name == "postgresql":
        return func.clock_timestamp(type_=UtcDateTime())
    return literal(utc_now(), UtcDateTime())


def _now_and_expiry(
    session: Session, lease_s: float
) -> tuple[ColumnElement[datetime], ColumnElement[datetime]]:
    """Now, and `lease_s` from now, by the database's clock (see `_now`)."""
    lease = timedelta(seconds=lease_s)
    if session.get_bind().dialect.name == "postgresql":
        now = func.clock_timestamp(type_=UtcDateTime())
        return now, (now + literal(lease, Interval())).cast(UtcDateTime())
    at = utc_now()
    return literal(at, UtcDateTime()), literal(at + lease, UtcDateTime())


def get_lease(session: Session, name: str = DISPATCHER) -> LeaseRecord | None:
    row = session.get(DispatcherLeaseRow, name, populate_existing=True)
    if row is None:
        return None
    return LeaseRecord(
        row.name, row.holder, row.epoch, row.acquired_at, row.renewed_at, row.expires_at
    )


def take_lease(session: Session, holder: str, lease_s: float, name: str = DISPATCHER) -> int | None:
    """Take the lease if it is free or expired: the new epoch, or None if it is held."""
    now, expires = _now_and_expiry(session, lease_s)
    table = _LEASES.c
    free = (table.holder.is_(None)) | (table.expires_at.is_(None)) | (table.expires_at < now)
    epoch = session.execute(
        update(_LEASES)
        .where(table.name == name, free)
        .values(
            holder=holder,
            epoch=table.epoch + 1,
            acquired_at=now,
            renewed_at=now,
            expires_at=expires,
        )
        .returning(table.epoch)
    ).scalar()
    if epoch is not None:
        return int(epoch)
    if session.get(DispatcherLeaseRow, name) is not None:
        return None
    # The first holder ever. Another process may insert it at the same moment: then the
    # lease is theirs (a savepoint keeps this transaction usable).
    now_at = database_now(session)
    try:
        with session.begin_nested():
            session.execute(
                insert(_LEASES).values(
                    name=name,
                    holder=holder,
                    epoch=1,
                    acquired_at=now_at,
                    renewed_at=now_at,
                    expires_at=now_at + timedelta(seconds=lease_s),
                )
            )
    except IntegrityError:
        return None
    return 1


def renew_lease(
    session: Session, holder: str, epoch: int, lease_s: float, name: str = DISPATCHER
) -> None:
    """Extend the lease `holder` took under `epoch`; `LeaseLost` if it is no longer theirs.

    A lease that expired but was not taken is still renewed: nobody else acted under it.
    """
    now, expires = _now_and_expiry(session, lease_s)
    if not _update_held(session, holder, epoch, name, {"renewed_at": now, "expires_at": expires}):
        raise LeaseLost(f"the dispatcher lease moved on from epoch {epoch}")


def release_lease(session: Session, holder: str, epoch: int, name: str = DISPATCHER) -> bool:
    """Give the lease up now (a clean stop), so a standby takes it at its next cycle."""
    return _update_held(session, holder, epoch, name, {"holder": None, "expires_at": None})


def _update_held(
    session: Session, holder: str, epoch: int, name: str, values: dict[str, Any]
) -> bool:
    """Update the lease only while `holder` still holds it under `epoch`; whether it did."""
    table = _LEASES.c
    updated = session.execute(
        update(_LEASES)
        .where(table.name == name, table.holder == holder, table.epoch == epoch)
        .values(values)
        .returning(table.epoch)
    ).scalar()
    return updated is not None
