"""A lab's audit trail (`lab_events`): every change to its usage that no job's bill made.

A lab's usage decides its place in the queue (SPEC §1), so an operator who sets it must
leave a record a PI can be shown: who, when, from what to what, and why. Jobs' charges are
recorded on the jobs (`job_events`, kind `charged`), not here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any

from sqlalchemy import ForeignKey, Index, Integer, String, Text, select, update
from sqlalchemy.orm import Mapped, Session, mapped_column

from jpushare.store.errors import InvalidRequest, NotFound
from jpushare.store.schema import Base, BigIntPk, Lab


class LabEventKind(StrEnum):
    USAGE_SET = "usage_set"  # detail: before, after (TFLOP-s), note


class LabEventRow(Base):
    """One change to a lab made by a person (not by a job's bill)."""

    __tablename__ = "lab_events"
    __table_args__ = (Index("ix_lab_events_lab_id", "lab_id", "id"),)

    id: Mapped[int] = mapped_column(BigIntPk, primary_key=True)
    lab_id: Mapped[int] = mapped_column(Integer, ForeignKey("labs.id", ondelete="CASCADE"))
    at: Mapped[datetime]
    kind: Mapped[str] = mapped_column(String(32))
    actor: Mapped[str | None] = mapped_column(Text)
    detail: Mapped[dict[str, Any] | None]


@dataclass(frozen=True, slots=True)
class LabEventRecord:
    id: int
    lab: str
    at: datetime
    kind: str
    actor: str | None
    detail: dict[str, Any] | None


@dataclass(frozen=True, slots=True)
class UsageSet:
    lab: str
    before_tflop_s: float
    after_tflop_s: float
    event_id: int


def non_finite_usage(raw: str, value: float) -> str:
    """The refusal of a usage that is not a finite number, naming what it is (NaN, or an
    infinity: `1e400` overflows a float)."""
    what = "not a number (NaN)" if math.isnan(value) else "infinite"
    return f"{raw} is {what}: a lab's usage is a finite number of TFLOP-s, never negative"


def set_lab_usage_recorded(
    session: Session,
    lab: str,
    usage_tflop_s: float,
    now: datetime,
    *,
    actor: str | None = None,
    note: str = "",
) -> UsageSet:
    """Set lab `lab`'s usage to `usage_tflop_s` (finite, never negative) and record who
    did it, when, and the value before. NotFound for an unknown lab, InvalidRequest for a
    negative or non-finite value."""
    if not math.isfinite(usage_tflop_s):
        raise InvalidRequest(non_finite_usage(repr(usage_tflop_s), usage_tflop_s))
    if usage_tflop_s < 0:
        raise InvalidRequest(
            f"a lab's usage is a finite number of TFLOP-s, never negative: not {usage_tflop_s}"
        )
    row = session.execute(
        select(Lab.id, Lab.cumulative_usage).where(Lab.name == lab).with_for_update()
    ).one_or_none()
    if row is None:
        raise NotFound("lab", lab)
    lab_id, before = row
    session.execute(
        update(Lab)
        .where(Lab.id == lab_id)
        .values(cumulative_usage=usage_tflop_s)
        .execution_options(synchronize_session=False)
    )
    event = LabEventRow(
        lab_id=lab_id,
        at=now,
        kind=LabEventKind.USAGE_SET.value,
        actor=actor,
        detail={"before": before, "after": usage_tflop_s, "note": note},
    )
    session.add(event)
    session.flush()
    return UsageSet(lab, before, usage_tflop_s, event.id)


def lab_events(session: Session, lab: str | None = None) -> list[LabEventRecord]:
    """Every lab event (of `lab`), oldest first."""
    stmt = (
        select(LabEventRow, Lab.name)
        .join(Lab, Lab.id == LabEventRow.lab_id)
        .order_by(LabEventRow.id)
    )
    if lab is not None:
        stmt = stmt.where(Lab.name == lab)
    return [
        LabEventRecord(e.id, name, e.at, e.kind, e.actor, e.detail)
        for e, name in session.execute(stmt)
    ]


__all__ = ["LabEventKind", "LabEventRecord", "LabEventRow", "UsageSet"]
