"""An array's mail as a whole (Slurm's "Array Summary"): the store's "as of event N"
facts on both databases, and the pure plan of what each task's event sends."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from sqlalchemy.orm import Session, sessionmaker

from jpushare import store
from jpushare.mail_types import MailType
from jpushare.notify.array_mail import ArrayPlan, folded_state, plan, summary_mails
from jpushare.store.array_mail import TaskEnd, array_began_before, array_ends
from jpushare.store.notifications import NotifyEvent
from jpushare.store.schema import JobEvent
from tests.dispatcher.conftest import init_cluster
from tests.notify.test_messages import T0, event

B, E, F, R = MailType.BEGIN, MailType.END, MailType.FAIL, MailType.REQUEUE


def _event(s: Session, job: int, kind: str, from_state: str, **detail: Any) -> int:
    row = JobEvent(
        job_id=job, at=T0, kind=kind, from_state=from_state, to_state=None, detail=detail
    )
    s.add(row)
    s.flush()
    return row.id


def test_the_store_answers_as_of_an_event_not_as_of_now(sessions: sessionmaker[Session]) -> None:
    users = init_cluster(sessions)
    with sessions.begin() as s:
        done = store.submit(
            s,
            user_id=users["alice"].id,
            name="sweep",
            command="true",
            num_gpus=1,
            now=T0,
            eligibility=store.Eligibility(array_tasks=(0, 1)),
        )
        array = done.job.id
        first, second = (t.id for t in done.tasks)
        lone = store.submit(
            s, user_id=users["alice"].id, name="lone", command="true", num_gpus=1, now=T0
        ).job.id
        _event(s, lone, "started", "DISPATCHED")  # another job's start is not the array's
        start_a = _event(s, first, "started", "DISPATCHED")
        start_b = _event(s, second, "started", "DISPATCHED")
        end_a = _event(s, first, "completed", "RUNNING", exit_code=0)
        end_b = _event(s, second, "failed", "RUNNING", exit_code=3)
    with sessions() as s:
        assert not array_began_before(s, array, start_a)
        assert array_began_before(s, array, start_b)
        assert array_ends(s, array, end_a) is None  # task 1 had not ended by then
        assert array_ends(s, array, end_b) == [TaskEnd("completed", 0), TaskEnd("failed", 3)]


def task(e: NotifyEvent) -> NotifyEvent:
    """`e` as an event of task 0 of array 12."""
    return replace(e, array_job_id=12, array_task_id=0)


def test_an_array_begins_once_and_ends_once() -> None:
    started = task(event("started", from_state="DISPATCHED", types=frozenset({B, E})))
    assert plan(started, False, None).summary == [B]
    assert plan(started, True, None).summary == []  # another task began first
    done = task(event("completed", exit_code=0, types=frozenset({B, E})))
    assert plan(done, True, None).summary == []  # not the last task
    ends = [TaskEnd("completed", 0), TaskEnd("failed", 2)]
    assert plan(done, True, ends).summary == [E]
    failing = replace(done, mail_types=frozenset({E, F}))
    assert plan(failing, True, ends).summary == [F]  # FAIL asked, a task failed
    only_fail = replace(done, mail_types=frozenset({F}))
    assert plan(only_fail, True, [TaskEnd("completed", 0)]).summary == []
    unseen = task(event("completed", from_state="DISPATCHED", exit_code=0))
    assert plan(unseen, False, [TaskEnd("completed", 0)]).summary == [B, E]
    requeued = task(event("oom_requeued"))
    assert plan(requeued, True, None) == ArrayPlan([R], [])  # per task, as Slurm's


@pytest.mark.parametrize(
    ("ends", "state"),
    [
        ([TaskEnd("completed", 0), TaskEnd("completed", 0)], "COMPLETED"),
        ([TaskEnd("cancelled", None)], "CANCELLED"),
        ([TaskEnd("completed", 0), TaskEnd("cancelled", None)], "Mixed"),
    ],
)
def test_the_tasks_states_fold_as_slurms(ends: list[TaskEnd], state: str) -> None:
    assert folded_state(ends) == state


def test_the_summary_subjects_are_slurms_with_jpu_share() -> None:
    done = task(event("failed", exit_code=3, at_s=50))
    ends = [TaskEnd("completed", 0), TaskEnd("failed", 3), TaskEnd("cancelled", None)]
    began, ended = summary_mails(done, [B, F], ends, "a@example.org")
    assert began.subject == "JPU-Share Array Summary Job_id=12_* (12) Name=train Began"
    assert ended.subject == (
        "JPU-Share Array Summary Job_id=12_* (12) Name=train Failed, Mixed, ExitCode [0-3]"
    )
    assert "3: 1 COMPLETED, 1 FAILED, 1 CANCELLED" in ended.body
    assert (ended.to, ended.mail_type) == ("a@example.org", F)
