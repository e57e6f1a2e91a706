"""The dashboard's two series over time: each lab's usage, and the watch-list per day.

Both are built from the functions the JSON API uses, so the last point of each equals what
the API says now: a lab's usage line is drawn *backwards* from `GET /v1/labs`'s figure by
subtracting the charges recorded after each point (`store.usage_history`), and each day of
the watch-list is `GET /v1/stats/watch`'s computation (`load_watch_records` +
`watch_figures`) over that day.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from math import ceil

from sqlalchemy.orm import Session

from jpushare.api.schemas import WatchPublic
from jpushare.policy.watch import watch_figures
from jpushare.store.usage_history import LabCharge, lab_charges
from jpushare.store.watch_records import load_watch_records

USAGE_WINDOW = timedelta(days=7)
USAGE_POINTS = 120  # points per line: enough for a smooth chart, few enough to stay light
WATCH_DAYS = 7
WATCH_MAX_DAYS = 90  # a longer window's chart shows its last 90 days (one query per day)


@dataclass(frozen=True, slots=True)
class Series:
    """Chart data: shared x (UNIX seconds) and one y list per named line."""

    x: list[float]
    lines: dict[str, list[float | None]]
    units: dict[str, str]  # line -> its unit; each unit gets its own axis

    def as_json(self) -> dict[str, object]:
        return {"x": self.x, "lines": self.lines, "units": self.units}


def usage_series(
    session: Session, usage_now: Mapping[str, float], now: datetime, start: datetime
) -> Series:
    """Each lab's usage (TFLOP-s) at evenly spaced times from `start` to `now`, ending with
    `usage_now` (the labs route's figures)."""
    return usage_from_charges(lab_charges(session, start, now), usage_now, start, now)


def usage_window_start(now: datetime, first_lab_created: datetime | None) -> datetime:
    """The last `USAGE_WINDOW`, or less on a young cluster (from its first lab's creation)."""
    start = now - USAGE_WINDOW
    if first_lab_created is not None and start < first_lab_created < now:
        return first_lab_created
    return start


def usage_from_charges(
    charges: Sequence[LabCharge],
    usage_now: Mapping[str, float],
    start: datetime,
    now: datetime,
    points: int = USAGE_POINTS,
) -> Series:
    """`usage_now` walked back through `charges` (oldest first, all in (start, now])."""
    step = (now - start) / points
    times = [start + step * i for i in range(points + 1)]
    lines: dict[str, list[float | None]] = {}
    for lab, current in usage_now.items():
        mine = [c for c in charges if c.lab == lab]
        at = [c.at for c in mine]
        # suffix[i] = what was charged from charge i on
        suffix = [0.0] * (len(mine) + 1)
        for i in range(len(mine) - 1, -1, -1):
            suffix[i] = suffix[i + 1] + mine[i].tflop_s
        lines[lab] = [round(current - suffix[bisect_right(at, t)], 3) for t in times]
    return Series(
        x=[t.timestamp() for t in times], lines=lines, units=dict.fromkeys(lines, "TFLOP-s")
    )


def watch_days(session: Session, now: datetime, days: int = WATCH_DAYS) -> list[WatchPublic]:
    """The watch-list of each of the last `days` 24-hour windows, oldest first, each computed
    as `GET /v1/stats/watch` computes one window."""
    out = []
    for i in range(days, 0, -1):
        since, until = now - timedelta(days=i), now - timedelta(days=i - 1)
        spans, ended = load_watch_records(session, since, until)
        out.append(WatchPublic(since=since, until=until, **watch_figures(spans, ended).as_dict()))
    return out


def days_in(window: WatchPublic) -> int:
    """How many 24-hour points the watch chart draws for `window`: one per day it spans
    (a part-day counts), 1 to `WATCH_MAX_DAYS`."""
    days = ceil((window.until - window.since) / timedelta(days=1))
    return max(1, min(WATCH_MAX_DAYS, days))


def watch_series(days: Sequence[WatchPublic]) -> Series:
    """Failed-reservation rate (%) and mean hold (minutes) per day, for the chart."""
    failed: list[float | None] = []
    hold: list[float | None] = []
    for w in days:
        rate = w.reservations.failed_rate
        failed.append(None if rate is None else round(rate * 100, 2))
        hold.append(None if w.hold_s.mean is None else round(w.hold_s.mean / 60, 2))
    return Series(
        x=[w.until.timestamp() for w in days],
        lines={"failed reservations": failed, "mean hold": hold},
        units={"failed reservations": "%", "mean hold": "minutes"},
    )
