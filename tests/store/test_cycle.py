"""load_snapshot and record_decisions: the store and the policy agree, and stale decisions
change nothing."""

from __future__ import annotations

import pytest
from sqlalchemy import update

from jpushare import store
from jpushare.policy import (
    AbsorbReservation,
    AccrueReservation,
    Dispatch,
    Placement,
    QueuedJob,
    ReleaseReason,
    ReleaseReservation,
    Reservation,
    RunningJob,
    Snapshot,
    StartReservation,
    decide,
)
from jpushare.store.schema import Lab
from jpushare.store.snapshot_and_decisions import QueueMemo
from tests.store.conftest import ALL_BUSY, TIERS, World, at, dump, run_cycle, submit

# node-b 4090: 1 idle; node-c 4090: 2 idle; everything else busy.
PARTLY_FREE = {**ALL_BUSY, ("node-b", "rtx4090"): 3, ("node-c", "rtx4090"): 2}


def _queue_of_three(world: World) -> tuple[int, int, int]:
    big = submit(world, world.bob, 4, seconds=0, min_tier="rtx4090")
    one = submit(world, world.alice, 1, seconds=1)
    two = submit(world, world.alice, 2, seconds=2)
    return big, one, two


def test_a_realistic_cycle_is_recorded_and_a_second_application_changes_nothing(
    world: World,
) -> None:
    big, one, two = _queue_of_three(world)
    with world.sessions.begin() as s:
        decisions = decide(store.load_snapshot(s, at(10), PARTLY_FREE))
    # The top job reserves the 2 idle GPUs of node-c (most idle 4090s), the 1-GPU job
    # starts beside it (S9), the second multi-GPU job waits without reserving (S8).
    assert decisions.actions == (
        StartReservation(str(big), "node-c", "rtx4090", 2),
        Dispatch(str(one), "node-b", "rtx4090", 1),
    )
    assert decisions.order == (str(big), str(one), str(two))

    with world.sessions.begin() as s:
        recorded = store.record_decisions(s, decisions, at(10))
    assert recorded.applied == decisions.actions and recorded.skipped == ()
    assert recorded.dispatched == (
        store.DispatchedJob(
            one,
            1,
            "alice-1",
            "python train.py",
            "alice",
            "node-b",
            "rtx4090",
            "p4090",
            1,
            None,
            unix_user="alice",
        ),
    )
    with world.sessions.begin() as s:
        b, o, t = store.get_job(s, big), store.get_job(s, one), store.get_job(s, two)
        kinds = {j: [e.kind for e in store.job_history(s, j)] for j in (big, one, two)}
    assert (b.state, b.reserved_gpus, b.reserved_node_name, b.reserved_tier_name) == (
        "GLOBAL_QUEUE_WAIT",
        2,
        "node-c",
        "rtx4090",
    )
    assert b.reservation_since == b.reservation_last_accrued_at == at(10)
    assert (o.state, o.node_name, o.tier_name, o.attempts, o.dispatched_at) == (
        "DISPATCHED",
        "node-b",
        "rtx4090",
        1,
        at(10),
    )
    assert (t.state, t.reserved_gpus) == ("GLOBAL_QUEUE_WAIT", 0)
    assert kinds == {
        big: ["submitted", "reservation_started"],
        one: ["submitted", "dispatched"],
        two: ["submitted"],
    }

    before = dump(world.sessions)
    with world.sessions.begin() as s:
        again = store.record_decisions(s, decisions, at(10))
    assert again.applied == () and again.dispatched == ()
    assert again.skipped == decisions.actions
    assert dump(world.sessions) == before


def test_snapshot_round_trip_matches_the_database(world: World) -> None:
    big, one, two = _queue_of_three(world)
    run_cycle(world, 10, PARTLY_FREE)
    with world.sessions.begin() as s:
        store.mark_running(s, one, at(12), "exec-1")
        snapshot = store.load_snapshot(s, at(15), PARTLY_FREE)
    assert snapshot.now == at(15).timestamp()
    assert snapshot.tiers == tuple(sorted(TIERS, key=lambda t: -t.sort_order))
    assert snapshot.lab_usage == {"alpha": 0.0, "beta": 0.0}
    assert snapshot.placements == (
        Placement("node-a", "rtx3080ti", 4, 4),
        Placement("node-b", "rtx4090", 4, 3),
        Placement("node-c", "rtx4090", 4, 2),
        Placement("node-c", "rtx5090", 4, 4),
    )
    assert sorted(snapshot.queue, key=lambda j: j.job_id) == sorted(
        [
            QueuedJob(
                str(big),
                "beta",
                4,
                20,
                at(0).timestamp(),
                Reservation("node-c", "rtx4090", 2, at(10).timestamp(), at(10).timestamp()),
            ),
            QueuedJob(str(two), "alpha", 2, 10, at(2).timestamp()),
        ],
        key=lambda j: j.job_id,
    )
    assert snapshot.running == (RunningJob(str(one), "node-b", "rtx4090", 1, at(12).timestamp()),)
    with world.sessions.begin() as s:
        assert store.held_by_jobs(s) == {("node-b", "rtx4090"): 1}


def test_accrual_absorb_and_fill_are_recorded_without_touching_the_lab(world: World) -> None:
    big = submit(world, world.bob, 4, min_tier="rtx4090")
    run_cycle(world, 10, PARTLY_FREE)  # reserves 2 on node-c
    decisions, recorded = run_cycle(world, 15, PARTLY_FREE)
    assert decisions.accruals == (AccrueReservation(str(big), 2 * 5 * 82.6, at(15).timestamp()),)
    assert recorded.accrued_tflop_s == pytest.approx(826.0)
    # node-c's other two 4090s free up: absorbed, full, dispatched there.
    freed = {**PARTLY_FREE, ("node-c", "rtx4090"): 0}
    decisions, recorded = run_cycle(world, 20, freed)
    assert decisions.actions == (
        AbsorbReservation(str(big), "node-c", "rtx4090", 2, 4),
        Dispatch(str(big), "node-c", "rtx4090", 4),
        ReleaseReservation(str(big), "node-c", "rtx4090", 4, ReleaseReason.FILLED),
    )
    assert recorded.applied == decisions.actions
    with world.sessions.begin() as s:
        job = store.get_job(s, big)
        history = store.job_history(s, big)
        assert store.get_lab(s, "beta").cumulative_usage == 0.0  # lazy: SPEC §4
    assert job.state == "DISPATCHED" and job.reserved_gpus == 0
    assert job.reservation_cost_tflop_s == pytest.approx(2 * 10 * 82.6)
    assert [e.kind for e in history] == [
        "submitted",
        "reservation_started",
        "absorbed",
        "released",
        "dispatched",
    ]
    released = history[3].detail
    assert released is not None
    assert (released["reason"], released["gpus"], released["held_s"]) == ("filled", 4, 10.0)


def test_a_swap_releases_the_reservation_and_dispatches_elsewhere(world: World) -> None:
    big = submit(world, world.bob, 4, min_tier="rtx4090")
    run_cycle(world, 10, PARTLY_FREE)
    decisions, recorded = run_cycle(world, 15, {**PARTLY_FREE, ("node-c", "rtx5090"): 0})
    assert decisions.actions == (
        Dispatch(str(big), "node-c", "rtx5090", 4),
        ReleaseReservation(str(big), "node-c", "rtx4090", 2, ReleaseReason.SWAP),
    )
    assert recorded.applied == decisions.actions
    with world.sessions.begin() as s:
        job = store.get_job(s, big)
    assert (job.state, job.tier_name, job.reserved_gpus) == ("DISPATCHED", "rtx5090", 0)
    assert job.reservation_cost_tflop_s == pytest.approx(2 * 5 * 82.6)


def test_s12_a_drained_node_releases_the_reservation_r5_and_it_moves(world: World) -> None:
    big = submit(world, world.bob, 4, min_tier="rtx4090")
    run_cycle(world, 10, PARTLY_FREE)  # reserves 2 on node-c
    with world.sessions.begin() as s:
        store.drain_node(s, "node-c", "maintenance", at(12))
    decisions, recorded = run_cycle(world, 15, PARTLY_FREE)
    assert decisions.actions == (
        ReleaseReservation(str(big), "node-c", "rtx4090", 2, ReleaseReason.R5),
        StartReservation(str(big), "node-b", "rtx4090", 1),
    )
    assert recorded.applied == decisions.actions
    with world.sessions.begin() as s:
        job = store.get_job(s, big)
        kinds = [(e.kind, (e.detail or {}).get("reason")) for e in store.job_history(s, big)]
    assert (job.reserved_node_name, job.reserved_gpus, job.reservation_since) == (
        "node-b",
        1,
        at(15),
    )
    assert job.reservation_cost_tflop_s == pytest.approx(2 * 5 * 82.6)
    assert kinds[-2:] == [("released", "r5"), ("reservation_started", None)]


def test_s5_r3_release_when_another_lab_becomes_cheaper(world: World) -> None:
    big = submit(world, world.bob, 4, min_tier="rtx4090")
    run_cycle(world, 10, PARTLY_FREE)
    other = submit(world, world.alice, 4, seconds=11, min_tier="rtx4090")
    # bob's lab used GPUs meanwhile (another of its jobs ended): alpha now goes first.
    with world.sessions.begin() as s:
        s.execute(update(Lab).where(Lab.name == "beta").values(cumulative_usage=1e6))
    decisions, recorded = run_cycle(world, 15, PARTLY_FREE)
    assert decisions.order == (str(other), str(big))
    assert decisions.actions[0] == ReleaseReservation(
        str(big), "node-c", "rtx4090", 2, ReleaseReason.R3
    )
    assert decisions.actions[1] == StartReservation(str(other), "node-c", "rtx4090", 2)
    assert recorded.applied == decisions.actions


def test_a_stale_dispatch_of_a_cancelled_job_is_skipped(world: World) -> None:
    job = submit(world, world.alice, 1)
    with world.sessions.begin() as s:
        decisions = decide(store.load_snapshot(s, at(5), PARTLY_FREE))
    with world.sessions.begin() as s:
        store.cancel_job(s, job, at(6))
    before = dump(world.sessions)
    with world.sessions.begin() as s:
        recorded = store.record_decisions(s, decisions, at(7))
    assert recorded.dispatched == () and recorded.skipped == decisions.actions
    assert dump(world.sessions) == before


def test_a_queue_memo_gives_the_same_snapshot_and_reuses_only_unchanged_jobs(
    world: World,
) -> None:
    memo = QueueMemo()
    jobs = {
        submit(world, world.alice, 1),
        submit(world, world.bob, 4, seconds=1),
        submit(world, world.alice, 2, seconds=2),
    }

    def snapshot(seconds: float) -> Snapshot:
        with world.sessions() as s:
            fresh = store.load_snapshot(s, at(seconds), PARTLY_FREE)
            memoized = store.load_snapshot(s, at(seconds), PARTLY_FREE, memo)
        assert memoized == fresh
        return memoized

    first = snapshot(5)
    decisions, _ = run_cycle(world, 10, PARTLY_FREE)
    second = snapshot(15)
    before = {j.job_id: j for j in first.queue}
    after = {j.job_id: j for j in second.queue}
    rebuilt = {j for j in after if after[j] is not before[j]}
    touched = {a.job_id for a in decisions.actions} | {a.job_id for a in decisions.accruals}
    assert touched and touched != {str(j) for j in jobs}
    # Every job the cycle changed is gone or built again; every other one is reused.
    assert rebuilt | (set(before) - set(after)) == touched
