"""The SPEC §10 watch-list's definitions, on hand-built records with hand-worked figures."""

from __future__ import annotations

import pytest

from jpushare.policy.model import ReleaseReason
from jpushare.policy.watch import (
    EndedJob,
    ReservationSpan,
    watch_figures,
    watch_over_time,
)

R = ReleaseReason

# Six reservations of two labs: A's end by r3 (10 s), filled (100 s), cancel (30 s) and one
# still held; B's by r5 (20 s) and swap (40 s).
SPANS = [
    ReservationSpan("1", "A", "t", 2, 0.0, 10.0, R.R3),
    ReservationSpan("1", "A", "t", 4, 20.0, 120.0, R.FILLED),
    ReservationSpan("2", "B", "t", 1, 5.0, 25.0, R.R5),
    ReservationSpan("3", "B", "t", 3, 30.0, 70.0, R.SWAP),
    ReservationSpan("4", "A", "t", 2, 200.0, 230.0, R.CANCEL),
    ReservationSpan("5", "A", "t", 1, 240.0),
]

# Ended jobs: two 1-GPU jobs (waits 0 and 60 s), two 4-GPU jobs (one paid 200 of
# reservation on a run of 800; one cancelled in the queue after 100 of reservation).
JOBS = [
    EndedJob("a", "A", 1, 0.0, 100.0, 0.0, 100.0),
    EndedJob("b", "B", 1, 60.0, 300.0, 0.0, 300.0),
    EndedJob("c", "A", 4, 90.0, 800.0, 200.0, 1000.0),
    EndedJob("d", "A", 4, None, 0.0, 100.0, 100.0),
]


def test_failed_reservations_are_r3_r5_and_cancel_over_all_started() -> None:
    w = watch_figures(SPANS, JOBS)
    r = w.reservations
    assert r.started == 6
    assert dict(r.released) == {"filled": 1, "swap": 1, "r3": 1, "r5": 1, "cancel": 1}
    assert r.held == 1
    assert r.failed == 3
    assert r.failed_rate == pytest.approx(3 / 6)


def test_failed_reservations_are_counted_per_lab_of_the_job_that_held_them() -> None:
    by_lab = watch_figures(SPANS, JOBS).reservations_by_lab
    assert sorted(by_lab) == ["A", "B"]
    # A: r3, filled, cancel, held -> 2 failed of 4; B: r5, swap -> 1 of 2.
    assert (by_lab["A"].started, by_lab["A"].failed, by_lab["A"].held) == (4, 2, 1)
    assert by_lab["A"].failed_rate == pytest.approx(0.5)
    assert (by_lab["B"].started, by_lab["B"].failed) == (2, 1)
    assert by_lab["B"].released["swap"] == 1


def test_hold_is_over_released_reservations_only() -> None:
    h = watch_figures(SPANS, JOBS).hold
    # holds 10, 100, 20, 40, 30 -> sorted 10 20 30 40 100; mean 40; p95 at rank 3.8:
    # 40 + 0.8 * (100 - 40) = 88; max 100. The held one does not count.
    assert h.count == 5
    assert h.mean_s == pytest.approx(40.0)
    assert h.p95_s == pytest.approx(88.0)
    assert h.max_s == 100.0


def test_reservation_share_and_burden_per_job_size() -> None:
    w = watch_figures(SPANS, JOBS)
    # charged 100 + 300 + 1000 + 100 = 1500, of which reservation 300: a share of 0.2.
    assert w.charged_tflop_s == 1500.0
    assert w.reservation_tflop_s == 300.0
    assert w.reservation_share == pytest.approx(0.2)
    one, four = w.by_gpus
    assert (one.num_gpus, one.jobs, one.burden, one.started) == (1, 2, 1.0, 2)
    assert one.mean_wait_s == pytest.approx(30.0)
    # 4 GPUs: charged 1100 for a run of 800 -> 1.375; only c ever started (wait 90).
    assert (four.num_gpus, four.jobs, four.started) == (4, 2, 1)
    assert four.burden == pytest.approx(1100 / 800)
    assert four.mean_wait_s == 90.0


def test_no_records_give_no_ratios_rather_than_zeros() -> None:
    w = watch_figures([], [])
    assert w.reservations.started == 0
    assert w.reservations.failed_rate is None
    assert w.hold.mean_s is None
    assert w.reservation_share is None
    assert w.by_gpus == ()
    # A size class that never ran has no burden either.
    only_queued = watch_figures([], [EndedJob("x", "A", 2, None, 0.0, 5.0, 5.0)])
    assert only_queued.by_gpus[0].burden is None
    assert only_queued.by_gpus[0].mean_wait_s is None


def test_the_document_is_rounded_and_keyed_by_gpu_count() -> None:
    doc = watch_figures(SPANS, JOBS).as_dict()
    assert doc["reservations"]["failed_rate"] == 0.5
    assert doc["reservations_by_lab"]["B"]["released"]["r5"] == 1
    assert doc["hold_s"] == {"count": 5, "mean": 40.0, "p95": 88.0, "max": 100.0}
    assert doc["usage"]["reservation_share"] == 0.2
    assert doc["by_gpus"]["4"]["burden"] == 1.375
    assert list(doc["by_gpus"]) == ["1", "4"]


def test_over_time_buckets_reservations_by_start_with_empty_buckets_kept() -> None:
    buckets = watch_over_time(SPANS, 100.0)
    # Starts 0, 20, 5, 30 -> bucket 0; none in [100, 200); 200, 240 -> bucket 2.
    assert [b.start for b in buckets] == [0.0, 100.0, 200.0]
    assert [b.counts.started for b in buckets] == [4, 0, 2]
    assert [b.counts.failed for b in buckets] == [2, 0, 1]
    assert buckets[1].counts.failed_rate is None
    assert buckets[0].hold.mean_s == pytest.approx((10 + 100 + 20 + 40) / 4)
    assert buckets[2].hold.count == 1  # the held one has no hold yet
    with pytest.raises(ValueError):
        watch_over_time(SPANS, 0.0)


def test_reserved_gpu_seconds_are_each_reservation_held_inside_the_window() -> None:
    from jpushare.policy.watch import reserved_gpu_s

    # Over [0, 250]: 2x10 + 4x100 + 1x20 + 3x40 + 2x30 + 1x10 (held: until 250) = 630.
    assert reserved_gpu_s(SPANS, 0.0, 250.0) == 630.0
    # Over [50, 100]: only the filled one (4 x 50) and the swap one (3 x 20).
    assert reserved_gpu_s(SPANS, 50.0, 100.0) == 260.0
    # A reservation that absorbed: 2 GPUs from 0 s, 3 from 40 s, released at 100 s.
    grown = ReservationSpan("6", "A", "t", 3, 0.0, 100.0, R.FILLED, ((0.0, 2), (40.0, 3)))
    assert reserved_gpu_s([grown], 0.0, 1000.0) == 2 * 40 + 3 * 60
    assert reserved_gpu_s([grown], 50.0, 1000.0) == 3 * 50


def test_the_backfill_split_says_how_much_reserved_time_backfill_served() -> None:
    from jpushare.policy.watch import BackfillTotals, backfill_split

    totals = BackfillTotals(
        reserved_served_gpu_s=315.0,
        idle_served_gpu_s=3600.0,
        idle_gpu_s=7200.0,
        yields=4,
        yield_seconds_sum=10.0,
        yield_seconds_max=5.0,
        since=0.0,
    )
    d = backfill_split(SPANS, 0.0, 250.0, totals).as_dict()
    assert d["reserved_gpu_hours"] == pytest.approx(630 / 3600, abs=1e-6)
    assert d["served_share_of_reserved"] == 0.5
    assert (d["backfill_idle_gpu_hours"], d["idle_gpu_hours"]) == (1.0, 2.0)
    assert (d["yields"], d["yield_mean_s"], d["yield_max_s"]) == (4, 2.5, 5.0)
    none = backfill_split([], 0.0, 250.0, BackfillTotals()).as_dict()
    assert (none["served_share_of_reserved"], none["yield_mean_s"], none["keeper_since"]) == (
        None,
        None,
        None,
    )
