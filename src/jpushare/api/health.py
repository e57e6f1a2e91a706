"""Whether the dispatcher is doing its work, as `/healthz` says it.

A live API over a dead or failing dispatcher must not look healthy: the dispatcher is
*stale* when no cycle has succeeded for `STALE_CYCLES` cycle lengths (at least
`MIN_STALE_S`, so that one slow executor call does not flap it), and *none* when no
dispatcher has ever run a cycle or taken the lease. Pure: the caller reads the records and
the clock.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Literal

from jpushare.store.health import DispatcherHealth
from jpushare.store.leadership import LeaseRecord

STALE_CYCLES = 3
DEFAULT_CYCLE_S = 5.0  # JPUSHARE_CYCLE_S default, for records that predate cycle_s
MIN_STALE_S = 10.0

DispatcherState = Literal["ok", "stale", "none"]


@dataclass(frozen=True, slots=True)
class DispatcherVerdict:
    state: DispatcherState
    reason: str | None  # a sentence for people; None when ok
    last_success_at: datetime | None
    holder: str | None
    stale_after_s: float


def stale_after_s(cycle_s: float | None) -> float:
    """How long without a successful cycle makes the dispatcher stale."""
    return max(STALE_CYCLES * (cycle_s if cycle_s else DEFAULT_CYCLE_S), MIN_STALE_S)


def judge_dispatcher(
    health: DispatcherHealth, lease: LeaseRecord | None, now: datetime
) -> DispatcherVerdict:
    """The dispatcher's state from its records at `now`."""
    limit = stale_after_s(health.cycle_s)
    holder = lease.holder if lease is not None else None
    last = health.last_ok_at
    if last is None and (lease is None or lease.acquired_at is None):
        return DispatcherVerdict(
            "none", "no dispatcher has run a cycle on this database yet", None, holder, limit
        )
    # Before its first success, a dispatcher is judged from when it took the lease.
    since = last if last is not None else lease.acquired_at if lease is not None else None
    assert since is not None
    age = (now - since).total_seconds()
    if age <= limit:
        return DispatcherVerdict("ok", None, last, holder, limit)
    failed = ", ".join(f"{k} {n}" for k, n in sorted(health.cycles_failed.items()) if n)
    what = (
        f"no dispatcher cycle has succeeded for {age:.0f} s (limit {limit:g} s)"
        if last is not None
        else f"no dispatcher cycle has succeeded since the lease was taken {age:.0f} s ago"
    )
    detail = f"; failed cycles so far: {failed}" if failed else ""
    who = f"; the lease is held by {holder}" if holder else "; nobody holds the lease"
    return DispatcherVerdict("stale", what + detail + who, last, holder, limit)
