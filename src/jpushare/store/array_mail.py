"""What the notifier needs to know of a job array to mail it as a whole (sbatch without
`--mail-type ARRAY_TASKS`): whether a task began before a given event, and whether the
event ends the array's last task, with how its tasks ended.

Everything is "as of event N" (ids at or below it), not the tasks' states now: the mail
channel reads events in id order, and a task that ended after the event must not make
an earlier end look like the last one. Indexed: jobs by array, events by job.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import ColumnElement, Select, and_, func, or_, select
from sqlalchemy.orm import Session

from jpushare.store.schema import Job, JobEvent

END_KINDS = ("completed", "failed", "cancelled")
REQUEUE_KINDS = ("oom_requeued", "node_fail_requeued")


@dataclass(frozen=True, slots=True)
class TaskEnd:
    """How one task of the array ended: its event's kind and exit code (None: none)."""

    kind: str
    exit_code: int | None


def _began() -> ColumnElement[bool]:
    """An event that carries its task's BEGIN mail (`notify.messages.mail_types_of`): a
    start, or the end or requeue of a run the dispatcher never saw running."""
    return or_(
        JobEvent.kind == "started",
        and_(
            JobEvent.kind.in_(("completed", "failed", *REQUEUE_KINDS)),
            JobEvent.from_state == "DISPATCHED",
        ),
    )


def _tasks_events(array_job_id: int, before_or_at: int) -> Select[int]:
    return (
        select(JobEvent.id)
        .join(Job, Job.id == JobEvent.job_id)
        .where(Job.array_job_id == array_job_id, JobEvent.id <= before_or_at)
    )


def array_began_before(session: Session, array_job_id: int, event_id: int) -> bool:
    """True when a task of the array began in an event before `event_id`."""
    query = _tasks_events(array_job_id, event_id - 1).where(_began()).limit(1)
    return session.scalar(query) is not None


def array_ends(session: Session, array_job_id: int, event_id: int) -> list[TaskEnd] | None:
    """How every task of the array ended, when each had ended by event `event_id`
    (inclusive); None while a task has not."""
    tasks = session.scalar(select(func.count(Job.id)).where(Job.array_job_id == array_job_id))
    ended = session.scalar(
        select(func.count(func.distinct(JobEvent.job_id)))
        .join(Job, Job.id == JobEvent.job_id)
        .where(
            Job.array_job_id == array_job_id,
            JobEvent.id <= event_id,
            JobEvent.kind.in_(END_KINDS),
        )
    )
    if not tasks or ended != tasks:
        return None
    rows = session.execute(
        select(JobEvent.kind, JobEvent.detail)
        .join(Job, Job.id == JobEvent.job_id)
        .where(
            Job.array_job_id == array_job_id,
            JobEvent.id <= event_id,
            JobEvent.kind.in_(END_KINDS),
        )
        .order_by(JobEvent.id)
    ).all()
    out = []
    for kind, detail in rows:
        code = (detail or {}).get("exit_code")
        ok = isinstance(code, int) and not isinstance(code, bool)
        out.append(TaskEnd(str(kind), code if ok else None))
    return out
