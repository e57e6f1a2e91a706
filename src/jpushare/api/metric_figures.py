"""GPU counts per placement and tier, and the figures /metrics shows, from the store's reads.

`placement_counts` is the one definition of busy, reserved and idle that `placements`,
`why` and /metrics share, so they always agree.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy.orm import Session

from jpushare.metrics import HOLD_BUCKETS_S, MetricFigures, TierGpus
from jpushare.policy.model import Placement
from jpushare.store import aggregates
from jpushare.store.health import load_health
from jpushare.store.leadership import get_lease
from jpushare.store.reservations import (
    PlacementKey,
    held_reservations,
    reservation_history,
    reserved_by_placement,
)
from jpushare.store.schema import JobState
from jpushare.store.watch_records import lab_reservation_totals, size_totals


@dataclass(frozen=True, slots=True)
class PlacementCounts:
    """One placement's GPUs as recorded now: busy (the dispatcher's last observation),
    reserved (the queued jobs' reservations) and idle (neither, on an up node)."""

    busy: int
    reserved: int
    idle: int
    unavailable: int  # neither busy nor reserved, on a node that is down or drained


def placement_counts(p: Placement, reserved: int) -> PlacementCounts:
    """Reserved GPUs taken by jobs outside JPU-Share (busy + reserved > capacity, until the
    next cycle releases the reservation by R5) count as busy, not twice. Idle is the
    policy's own rule (`Placement.free`, down or drained nodes have none) less what is
    reserved."""
    busy = min(p.busy, p.capacity)
    held = min(reserved, p.capacity - busy)
    idle = max(0, p.free - held)
    return PlacementCounts(busy, held, idle, p.capacity - busy - held - idle)


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


def metric_figures(
    session: Session,
    placements: Sequence[Placement],
    now: datetime | None = None,
) -> MetricFigures:
    """Everything /metrics shows from the database, in the caller's transaction (`now`:
    for the oldest queued job's wait)."""
    by_state = aggregates.job_counts_by_state(session)
    held = held_reservations(session)
    history = reservation_history(session, HOLD_BUCKETS_S)
    return MetricFigures(
        queue_length=by_state.get(JobState.GLOBAL_QUEUE_WAIT.value, 0),
        jobs_by_state=by_state,
        jobs_submitted=aggregates.jobs_submitted(session),
        gpus_by_tier=tier_gpus(placements, reserved_by_placement(held)),
        reservations_active=len(held),
        reservations_started=history.started,
        reservations_ended=history.ended,
        hold_bucket_counts=history.bucket_counts,
        hold_count=history.hold_count,
        hold_sum_s=history.hold_sum_s,
        lab_usage=aggregates.lab_usage(session),
        lab_reservations=lab_reservation_totals(session),
        ended_by_size=size_totals(session),
        health=load_health(session),
        lease=get_lease(session),
        requeues=aggregates.requeues_by_cause(session),
        oldest_queued_at=aggregates.oldest_queued_at(session),
        foreign_gpus=aggregates.foreign_gpus_by_tier(session),
        now=now,
    )
