"""The watch-list's records read from the database for a window (SPEC §10)."""

from __future__ import annotations

import pytest

from jpushare import store
from jpushare.policy.model import ReleaseReason
from jpushare.store.schema import JobState
from jpushare.store.watch_records import load_ended_jobs, load_reservation_spans, size_totals
from tests.store.conftest import ALL_BUSY, T0, World, at, run_cycle, submit


def history(world: World) -> tuple[int, int]:
    """bob's first 4-GPU job reserves node-c's 2 idle 5090s at 0 s and is cancelled at 15 s;
    his second reserves them at 20 s, absorbs a third at 30 s, fills at 40 s and runs to 50 s."""
    busy = dict(ALL_BUSY) | {("node-c", "rtx5090"): 2}
    first = submit(world, world.bob, 4)
    run_cycle(world, 0, busy)
    with world.sessions.begin() as s:
        store.cancel_job(s, first, at(15))
    second = submit(world, world.bob, 4, seconds=16)
    run_cycle(world, 20, busy)
    run_cycle(world, 30, busy | {("node-c", "rtx5090"): 1})
    _, rec = run_cycle(world, 40, busy | {("node-c", "rtx5090"): 0})
    assert [d.job_id for d in rec.dispatched] == [second]
    with world.sessions.begin() as s:
        store.mark_running(s, second, at(40))
        store.end_job(s, second, JobState.COMPLETED, at(50))
    return first, second


def test_every_reservation_of_the_window_with_its_size_at_release(world: World) -> None:
    first, second = history(world)
    with world.sessions.begin() as s:
        spans = load_reservation_spans(s, T0, at(100))
    t0 = T0.timestamp()
    assert [(int(r.job_id), r.lab, r.tier, r.gpus, r.reason) for r in spans] == [
        (first, "beta", "rtx5090", 2, ReleaseReason.CANCEL),
        (second, "beta", "rtx5090", 4, ReleaseReason.FILLED),
    ]
    assert [(r.started_at - t0, r.hold_s) for r in spans] == [(0.0, 15.0), (20.0, 20.0)]


def test_a_reservation_started_before_the_window_is_not_in_it_and_one_open_at_its_end_is_held(
    world: World,
) -> None:
    _, second = history(world)
    with world.sessions.begin() as s:
        spans = load_reservation_spans(s, at(10), at(35))
    # The first started at 0 s (its release at 15 s is not this window's); the second is
    # still held at 35 s, with the 3 GPUs it held then.
    assert [(int(r.job_id), r.gpus, r.reason, r.ended_at) for r in spans] == [
        (second, 3, None, None)
    ]


def test_ended_jobs_carry_costs_and_the_wait_to_their_first_dispatch(world: World) -> None:
    first, second = history(world)
    with world.sessions.begin() as s:
        jobs = load_ended_jobs(s, T0, at(100))
        only_first = load_ended_jobs(s, T0, at(20))
    tflops = 104.8
    a, b = jobs
    assert (int(a.job_id), a.num_gpus, a.wait_s, a.run_cost) == (first, 4, None, 0.0)
    assert a.reservation_cost == a.charged == pytest.approx(2 * 15 * tflops)
    # The second: 2 GPUs 20-30 s, 3 GPUs 30-40 s reserved; ran 4 GPUs 40-50 s; waited 24 s.
    assert int(b.job_id) == second and b.wait_s == 24.0
    assert b.reservation_cost == pytest.approx(2 * 10 * tflops + 3 * 10 * tflops)
    assert b.run_cost == pytest.approx(4 * 10 * tflops)
    assert b.charged == pytest.approx(b.run_cost + b.reservation_cost)
    assert [int(j.job_id) for j in only_first] == [first]


def test_a_requeued_job_waited_until_its_first_dispatch_not_its_last(world: World) -> None:
    busy = dict(ALL_BUSY) | {("node-b", "rtx4090"): 0}
    job = submit(world, world.alice, 1, seconds=3)
    run_cycle(world, 5, busy)  # first dispatch at 5 s
    with world.sessions.begin() as s:
        store.mark_running(s, job, at(6))
        store.requeue_after_node_failure(s, job, at(20))
    run_cycle(world, 25, busy)  # second dispatch at 25 s
    with world.sessions.begin() as s:
        store.mark_running(s, job, at(26))
        store.end_job(s, job, JobState.COMPLETED, at(30))
        (ended,) = load_ended_jobs(s, T0, at(100))
        sizes = size_totals(s)
    assert ended.wait_s == 2.0  # 5 s - 3 s, though dispatched_at now says 25 s
    assert sizes[1].waited == 1
    assert sizes[1].wait_sum_s == pytest.approx(2.0, abs=1e-3)
