"""How the CLI (and the operator's `admin` commands) print things a person reads: aligned
tables, relative times, short amounts and durations, state labels, and text made safe
for a terminal.

One place, so that `jobs`, `labs`, `admin lab list` and the web's pages print a state, a
number, a boolean and a time the same way. Imports nothing beyond the standard library:
the client must start at once, and the server may import this without the client's HTTP.

Terminal safety: job names, users, labs, commands, reasons, why sentences and the server's
error messages are written by other people, and a terminal obeys what it is sent (ESC ]
sets the window title or the clipboard, ESC [2J clears the screen, CR and bidi overrides
hide what follows). `clean` makes one such field a single printable line: escape
sequences (7- and 8-bit) are dropped whole, tabs, newlines and other line breaks become a
space, every other C0/C1 control, DEL and the bidi embedding/override/isolate marks are
dropped. `printable` applies it to every string of an API answer (the client does this
for every answer it prints, and `table` for every cell); `clean_output` is the multi-line
variant for another person's job output; `json_text` keeps `--json` exact while escaping
the characters a terminal would act on.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from jpushare.time_limits import ended_by_time_limit
from jpushare.vocabulary import JobState

# A person reads "QUEUED" where the API says GLOBAL_QUEUE_WAIT (the web's pages use this).
STATE_LABELS: dict[str, str] = {JobState.GLOBAL_QUEUE_WAIT: "QUEUED"}


def state_label(state: str, reason: str | None = None) -> str:
    """The word a person reads for an API state: QUEUED for GLOBAL_QUEUE_WAIT, and
    "FAILED (time limit)" for a job its time limit ended (given its reason)."""
    label = STATE_LABELS.get(state, state)
    return f"{label} (time limit)" if ended_by_time_limit(state, reason) else label


# An escape sequence, dropped whole: CSI (ESC [ or 0x9B, parameters, intermediates, a final
# byte); a string (OSC, DCS, SOS, PM, APC; 7- or 8-bit) up to its BEL or ST, or to the end
# when it has none (a terminal would swallow the rest too); any other ESC and what it
# selects.
_ESCAPE_SEQUENCE = re.compile(
    r"(?:\x1b\[|\x9b)[0-?]*[ -/]*[@-~]?"
    r"|(?:\x1b[\]PX^_]|[\x90\x98\x9d\x9e\x9f])[^\x07\x1b\x9c]*(?:\x07|\x1b\\|\x9c)?"
    r"|\x1b[ -/]*[0-~]?"
)
_BIDI = "\u200e\u200f\u202a-\u202e\u2066-\u2069"
_LINE_BREAKS = re.compile(r"[\t\n\v\f\r\x85\u2028\u2029]+")
_CONTROLS = re.compile(f"[\\x00-\\x1f\\x7f-\\x9f{_BIDI}]")
_CONTROLS_BUT_LAYOUT = re.compile(f"[\\x00-\\x08\\x0b-\\x1f\\x7f-\\x9f{_BIDI}]")
_JSON_UNSAFE = re.compile(f"[\\x7f-\\x9f{_BIDI}]")


def clean(value: object) -> str:
    """`value` as one line a terminal only displays (see the module docstring)."""
    text = value if isinstance(value, str) else str(value)
    if text.isprintable():  # the usual case: nothing to do
        return text
    text = _ESCAPE_SEQUENCE.sub("", text)
    return _CONTROLS.sub("", _LINE_BREAKS.sub(" ", text))


def clean_output(text: str) -> str:
    """A job's output, shown to someone other than its owner: lines and tabs kept (a CR
    ends a line: it could hide the one before), escape sequences and other controls
    dropped."""
    text = _ESCAPE_SEQUENCE.sub("", text).replace("\r\n", "\n").replace("\r", "\n")
    return _CONTROLS_BUT_LAYOUT.sub("", text)


def printable(answer: Any) -> Any:
    """Every string of an API answer (keys included) through `clean`."""
    if isinstance(answer, str):
        return clean(answer)
    if isinstance(answer, dict):
        return {clean(k) if isinstance(k, str) else k: printable(v) for k, v in answer.items()}
    if isinstance(answer, list):
        return [printable(v) for v in answer]
    return answer


def json_text(answer: Any) -> str:
    """`--json` output: the answer exactly, with the characters JSON leaves raw but a
    terminal acts on (DEL, C1 controls, bidi marks) written as \\uXXXX escapes."""
    text = json.dumps(answer, indent=2, ensure_ascii=False)
    return _JSON_UNSAFE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


def yes_no(value: bool | None) -> str:
    return "-" if value is None else ("yes" if value else "no")


def table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """Aligned columns; numbers right-aligned, text left-aligned."""
    cells = [[("-" if c is None else clean(c)) for c in row] for row in rows]
    headers = [clean(h) for h in headers]
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
    """TFLOP-seconds as a person reads them, the one format of the CLI, the web's pages and
    "why": whole numbers with thousands separators from 100 up (`8,426`, `1,234,568`),
    at most two decimals below (`12.5`, `0.25`, `0`)."""
    if abs(tflop_s) >= 100:
        return f"{tflop_s:,.0f}"
    return f"{tflop_s:,.2f}".rstrip("0").rstrip(".") if tflop_s else "0"


def csv_number(value: float | None) -> str:
    """A fractional figure in a CSV (costs, seconds): three decimals, no thousands
    separator (`8425.509`, `600.000`); empty when unknown."""
    if value is None:
        return ""
    text = f"{value:.3f}"
    return "0.000" if text == "-0.000" else text


def timestamp(at: datetime | None) -> str:
    """A time, the one format of the CLI and the web: `2026-01-05 09:00:05 UTC`; '-'."""
    if at is None:
        return "-"
    return at.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def duration(seconds: float | None, hour_digits: int = 1) -> str:
    """Seconds, short: 45s, 12.5m, 3.2h, 2.1d; '-' when unknown. Hours get `hour_digits`
    decimals (the simulator's report prints 3.25h)."""
    if seconds is None:
        return "-"
    if seconds < 120:
        return f"{seconds:.0f}s"
    if seconds < 7200:
        return f"{seconds / 60:.1f}m"
    if seconds < 172800:
        return f"{seconds / 3600:.{hour_digits}f}h"
    return f"{seconds / 86400:.1f}d"
