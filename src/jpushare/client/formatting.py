"""How the CLI (and the operator's `admin` commands) print things a person reads: aligned
tables, relative times, short amounts and durations, and state labels.

One place, so that `jobs`, `labs`, `admin lab list` and the web's pages print a state, a
number, a boolean and a time the same way. Imports nothing beyond the standard library:
the client must start at once, and the server may import this without the client's HTTP.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime

from jpushare.time_limits import ended_by_time_limit
from jpushare.vocabulary import JobState

# A person reads "QUEUED" where the API says GLOBAL_QUEUE_WAIT (the web's pages use this).
STATE_LABELS: dict[str, str] = {JobState.GLOBAL_QUEUE_WAIT: "QUEUED"}


def state_label(state: str, reason: str | None = None) -> str:
    """The word a person reads for an API state: QUEUED for GLOBAL_QUEUE_WAIT, and
    "FAILED (time limit)" for a job its time limit ended (given its reason)."""
    label = STATE_LABELS.get(state, state)
    return f"{label} (time limit)" if ended_by_time_limit(state, reason) else label


def yes_no(value: bool | None) -> str:
    return "-" if value is None else ("yes" if value else "no")


def table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """Aligned columns; numbers right-aligned, text left-aligned."""
    cells = [[("-" if c is None else str(c)) for c in row] for row in rows]
    widths = [len(h) for h in headers]
    for row in cells:
        for i, c in enumerate(row):
            widths[i] = max(widths[i], len(c))
    numeric = [
        bool(rows) and all(isinstance(r[i], int | float) or r[i] is None for r in rows)
        for i in range(len(headers))
    ]

    def line(values: Sequence[str]) -> str:
        parts = [
            v.rjust(widths[i]) if numeric[i] else v.ljust(widths[i]) for i, v in enumerate(values)
        ]
        return "  ".join(parts).rstrip()

    return "\n".join([line(list(headers)), *(line(r) for r in cells)])


def parse_time(value: str | None) -> datetime | None:
    if not value:
        return None
    try:
        at = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return at if at.tzinfo else at.replace(tzinfo=UTC)


def ago(value: str | None, now: datetime) -> str:
    """'3m ago', '2h ago', 'in 5s' (clock skew), '-' when unknown."""
    at = parse_time(value)
    if at is None:
        return "-"
    seconds = (now - at).total_seconds()
    future = seconds < 0
    s = int(abs(seconds))
    if s < 60:
        text = f"{s}s"
    elif s < 3600:
        text = f"{s // 60}m"
    elif s < 86400:
        text = f"{s // 3600}h{(s % 3600) // 60:02d}m" if s < 36000 else f"{s // 3600}h"
    else:
        text = f"{s // 86400}d{(s % 86400) // 3600}h"
    return f"in {text}" if future else f"{text} ago"


def amount(tflop_s: float) -> str:
    """TFLOP-seconds, short: 0, 950, 12.3k, 4.56M, 7.89G."""
    for limit, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(tflop_s) >= limit:
            return f"{tflop_s / limit:.3g}{suffix}"
    return f"{tflop_s:.0f}"


def duration(seconds: float | None) -> str:
    """Seconds, short: 45s, 12.5m, 3.2h, 2.1d; '-' when unknown."""
    if seconds is None:
        return "-"
    if seconds < 120:
        return f"{seconds:.0f}s"
    if seconds < 7200:
        return f"{seconds / 60:.1f}m"
    if seconds < 172800:
        return f"{seconds / 3600:.1f}h"
    return f"{seconds / 86400:.1f}d"
