"""Lazy usage accounting (SPEC §4): costs in TFLOP-seconds, charged to the lab at job end."""

from __future__ import annotations

import pytest

from jpushare.policy import (
    AbsorbReservation,
    AccrueReservation,
    Placement,
    QueuedJob,
    ReleaseReason,
    ReleaseReservation,
    Reservation,
    Snapshot,
    StartReservation,
    decide,
)
from jpushare.policy.accounting import (
    gpu_cost,
    job_bill,
    reservation_accrual,
    run_cost,
)
from tests.constants import RTX4090
from tests.policy.chain import advance, apply, job

P = ("node-p", "rtx4090")


def test_a_gpu_cost_is_gpus_times_seconds_times_tflops() -> None:
    assert gpu_cost(1, 300.0, 82.6) == pytest.approx(24_780.0)
    assert gpu_cost(4, 3_600.0, 104.8) == pytest.approx(1_509_120.0)
    assert gpu_cost(0, 300.0, 82.6) == 0.0


def test_a_negative_span_costs_nothing() -> None:
    assert gpu_cost(2, -5.0, 82.6) == 0.0
    assert reservation_accrual(2, 10.0, 5.0, 82.6) == 0.0  # a clock that went backwards
    assert run_cost(2, 10.0, 5.0, 82.6) == 0.0


def test_reservation_accrual_and_run_cost_measure_the_span_between_their_two_times() -> None:
    assert reservation_accrual(1, 0.0, 300.0, 82.6) == pytest.approx(24_780.0)
    assert run_cost(2, 1_000.0, 1_300.0, 82.6) == pytest.approx(49_560.0)


def test_the_bill_is_run_plus_reservation_with_no_discount_and_no_cap() -> None:
    assert job_bill(99_120.0, 49_560.0) == 148_680.0
    assert job_bill(0.0, 10.0**12) == 10.0**12  # no cap (design note 3.5)


def _reserving(now: float, reservation: Reservation, busy: int) -> Snapshot:
    return Snapshot(
        tiers=(RTX4090,),
        placements=(Placement("node-p", "rtx4090", capacity=4, busy=busy),),
        queue=(QueuedJob("jobA", "BCG", 4, 20, 0.0, reservation),),
        lab_usage={"BCG": 24_000.0},
        now=now,
    )


def test_absorbed_gpus_are_accrued_from_the_cycle_that_absorbed_them() -> None:
    snap = Snapshot(
        tiers=(RTX4090,),
        placements=(Placement("node-p", "rtx4090", capacity=4, busy=3),),
        queue=(QueuedJob("jobA", "BCG", 4, 20, 0.0),),
        lab_usage={"BCG": 24_000.0},
        now=0.0,
    )
    d = decide(snap)
    assert d.actions == (StartReservation("jobA", "node-p", "rtx4090", 1),)

    # t=5: one GPU frees; the cycle accrues 1 GPU x 5 s, then absorbs it.
    snap = advance(apply(snap, d), 5.0, freed={P: 1})
    d = decide(snap)
    assert d.accruals == (AccrueReservation("jobA", 1 * 5.0 * 82.6, 5.0),)
    assert d.actions == (AbsorbReservation("jobA", "node-p", "rtx4090", 1, 2),)

    # t=10: 2 GPUs x 5 s.
    snap = advance(apply(snap, d), 10.0)
    assert job(snap, "jobA").reservation == Reservation("node-p", "rtx4090", 2, 0.0, 5.0)
    d = decide(snap)
    assert d.accruals == (AccrueReservation("jobA", 2 * 5.0 * 82.6, 10.0),)
    assert d.actions == ()


def test_a_cycle_at_the_time_of_the_last_accrual_accrues_nothing() -> None:
    res = Reservation("node-p", "rtx4090", 1, since=0.0, last_accrued_at=5.0)
    d = decide(_reserving(5.0, res, busy=3))
    assert d.accruals == ()
    assert d.actions == ()


def test_skipped_cycles_accrue_the_same_total_as_every_cycle() -> None:
    res = Reservation("node-p", "rtx4090", 2, since=0.0, last_accrued_at=0.0)
    every_cycle = 0.0
    snap = _reserving(0.0, res, busy=2)
    for t in range(5, 605, 5):
        snap = advance(snap, float(t))
        d = decide(snap)
        every_cycle += sum(a.tflop_s for a in d.accruals)
        snap = apply(snap, d)

    one_jump = decide(_reserving(600.0, res, busy=2)).accruals

    assert one_jump == (AccrueReservation("jobA", 2 * 600.0 * 82.6, 600.0),)
    assert every_cycle == pytest.approx(one_jump[0].tflop_s)


def test_a_released_reservation_is_accrued_up_to_the_cycle_that_releases_it() -> None:
    res = Reservation("node-p", "rtx4090", 2, since=0.0, last_accrued_at=100.0)
    down = Snapshot(
        tiers=(RTX4090,),
        placements=(Placement("node-p", "rtx4090", 4, busy=2, schedulable=False),),
        queue=(QueuedJob("jobA", "BCG", 4, 20, 0.0, res),),
        lab_usage={"BCG": 24_000.0},
        now=130.0,
    )

    d = decide(down)

    assert d.accruals == (AccrueReservation("jobA", 2 * 30.0 * 82.6, 130.0),)
    assert d.actions == (ReleaseReservation("jobA", "node-p", "rtx4090", 2, ReleaseReason.R5),)
    assert apply(down, d).lab_usage == {"BCG": 24_000.0}  # lazy: the lab waits for job end
