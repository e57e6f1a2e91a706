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

from jpushare.client.formatting import state_label  # one mapping, shared with the CLI

_env = Environment(
    loader=PackageLoader("jpushare.web", "templates"),
    autoescape=select_autoescape(default=True, default_for_string=True),
    trim_blocks=True,
    lstrip_blocks=True,
)


def utc(at: datetime | None) -> str:
    """`2026-01-05 09:00:05 UTC`, or an em dash."""
    if at is None:
        return "—"
    return at.strftime("%Y-%m-%d %H:%M:%S UTC")


def duration(seconds: float | None) -> str:
    """`45 s`, `12 min`, `3.5 h`, `2.1 d` (a person's reading of a span)."""
    if seconds is None:
        return "—"
    s = max(0.0, seconds)
    if s < 90:
        return f"{s:.0f} s"
    if s < 90 * 60:
        return f"{s / 60:.0f} min"
    if s < 48 * 3600:
        return f"{s / 3600:.1f} h"
    return f"{s / 86400:.1f} d"


def since(at: datetime | None, now: datetime) -> str:
    """How long ago, e.g. `12 min ago`."""
    if at is None:
        return "—"
    return f"{duration((now - at).total_seconds())} ago"


def tflops(value: float | None) -> str:
    """TFLOP-seconds as a person reads them: `1,234,568` or `12.5`."""
    if value is None:
        return "—"
    if abs(value) >= 100:
        return f"{value:,.0f}"
    return f"{value:,.2f}".rstrip("0").rstrip(".") if value else "0"


def percent(ratio: float | None) -> str:
    if ratio is None:
        return "—"
    return f"{ratio * 100:.1f} %"


_env.filters.update(
    utc=utc, duration=duration, tflops=tflops, percent=percent, state_label=state_label
)


def render(template: str, **context: Any) -> str:
    return _env.get_template(template).render(since=since, **context)
