"""Read-only queries the API needs and the store does not offer (yet).

Only SELECTs, in the caller's session; no writes ever happen here. They answer questions
about many rows at once (counts, the reservation history for /metrics) that the store's
record-by-record functions would answer slowly. Candidates to move into the store.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import case, func, or_, select, text
from sqlalchemy.orm import Session, aliased

from jpushare.metrics import HOLD_BUCKETS_S, MetricFigures, TierGpus
from jpushare.policy.model import Placement
from jpushare.store.health import load_health
from jpushare.store.leadership import get_lease
from jpushare.store.observations import PlacementObservation
from jpushare.store.schema import (
    ACTIVE_STATES,
    EventKind,
    GpuTier,
    Job,
    JobEvent,
    JobState,
    Lab,
)
from jpushare.store.watch import lab_reservation_totals, size_totals

PlacementKey = tuple[str, str]


def ping(session: Session) -> None:
    """Raise if the database does not answer."""
    session.execute(text("SELECT 1"))


def tier_names_by_sort_order(session: Session) -> dict[int, str]:
    """sort_order -> tier name (a job's minimum tier is stored as a sort order)."""
    out: dict[int, str] = {}
    rows = session.execute(select(GpuTier.sort_order, GpuTier.name).order_by(GpuTier.name))
    for order, name in rows:
        out.setdefault(order, name)
    return out


def job_counts_by_state(session: Session) -> dict[str, int]:
    rows = session.execute(select(Job.state, func.count()).group_by(Job.state))
    return {state: count for state, count in rows}


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
    costs (run_cost + reservation_gpu_seconds, as `job_bill`) less `charged_tflop_s`, plus
    the running attempt's GPU time since it started and the reservation's since it was last
    accrued, × TFLOPS. What `charge_lab` would add if every job ended now."""
    active = [s.value for s in ACTIVE_STATES]
    rows = session.execute(
        select(
            Lab.name,
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
    out: dict[str, LabInFlight] = {}
    for lab, state, gpus, started, uncharged, tflops, reserved, accrued, res_tflops in rows:
        total = max(0.0, uncharged)
        running = 0
        if state == JobState.RUNNING.value and started is not None and tflops is not None:
            total += gpus * max(0.0, (now - started).total_seconds()) * tflops
        if state in active:
            running = gpus
        if reserved and accrued is not None and res_tflops is not None:
            total += reserved * max(0.0, (now - accrued).total_seconds()) * res_tflops
        before = out.get(lab, LabInFlight())
        out[lab] = LabInFlight(
            before.tflop_s + total,
            before.running_gpus + running,
            before.reserved_gpus + reserved,
        )
    return out


@dataclass(frozen=True, slots=True)
class HeldReservation:
    job_id: int
    node: str
    tier: str
    gpus: int
    num_gpus: int
    since: datetime | None


def reservations(session: Session) -> list[HeldReservation]:
    """Every reservation held now (SPEC §7's partial index makes this cheap)."""
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


def reserved_by_placement(held: Sequence[HeldReservation]) -> dict[PlacementKey, int]:
    out: dict[PlacementKey, int] = defaultdict(int)
    for r in held:
        out[(r.node, r.tier)] += r.gpus
    return dict(out)


@dataclass(frozen=True, slots=True)
class PlacementCounts:
    """One placement's GPUs as recorded now: busy (the dispatcher's last observation),
    reserved (the queued jobs' reservations) and idle (neither, on an up node)."""

    busy: int
    reserved: int
    idle: int
    unavailable: int  # neither busy nor reserved, on a node that is down or drained


def placement_counts(p: Placement, reserved: int) -> PlacementCounts:
    """The one definition `placements`, `why` and /metrics share, so they always agree.

    Reserved GPUs taken by jobs outside JPU-Share (busy + reserved > capacity, until the
    next cycle releases the reservation by R5) count as busy, not twice.
    """
    busy = min(p.busy, p.capacity)
    held = min(reserved, p.capacity - busy)
    rest = max(0, p.capacity - busy - held)
    return PlacementCounts(busy, held, rest if p.schedulable else 0, 0 if p.schedulable else rest)


def tier_gpus(
    placements: Sequence[Placement], reserved: Mapping[PlacementKey, int]
) -> dict[str, TierGpus]:
    """Per tier: capacity and how many GPUs are running, reserved, idle or unavailable."""
    sums: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0, 0, 0])
    for p in placements:
        s = sums[p.tier]
        c = placement_counts(p, reserved.get(p.key, 0))
        s[0] += p.capacity
        s[1] += c.busy
        s[2] += c.reserved
        s[3] += c.idle
        s[4] += c.unavailable
    return {tier: TierGpus(*v) for tier, v in sums.items()}


def _released_reason() -> object:
    return JobEvent.detail["reason"].as_string()


def reservation_history(session: Session) -> tuple[int, dict[str, int], list[int], int, float]:
    """From `job_events`: (started, ended by reason, cumulative hold-time bucket counts,
    ended count, summed hold seconds). Released events carry `held_s`; a cancel's does
    not, so its hold time is `at - since`, computed here for those few rows."""
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
            *[func.coalesce(func.sum(case((held <= b, 1), else_=0)), 0) for b in HOLD_BUCKETS_S],
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
        for i, b in enumerate(HOLD_BUCKETS_S):
            if seconds <= b:
                buckets[i] += 1
    return int(started or 0), ended, buckets, count, total


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


def metric_figures(
    session: Session,
    placements: Sequence[Placement],
    now: datetime | None = None,
) -> MetricFigures:
    """Everything /metrics shows from the database, in the caller's transaction (`now`:
    for the oldest queued job's wait)."""
    by_state = job_counts_by_state(session)
    held = reservations(session)
    started, ended, buckets, count, total = reservation_history(session)
    submitted = session.scalar(
        select(func.count()).select_from(JobEvent).where(JobEvent.kind == EventKind.SUBMITTED.value)
    )
    usage = {name: value for name, value in session.execute(select(Lab.name, Lab.cumulative_usage))}
    return MetricFigures(
        queue_length=by_state.get(JobState.GLOBAL_QUEUE_WAIT.value, 0),
        jobs_by_state=by_state,
        jobs_submitted=int(submitted or 0),
        gpus_by_tier=tier_gpus(placements, reserved_by_placement(held)),
        reservations_active=len(held),
        reservations_started=started,
        reservations_ended=ended,
        hold_bucket_counts=buckets,
        hold_count=count,
        hold_sum_s=total,
        lab_usage=usage,
        lab_reservations=lab_reservation_totals(session),
        ended_by_size=size_totals(session),
        health=load_health(session),
        lease=get_lease(session),
        requeues=requeues_by_cause(session),
        oldest_queued_at=oldest_queued_at(session),
        foreign_gpus=foreign_gpus_by_tier(session),
        now=now,
    )
