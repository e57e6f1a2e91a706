"""The lending option's store side (`reserved_gpus: lend-by-limit`, revision 0009), on
SQLite and PostgreSQL: a lent dispatch records its lender and loan end, the snapshot gives
them back to the policy, and the lent GPU is the borrower's run cost only: the lender's
reservation pays for its unlent GPUs, and for the lent one again from the loan's end."""

from __future__ import annotations

import pytest

from jpushare import store
from jpushare.policy import Decisions, Dispatch, StartReservation, decide
from jpushare.policy.options import ReservedGpus
from jpushare.store.schema import JobState
from tests.store.conftest import ALL_BUSY, Busy, World, at

LEND = ReservedGpus.LEND_BY_LIMIT
TF = 82.6  # rtx4090
C4090 = ("node-c", "rtx4090")


def lend_cycle(world: World, seconds: float, busy: Busy) -> Decisions:
    with world.sessions.begin() as s:
        decisions = decide(store.load_snapshot(s, at(seconds), busy), reserved_gpus=LEND)
        store.record_decisions(s, decisions, at(seconds))
    return decisions


def job_of(world: World, user: store.UserRecord, gpus: int, limit: float, t: float) -> int:
    with world.sessions.begin() as s:
        return store.submit(
            s,
            user_id=user.id,
            name=f"j{gpus}",
            command="x",
            num_gpus=gpus,
            now=at(t),
            min_tier="rtx4090",
            time_limit_s=limit,
        ).job.id


def test_a_lent_run_is_recorded_loaded_and_charged_once(world: World) -> None:
    # t=0: `long` (2 GPUs, limit 600 s) starts on node-c's 4090s, the only free ones.
    long = job_of(world, world.alice, 2, 600.0, 0)
    lend_cycle(world, 0, {**ALL_BUSY, C4090: 0})
    with world.sessions.begin() as s:
        assert store.mark_running(s, long, at(0))
    # t=10: `big` (4) reserves the 2 idle GPUs; `short` (1, limit 60 s) ends by the
    # projected fill (600 s) and borrows one of them.
    big = job_of(world, world.bob, 4, 3600.0, 5)
    short = job_of(world, world.bob, 1, 60.0, 6)
    d = lend_cycle(world, 10, {**ALL_BUSY, C4090: 2})
    assert d.actions == (
        StartReservation(str(big), "node-c", "rtx4090", 2),
        Dispatch(
            str(short), "node-c", "rtx4090", 1, lent_from=str(big), lent_until=at(70).timestamp()
        ),
    )
    with world.sessions.begin() as s:
        lent = store.get_job(s, short)
        assert (lent.lent_from_job_id, lent.lent_until) == (big, at(70))
        dispatched = [e for e in store.job_history(s, short) if e.kind == "dispatched"]
        assert dispatched[0].detail is not None
        assert dispatched[0].detail["lent_from"] == big
        assert store.mark_running(s, short, at(10))
        snap = store.load_snapshot(s, at(15), {**ALL_BUSY, C4090: 3})
    assert {r.job_id: r.lent_from for r in snap.running} == {str(long): None, str(short): str(big)}

    # t=20: the reservation accrues 10 s of its one unlent GPU (the other is short's run).
    lend_cycle(world, 20, {**ALL_BUSY, C4090: 3})
    with world.sessions.begin() as s:
        assert store.get_job(s, big).reservation_cost_tflop_s == pytest.approx(1 * 10 * TF)
        # t=25: short ends; the lender is accrued up to then with the GPU still lent.
        ended = store.end_job(s, short, JobState.COMPLETED, at(25), exit_code=0)
        assert ended is not None
        assert store.get_job(s, big).reservation_cost_tflop_s == pytest.approx(15 * TF)
        assert store.get_job(s, short).run_cost == pytest.approx(15 * TF)
    # t=30: both reserved GPUs are the reservation's again: 2 x 5 s.
    lend_cycle(world, 30, {**ALL_BUSY, C4090: 2})
    with world.sessions.begin() as s:
        assert store.get_job(s, big).reservation_cost_tflop_s == pytest.approx(25 * TF)
    # Over 10..30 the two reserved GPUs held 40 GPU-s: 15 were short's run, 25 the
    # reservation's, none both.


def test_a_requeued_borrower_forgets_its_loan(world: World) -> None:
    long = job_of(world, world.alice, 2, 600.0, 0)
    lend_cycle(world, 0, {**ALL_BUSY, C4090: 0})
    big = job_of(world, world.bob, 4, 3600.0, 5)
    short = job_of(world, world.bob, 1, 60.0, 6)
    lend_cycle(world, 10, {**ALL_BUSY, C4090: 2})
    with world.sessions.begin() as s:
        assert store.mark_running(s, long, at(0)) and store.mark_running(s, short, at(10))
        assert store.requeue_after_node_failure(s, short, at(20)) is not None
        job = store.get_job(s, short)
        assert (job.state, job.lent_from_job_id, job.lent_until) == (
            JobState.GLOBAL_QUEUE_WAIT,
            None,
            None,
        )
        assert store.get_job(s, big).reservation_cost_tflop_s == pytest.approx(1 * 10 * TF)
