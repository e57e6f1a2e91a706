"""Which events mail which types (Slurm's rule), and what the mails and the webhook say."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from jpushare.mail_types import MailType
from jpushare.notify.messages import (
    address_of,
    duration,
    mail_types_of,
    mails_for,
    webhook_body,
)
from jpushare.store.notifications import NotifyEvent
from jpushare.store.records import JobEventRecord
from jpushare.store.schema import EventKind

T0 = datetime(2026, 12, 3, 12, 0, 0, tzinfo=UTC)
B, E, F, R = MailType.BEGIN, MailType.END, MailType.FAIL, MailType.REQUEUE
ALL = frozenset({B, E, F, R})


def event(
    kind: str,
    *,
    event_id: int = 10,
    at_s: float = 100.0,
    from_state: str | None = "RUNNING",
    types: frozenset[MailType] = ALL,
    mail_user: str | None = "alice@example.org",
    name: str = "train",
    **detail: Any,
) -> NotifyEvent:
    return NotifyEvent(
        event_id=event_id,
        job_id=12,
        at=T0 + timedelta(seconds=at_s),
        kind=kind,
        from_state=from_state,
        to_state=None,
        detail=detail,
        job_name=name,
        user="alice",
        unix_user="al",
        lab="NLP",
        state="RUNNING",
        num_gpus=2,
        submitted_at=T0,
        mail_types=types,
        mail_user=mail_user,
    )


def record(event_id: int, kind: EventKind, at_s: float, **detail: Any) -> JobEventRecord:
    return JobEventRecord(event_id, 12, T0 + timedelta(seconds=at_s), kind, None, None, detail)


@pytest.mark.parametrize(
    ("kind", "types", "sent"),
    [
        ("started", ALL, [B]),
        ("started", frozenset({E}), []),
        ("completed", ALL, [E]),
        ("cancelled", ALL, [E]),  # Slurm: a cancelled job's mail is END, not FAIL
        ("failed", ALL, [F]),
        ("failed", frozenset({E}), [E]),  # no FAIL asked for: the end's mail is END
        ("failed", frozenset({F}), [F]),
        ("completed", frozenset({F}), []),
        ("oom_requeued", ALL, [R]),
        ("node_fail_requeued", frozenset({E}), []),
        ("dispatched", ALL, []),
        ("charged", ALL, []),
        ("submitted", ALL, []),
    ],
)
def test_mail_types_of_events(kind: str, types: frozenset[MailType], sent: list[MailType]) -> None:
    assert mail_types_of(event(kind, types=types)) == sent


def test_a_run_never_seen_running_sends_its_begin_with_its_end() -> None:
    assert mail_types_of(event("failed", from_state="DISPATCHED")) == [B, F]
    assert mail_types_of(event("completed", from_state="DISPATCHED", types=frozenset({B}))) == [B]
    # A cancel of a dispatched job: it may never have run; no BEGIN.
    assert mail_types_of(event("cancelled", from_state="DISPATCHED")) == [E]


def test_subjects_follow_slurms() -> None:
    history = [
        record(1, EventKind.SUBMITTED, 0),
        record(5, EventKind.DISPATCHED, 60, node="node-a", tier="rtx4090", attempt=1),
        record(6, EventKind.STARTED, 62),
    ]
    (began,) = mails_for(event("started", event_id=6, at_s=62), history[:2], "a@b.org")
    assert began.subject == "JPU-Share Job_id=12 Name=train Began, Queued time 00:01:02"
    assert began.to == "a@b.org"
    (ended,) = mails_for(event("completed", at_s=62 + 3725, exit_code=0), history, "a@b.org")
    assert ended.subject == (
        "JPU-Share Job_id=12 Name=train Ended, Run time 01:02:05, COMPLETED, ExitCode 0"
    )
    (failed,) = mails_for(
        event("failed", at_s=92, exit_code=None, reason="time limit (30 s)"), history, "a@b.org"
    )
    assert failed.subject == (
        "JPU-Share Job_id=12 Name=train Failed, Run time 00:00:30, FAILED (time limit)"
    )
    assert "Reason: time limit (30 s)" in failed.body
    assert "Node: node-a (rtx4090)" in failed.body and "of alice (lab NLP)" in failed.body


def test_a_requeued_attempt_queues_again_from_its_requeue() -> None:
    history = [
        record(1, EventKind.SUBMITTED, 0),
        record(2, EventKind.STARTED, 10),
        record(3, EventKind.OOM_REQUEUED, 70),
    ]
    (requeued,) = mails_for(event("oom_requeued", event_id=3, at_s=70), history[:2], "a@b.org")
    assert requeued.subject == (
        "JPU-Share Job_id=12 Name=train Requeued, Run time 00:01:00, REQUEUED (out of memory)"
    )
    (began,) = mails_for(event("started", event_id=4, at_s=100), history, "a@b.org")
    assert began.subject.endswith("Began, Queued time 00:00:30")


def test_a_name_cannot_add_a_header_line() -> None:
    (mail,) = mails_for(event("started", name="x\r\nBcc: eve@evil.org"), [], "a@b.org")
    assert "\n" not in mail.subject and "\r" not in mail.subject


def test_the_address_is_the_jobs_else_the_account_at_the_sites_domain() -> None:
    assert address_of(event("started"), "uni.edu") == "alice@example.org"
    assert address_of(event("started", mail_user=None), "uni.edu") == "al@uni.edu"
    assert address_of(event("started", mail_user=None), None) is None


def test_durations_as_slurm_writes_them() -> None:
    assert duration(62) == "00:01:02"
    assert duration(86400 + 3661) == "1-01:01:01"
    assert duration(-3) == "00:00:00"


def test_the_webhook_body_names_the_event_and_its_job() -> None:
    body = webhook_body(event("failed", exit_code=3, reason="exit code 3"))
    assert body == {
        "version": 1,
        "event_id": 10,
        "kind": "failed",
        "at": "2026-12-03T12:01:40+00:00",
        "from_state": "RUNNING",
        "to_state": None,
        "detail": {"exit_code": 3, "reason": "exit code 3"},
        "job": {
            "id": 12,
            "name": "train",
            "user": "alice",
            "lab": "NLP",
            "state": "RUNNING",
            "num_gpus": 2,
            "submitted_at": "2026-12-03T12:00:00+00:00",
        },
    }
