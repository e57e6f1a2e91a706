"""Each lab's charges over a window, read from the `charged` job events (the dashboard's chart).

A lab's usage changes when one of its jobs (or an attempt) is charged, and every charge is
a `charged` event whose `detail.tflop_s` is the amount added (`ledger.settle`, written by
`ledger_writes`).
`lab_charges(session, since, until)` returns those amounts in time order, so the dashboard
can draw each lab's usage backwards from the figure `GET /v1/labs` shows now: the line ends
exactly at that number. `user_charges` sums the same events per user of one lab (the lab
page's usage over 7, 30 or 90 days). Only SELECTs, in the caller's session.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import select
from sqlalchemy.orm import Session

from jpushare.store.schema import EventKind, Job, JobEvent, Lab, User


@dataclass(frozen=True, slots=True)
class LabCharge:
    """`tflop_s` added to `lab`'s usage at `at`."""

    at: datetime
    lab: str
    tflop_s: float


def lab_charges(session: Session, since: datetime, until: datetime) -> list[LabCharge]:
    """Every charge in (since, until], oldest first."""
    rows = session.execute(
        select(JobEvent.at, Lab.name, JobEvent.detail)
        .join(Job, Job.id == JobEvent.job_id)
        .join(Lab, Lab.id == Job.lab_id)
        .where(
            JobEvent.kind == EventKind.CHARGED.value,
            JobEvent.at > since,
            JobEvent.at <= until,
        )
        .order_by(JobEvent.at, JobEvent.id)
    ).all()
    charges = []
    for at, lab, detail in rows:
        amount = detail.get("tflop_s") if isinstance(detail, dict) else None
        if isinstance(amount, int | float):
            charges.append(LabCharge(at=at, lab=lab, tflop_s=float(amount)))
    return charges


@dataclass(frozen=True, slots=True)
class UserCharges:
    """What one user's jobs added to their lab's usage in a window, and how many jobs."""

    tflop_s: float = 0.0
    jobs: int = 0


def user_charges(
    session: Session, lab_id: int, since: datetime, until: datetime
) -> dict[str, UserCharges]:
    """user name -> the charges in (since, until] of their jobs in lab `lab_id` (a job
    charged twice, e.g. a requeued attempt, counts once in `jobs`)."""
    rows = session.execute(
        select(User.name, JobEvent.job_id, JobEvent.detail)
        .join(Job, Job.id == JobEvent.job_id)
        .join(User, User.id == Job.user_id)
        .where(
            Job.lab_id == lab_id,
            JobEvent.kind == EventKind.CHARGED.value,
            JobEvent.at > since,
            JobEvent.at <= until,
        )
    ).all()
    amounts: dict[str, float] = {}
    jobs: dict[str, set[int]] = {}
    for user, job_id, detail in rows:
        amount = detail.get("tflop_s") if isinstance(detail, dict) else None
        if isinstance(amount, int | float):
            amounts[user] = amounts.get(user, 0.0) + float(amount)
            jobs.setdefault(user, set()).add(job_id)
    return {u: UserCharges(amounts[u], len(jobs[u])) for u in amounts}
