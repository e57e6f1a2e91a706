"""Reservations across all jobs: the ones held now and the history of those that ended.

Only SELECTs, in the caller's session. `placements`, `why` and /metrics read the held
ones from here (the partial index on held reservations makes that cheap); /metrics reads
the history, aggregated in SQL because every scrape reads it.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime

from sqlalchemy import case, func, select
from sqlalchemy.orm import Session

from jpushare.store.schema import EventKind, GpuTier, Job, JobEvent, JobState

PlacementKey = tuple[str, str]


@dataclass(frozen=True, slots=True)
class HeldReservation:
    job_id: int
    node: str
    tier: str
    gpus: int
    num_gpus: int
    since: datetime | None


def held_reservations(session: Session) -> list[HeldReservation]:
    """Every reservation held now, by job id."""
    rows = session.execute(
        select(
            Job.id,
            Job.reserved_node_name,
            GpuTier.name,
            Job.reserved_gpus,
            Job.num_gpus,
            Job.reservation_since,
        )
        .join(GpuTier, GpuTier.id == Job.reserved_tier_id)
        .where(Job.reserved_gpus > 0, Job.state == JobState.GLOBAL_QUEUE_WAIT.value)
        .order_by(Job.id)
    )
    return [
        HeldReservation(jid, node, tier, gpus, n, since)
        for jid, node, tier, gpus, n, since in rows
        if node is not None
    ]


@dataclass(frozen=True, slots=True)
class LentRun:
    """A DISPATCHED or RUNNING job on GPUs lent from `lent_from`'s reservation (lending)."""

    job_id: int
    node: str
    tier: str
    gpus: int
    lent_from: int
    until: datetime | None


def lent_runs(session: Session) -> list[LentRun]:
    """Every run on lent GPUs now (`reserved_gpus: lend-by-limit`), by job id: a handful
    of rows among the active jobs."""
    rows = session.execute(
        select(
            Job.id, Job.node_name, GpuTier.name, Job.num_gpus, Job.lent_from_job_id, Job.lent_until
        )
        .join(GpuTier, GpuTier.id == Job.tier_id)
        .where(
            Job.lent_from_job_id.is_not(None),
            Job.state.in_([JobState.DISPATCHED.value, JobState.RUNNING.value]),
        )
        .order_by(Job.id)
    )
    return [
        LentRun(jid, node, tier, n, lender, until)
        for jid, node, tier, n, lender, until in rows
        if node is not None and lender is not None
    ]


def reserved_by_placement(held: Sequence[HeldReservation]) -> dict[PlacementKey, int]:
    out: dict[PlacementKey, int] = defaultdict(int)
    for r in held:
        out[(r.node, r.tier)] += r.gpus
    return dict(out)


@dataclass(frozen=True, slots=True)
class ReservationHistory:
    """All reservations so far: how many started, how many ended by release reason, and the
    ended ones' hold times (cumulative counts per bound of `bounds_s`, their count and sum)."""

    started: int = 0
    ended: dict[str, int] = field(default_factory=dict)
    bucket_counts: list[int] = field(default_factory=list)
    hold_count: int = 0
    hold_sum_s: float = 0.0


def reservation_history(session: Session, bounds_s: Sequence[float]) -> ReservationHistory:
    """From `job_events`. Released events carry `held_s`; a cancel's does not, so its hold
    time is `at - since`, computed here for those few rows."""
    started = session.scalar(
        select(func.count())
        .select_from(JobEvent)
        .where(JobEvent.kind == EventKind.RESERVATION_STARTED.value)
    )
    reason = JobEvent.detail["reason"].as_string()
    ended = {
        r: c
        for r, c in session.execute(
            select(reason, func.count())
            .where(JobEvent.kind == EventKind.RELEASED.value)
            .group_by(reason)
        )
        if r is not None
    }
    held = JobEvent.detail["held_s"].as_float()
    released = JobEvent.kind == EventKind.RELEASED.value
    row = session.execute(
        select(
            func.count(held),
            func.coalesce(func.sum(held), 0.0),
            *[func.coalesce(func.sum(case((held <= b, 1), else_=0)), 0) for b in bounds_s],
        ).where(released)
    ).one()
    count, total = int(row[0]), float(row[1])
    buckets = [int(v) for v in row[2:]]
    # Released events without held_s (cancels): at - since, in Python.
    since = JobEvent.detail["since"].as_string()
    for at, since_text in session.execute(
        select(JobEvent.at, since).where(released, held.is_(None), since.is_not(None))
    ):
        try:
            seconds = max(0.0, (at - datetime.fromisoformat(since_text)).total_seconds())
        except (TypeError, ValueError):
            continue
        count += 1
        total += seconds
        for i, b in enumerate(bounds_s):
            if seconds <= b:
                buckets[i] += 1
    return ReservationHistory(int(started or 0), ended, buckets, count, total)
