"""Lazy charging (SPEC §4), written once: what a job owes and when it reaches its lab.

A job's `Account` holds its run cost (every attempt), its reservation cost (every accrued
span) and the part of their sum, its bill, already added to its lab's usage. The lab is
charged only at `settle`, and only `bill - charged`: settling after every end of an
attempt makes each TFLOP-second reach the lab exactly once, whatever the number of
attempts, accruals and settlements between. Times are epoch seconds (floats).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from jpushare.ledger.states import EventKind, LedgerEvent, next_state
from jpushare.policy.accounting import job_bill, reservation_accrual, run_cost
from jpushare.vocabulary import JobState


@dataclass(frozen=True, slots=True)
class Account:
    """A job's costs so far, in TFLOP-seconds; `charged` is what its lab has been charged.
    (Built field by field below, not with `dataclasses.replace`: three times faster, and
    the simulator builds one at every end of an attempt.)"""

    run_cost: float = 0.0
    reservation_cost: float = 0.0
    charged: float = 0.0

    @property
    def bill(self) -> float:
        return job_bill(self.run_cost, self.reservation_cost)


@dataclass(frozen=True, slots=True)
class Accrual:
    """The account after an accrual and the cost it added; `accrued_to` is the new time of
    the last accrual, None when there was nothing to accrue (the job's values stay)."""

    account: Account
    cost: float
    accrued_to: float | None


def accrue_reservation(
    account: Account, gpus: int, last_accrued_at: float | None, now: float, tflops: float
) -> Accrual:
    """The reservation's cost from its last accrual to `now` joins the job's account; the
    lab is not charged (lazy). Nothing when no GPUs are held or `now` is not later."""
    if gpus <= 0 or last_accrued_at is None or now <= last_accrued_at:
        return Accrual(account, 0.0, None)
    cost = reservation_accrual(gpus, last_accrued_at, now, tflops)
    added = Account(account.run_cost, account.reservation_cost + cost, account.charged)
    return Accrual(added, cost, now)


@dataclass(frozen=True, slots=True)
class Charge:
    """A settlement: the account after it, what the lab's usage gains, the events."""

    account: Account
    due: float
    events: tuple[LedgerEvent, ...]


def settle(account: Account, detail: Mapping[str, Any] | None = None) -> Charge:
    """Charge the lab what it was not charged yet of the bill: `bill - charged`, after
    which `charged == bill`, with a `charged` event (none when nothing is due). `detail`
    is added to the event's."""
    bill = account.bill
    due = bill - account.charged
    if due == 0:
        return Charge(account, 0.0, ())
    event = LedgerEvent(
        EventKind.CHARGED,
        detail={
            "tflop_s": due,
            "run_cost": account.run_cost,
            "reservation_cost": account.reservation_cost,
            "bill": bill,
            **(detail or {}),
        },
    )
    return Charge(Account(account.run_cost, account.reservation_cost, bill), due, (event,))


@dataclass(frozen=True, slots=True)
class Run:
    """The attempt that is ending: its number, GPUs, start (None: never started) and the
    TFLOPS of the tier it ran on."""

    attempt: int
    num_gpus: int
    started_at: float | None
    tflops: float


@dataclass(frozen=True, slots=True)
class AttemptEnd:
    """An attempt's end applied: the job's next state, its account (settled), this
    attempt's run cost, what its lab is due now, and the events (the end, then the
    charge if any)."""

    to_state: JobState
    account: Account
    run_cost: float
    due: float
    events: tuple[LedgerEvent, ...]


@dataclass(frozen=True, slots=True)
class RunCharge:
    account: Account
    cost: float  # the attempt's run cost, now in the account


def add_run(account: Account, run: Run, ended_at: float) -> RunCharge:
    """The run cost of `run`, ended at `ended_at`, joins the account (0.0 for a run that
    never started); the lab is not charged until `settle`."""
    cost = 0.0
    if run.started_at is not None:
        cost = run_cost(run.num_gpus, run.started_at, ended_at, run.tflops)
    return RunCharge(
        Account(account.run_cost + cost, account.reservation_cost, account.charged), cost
    )


def end_attempt(
    state: JobState | str,
    kind: EventKind,
    account: Account,
    run: Run,
    ended_at: float,
    detail: Mapping[str, Any] | None = None,
    charge_detail: Mapping[str, Any] | None = None,
) -> AttemptEnd:
    """The attempt ends by `kind` (completed, failed, cancelled, or requeued after an out
    of memory or a node failure): its run cost joins the account, the lab is charged what
    it was not yet, in the same step (SPEC §4). IllegalTransition if `kind` cannot happen
    in `state`."""
    from_state = JobState(state)
    to_state = next_state(from_state, kind)
    ran = add_run(account, run, ended_at)
    end = LedgerEvent(
        kind,
        from_state,
        to_state,
        {"attempt": run.attempt, "run_cost": ran.cost, **(detail or {})},
    )
    charge = settle(ran.account, charge_detail)
    return AttemptEnd(to_state, charge.account, ran.cost, charge.due, (end, *charge.events))


def resettle_run(
    account: Account, recorded_cost: float, real_cost: float, detail: Mapping[str, Any]
) -> Charge:
    """A run charged `recorded_cost` (up to a cancel) really cost `real_cost`: the account
    takes the difference and the lab is charged (or credited) it. The `charged` event is
    written even when nothing changes, so that it can say the charge is final."""
    fixed = Account(
        account.run_cost + (real_cost - recorded_cost), account.reservation_cost, account.charged
    )
    charge = settle(fixed, detail)
    if charge.events:
        return charge
    totals = {"run_cost": fixed.run_cost, "reservation_cost": fixed.reservation_cost}
    event = LedgerEvent(
        EventKind.CHARGED,
        detail={"tflop_s": 0.0, **totals, "bill": fixed.charged, **detail},
    )
    return Charge(fixed, 0.0, (event,))
