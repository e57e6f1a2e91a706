"""An array's mail as a whole, as Slurm sends it without `--mail-type ARRAY_TASKS`.

Slurm's rule (its controller's "Array Summary" mails): BEGIN once, when the array's first
task starts; END once, when its last task ends, with the tasks' states folded into one
("COMPLETED" when all agree, else "Mixed") and the range of their exit codes; REQUEUE per
requeued task (Slurm has no whole-array requeue). JPU-Share sends FAIL instead of END when
FAIL is asked for and a task failed. With ARRAY_TASKS each task mails as a lone job does,
with Slurm's "Array Task Job_id=12_3 (15)" subject.

Pure: the event, and what the store says of its array, in; mail types and mails out.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from jpushare.mail_types import MailType
from jpushare.notify.messages import SUBJECT_PREFIX, Mail, mail_types_of, one_line
from jpushare.store.array_mail import END_KINDS, TaskEnd
from jpushare.store.notifications import NotifyEvent

_STATES = {"completed": "COMPLETED", "failed": "FAILED", "cancelled": "CANCELLED"}


def mails_as_a_whole(event: NotifyEvent) -> bool:
    """True for a task of an array that did not ask for ARRAY_TASKS."""
    return event.array_job_id is not None and MailType.ARRAY_TASKS not in event.mail_types


def needs_begin_check(event: NotifyEvent) -> bool:
    """Whether the event would send its task's BEGIN (then: did the array begin before?)."""
    return MailType.BEGIN in mail_types_of(event)


def needs_end_check(event: NotifyEvent) -> bool:
    """Whether the event ends a task and the array asked for its end (then: is it the
    array's last?)."""
    asked = event.mail_types
    return event.kind in END_KINDS and (MailType.END in asked or MailType.FAIL in asked)


@dataclass(frozen=True, slots=True)
class ArrayPlan:
    """What one event of an array that mails as a whole sends."""

    task_types: list[MailType]  # mailed as the task's (REQUEUE)
    summary: list[MailType]  # mailed as the array's (BEGIN, then END or FAIL)


def plan(event: NotifyEvent, began_before: bool, ends: Sequence[TaskEnd] | None) -> ArrayPlan:
    """`began_before`: a task of the array began in an earlier event; `ends`: how every
    task ended when this event ends the last one, else None."""
    asked = event.mail_types
    types = mail_types_of(event)
    summary: list[MailType] = []
    if MailType.BEGIN in types and not began_before:
        summary.append(MailType.BEGIN)
    if ends is not None and event.kind in END_KINDS:
        if MailType.FAIL in asked and any(e.kind == "failed" for e in ends):
            summary.append(MailType.FAIL)
        elif MailType.END in asked:
            summary.append(MailType.END)
    return ArrayPlan([t for t in types if t is MailType.REQUEUE], summary)


def folded_state(ends: Sequence[TaskEnd]) -> str:
    """The tasks' end states as one word: the state all share, else Slurm's "Mixed"."""
    states = {_STATES.get(e.kind, e.kind.upper()) for e in ends}
    return states.pop() if len(states) == 1 else "Mixed"


def summary_mails(
    event: NotifyEvent,
    types: Sequence[MailType],
    ends: Sequence[TaskEnd] | None,
    address: str,
) -> list[Mail]:
    """The array's summary mails: `JPU-Share Array Summary Job_id=12_* (12) Name=sweep
    Ended, COMPLETED, ExitCode [0-0]`."""
    array = event.array_job_id
    name = one_line(event.job_name)
    head = f"{SUBJECT_PREFIX} Array Summary Job_id={array}_* ({array}) Name={name}"
    out: list[Mail] = []
    for kind in types:
        if kind is MailType.BEGIN:
            subject, state = f"{head} Began", "RUNNING"
            body = f"Its first task ({event.job_id}) began at {event.at.isoformat()}."
        else:
            assert ends is not None
            state = folded_state(ends)
            word = "Failed" if kind is MailType.FAIL else "Ended"
            subject = f"{head} {word}, {state}"
            codes = [e.exit_code for e in ends if e.exit_code is not None]
            if codes:
                subject += f", ExitCode [{min(codes)}-{max(codes)}]"
            counts = {s: 0 for s in _STATES.values()}
            for e in ends:
                label = _STATES.get(e.kind, e.kind.upper())
                counts[label] = counts.get(label, 0) + 1
            said = ", ".join(f"{n} {s}" for s, n in counts.items() if n)
            body = f"Every task of array {array} has ended ({len(ends)}: {said})."
        text = (
            f"Array {array} ({name}) of {event.user} (lab {event.lab}): "
            f"{state}\n{body}\n`jpushare jobs -j {array}` lists its tasks.\n"
        )
        out.append(Mail(address, subject, text, kind))
    return out
