"""Notifications' part of the database: each job's mail request (`job_mail`, sbatch's
--mail-type / --mail-user) and the notifier's outbox cursors (`notify_cursors`).

The outbox is the ledger itself: every transition already writes a `job_events` row, so
the notifier reads the events after its cursor (`events_after`) and moves the cursor on
(`move_cursor`) once each is delivered or given up. The cursor is in the database, so a
restart neither loses nor repeats a notification (up to the one in flight when the
process died). One cursor per channel (`mail`, `webhook`): a webhook that is down does not
hold mail back.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import BigInteger, ForeignKey, Integer, String, Text, func, insert, select, update
from sqlalchemy.orm import Mapped, Session, mapped_column

from jpushare.mail_types import MailType, mail_types_text, stored_mail_types
from jpushare.store.schema import Base, Job, JobEvent, Lab, User

_JOB_ID = BigInteger().with_variant(Integer(), "sqlite")


class JobMailRow(Base):
    """A job's mail request; no row: no mail (sbatch's default, --mail-type NONE)."""

    __tablename__ = "job_mail"

    job_id: Mapped[int] = mapped_column(
        _JOB_ID, ForeignKey("jobs.id", ondelete="CASCADE"), primary_key=True, autoincrement=False
    )
    mail_types: Mapped[str] = mapped_column(String(64))  # "BEGIN,END": `mail_types_text`
    mail_user: Mapped[str | None] = mapped_column(Text)  # NULL: the owner's account @ domain


class NotifyCursorRow(Base):
    """The last `job_events.id` a channel has dealt with (delivered or given up)."""

    __tablename__ = "notify_cursors"

    channel: Mapped[str] = mapped_column(String(32), primary_key=True)
    last_event_id: Mapped[int] = mapped_column(_JOB_ID)
    updated_at: Mapped[datetime]


@dataclass(frozen=True, slots=True)
class NotifyEvent:
    """One `job_events` row with what a notification about it says of its job (as the job
    is when the event is read: its name, owner, lab; its mail request)."""

    event_id: int
    job_id: int
    at: datetime
    kind: str
    from_state: str | None
    to_state: str | None
    detail: dict[str, Any]
    job_name: str
    user: str
    unix_user: str
    lab: str
    state: str
    num_gpus: int
    submitted_at: datetime
    mail_types: frozenset[MailType]
    mail_user: str | None
    array_job_id: int | None = None  # a task of this array (Slurm's ArrayJobId)
    array_task_id: int | None = None


def set_job_mail(
    session: Session, job_id: int, types: Iterable[MailType], mail_user: str | None
) -> None:
    """Record the job's mail request (nothing for no types: no mail is the default)."""
    text = mail_types_text(set(types))
    if not text:
        return
    session.execute(insert(JobMailRow).values(job_id=job_id, mail_types=text, mail_user=mail_user))


def job_mail(session: Session, job_id: int) -> tuple[frozenset[MailType], str | None]:
    """The job's mail types and address (empty, None: no mail asked for)."""
    row = session.execute(
        select(JobMailRow.mail_types, JobMailRow.mail_user).where(JobMailRow.job_id == job_id)
    ).one_or_none()
    return (frozenset(), None) if row is None else (stored_mail_types(row[0]), row[1])


def start_cursor(session: Session, channel: str, now: datetime) -> int:
    """The channel's cursor; a channel seen for the first time starts after the newest
    event (history from before notifications were set up is not sent)."""
    last = session.scalar(
        select(NotifyCursorRow.last_event_id).where(NotifyCursorRow.channel == channel)
    )
    if last is not None:
        return int(last)
    newest = int(session.scalar(select(func.coalesce(func.max(JobEvent.id), 0))) or 0)
    session.execute(
        insert(NotifyCursorRow).values(channel=channel, last_event_id=newest, updated_at=now)
    )
    return newest


def move_cursor(session: Session, channel: str, from_id: int, to_id: int, now: datetime) -> bool:
    """Move the channel's cursor from `from_id` to `to_id`; False (nothing changed) when it
    is no longer at `from_id` (another notifier moved it)."""
    result = session.execute(
        update(NotifyCursorRow)
        .where(NotifyCursorRow.channel == channel, NotifyCursorRow.last_event_id == from_id)
        .values(last_event_id=to_id, updated_at=now)
        .execution_options(synchronize_session=False)
    )
    return bool(getattr(result, "rowcount", 0) == 1)


_EVENTS = (
    select(
        JobEvent.id,
        JobEvent.job_id,
        JobEvent.at,
        JobEvent.kind,
        JobEvent.from_state,
        JobEvent.to_state,
        JobEvent.detail,
        Job.name,
        User.name,
        User.unix_user,
        Lab.name,
        Job.state,
        Job.num_gpus,
        Job.submitted_at,
        JobMailRow.mail_types,
        JobMailRow.mail_user,
        Job.array_job_id,
        Job.array_task_id,
    )
    .join(Job, Job.id == JobEvent.job_id)
    .join(User, User.id == Job.user_id)
    .join(Lab, Lab.id == Job.lab_id)
    .outerjoin(JobMailRow, JobMailRow.job_id == Job.id)
)


def events_after(session: Session, after_id: int, limit: int) -> list[NotifyEvent]:
    """Up to `limit` events with ids above `after_id`, oldest first (one statement)."""
    rows = session.execute(
        _EVENTS.where(JobEvent.id > after_id).order_by(JobEvent.id).limit(limit)
    ).all()
    return [
        NotifyEvent(
            event_id=r[0],
            job_id=r[1],
            at=r[2],
            kind=r[3],
            from_state=r[4],
            to_state=r[5],
            detail=dict(r[6] or {}),
            job_name=r[7],
            user=r[8],
            unix_user=r[9],
            lab=r[10],
            state=r[11],
            num_gpus=r[12],
            submitted_at=r[13],
            mail_types=stored_mail_types(r[14]),
            mail_user=r[15],
            array_job_id=r[16],
            array_task_id=r[17],
        )
        for r in rows
    ]
