"""What start estimates read from the database: past run times, and whose jobs are waiting.

Only SELECTs, in the caller's session. Both return plain tuples (user, lab, …) that
`sim.estimate` turns into its records; the store knows nothing of estimates.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import select
from sqlalchemy.orm import Session

from jpushare.store.schema import ACTIVE_STATES, Job, JobState, Lab, User

RECENT_RUNS = 5000  # history looked at: the latest completed jobs, so the read is bounded


@dataclass(frozen=True, slots=True)
class CompletedRun:
    user: str
    lab: str
    num_gpus: int
    run_s: float


def completed_runs(session: Session, limit: int = RECENT_RUNS) -> list[CompletedRun]:
    """The run times (end - start of the last attempt) of the latest `limit` COMPLETED jobs."""
    rows = session.execute(
        select(User.name, Lab.name, Job.num_gpus, Job.started_at, Job.ended_at)
        .join(User, User.id == Job.user_id)
        .join(Lab, Lab.id == Job.lab_id)
        .where(
            Job.state == JobState.COMPLETED.value,
            Job.started_at.is_not(None),
            Job.ended_at.is_not(None),
        )
        .order_by(Job.id.desc())
        .limit(limit)
    )
    return [
        CompletedRun(user, lab, n, max(0.0, (ended - started).total_seconds()))
        for user, lab, n, started, ended in rows
        if started is not None and ended is not None
    ]


def waiting_and_running_owners(session: Session) -> dict[int, tuple[str, str]]:
    """job id -> (user, lab) for every queued, dispatched or running job."""
    states = [JobState.GLOBAL_QUEUE_WAIT.value, *(s.value for s in ACTIVE_STATES)]
    rows = session.execute(
        select(Job.id, User.name, Lab.name)
        .join(User, User.id == Job.user_id)
        .join(Lab, Lab.id == Job.lab_id)
        .where(Job.state.in_(states))
    )
    return {jid: (user, lab) for jid, user, lab in rows}
