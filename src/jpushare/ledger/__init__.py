"""A job's life and its bill (SPEC §4, §5): pure functions on plain values, no I/O, no clock.

The store and the simulator apply what these return (the new values, the amount due to the
lab, the events to write); neither decides a transition or a charge on its own.
"""

from jpushare.ledger.charges import (
    Account,
    Accrual,
    AttemptEnd,
    Charge,
    Run,
    RunCharge,
    accrue_reservation,
    add_run,
    end_attempt,
    resettle_run,
    settle,
)
from jpushare.ledger.states import (
    END_EVENTS,
    TRANSITIONS,
    EventKind,
    IllegalTransition,
    LedgerEvent,
    next_state,
)

__all__ = [
    "END_EVENTS",
    "TRANSITIONS",
    "Account",
    "Accrual",
    "AttemptEnd",
    "Charge",
    "EventKind",
    "IllegalTransition",
    "LedgerEvent",
    "Run",
    "RunCharge",
    "accrue_reservation",
    "add_run",
    "end_attempt",
    "next_state",
    "resettle_run",
    "settle",
]
