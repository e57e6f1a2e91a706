"""A job's states and the one table of its legal transitions (SPEC §5).

`TRANSITIONS[state][event]` is the state an event moves a job to; an event missing from a
state's row cannot happen to a job in that state. Events that leave the state as it is
(a reservation starting, an accrual, a charge) are not in the table: they change values,
not the state. The store's guarded UPDATEs and the simulator both take the target state
from here, so a new transition is added in one place.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from types import MappingProxyType
from typing import Any

from jpushare.vocabulary import JobState


class EventKind(StrEnum):
    """What happened to a job (`job_events.kind`)."""

    SUBMITTED = "submitted"
    RESERVATION_STARTED = "reservation_started"
    ABSORBED = "absorbed"
    RELEASED = "released"  # detail.reason: filled | swap | r3 | r5 | cancel
    # Accruals get no event (one per cycle would swamp the table): the job's
    # reservation_gpu_seconds holds the sum, and `released` says how long it was held.
    DISPATCHED = "dispatched"
    DISPATCH_CONFIRMED = "dispatch_confirmed"
    STARTED = "started"
    OOM_REQUEUED = "oom_requeued"
    NODE_FAIL_REQUEUED = "node_fail_requeued"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"
    CHARGED = "charged"  # detail: tflop_s added to the lab and the job's bill so far
    # Eligibility (`ledger.eligibility`): the job stays queued; `waiting` changes.
    HELD = "held"  # detail: by
    HOLD_RELEASED = "hold_released"  # detail: by
    ELIGIBLE = "eligible"  # it entered the policy's queue (its queue entry time)
    WAITING = "waiting"  # detail: waiting (the Waiting code), waits_for
    UPDATED = "updated"  # detail: the fields changed, before and after


_Q = JobState.GLOBAL_QUEUE_WAIT
# What ends an attempt: the job ends (completed, failed, cancelled) or goes back to the
# queue keeping its place (out of memory, node failure).
_ATTEMPT_ENDS: Mapping[EventKind, JobState] = {
    EventKind.COMPLETED: JobState.COMPLETED,
    EventKind.FAILED: JobState.FAILED,
    EventKind.CANCELLED: JobState.CANCELLED,
    EventKind.OOM_REQUEUED: _Q,
    EventKind.NODE_FAIL_REQUEUED: _Q,
}

TRANSITIONS: Mapping[JobState, Mapping[EventKind, JobState]] = MappingProxyType(
    {
        _Q: MappingProxyType(
            {
                EventKind.DISPATCHED: JobState.DISPATCHED,
                EventKind.CANCELLED: JobState.CANCELLED,
            }
        ),
        JobState.DISPATCHED: MappingProxyType(
            {EventKind.STARTED: JobState.RUNNING, **_ATTEMPT_ENDS}
        ),
        JobState.RUNNING: MappingProxyType(dict(_ATTEMPT_ENDS)),
        JobState.COMPLETED: MappingProxyType({}),
        JobState.FAILED: MappingProxyType({}),
        JobState.CANCELLED: MappingProxyType({}),
    }
)

END_EVENTS: Mapping[JobState, EventKind] = MappingProxyType(
    {
        JobState.COMPLETED: EventKind.COMPLETED,
        JobState.FAILED: EventKind.FAILED,
        JobState.CANCELLED: EventKind.CANCELLED,
    }
)
"""The event that ends a job in each ended state."""


class IllegalTransition(ValueError):
    """An event the table does not allow in the job's state (a bug in the caller)."""

    def __init__(self, state: JobState, event: EventKind) -> None:
        super().__init__(f"{event.value} cannot happen to a {state.value} job")
        self.state, self.event = state, event


def next_state(state: JobState | str, event: EventKind) -> JobState:
    """The state `event` moves a job in `state` to; IllegalTransition if it cannot."""
    state = JobState(state)
    target = TRANSITIONS[state].get(event)
    if target is None:
        raise IllegalTransition(state, event)
    return target


@dataclass(frozen=True, slots=True)
class LedgerEvent:
    """One `job_events` row without its job and time (the caller knows both)."""

    kind: EventKind
    from_state: JobState | None = None
    to_state: JobState | None = None
    detail: Mapping[str, Any] = field(default_factory=dict)
