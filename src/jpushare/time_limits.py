"""Time limits as Slurm users write them, and how a job ended by its limit reads.

One parser for the CLI (`--time-limit`) and the API (`time_limit`, a string beside the
numeric `time_limit_s`), so both accept the same words. Standard library only (and the
shared vocabulary, a leaf): the user CLI imports this and must start fast. No I/O.

Accepted forms (sbatch's `--time`, plus unit suffixes):

- `90`: minutes, as sbatch;
- `MM:SS` and `HH:MM:SS` (`1:30:00`); note that `1:30` is 1 minute 30 seconds, as in Slurm;
- `D-HH`, `D-HH:MM`, `D-HH:MM:SS` (`2-00:00:00`, `1-12`);
- units: `1h30m`, `45m`, `2d`, `90s`, `1d12h` (d, h, m, s, each at most once, in that order).
"""

from __future__ import annotations

import re

from jpushare.vocabulary import JobState

TIME_LIMIT_FORMS = (
    "minutes (90), MM:SS, HH:MM:SS (1:30:00), D-HH, D-HH:MM, D-HH:MM:SS (2-00:00:00, 1-12) "
    "or units (1h30m, 45m, 2d, 90s)"
)
MAX_TIME_LIMIT_S = 365 * 86400  # the API's bound on time_limit_s (365 days)

_UNITS = re.compile(r"(?:(\d+)d)?(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?")
_DAYS = re.compile(r"(\d+)-(\d+)(?::(\d+))?(?::(\d+))?")
_CLOCK = re.compile(r"(\d+)(?::(\d+))?(?::(\d+))?")


class TimeLimitError(ValueError):
    """A time limit no accepted form reads; the message names the forms."""


def parse_time_limit(text: str) -> float:
    """A time limit in seconds, from any form in the module docstring.

    Raises TimeLimitError for anything else, zero, or more than 365 days.
    """
    value = text.strip().lower()
    seconds = _parse(value)
    if seconds is None:
        raise TimeLimitError(f"time limit {text!r} is not understood; use {TIME_LIMIT_FORMS}")
    if seconds <= 0:
        raise TimeLimitError(f"time limit {text!r} is zero; a time limit must be positive")
    if seconds > MAX_TIME_LIMIT_S:
        raise TimeLimitError(f"time limit {text!r} is too long: at most 365 days")
    return float(seconds)


def _parse(value: str) -> int | None:
    if not value:
        return None
    if value.isdigit():  # sbatch: a bare number is minutes
        return int(value) * 60
    m = _DAYS.fullmatch(value)
    if m:
        days, hours, minutes, secs = (int(g) if g else 0 for g in m.groups())
        if hours > 23 or minutes > 59 or secs > 59:
            return None
        return ((days * 24 + hours) * 60 + minutes) * 60 + secs
    m = _CLOCK.fullmatch(value)
    if m:
        parts = [int(g) for g in m.groups() if g is not None]
        if len(parts) == 2:  # MM:SS
            minutes, secs = parts
            return None if secs > 59 else minutes * 60 + secs
        hours, minutes, secs = parts  # HH:MM:SS (a lone number was handled above)
        return None if minutes > 59 or secs > 59 else (hours * 60 + minutes) * 60 + secs
    m = _UNITS.fullmatch(value)
    if m and any(m.groups()):
        days, hours, minutes, secs = (int(g) if g else 0 for g in m.groups())
        return ((days * 24 + hours) * 60 + minutes) * 60 + secs
    return None


# --- a job ended by its limit ------------------------------------------------------------

#: Every reason the service records for a run stopped at its time limit starts with this
#: (the local executor's "time limit of 3600 s reached", the Slurm executor's TIMEOUT).
TIME_LIMIT_REASON = "time limit"


def time_limit_reason(detail: str | None) -> str:
    """The reason recorded for a run its executor stopped at the limit (TIMEOUT)."""
    if detail and detail.lower().startswith(TIME_LIMIT_REASON):
        return detail
    return f"{TIME_LIMIT_REASON} reached" + (f" ({detail})" if detail else "")


def ended_by_time_limit(state: str, reason: str | None) -> bool:
    """Whether a job's state and reason say its time limit ended it."""
    return (
        state == JobState.FAILED
        and bool(reason)
        and str(reason).lower().startswith(TIME_LIMIT_REASON)
    )


def state_label(state: str, reason: str | None) -> str:
    """The state as people read it: "FAILED (time limit)" for a job its limit ended."""
    return f"{state} (time limit)" if ended_by_time_limit(state, reason) else state
