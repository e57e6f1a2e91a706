"""A job's life after dispatch (SPEC §5) and its bill (SPEC §4): charged once, in the
transaction that ends it."""

from __future__ import annotations

import pytest

from jpushare import store
from jpushare.policy import Dispatch, ReleaseReason
from tests.store.conftest import ALL_BUSY, World, at, dump, run_cycle, submit

PARTLY_FREE = {**ALL_BUSY, ("node-b", "rtx4090"): 3, ("node-c", "rtx4090"): 2}
ONLY_3080TI_FREE = {**ALL_BUSY, ("node-a", "rtx3080ti"): 0}
ONLY_5090_FREE = {**ALL_BUSY, ("node-c", "rtx5090"): 0}
TF_4090 = 82.6


def _usage(world: World, lab: str) -> float:
    with world.sessions.begin() as s:
        return store.get_lab(s, lab).cumulative_usage


def test_reservation_and_run_reach_the_lab_exactly_once_at_job_end(world: World) -> None:
    big = submit(world, world.bob, 4, min_tier="rtx4090")
    run_cycle(world, 10, PARTLY_FREE)  # reserve 2 on node-c
    run_cycle(world, 15, PARTLY_FREE)  # accrue 5 s
    _, recorded = run_cycle(world, 20, {**PARTLY_FREE, ("node-c", "rtx4090"): 0})  # fill
    assert [d.job_id for d in recorded.dispatched] == [big]
    assert _usage(world, "beta") == 0.0  # lazy: nothing reaches the lab before the end
    with world.sessions.begin() as s:
        assert store.confirm_dispatch(s, big, "exec-7", at(21), attempt=1)
        assert store.mark_running(s, big, at(22), attempt=1)
        assert not store.mark_running(s, big, at(23), attempt=1)  # already running
        ended = store.end_job(s, big, store.JobState.COMPLETED, at(122), exit_code=0, attempt=1)
    reservation = 2 * 10 * TF_4090
    run = 4 * 100 * TF_4090
    assert ended is not None
    assert ended.charged_tflop_s == pytest.approx(reservation + run)
    assert _usage(world, "beta") == pytest.approx(reservation + run)
    job = ended.job
    assert (job.state, job.exit_code, job.executor_id, job.started_at, job.ended_at) == (
        "COMPLETED",
        0,
        "exec-7",
        at(22),
        at(122),
    )
    assert job.run_cost == pytest.approx(run)
    assert job.charged_tflop_s == pytest.approx(job.bill)
    assert _usage(world, "alpha") == 0.0

    before = dump(world.sessions)
    with world.sessions.begin() as s:  # the executor reports the end again: nothing changes
        assert store.end_job(s, big, store.JobState.COMPLETED, at(130), exit_code=0) is None
        assert store.end_job(s, big, store.JobState.FAILED, at(130), attempt=1) is None
    assert dump(world.sessions) == before
    with world.sessions.begin() as s:
        kinds = [e.kind for e in store.job_history(s, big)]
    assert kinds[-4:] == ["dispatch_confirmed", "started", "completed", "charged"]


def test_a_job_that_started_and_ended_between_polls_is_charged_from_its_real_start(
    world: World,
) -> None:
    job = submit(world, world.alice, 1)
    run_cycle(world, 5, ONLY_3080TI_FREE)
    with world.sessions.begin() as s:
        ended = store.end_job(
            s, job, store.JobState.FAILED, at(65), exit_code=3, reason="exit 3", started_at=at(5)
        )
    assert ended is not None and ended.job.started_at == at(5)
    assert _usage(world, "alpha") == pytest.approx(60 * 34.1)


def test_s10_oom_requeue_keeps_queue_entered_at_and_raises_the_minimum_tier(
    world: World,
) -> None:
    job = submit(world, world.alice, 1, seconds=2)
    _, recorded = run_cycle(world, 5, ONLY_3080TI_FREE)
    assert recorded.applied == (Dispatch(str(job), "node-a", "rtx3080ti", 1),)
    with world.sessions.begin() as s:
        store.mark_running(s, job, at(6), "e1")
        ended = store.requeue_after_oom(s, job, at(16), attempt=1, exit_code=1)
    assert ended is not None and ended.requeued
    record = ended.job
    assert record.state == "GLOBAL_QUEUE_WAIT"
    assert record.queue_entered_at == at(2)
    assert record.minimum_tier_sort_order == 20
    assert (record.node_name, record.executor_id, record.started_at) == (None, None, None)
    assert record.attempts == 1
    assert record.reason == "out of memory on rtx3080ti; retrying at >= rtx4090"
    assert ended.charged_tflop_s == pytest.approx(10 * 34.1)
    assert _usage(world, "alpha") == pytest.approx(10 * 34.1)

    # The 3080 Ti is free again but no longer fits; a 5090 frees up and takes it.
    decisions, recorded = run_cycle(world, 20, ONLY_3080TI_FREE)
    assert recorded.applied == ()
    assert decisions.why[str(job)].code == "WAITING_FOR_GPUS"
    _, recorded = run_cycle(world, 25, ONLY_5090_FREE)
    assert [(d.job_id, d.tier, d.attempt) for d in recorded.dispatched] == [(job, "rtx5090", 2)]
    # Out of memory on the strongest tier: FAILED, saying why; only attempt 2 is charged.
    with world.sessions.begin() as s:
        assert store.requeue_after_oom(s, job, at(40), attempt=1) is None  # stale attempt
        ended = store.requeue_after_oom(s, job, at(40), attempt=2, started_at=at(30))
    assert ended is not None and not ended.requeued
    assert ended.job.state == "FAILED"
    assert ended.job.reason == "out of memory on rtx5090, and no stronger auto-assign tier exists"
    assert _usage(world, "alpha") == pytest.approx(10 * 34.1 + 10 * 104.8)
    with world.sessions.begin() as s:
        kinds = [e.kind for e in store.job_history(s, job)]
    assert kinds == [
        "submitted",
        "dispatched",
        "started",
        "oom_requeued",
        "charged",
        "dispatched",
        "failed",
        "charged",
    ]


def test_node_failure_requeues_without_escalation(world: World) -> None:
    job = submit(world, world.alice, 1, seconds=1)
    run_cycle(world, 5, ONLY_3080TI_FREE)
    with world.sessions.begin() as s:
        store.mark_running(s, job, at(5), "e1")
        ended = store.requeue_after_node_failure(s, job, at(25), attempt=1)
    assert ended is not None and ended.requeued
    assert (ended.job.state, ended.job.minimum_tier_sort_order) == ("GLOBAL_QUEUE_WAIT", 10)
    assert ended.job.queue_entered_at == at(1)
    assert "node-a failed" in (ended.job.reason or "")
    assert _usage(world, "alpha") == pytest.approx(20 * 34.1)


def test_fail_dispatch_fails_a_refused_job_once_and_charges_nothing(world: World) -> None:
    job = submit(world, world.bob, 1, seconds=2)
    free_two = {**ALL_BUSY, ("node-a", "rtx3080ti"): 2}
    _, recorded = run_cycle(world, 5, free_two)
    assert [d.job_id for d in recorded.dispatched] == [job]
    with world.sessions.begin() as s:
        failed = store.fail_dispatch(s, job, at(6), "sbatch: invalid partition", attempt=1)
        assert store.fail_dispatch(s, job, at(7), "again") is None
    assert failed is not None
    assert (failed.job.state, failed.job.reason) == ("FAILED", "sbatch: invalid partition")
    assert failed.charged_tflop_s == 0.0
    _, recorded = run_cycle(world, 10, free_two)
    assert recorded.dispatched == ()


def test_s11_cancel_during_a_reservation_charges_the_accrued_cost(world: World) -> None:
    big = submit(world, world.bob, 4, min_tier="rtx4090")
    run_cycle(world, 10, PARTLY_FREE)  # reserve 2 on node-c
    run_cycle(world, 15, PARTLY_FREE)  # accrue 5 s into the job
    with world.sessions.begin() as s:
        cancelled = store.cancel_job(s, big, at(18))
    expected = 2 * 8 * TF_4090  # 10 -> 18 s on 2 GPUs
    assert cancelled.released is ReleaseReason.CANCEL
    assert cancelled.previous_state == "GLOBAL_QUEUE_WAIT"
    assert (cancelled.stop_attempt, cancelled.stop_executor_id) == (None, None)
    assert cancelled.charged_tflop_s == pytest.approx(expected)
    job = cancelled.job
    assert (job.state, job.reserved_gpus, job.reserved_node_name, job.ended_at) == (
        "CANCELLED",
        0,
        None,
        at(18),
    )
    assert job.reservation_cost_tflop_s == pytest.approx(expected)
    assert _usage(world, "beta") == pytest.approx(expected)
    with world.sessions.begin() as s:
        history = store.job_history(s, big)
        with pytest.raises(store.InvalidTransition):
            store.cancel_job(s, big, at(20))
        with pytest.raises(store.NotFound):
            store.cancel_job(s, 999, at(20))
    assert [(e.kind, (e.detail or {}).get("reason")) for e in history][-3:] == [
        ("released", "cancel"),
        ("cancelled", "cancelled"),
        ("charged", None),
    ]
    # The next cycle frees the GPUs for others: nothing is reserved any more.
    decisions, _ = run_cycle(world, 20, PARTLY_FREE)
    assert decisions.actions == ()


def test_cancelling_a_running_job_charges_its_run_and_names_the_run_to_stop(
    world: World,
) -> None:
    job = submit(world, world.alice, 1)
    run_cycle(world, 5, ONLY_3080TI_FREE)
    with world.sessions.begin() as s:
        store.mark_running(s, job, at(10), "pgid-4242", attempt=1)
        cancelled = store.cancel_job(s, job, at(40), reason="user asked")
    assert (cancelled.previous_state, cancelled.stop_attempt, cancelled.stop_executor_id) == (
        "RUNNING",
        1,
        "pgid-4242",
    )
    assert cancelled.job.state == "CANCELLED" and cancelled.released is None
    assert cancelled.charged_tflop_s == pytest.approx(30 * 34.1)
    with world.sessions.begin() as s:  # the executor's late report changes nothing
        assert store.end_job(s, job, store.JobState.CANCELLED, at(41), attempt=1) is None
    assert _usage(world, "alpha") == pytest.approx(30 * 34.1)


def test_a_cancelled_runs_charge_is_provisional_until_its_real_end_settles_it(
    world: World,
) -> None:
    # The cancel's charge (the run up to the cancel) is marked provisional in the answer and
    # in its events; the executor's report of the real end makes it final.
    job = submit(world, world.alice, 1)
    run_cycle(world, 5, ONLY_3080TI_FREE)
    with world.sessions.begin() as s:
        store.mark_running(s, job, at(10), "pgid-7", attempt=1)
        cancelled = store.cancel_job(s, job, at(40), reason="user asked")
    assert cancelled.provisional
    with world.sessions.begin() as s:
        history = store.job_history(s, job)
    (end,) = [e for e in history if e.kind == "cancelled"]
    (charge,) = [e for e in history if e.kind == "charged"]
    assert end.detail is not None and end.detail["provisional"] is True
    assert charge.detail is not None and charge.detail["provisional"] is True
    assert charge.detail["tflop_s"] == pytest.approx(30 * 34.1)

    with world.sessions.begin() as s:  # the run really ended 2 s after the cancel
        assert store.settle_cancelled_run(s, job, 1, at(10), at(42)) == pytest.approx(2 * 34.1)
        history = store.job_history(s, job)
    final = [e for e in history if e.kind == "charged"][-1]
    assert final.detail is not None and final.detail["provisional"] is False
    assert _usage(world, "alpha") == pytest.approx(32 * 34.1)


def test_a_settlement_that_changes_nothing_still_makes_the_charge_final(world: World) -> None:
    job = submit(world, world.alice, 1)
    run_cycle(world, 5, ONLY_3080TI_FREE)
    with world.sessions.begin() as s:
        store.mark_running(s, job, at(10), "pgid-8", attempt=1)
        store.cancel_job(s, job, at(40))
    with world.sessions.begin() as s:  # it really ran from 12 to 42: as long as charged
        assert store.settle_cancelled_run(s, job, 1, at(12), at(42)) == 0.0
    with world.sessions.begin() as s:  # settled already: nothing more, no second event
        assert store.settle_cancelled_run(s, job, 1, at(12), at(42)) == 0.0
        charges = [e.detail for e in store.job_history(s, job) if e.kind == "charged"]
    assert [c and (c["provisional"], c["tflop_s"]) for c in charges] == [
        (True, pytest.approx(30 * 34.1)),
        (False, 0.0),
    ]
    assert _usage(world, "alpha") == pytest.approx(30 * 34.1)


def test_end_job_takes_only_end_states(world: World) -> None:
    job = submit(world, world.alice, 1)
    with world.sessions.begin() as s, pytest.raises(store.InvalidRequest):
        store.end_job(s, job, store.JobState.RUNNING, at(1))
    with world.sessions.begin() as s:  # a queued job cannot "end": only cancel
        assert store.end_job(s, job, store.JobState.COMPLETED, at(1)) is None
