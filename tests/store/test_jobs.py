"""Submission (SPEC §2), reading, listing and history of jobs."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest
from sqlalchemy import func, select
from sqlalchemy.exc import StatementError

from jpushare import store
from jpushare.store.schema import Job, JobEvent
from tests.store.conftest import T0, World, at, submit


def _count(world: World) -> tuple[int, int]:
    with world.sessions() as s:
        jobs = s.scalar(select(func.count()).select_from(Job))
        events = s.scalar(select(func.count()).select_from(JobEvent))
    return int(jobs or 0), int(events or 0)


def test_a_submitted_job_is_queued_with_the_lowest_tier_as_its_minimum(world: World) -> None:
    job_id = submit(world, world.alice, 2, seconds=3)
    with world.sessions.begin() as s:
        job = store.get_job(s, job_id)
        [event] = store.job_history(s, job_id)
    assert job.state == store.JobState.GLOBAL_QUEUE_WAIT
    assert (job.lab_name, job.user_name, job.num_gpus) == ("alpha", "alice", 2)
    assert job.minimum_tier_sort_order == 10
    assert job.queue_entered_at == job.submitted_at == at(3)
    assert (job.attempts, job.reserved_gpus, job.bill) == (0, 0, 0.0)
    assert event.kind == "submitted" and event.to_state == "GLOBAL_QUEUE_WAIT"
    assert event.detail == {
        "num_gpus": 2,
        "min_tier": "rtx3080ti",
        "minimum_tier_sort_order": 10,
        "fit_placements": 4,
    }


def test_s13_no_fit_placement_is_rejected_with_the_report_and_stores_nothing(
    world: World,
) -> None:
    with world.sessions.begin() as s, pytest.raises(store.NoFitPlacement) as caught:
        store.submit(
            s,
            user_id=world.alice.id,
            name="big",
            command="x",
            num_gpus=8,
            now=T0,
            min_tier="rtx4090",
        )
    report = caught.value.report
    assert not report.ok and report.largest_fit == 4
    assert "largest fit is 4" in report.message
    assert _count(world) == (0, 0)


@pytest.mark.parametrize("num_gpus", [0, 9, -1])
def test_num_gpus_outside_1_to_8_is_invalid_for_every_role(world: World, num_gpus: int) -> None:
    with world.sessions.begin() as s, pytest.raises(store.InvalidRequest):
        store.submit(s, user_id=world.root.id, name="x", command="x", num_gpus=num_gpus, now=T0)
    assert _count(world) == (0, 0)


def test_a_student_may_ask_for_as_many_gpus_as_fit(world: World) -> None:
    job_id = submit(world, world.alice, 4, min_tier="rtx5090")
    with world.sessions.begin() as s:
        assert store.get_job(s, job_id).minimum_tier_sort_order == 30


def test_unknown_tier_user_or_job(world: World) -> None:
    with world.sessions.begin() as s:
        with pytest.raises(store.InvalidRequest, match="unknown tier"):
            store.submit(
                s, user_id=world.bob.id, name="x", command="x", num_gpus=1, now=T0, min_tier="k80"
            )
        with pytest.raises(store.NotFound):
            store.submit(s, user_id=999, name="x", command="x", num_gpus=1, now=T0)
        with pytest.raises(store.NotFound):
            store.get_job(s, 999)
        with pytest.raises(store.NotFound):
            store.job_history(s, 999)


def test_list_jobs_filters_by_state_lab_and_user_newest_first(world: World) -> None:
    a1 = submit(world, world.alice, 1)
    b1 = submit(world, world.bob, 1)
    a2 = submit(world, world.alice, 2)
    with world.sessions.begin() as s:
        store.cancel_job(s, a1, at(1))

        def ids(f: store.JobFilter | None) -> list[int]:
            return [j.id for j in store.list_jobs(s, f)]

        assert ids(None) == [a2, b1, a1]
        assert ids(store.JobFilter(lab="alpha")) == [a2, a1]
        assert ids(store.JobFilter(user_id=world.bob.id)) == [b1]
        assert ids(store.JobFilter(states=(store.JobState.CANCELLED,))) == [a1]
        assert ids(store.JobFilter(before_id=a2, limit=1)) == [b1]
        assert set(store.get_jobs(s, [a1, b1, 999])) == {a1, b1}


def test_job_ids_round_trip_through_the_policy_text_form() -> None:
    assert store.parse_job_id(store.policy_job_id(42)) == 42
    for bad in ("x", "0", "-3", ""):
        with pytest.raises(store.InvalidRequest):
            store.parse_job_id(bad)


def test_times_are_aware_utc_and_naive_times_are_refused(world: World) -> None:
    naive = datetime(2026, 1, 5, 9, 0, 0)
    with pytest.raises(ValueError):
        store.to_epoch(naive)
    with world.sessions.begin() as s, pytest.raises((ValueError, StatementError)):
        store.submit(s, user_id=world.alice.id, name="x", command="x", num_gpus=1, now=naive)
    local = T0.astimezone(timezone(timedelta(hours=9)))  # the same instant, in Seoul
    job_id = submit(world, world.alice, 1)
    with world.sessions.begin() as s:
        store.submit(s, user_id=world.alice.id, name="y", command="y", num_gpus=1, now=local)
        job = store.get_job(s, job_id)
        later = store.list_jobs(s)[0]
    assert job.submitted_at.tzinfo is not None and job.submitted_at.utcoffset() == timedelta(0)
    assert later.submitted_at == T0 and later.submitted_at.tzinfo == UTC
    assert store.from_epoch(store.to_epoch(T0)) == T0
