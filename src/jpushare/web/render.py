"""Jinja2 templates with autoescaping on, and the filters the pages use to print figures.

Every value from the database (job names, reasons, commands, output) is escaped by Jinja2
when it is printed: a job named `<script>` shows as text. Chart data goes into the page as
JSON inside `<script type="application/json">` through `tojson`, which escapes `<`, `>` and
`&`, so it cannot close the element either.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from jinja2 import Environment, PackageLoader, select_autoescape

# One mapping and one format per kind (cost, span, time), shared with the CLI.
from jpushare.client.formatting import amount, state_label, timestamp
from jpushare.client.formatting import duration as cli_duration

_env = Environment(
    loader=PackageLoader("jpushare.web", "templates"),
    autoescape=select_autoescape(default=True, default_for_string=True),
    trim_blocks=True,
    lstrip_blocks=True,
)


def utc(at: datetime | None) -> str:
    """`2026-01-05 09:00:05 UTC` (the CLI's `timestamp`), or an em dash."""
    return "—" if at is None else timestamp(at)


def duration(seconds: float | None) -> str:
    """A span, as the CLI prints it: `45s`, `12.5m`, `3.2h`, `2.1d`; an em dash unknown."""
    return "—" if seconds is None else cli_duration(max(0.0, seconds))


def since(at: datetime | None, now: datetime) -> str:
    """How long ago, e.g. `12.5m ago`."""
    if at is None:
        return "—"
    return f"{duration((now - at).total_seconds())} ago"


def tflops(value: float | None) -> str:
    """TFLOP-seconds as the CLI prints them (`amount`: `1,234,568`, `12.5`), or an em dash."""
    return "—" if value is None else amount(value)


def state_text(state: str, reason: str | None, waiting: str | None) -> str:
    """The state as the CLI prints it (`jpushare jobs`, `show`): QUEUED, "FAILED (time
    limit)", and a held or waiting job's reason after it: "QUEUED (HELD)"."""
    label = state_label(state, reason)
    return f"{label} ({waiting})" if waiting else label


def job_state(job: Any) -> str:
    """`state_text` of a job (the API's answer or a record: both have these fields)."""
    return state_text(job.state, job.reason, job.waiting)


def percent(ratio: float | None) -> str:
    if ratio is None:
        return "—"
    return f"{ratio * 100:.1f} %"


_env.filters.update(
    utc=utc,
    duration=duration,
    tflops=tflops,
    percent=percent,
    state_label=state_label,
    job_state=job_state,
)


def render(template: str, **context: Any) -> str:
    return _env.get_template(template).render(since=since, **context)
