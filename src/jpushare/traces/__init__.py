"""Real GPU-cluster traces turned into the simulator's TRACE.csv (docs/formats.md §2).

What lives here, shared by the per-trace loaders (`philly`, `alibaba`):

- `TraceRow`: one row of TRACE.csv, and `TRACE_HEADER`, the exact header the simulator reads
  (`job_id,submit_time,duration,num_gpus,lab,min_tier,cancel_time,oom_on,time_limit`; the last
  four columns may be empty).
- `LoadReport`: how many raw rows a loader read, kept, dropped (by reason) and adjusted (by
  note), so that every conversion decision is counted and printed, never silent.
- `write_trace` / `format_trace`: the TRACE.csv writer.
- `select_last_window`: keep the jobs submitted in the last N seconds of a trace and rebase
  the times so that the first kept job is submitted at t = 0; `window_start` and
  `place_in_window` do the same per raw job inside the loaders, optionally carrying over
  the jobs still running when the window opens.
- `hour_time_limit`: the user runtime estimate EASY backfill needs and the traces lack.
- `offered_load`: sum(num_gpus × duration) / (window length × GPUs), the figure the example
  clusters are sized by.

Everything here is pure (lists in, lists out) except the explicit file writers, so the
loaders are easy to test on the shipped files in `data/traces/`.
"""

from __future__ import annotations

import csv
import io
import math
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TextIO, TypeVar

T = TypeVar("T")

TRACE_HEADER: tuple[str, ...] = (
    "job_id",
    "submit_time",
    "duration",
    "num_gpus",
    "lab",
    "min_tier",
    "cancel_time",
    "oom_on",
    "time_limit",
)

DAY_S = 86_400
HOUR_S = 3_600
MAX_GPUS_PER_JOB = 8  # SPEC §2: 1 <= num_gpus <= 8, on one node


@dataclass(frozen=True, slots=True)
class TraceRow:
    """One job of TRACE.csv. Times are integer seconds on the trace's clock."""

    job_id: str
    submit_time: int
    duration: int
    num_gpus: int
    lab: str
    min_tier: str | None = None  # empty = lowest auto-assign tier
    cancel_time: int | None = None  # absolute time the user cancels the job
    oom_on: tuple[str, ...] = ()  # tiers on which the job runs out of memory
    time_limit: int | None = None  # the user's runtime estimate; empty = duration

    def shifted(self, delta: int) -> TraceRow:
        """The same job with every absolute time moved by `delta` seconds."""
        cancel = None if self.cancel_time is None else self.cancel_time + delta
        return replace(self, submit_time=self.submit_time + delta, cancel_time=cancel)

    def as_csv_fields(self) -> list[str]:
        """The row's values in `TRACE_HEADER` order, empty strings for absent options."""
        return [
            self.job_id,
            str(self.submit_time),
            str(self.duration),
            str(self.num_gpus),
            self.lab,
            self.min_tier or "",
            "" if self.cancel_time is None else str(self.cancel_time),
            ";".join(self.oom_on),
            "" if self.time_limit is None else str(self.time_limit),
        ]


@dataclass(slots=True)
class LoadReport:
    """What a loader did with the raw rows: kept, dropped by reason, adjusted by note.

    `read` counts raw rows; `read == kept + sum(dropped.values())` always holds. `adjusted`
    counts kept rows that were changed on the way (e.g. a fractional GPU rounded up to one
    whole GPU); a row may carry several notes.
    """

    source: str
    read: int = 0
    kept: int = 0
    dropped: Counter[str] = field(default_factory=Counter)
    adjusted: Counter[str] = field(default_factory=Counter)

    def drop(self, reason: str) -> None:
        self.dropped[reason] += 1

    def lines(self) -> list[str]:
        """Human-readable counts, one fact per line (the CLI prints them on stderr)."""
        out = [f"{self.source}: read {self.read}, kept {self.kept}, dropped {self.total_dropped}"]
        out.extend(f"  dropped  {n:6d}  {reason}" for reason, n in sorted(self.dropped.items()))
        out.extend(f"  adjusted {n:6d}  {note}" for note, n in sorted(self.adjusted.items()))
        return out

    @property
    def total_dropped(self) -> int:
        return sum(self.dropped.values())


def hour_time_limit(duration: int) -> int:
    """A plausible user runtime estimate: the duration rounded up to whole hours, >= 1 h.

    Real users ask for round numbers and over-ask; Slurm sites commonly see limits of whole
    hours. The estimate is never below the true duration, so a backfill plan made from it
    is conservative (as Slurm's is), and short jobs look like "1 hour" jobs to the planner.
    """
    return max(HOUR_S, math.ceil(duration / HOUR_S) * HOUR_S)


def parse_window(spec: str) -> int | None:
    """`all` -> None; `last10d` -> 864000; `last36h` -> 129600 (seconds)."""
    text = spec.strip().lower()
    if text in ("", "all"):
        return None
    if text.startswith("last") and len(text) > 5 and text[-1] in ("d", "h"):
        number = text[4:-1]
        if number.isdigit() and int(number) > 0:
            return int(number) * (DAY_S if text[-1] == "d" else HOUR_S)
    raise ValueError(f"window must be 'all' or 'last<N>d' / 'last<N>h', not {spec!r}")


def select_last_window(
    rows: Sequence[TraceRow], seconds: int, *, anchor: int | None = None
) -> list[TraceRow]:
    """Jobs submitted in the last `seconds` of the trace, rebased so the first is at 0.

    The window is `[anchor - seconds, anchor]` with `anchor` the latest submit time of
    `rows` unless given (a loader passes the latest submit of the whole raw file, so that
    the window does not depend on which rows were dropped). Jobs submitted before the
    window are left out entirely, including any that would still be running at its start:
    the replay begins on an empty cluster. Order is kept.
    """
    if not rows:
        return []
    end = max(r.submit_time for r in rows) if anchor is None else anchor
    start = end - seconds
    kept = [r for r in rows if r.submit_time >= start]
    if not kept:
        return []
    origin = min(r.submit_time for r in kept)
    return [r.shifted(-origin) for r in kept]


def rebase(rows: Sequence[TraceRow], origin: int | None = None) -> list[TraceRow]:
    """The rows shifted so that `origin` (default: the earliest submission) is t = 0."""
    if not rows:
        return []
    zero = min(r.submit_time for r in rows) if origin is None else origin
    return [r.shifted(-zero) for r in rows]


def window_start(submits: Iterable[int], window_s: int | None) -> int | None:
    """Start of the last-`window_s` window of a trace (None: no window, or no jobs)."""
    if window_s is None:
        return None
    latest = max(submits, default=None)
    return None if latest is None else latest - window_s


def place_in_window(
    submit: int, duration: int, start: int | None, carry_over: bool
) -> tuple[int, int] | None:
    """(submit, duration) of a job on a window starting at `start`, or None to drop it.

    A job submitted inside the window (or with no window) is unchanged. One submitted
    before it is dropped, unless `carry_over` and it would still be running at `start`
    had it started at its submission (the traces have no queueing data): then it enters
    at `start` with its remaining duration, so the replay starts with the cluster's
    standing load instead of an empty cluster.
    """
    if start is None or submit >= start:
        return submit, duration
    if carry_over and submit + duration > start:
        return start, submit + duration - start
    return None


@dataclass(slots=True)
class TraceWindow:
    """A loader's window step, shared so that every loader windows alike: `place` puts one
    raw job on the window (counting a drop), `finish` rebases the kept rows."""

    report: LoadReport
    start: int | None
    carry_over: bool

    def place(self, submit: int, duration: int, before: str) -> tuple[int, int] | None:
        """`place_in_window`; None (counted as `before`, the drop reason) to drop the job."""
        placed = place_in_window(submit, duration, self.start, self.carry_over)
        if placed is None:
            self.report.drop(before + (", ended before it" if self.carry_over else ""))
        return placed

    def finish(self, rows: Sequence[TraceRow]) -> tuple[list[TraceRow], LoadReport]:
        """The kept rows rebased (t = 0: the window start if carrying over), and the report."""
        self.report.kept = len(rows)
        return rebase(rows, self.start if self.carry_over else None), self.report


def csv_records(lines: Iterable[str], columns: Iterable[str], what: str) -> csv.DictReader[str]:
    """A CSV reader on `lines`, whose header must hold `columns` (else ValueError: not `what`)."""
    reader = csv.DictReader(lines)
    missing = set(columns) - set(reader.fieldnames or ())
    if missing:
        raise ValueError(f"not {what}: missing columns {sorted(missing)}")
    return reader


def read_csv_file(path: str | Path, parse: Callable[[Iterable[str]], T]) -> T:
    """`parse` on the lines of the CSV file at `path`."""
    with Path(path).open(encoding="utf-8", newline="") as stream:
        return parse(stream)


def offered_load(
    rows: Iterable[TraceRow], gpus: int, *, span: int | None = None, clip: bool = False
) -> float:
    """sum(num_gpus × duration) / (span × gpus): demand over capacity, 1.0 = saturated.

    `span` defaults to the submission window (last submit − first submit). With
    `clip=False` durations count in full, even the part of a long job that runs past the
    window; with `clip=True` only the part inside the window counts (each job as if it
    started at its submission), which is the mean GPU demand during the window.
    """
    listed = list(rows)
    if not listed or gpus <= 0:
        return 0.0
    first = min(r.submit_time for r in listed)
    if span is None:
        span = max(r.submit_time for r in listed) - first
    if span <= 0:
        return math.inf
    end = first + span
    if clip:
        demand = sum(r.num_gpus * max(0, min(r.duration, end - r.submit_time)) for r in listed)
    else:
        demand = sum(r.num_gpus * r.duration for r in listed)
    return demand / (span * gpus)


def format_trace(rows: Iterable[TraceRow]) -> str:
    """TRACE.csv as text: `TRACE_HEADER` then one line per row, `\\n` line ends."""
    buffer = io.StringIO()
    write_rows(rows, buffer)
    return buffer.getvalue()


def write_rows(rows: Iterable[TraceRow], stream: TextIO) -> int:
    """Write header and rows to an open text stream; returns the number of rows."""
    writer = csv.writer(stream, lineterminator="\n")
    writer.writerow(TRACE_HEADER)
    count = 0
    for row in rows:
        writer.writerow(row.as_csv_fields())
        count += 1
    return count


def write_trace(rows: Iterable[TraceRow], path: str | Path) -> int:
    """Write TRACE.csv to `path` (parent folders created); returns the number of rows."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    with target.open("w", encoding="utf-8", newline="") as stream:
        return write_rows(rows, stream)


__all__ = [
    "DAY_S",
    "HOUR_S",
    "MAX_GPUS_PER_JOB",
    "TRACE_HEADER",
    "LoadReport",
    "TraceRow",
    "TraceWindow",
    "csv_records",
    "format_trace",
    "hour_time_limit",
    "offered_load",
    "parse_window",
    "place_in_window",
    "read_csv_file",
    "rebase",
    "select_last_window",
    "window_start",
    "write_rows",
    "write_trace",
]
