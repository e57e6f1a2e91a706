"""Figures over many rows at once, for /metrics, `labs`, `placements` and the lab page.

Only SELECTs, in the caller's session, aggregated in SQL: the record-by-record functions of
`jobs` and `accounts` would answer these slowly.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import func, or_, select
from sqlalchemy.orm import Session, aliased

from jpushare.store.observations import PlacementObservation
from jpushare.store.schema import (
    ACTIVE_STATES,
    EventKind,
    GpuTier,
    Job,
    JobEvent,
    JobState,
    Lab,
    User,
)

PlacementKey = tuple[str, str]


def job_counts_by_state(session: Session) -> dict[str, int]:
    rows = session.execute(select(Job.state, func.count()).group_by(Job.state))
    return {state: count for state, count in rows}


def jobs_submitted(session: Session) -> int:
    """Jobs ever submitted (their `submitted` events)."""
    n = session.scalar(
        select(func.count()).select_from(JobEvent).where(JobEvent.kind == EventKind.SUBMITTED.value)
    )
    return int(n or 0)


def lab_usage(session: Session) -> dict[str, float]:
    """lab name -> cumulative usage (TFLOP-seconds charged so far)."""
    return {name: value for name, value in session.execute(select(Lab.name, Lab.cumulative_usage))}


def lab_job_counts(session: Session) -> dict[str, dict[str, int]]:
    """lab name -> {"queued": n, "running": n} (running counts DISPATCHED too)."""
    active = [s.value for s in ACTIVE_STATES]
    rows = session.execute(
        select(Lab.name, Job.state, func.count())
        .join(Job, Job.lab_id == Lab.id)
        .where(Job.state.in_([JobState.GLOBAL_QUEUE_WAIT.value, *active]))
        .group_by(Lab.name, Job.state)
    )
    out: dict[str, dict[str, int]] = defaultdict(lambda: {"queued": 0, "running": 0})
    for lab, state, count in rows:
        key = "queued" if state == JobState.GLOBAL_QUEUE_WAIT.value else "running"
        out[lab][key] += count
    return dict(out)


@dataclass(frozen=True, slots=True)
class LabInFlight:
    """What a lab holds now and has not been charged for yet (charging is lazy, SPEC §4)."""

    tflop_s: float = 0.0
    running_gpus: int = 0
    reserved_gpus: int = 0


_RunTier = aliased(GpuTier)
_ReservedTier = aliased(GpuTier)


def lab_in_flight(session: Session, now: datetime) -> dict[str, LabInFlight]:
    """lab name -> its jobs' bills so far that have not reached it: each job's recorded
    costs (run_cost + reservation_gpu_seconds) less `charged_tflop_s`, plus the running
    attempt's GPU time since it started and the reservation's since it was last accrued,
    × TFLOPS. What `charge_lab` would add if every job ended now."""
    out: dict[str, LabInFlight] = {}
    for lab, _user, held in _jobs_in_flight(session, now, lab_id=None):
        out[lab] = _plus(out.get(lab, LabInFlight()), held)
    return out


def user_in_flight(session: Session, now: datetime, lab_id: int) -> dict[str, LabInFlight]:
    """user name -> what `lab_in_flight` counts for the lab, per user of the lab (the lab
    page's breakdown; the users' figures add up to the lab's)."""
    out: dict[str, LabInFlight] = {}
    for _lab, user, held in _jobs_in_flight(session, now, lab_id=lab_id):
        out[user] = _plus(out.get(user, LabInFlight()), held)
    return out


def _plus(a: LabInFlight, b: LabInFlight) -> LabInFlight:
    return LabInFlight(
        a.tflop_s + b.tflop_s, a.running_gpus + b.running_gpus, a.reserved_gpus + b.reserved_gpus
    )


def _jobs_in_flight(
    session: Session, now: datetime, lab_id: int | None
) -> Iterator[tuple[str, str, LabInFlight]]:
    """(lab, user, what the job holds uncharged) for every job not ended that holds or owes
    something; only `lab_id`'s when given. The one computation of "in flight"."""
    active = [s.value for s in ACTIVE_STATES]
    stmt = (
        select(
            Lab.name,
            User.name,
            Job.state,
            Job.num_gpus,
            Job.started_at,
            Job.run_cost + Job.reservation_gpu_seconds - Job.charged_tflop_s,
            _RunTier.tflops,
            Job.reserved_gpus,
            func.coalesce(Job.reservation_last_accrued_at, Job.reservation_since),
            _ReservedTier.tflops,
        )
        .join(Lab, Lab.id == Job.lab_id)
        .join(User, User.id == Job.user_id)
        .outerjoin(_RunTier, _RunTier.id == Job.tier_id)
        .outerjoin(_ReservedTier, _ReservedTier.id == Job.reserved_tier_id)
        .where(
            or_(
                Job.state.in_(active),
                Job.reserved_gpus > 0,
                Job.run_cost + Job.reservation_gpu_seconds > Job.charged_tflop_s,
            ),
            ~Job.state.in_([s.value for s in JobState if s.ended]),
        )
    )
    if lab_id is not None:
        stmt = stmt.where(Job.lab_id == lab_id)
    for (
        lab,
        user,
        state,
        gpus,
        started,
        uncharged,
        tflops,
        reserved,
        accrued,
        res_tflops,
    ) in session.execute(stmt):
        total = max(0.0, uncharged)
        running = 0
        if state == JobState.RUNNING.value and started is not None and tflops is not None:
            total += gpus * max(0.0, (now - started).total_seconds()) * tflops
        if state in active:
            running = gpus
        if reserved and accrued is not None and res_tflops is not None:
            total += reserved * max(0.0, (now - accrued).total_seconds()) * res_tflops
        yield lab, user, LabInFlight(total, running, reserved)


REQUEUE_CAUSES = {
    EventKind.OOM_REQUEUED.value: "oom",
    EventKind.NODE_FAIL_REQUEUED.value: "node_failure",
}


def requeues_by_cause(session: Session) -> dict[str, int]:
    """Jobs requeued after an attempt ended (SPEC §5), by cause: oom, node_failure."""
    counts = dict.fromkeys(REQUEUE_CAUSES.values(), 0)
    for kind, n in session.execute(
        select(JobEvent.kind, func.count())
        .where(JobEvent.kind.in_(list(REQUEUE_CAUSES)))
        .group_by(JobEvent.kind)
    ):
        counts[REQUEUE_CAUSES[kind]] = int(n)
    return counts


def oldest_queued_at(session: Session) -> datetime | None:
    """When the job that has waited longest in the global queue entered it."""
    at: datetime | None = session.scalar(
        select(func.min(Job.queue_entered_at)).where(Job.state == JobState.GLOBAL_QUEUE_WAIT.value)
    )
    return at


def foreign_gpus_by_tier(session: Session) -> dict[str, int]:
    """GPUs in use outside JPU-Share per tier, at the dispatcher's last observation.

    The observation counts every used GPU (foreign jobs included); JPU-Share's own jobs
    that were active then (dispatched before it) are subtracted. A job that ended since the
    observation is no longer counted as ours, so for up to one cycle its GPUs may show here.
    """
    observed: dict[PlacementKey, tuple[int, datetime]] = {
        (node, tier): (busy, at)
        for node, tier, busy, at in session.execute(
            select(
                PlacementObservation.node_name,
                PlacementObservation.tier_name,
                PlacementObservation.busy_gpus,
                PlacementObservation.observed_at,
            )
        )
    }
    if not observed:
        return {}
    ours: dict[PlacementKey, int] = defaultdict(int)
    at = max(a for _, a in observed.values())
    for node, tier, n in session.execute(
        select(Job.node_name, GpuTier.name, Job.num_gpus)
        .join(GpuTier, GpuTier.id == Job.tier_id)
        .where(Job.state.in_([s.value for s in ACTIVE_STATES]), Job.dispatched_at < at)
    ):
        if node is not None:
            ours[(node, tier)] += n
    out: dict[str, int] = defaultdict(int)
    for (node, tier), (busy, _) in observed.items():
        out[tier] += max(0, busy - ours.get((node, tier), 0))
    return dict(out)
