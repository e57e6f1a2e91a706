"""What a job's event says to its owner (mail) and to the operator (the webhook's JSON).

Pure: an event and the job's history in, messages out. Which events mail which types is
sbatch's rule (`jpushare.mail_types`), applied as Slurm's controller does: one mail per
start (BEGIN) and per requeue (REQUEUE); one per end: a completed or cancelled job's is
END, a failed one's FAIL if asked for, else END. A run that started and ended between two
looks of the dispatcher has no `started` event: its end (or requeue) sends the BEGIN mail
first, so a job that asked for BEGIN always gets it once it has run.

Subjects follow Slurm's ("Slurm Job_id=12 Name=train Began, Queued time 00:01:02"), with
JPU-Share for Slurm, so mail filters written for one work for the other with that word
changed.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from jpushare.mail_types import MailType
from jpushare.store.notifications import NotifyEvent
from jpushare.store.records import JobEventRecord
from jpushare.time_limits import state_label

SUBJECT_PREFIX = "JPU-Share"
WEBHOOK_VERSION = 1

_ENDS = {"completed": "COMPLETED", "failed": "FAILED", "cancelled": "CANCELLED"}
_REQUEUES = {
    "oom_requeued": "REQUEUED (out of memory)",
    "node_fail_requeued": "REQUEUED (node failure)",
}


@dataclass(frozen=True, slots=True)
class Mail:
    to: str
    subject: str
    body: str
    mail_type: MailType


def mail_types_of(event: NotifyEvent) -> list[MailType]:
    """The mail types this event sends to its job's owner, in order (none, one, or BEGIN
    then the end's for a run never seen running)."""
    asked = event.mail_types
    out: list[MailType] = []
    ran_unseen = event.from_state == "DISPATCHED" and event.kind != "cancelled"
    if event.kind == "started" and MailType.BEGIN in asked:
        out.append(MailType.BEGIN)
    elif event.kind in _REQUEUES:
        if ran_unseen and MailType.BEGIN in asked:
            out.append(MailType.BEGIN)
        if MailType.REQUEUE in asked:
            out.append(MailType.REQUEUE)
    elif event.kind in _ENDS:
        if ran_unseen and MailType.BEGIN in asked:
            out.append(MailType.BEGIN)
        if event.kind == "failed" and MailType.FAIL in asked:
            out.append(MailType.FAIL)
        elif MailType.END in asked:
            out.append(MailType.END)
    return out


def address_of(event: NotifyEvent, domain: str | None) -> str | None:
    """Where the job's mail goes: its --mail-user, else its owner's Unix account at the
    operator's JPUSHARE_MAIL_DOMAIN (Slurm's MailDomain), else nowhere (None)."""
    if event.mail_user:
        return event.mail_user
    return f"{event.unix_user}@{domain}" if domain else None


def duration(seconds: float) -> str:
    """Slurm's elapsed-time form: HH:MM:SS, or D-HH:MM:SS from a day on."""
    total = max(0, round(seconds))
    days, rest = divmod(total, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    clock = f"{hours:02d}:{minutes:02d}:{secs:02d}"
    return f"{days}-{clock}" if days else clock


def one_line(text: str) -> str:
    """Text other people wrote, safe in a header: control characters become spaces."""
    return "".join(" " if ord(c) < 32 or ord(c) == 127 else c for c in text).strip()


@dataclass(frozen=True, slots=True)
class _Attempt:
    queued: datetime  # when its wait began: the submission, or the requeue before it
    started: datetime | None  # its `started` event, else its `dispatched` one
    where: str | None  # "node-a (rtx4090)", from its `dispatched` event


def _attempt(event: NotifyEvent, history: Sequence[JobEventRecord]) -> _Attempt:
    """The attempt the event belongs to, from the job's events before it."""
    queued, started, where = event.submitted_at, None, None
    for e in history:
        if e.id >= event.event_id:
            break
        kind = e.kind.value
        if kind in _REQUEUES:
            queued, started, where = e.at, None, None
        elif kind in ("dispatched", "started"):
            started = e.at
        if kind == "dispatched":
            node, tier = (e.detail or {}).get("node"), (e.detail or {}).get("tier")
            if isinstance(node, str):
                where = one_line(node) + (f" ({one_line(tier)})" if isinstance(tier, str) else "")
    return _Attempt(queued, started, where)


def mails_for(
    event: NotifyEvent,
    history: Sequence[JobEventRecord],
    address: str,
    types: Sequence[MailType] | None = None,
) -> list[Mail]:
    """The mails this event sends to `address` (see the module docstring): those of
    `types` (default `mail_types_of(event)`). An array's task says so as Slurm does:
    `Array Task Job_id=12_3 (15)`."""
    attempt = _attempt(event, history)
    queued, started = attempt.queued, attempt.started
    name = one_line(event.job_name)
    head = f"{SUBJECT_PREFIX} Job_id={event.job_id} Name={name}"
    if event.array_job_id is not None:
        task = f"{event.array_job_id}_{event.array_task_id}"
        head = f"{SUBJECT_PREFIX} Array Task Job_id={task} ({event.job_id}) Name={name}"
    detail = event.detail
    exit_code = detail.get("exit_code")
    reason = detail.get("reason") if isinstance(detail.get("reason"), str) else None
    out: list[Mail] = []
    for kind in mail_types_of(event) if types is None else types:
        if kind is MailType.BEGIN:
            began = event.at if event.kind == "started" else (started or event.at)
            subject = f"{head} Began, Queued time {duration((began - queued).total_seconds())}"
            state = "RUNNING"
        else:
            run_s = (event.at - started).total_seconds() if started is not None else 0.0
            if kind is MailType.REQUEUE:
                state = _REQUEUES[event.kind]
                word = "Requeued"
            else:
                state = state_label(_ENDS[event.kind], reason)
                word = "Failed" if kind is MailType.FAIL else "Ended"
            subject = f"{head} {word}, Run time {duration(run_s)}, {state}"
            if isinstance(exit_code, int) and not isinstance(exit_code, bool):
                subject += f", ExitCode {exit_code}"
        out.append(Mail(address, subject, _body(event, state, reason, attempt.where), kind))
    return out


def _body(event: NotifyEvent, state: str, reason: str | None, where: str | None) -> str:
    lines = [
        f"Job {event.job_id} ({one_line(event.job_name)}) of {event.user} (lab {event.lab}): "
        f"{state}",
        f"Submitted: {event.submitted_at.isoformat()}",
        f"This event: {event.kind} at {event.at.isoformat()}",
    ]
    if where is not None:
        lines.append(f"Node: {where}")
    if reason:
        lines.append(f"Reason: {one_line(reason)}")
    lines.append(f"`jpushare show {event.job_id}` shows its attempts, times and costs.")
    return "\n".join(lines) + "\n"


def webhook_body(event: NotifyEvent) -> dict[str, Any]:
    """The webhook's JSON for one event (docs/formats.md, "Notifications")."""
    return {
        "version": WEBHOOK_VERSION,
        "event_id": event.event_id,
        "kind": event.kind,
        "at": event.at.isoformat(),
        "from_state": event.from_state,
        "to_state": event.to_state,
        "detail": event.detail,
        "job": {
            "id": event.job_id,
            "name": event.job_name,
            "user": event.user,
            "lab": event.lab,
            "state": event.state,
            "num_gpus": event.num_gpus,
            "submitted_at": event.submitted_at.isoformat(),
        },
    }
