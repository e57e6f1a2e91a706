"""The scheduling policy of SPEC §1-§5 and §8: pure functions, no I/O, no clock."""

from jpushare.policy.decide import decide, queue_order
from jpushare.policy.fit import check_fit, default_min_sort_order, fits
from jpushare.policy.model import (
    AbsorbReservation,
    AccrueReservation,
    Action,
    Decisions,
    Dispatch,
    Placement,
    QueuedJob,
    ReleaseReason,
    ReleaseReservation,
    Reservation,
    RunningJob,
    Snapshot,
    StartReservation,
    Tier,
    Why,
    WhyCode,
)
from jpushare.policy.oom import escalate
from jpushare.policy.order import PlacementOrder

__all__ = [
    "AbsorbReservation",
    "AccrueReservation",
    "Action",
    "Decisions",
    "Dispatch",
    "Placement",
    "PlacementOrder",
    "QueuedJob",
    "ReleaseReason",
    "ReleaseReservation",
    "Reservation",
    "RunningJob",
    "Snapshot",
    "StartReservation",
    "Tier",
    "Why",
    "WhyCode",
    "check_fit",
    "decide",
    "default_min_sort_order",
    "escalate",
    "fits",
    "queue_order",
]
