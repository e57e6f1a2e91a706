"""How the dispatcher is doing, kept in the database so that every API process can say it.

`dispatcher_health` (migration 0005) holds one row per counter: `cycle_ok` (cycles that
observed the executor and recorded their decisions; `last_at` is the last one, `holder`
the process that ran it), `cycle_failed:<kind>` and `executor_failed:<call>` (counts, and
when the last one happened), `cycle_ms` (the milliseconds of every cycle that returned,
added up; `last_at` when the last one ended and `cycle_s` how long it took) and
`cycles_timed` (how many cycles `cycle_ms` adds up: its mean is one over the other). The
dispatcher adds what it counted since its last write (`add_health_counts`), so the totals
stay monotonic across leaders and restarts; an API worker process that never dispatches
reads them (`load_health`) for `/metrics`, `/healthz` and the operator page. Like the
rest of the store, nothing here commits.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime

from sqlalchemy import BigInteger, Float, Text, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Mapped, Session, mapped_column

from jpushare.store.schema import Base

CYCLE_OK = "cycle_ok"
CYCLE_FAILED = "cycle_failed:"
EXECUTOR_FAILED = "executor_failed:"
CYCLE_MS = "cycle_ms"
CYCLES_TIMED = "cycles_timed"


class DispatcherHealthRow(Base):
    """One counter of the dispatcher's health, with the time of its last increment."""

    __tablename__ = "dispatcher_health"

    name: Mapped[str] = mapped_column(Text, primary_key=True)
    count: Mapped[int] = mapped_column(BigInteger)
    last_at: Mapped[datetime | None]
    holder: Mapped[str | None] = mapped_column(Text)
    cycle_s: Mapped[float | None] = mapped_column(Float)


@dataclass(frozen=True, slots=True)
class HealthCount:
    """What one process counted since its last write: how many, and the latest time."""

    count: int
    last_at: datetime


@dataclass(frozen=True, slots=True)
class DispatcherHealth:
    """The dispatcher's record, as every process reads it."""

    cycles_ok: int = 0
    last_ok_at: datetime | None = None
    last_ok_holder: str | None = None
    cycle_s: float | None = None  # the cycle length of the process that last succeeded
    cycles_failed: Mapping[str, int] = field(default_factory=dict)  # kind -> count
    last_failed_at: datetime | None = None
    executor_failed: Mapping[str, int] = field(default_factory=dict)  # call -> count
    last_cycle_s: float | None = None  # how long the last cycle that returned took
    last_cycle_at: datetime | None = None  # when it ended
    cycle_ms_total: int = 0  # every timed cycle's milliseconds, added up
    cycles_timed: int = 0

    @property
    def mean_cycle_s(self) -> float | None:
        """The mean duration of the cycles timed, in seconds (None before the first)."""
        return self.cycle_ms_total / 1000 / self.cycles_timed if self.cycles_timed else None


def add_health_counts(
    session: Session,
    counts: Mapping[str, HealthCount],
    *,
    holder: str | None = None,
    cycle_s: float | None = None,
    last_cycle_s: float | None = None,
) -> None:
    """Add `counts` (counter name -> what was counted) to the stored totals; `holder` and
    `cycle_s` go with `cycle_ok`, `last_cycle_s` (the last cycle's duration) with `cycle_ms`."""
    table = DispatcherHealthRow.__table__.c
    for name, c in sorted(counts.items()):
        if c.count <= 0 and name != CYCLE_MS:  # a sub-millisecond cycle still sets the last
            continue
        values: dict[str, object] = {"count": table.count + c.count, "last_at": c.last_at}
        if name == CYCLE_OK:
            values.update(holder=holder, cycle_s=cycle_s)
        elif name == CYCLE_MS:
            values.update(cycle_s=last_cycle_s)
        done = session.execute(
            update(DispatcherHealthRow)
            .where(table.name == name)
            .values(values)
            .execution_options(synchronize_session=False)
        )
        if done.rowcount:  # type: ignore[attr-defined]
            continue
        row = DispatcherHealthRow(
            name=name,
            count=c.count,
            last_at=c.last_at,
            holder=holder if name == CYCLE_OK else None,
            cycle_s=cycle_s if name == CYCLE_OK else last_cycle_s if name == CYCLE_MS else None,
        )
        try:
            with session.begin_nested():  # another process may insert it at the same moment
                session.add(row)
        except IntegrityError:
            session.execute(
                update(DispatcherHealthRow)
                .where(table.name == name)
                .values(values)
                .execution_options(synchronize_session=False)
            )


def load_health(session: Session) -> DispatcherHealth:
    """Every counter, as stored."""
    ok = 0
    last_ok_at: datetime | None = None
    holder: str | None = None
    cycle_s: float | None = None
    failed: dict[str, int] = {}
    last_failed_at: datetime | None = None
    executor: dict[str, int] = {}
    last_cycle_s: float | None = None
    last_cycle_at: datetime | None = None
    cycle_ms_total = timed = 0
    rows = session.execute(
        select(
            DispatcherHealthRow.name,
            DispatcherHealthRow.count,
            DispatcherHealthRow.last_at,
            DispatcherHealthRow.holder,
            DispatcherHealthRow.cycle_s,
        )
    )
    for name, count, last_at, row_holder, row_cycle_s in rows:
        if name == CYCLE_OK:
            ok, last_ok_at, holder, cycle_s = count, last_at, row_holder, row_cycle_s
        elif name.startswith(CYCLE_FAILED):
            failed[name.removeprefix(CYCLE_FAILED)] = count
            if last_at is not None and (last_failed_at is None or last_at > last_failed_at):
                last_failed_at = last_at
        elif name.startswith(EXECUTOR_FAILED):
            executor[name.removeprefix(EXECUTOR_FAILED)] = count
        elif name == CYCLE_MS:
            last_cycle_s, last_cycle_at, cycle_ms_total = row_cycle_s, last_at, count
        elif name == CYCLES_TIMED:
            timed = count
    return DispatcherHealth(
        ok,
        last_ok_at,
        holder,
        cycle_s,
        failed,
        last_failed_at,
        executor,
        last_cycle_s=last_cycle_s,
        last_cycle_at=last_cycle_at,
        cycle_ms_total=cycle_ms_total,
        cycles_timed=timed,
    )
