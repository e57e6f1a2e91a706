"""Lazy charging (SPEC §4) as the ledger writes it: each TFLOP-second of a job's bill
reaches its lab once, at a settlement, whatever came between."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from jpushare.ledger import (
    Account,
    EventKind,
    Run,
    accrue_reservation,
    add_run,
    end_attempt,
    resettle_run,
    settle,
)
from jpushare.vocabulary import JobState

TFLOPS = 82.6


def test_a_settlement_charges_the_bill_less_what_was_charged_and_says_so() -> None:
    charge = settle(Account(run_cost=100.0, reservation_cost=20.0, charged=30.0), {"x": 1})
    assert charge.due == 90.0
    assert charge.account == Account(100.0, 20.0, 120.0)
    (event,) = charge.events
    assert event.kind is EventKind.CHARGED
    assert dict(event.detail) == {
        "tflop_s": 90.0,
        "run_cost": 100.0,
        "reservation_cost": 20.0,
        "bill": 120.0,
        "x": 1,
    }
    again = settle(charge.account)
    assert (again.due, again.events, again.account) == (0.0, (), charge.account)


def test_an_accrual_moves_the_job_not_the_lab_and_only_forward() -> None:
    accrual = accrue_reservation(Account(), 2, 100.0, 400.0, TFLOPS)
    assert accrual.cost == pytest.approx(2 * 300 * TFLOPS)
    assert accrual.account == Account(0.0, accrual.cost, 0.0)
    assert accrual.accrued_to == 400.0
    for gpus, last, now in [(2, 400.0, 400.0), (2, 500.0, 400.0), (0, 100.0, 400.0)]:
        nothing = accrue_reservation(Account(), gpus, last, now, TFLOPS)
        assert (nothing.cost, nothing.accrued_to) == (0.0, None)
    assert accrue_reservation(Account(), 2, None, 400.0, TFLOPS).accrued_to is None


def test_an_attempt_that_ends_adds_its_run_and_charges_the_lab_in_the_same_step() -> None:
    held = Account(0.0, 50.0, 0.0)
    end = end_attempt(
        JobState.RUNNING, EventKind.NODE_FAIL_REQUEUED, held, Run(2, 1, 10.0, TFLOPS), 20.0
    )
    assert end.to_state is JobState.GLOBAL_QUEUE_WAIT
    assert end.run_cost == pytest.approx(10 * TFLOPS)
    assert end.due == end.account.charged == end.account.bill == 50.0 + end.run_cost
    kinds = [(e.kind, e.from_state, e.to_state) for e in end.events]
    assert kinds == [
        (EventKind.NODE_FAIL_REQUEUED, JobState.RUNNING, JobState.GLOBAL_QUEUE_WAIT),
        (EventKind.CHARGED, None, None),
    ]
    assert end.events[0].detail == {"attempt": 2, "run_cost": end.run_cost}
    never_ran = end_attempt(
        JobState.DISPATCHED, EventKind.FAILED, Account(), Run(1, 4, None, TFLOPS), 20.0
    )
    assert (never_ran.run_cost, never_ran.due, len(never_ran.events)) == (0.0, 0.0, 1)


def test_a_resettled_run_takes_the_difference_and_always_says_the_charge_is_final() -> None:
    charged = Account(100.0, 0.0, 100.0)
    less = resettle_run(charged, 100.0, 60.0, {"provisional": False})
    assert (less.due, less.account) == (-40.0, Account(60.0, 0.0, 60.0))
    same = resettle_run(charged, 100.0, 100.0, {"provisional": False})
    (event,) = same.events
    assert same.due == 0.0
    assert dict(event.detail) == {
        "tflop_s": 0.0,
        "run_cost": 100.0,
        "reservation_cost": 0.0,
        "bill": 100.0,
        "provisional": False,
    }


COSTS = st.floats(0.0, 1e9, allow_nan=False)
STEPS = st.lists(st.tuples(st.sampled_from(["run", "reserve", "settle"]), COSTS), max_size=40)


@given(steps=STEPS)
def test_the_lab_gets_the_whole_bill_once_whatever_the_history(
    steps: list[tuple[str, float]],
) -> None:
    account, usage, t = Account(), 0.0, 0.0
    for what, seconds in steps:
        if what == "run":
            account = add_run(account, Run(1, 2, t, TFLOPS), t + seconds).account
        elif what == "reserve":
            account = accrue_reservation(account, 3, t, t + seconds, TFLOPS).account
        else:
            charge = settle(account)
            account, usage = charge.account, usage + charge.due
        t += seconds
    charge = settle(account)
    usage += charge.due
    assert charge.account.charged == charge.account.bill
    assert usage == pytest.approx(charge.account.bill, rel=1e-9)
    assert settle(charge.account).due == 0.0
