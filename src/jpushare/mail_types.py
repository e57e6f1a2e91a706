"""sbatch's `--mail-type` and `--mail-user`, read the same way by the CLI, the API and the
notifier: the mail types JPU-Share sends, and what an address may be.

Pure: text in, values or a ValueError sentence out.

sbatch's meanings, which JPU-Share keeps (`notify.messages` sends them):
- BEGIN: the job started running (each attempt);
- END: the job ended: completed or cancelled, or failed when FAIL is not asked for;
- FAIL: the job failed (an exit code other than 0, its time limit, out of memory, a lost
  node: every FAILED end);
- REQUEUE: the job went back to the queue after an out-of-memory or node failure;
- ALL: BEGIN, END, FAIL and REQUEUE; NONE: no mail;
- ARRAY_TASKS (not a mail of its own, and not in ALL): an array's tasks mail one by one.
  Without it an array mails as a whole, as Slurm's "Array Summary": BEGIN once, when its
  first task starts; END (or FAIL, if asked and a task failed) once, when its last task
  ends; REQUEUE per requeued task.

sbatch's other types (TIME_LIMIT, TIME_LIMIT_90/80/50, INVALID_DEPEND, STAGE_OUT) are
not sent: `parse_mail_types` names them apart so the CLI can warn and go on.
"""

from __future__ import annotations

import re
from enum import StrEnum


class MailType(StrEnum):
    BEGIN = "BEGIN"
    END = "END"
    FAIL = "FAIL"
    REQUEUE = "REQUEUE"
    ARRAY_TASKS = "ARRAY_TASKS"  # how an array's mail goes (per task), not a mail


ALL_MAIL_TYPES = frozenset({MailType.BEGIN, MailType.END, MailType.FAIL, MailType.REQUEUE})
ACCEPTED = "NONE, BEGIN, END, FAIL, REQUEUE, ALL, ARRAY_TASKS"
# sbatch's types JPU-Share reads and does not send (a warning, not an error).
NOT_SENT = frozenset(
    {
        "TIME_LIMIT",
        "TIME_LIMIT_90",
        "TIME_LIMIT_80",
        "TIME_LIMIT_50",
        "INVALID_DEPEND",
        "STAGE_OUT",
    }
)

MAX_ADDRESS_LENGTH = 254  # RFC 5321's path limit less its brackets
# One address, `local@domain`: no space, comma, angle bracket or control character, so it
# can be neither two recipients nor a second header line.
_ADDRESS = re.compile(
    r"[^\s@,;<>\"()\[\]\\\x00-\x1f\x7f]+@[A-Za-z0-9](?:[A-Za-z0-9.-]*[A-Za-z0-9])?"
)


def parse_mail_types(text: str) -> tuple[frozenset[MailType], list[str]]:
    """sbatch's `--mail-type` list (`END,FAIL`, case as sbatch: any) as the types it asks
    for and the sbatch types named that JPU-Share does not send; ValueError for a word
    sbatch does not know either. NONE alone: no mail."""
    words = [w.strip().upper() for w in text.split(",") if w.strip()]
    if not words:
        raise ValueError(f"--mail-type needs one or more of {ACCEPTED}")
    types: set[MailType] = set()
    skipped: list[str] = []
    for word in words:
        if word == "ALL":
            types |= ALL_MAIL_TYPES
        elif word == "NONE":
            continue
        elif word in MailType.__members__:
            types.add(MailType(word))
        elif word in NOT_SENT:
            skipped.append(word)
        else:
            raise ValueError(f"--mail-type: {word!r} is not a mail type ({ACCEPTED})")
    if "NONE" in words and len(words) > 1:
        raise ValueError("--mail-type NONE cannot be given with other types")
    return frozenset(types), skipped


def mail_types_text(types: frozenset[MailType] | set[MailType]) -> str:
    """The types as one stored word list, in a fixed order (`BEGIN,END`); "" for none."""
    return ",".join(t.value for t in MailType if t in types)


def stored_mail_types(text: str | None) -> frozenset[MailType]:
    """The stored list back as types (unknown words, from a later version, are skipped)."""
    words = (text or "").split(",")
    return frozenset(MailType(w) for w in words if w in MailType.__members__)


def check_mail_address(value: str) -> str:
    """One mail address, `user@host.domain`, as --mail-user takes it; ValueError else."""
    if len(value) > MAX_ADDRESS_LENGTH or not _ADDRESS.fullmatch(value):
        raise ValueError(
            f"--mail-user must be one mail address (user@example.org, at most "
            f"{MAX_ADDRESS_LENGTH} characters), not {value[:80]!r}"
        )
    return value
