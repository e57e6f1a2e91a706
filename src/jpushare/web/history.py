"""The dashboard's two series over time: each lab's usage, and the watch-list per day.

Both are built from the functions the JSON API uses, so the last point of each equals what
the API says now: a lab's usage line is drawn *backwards* from `GET /v1/labs`'s figure by
subtracting the charges recorded after each point (`store.usage_history`), and each day of
the watch-list is `GET /v1/stats/watch`'s reservation figures (`policy.watch`) over the
reservations that started that day.
"""

from __future__ import annotations

from bisect import bisect_right
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from math import ceil, floor

from sqlalchemy.orm import Session

from jpushare.api.schemas.health import WatchPublic
from jpushare.policy.watch import ReservationSpan, hold_figures, reservation_counts
from jpushare.store.times import to_epoch
from jpushare.store.usage_history import LabCharge, lab_charges
from jpushare.store.watch_records import load_reservation_spans

USAGE_WINDOW = timedelta(days=7)
USAGE_POINTS = 120  # points per line: enough for a smooth chart, few enough to stay light
WATCH_DAYS = 7
WATCH_MAX_DAYS = 90  # a longer window's chart shows its last 90 days


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


@dataclass(frozen=True, slots=True)
class WatchDay:
    """One point of the watch chart: the reservations that started in the 24 hours to
    `until`, the share of them that failed and their mean hold (seconds)."""

    until: datetime
    failed_rate: float | None
    hold_mean_s: float | None


def watch_days(session: Session, now: datetime, days: int = WATCH_DAYS) -> list[WatchDay]:
    """The last `days` 24-hour windows to `now`, oldest first, with SPEC §10's failed rate
    and hold (`policy.watch`) of the reservations that started in each.

    One read of the reservation events for all the days (`load_reservation_spans`), grouped
    by start time here: a read per day scanned the events once per point (100,000 jobs on
    SQLite: 5 s for 7 days, 100 s for 90; `bench/bench_dashboard_windows.py`). A reservation
    released on a later day than it started counts, with its hold, on its start day, as
    `GET /v1/stats/watch` over the whole window counts it."""
    start = now - timedelta(days=days)
    origin = to_epoch(start)
    grouped: dict[int, list[ReservationSpan]] = defaultdict(list)
    for span in load_reservation_spans(session, start, now):
        grouped[min(days - 1, max(0, floor((span.started_at - origin) / 86400)))].append(span)
    out = []
    for i in range(days):
        spans = grouped.get(i, [])
        out.append(
            WatchDay(
                start + timedelta(days=i + 1),
                reservation_counts(spans).failed_rate,
                hold_figures(spans).mean_s,
            )
        )
    return out


def days_in(window: WatchPublic) -> int:
    """How many 24-hour points the watch chart draws for `window`: one per day it spans
    (a part-day counts), 1 to `WATCH_MAX_DAYS`."""
    days = ceil((window.until - window.since) / timedelta(days=1))
    return max(1, min(WATCH_MAX_DAYS, days))


def watch_series(days: Sequence[WatchDay]) -> Series:
    """Failed-reservation rate (%) and mean hold (minutes) per day, for the chart."""
    failed: list[float | None] = []
    hold: list[float | None] = []
    for d in days:
        failed.append(None if d.failed_rate is None else round(d.failed_rate * 100, 2))
        hold.append(None if d.hold_mean_s is None else round(d.hold_mean_s / 60, 2))
    return Series(
        x=[d.until.timestamp() for d in days],
        lines={"failed reservations": failed, "mean hold": hold},
        units={"failed reservations": "%", "mean hold": "minutes"},
    )
