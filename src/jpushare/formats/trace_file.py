"""TRACE.csv: the job trace format (docs/formats.md §2), parsed into `TraceJob`s.

Header `job_id,submit_time,duration,num_gpus,lab`, plus any of the optional columns
`min_tier` (tier name; empty = lowest auto-assign tier), `cancel_time` (absolute seconds),
`oom_on` (tier names joined by `;`) and `time_limit` (seconds; empty = `duration`). Times
are seconds. Columns may come in any order; unknown columns are an error (a typo would
otherwise be silently ignored).

`parse_trace` checks the file on its own; `check_tiers` checks the tier names against a
cluster. Every error is a `TraceFileError` naming the file and line.
"""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from jpushare.formats.errors import TraceFileError
from jpushare.policy.fit import MAX_GPUS, MIN_GPUS
from jpushare.policy.model import Tier
from jpushare.vocabulary import JobId

REQUIRED_COLUMNS = ("job_id", "submit_time", "duration", "num_gpus", "lab")
OPTIONAL_COLUMNS = ("min_tier", "cancel_time", "oom_on", "time_limit")


@dataclass(frozen=True, slots=True)
class TraceJob:
    """One row of a trace. `line` is its line in the file (0 when built in code)."""

    job_id: JobId
    submit_time: float
    duration: float
    num_gpus: int
    lab: str
    min_tier: str | None = None
    cancel_time: float | None = None
    oom_on: frozenset[str] = frozenset()
    time_limit: float | None = None
    line: int = 0

    @property
    def time_limit_s(self) -> float:
        """The user's runtime estimate: `time_limit`, or `duration` when not given."""
        return self.duration if self.time_limit is None else self.time_limit


def load_trace(path: str | Path) -> list[TraceJob]:
    """Read and check a TRACE.csv file (rows in file order)."""
    source = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8-sig")
    except OSError as e:
        raise TraceFileError(source, 0, f"cannot read the trace file: {e.strerror}") from e
    except UnicodeDecodeError as e:
        raise TraceFileError(source, 0, "the trace file is not UTF-8 text") from e
    return parse_trace(text, source)


def parse_trace(text: str, source: str = "<trace>") -> list[TraceJob]:
    """Parse TRACE.csv text; `source` names it in error messages."""
    reader = csv.reader(io.StringIO(text))
    try:
        header = next(reader)
    except StopIteration:
        raise TraceFileError(source, 1, "empty file: expected a header line") from None
    except csv.Error as e:
        raise TraceFileError(source, 1, f"not valid CSV: {e}") from e
    columns = [c.strip() for c in header]
    for c in columns:
        if c not in REQUIRED_COLUMNS and c not in OPTIONAL_COLUMNS:
            raise TraceFileError(
                source,
                1,
                f"unknown column {c!r}; the columns are {', '.join(REQUIRED_COLUMNS)} "
                f"and optionally {', '.join(OPTIONAL_COLUMNS)}",
            )
    if len(set(columns)) != len(columns):
        raise TraceFileError(source, 1, "a column appears twice in the header")
    missing = [c for c in REQUIRED_COLUMNS if c not in columns]
    if missing:
        raise TraceFileError(source, 1, f"missing column(s): {', '.join(missing)}")

    jobs: list[TraceJob] = []
    seen: dict[str, int] = {}
    line = 1
    try:
        for row in reader:
            line = reader.line_num
            if not row or all(not f.strip() for f in row):
                continue
            if len(row) != len(columns):
                raise TraceFileError(
                    source, line, f"expected {len(columns)} fields, found {len(row)}"
                )
            job = _parse_row(
                source, line, dict(zip(columns, (f.strip() for f in row), strict=True))
            )
            if job.job_id in seen:
                raise TraceFileError(
                    source, line, f"job_id {job.job_id!r} already used on line {seen[job.job_id]}"
                )
            seen[job.job_id] = line
            jobs.append(job)
    except csv.Error as e:
        raise TraceFileError(source, reader.line_num, f"not valid CSV: {e}") from e
    return jobs


def _parse_row(source: str, line: int, f: dict[str, str]) -> TraceJob:
    job_id = f["job_id"]
    if not job_id:
        raise TraceFileError(source, line, "job_id is empty")
    lab = f["lab"]
    if not lab:
        raise TraceFileError(source, line, f"job {job_id}: lab is empty")
    submit = _seconds(source, line, f["submit_time"], "submit_time", job_id)
    duration = _seconds(source, line, f["duration"], "duration", job_id)
    try:
        num_gpus = int(f["num_gpus"])
    except ValueError:
        raise TraceFileError(
            source, line, f"job {job_id}: num_gpus must be a whole number, got {f['num_gpus']!r}"
        ) from None
    if not MIN_GPUS <= num_gpus <= MAX_GPUS:
        raise TraceFileError(
            source,
            line,
            f"job {job_id}: num_gpus must be {MIN_GPUS}-{MAX_GPUS} (one node), got {num_gpus}",
        )
    min_tier = f.get("min_tier", "") or None
    cancel_raw = f.get("cancel_time", "")
    cancel = _seconds(source, line, cancel_raw, "cancel_time", job_id) if cancel_raw else None
    if cancel is not None and cancel < submit:
        raise TraceFileError(
            source, line, f"job {job_id}: cancel_time {cancel:g} is before submit_time {submit:g}"
        )
    oom_raw = f.get("oom_on", "")
    oom_on = (
        frozenset(t.strip() for t in oom_raw.split(";") if t.strip()) if oom_raw else frozenset()
    )
    limit_raw = f.get("time_limit", "")
    limit = _seconds(source, line, limit_raw, "time_limit", job_id) if limit_raw else None
    return TraceJob(job_id, submit, duration, num_gpus, lab, min_tier, cancel, oom_on, limit, line)


def _seconds(source: str, line: int, raw: str, what: str, job_id: JobId) -> float:
    try:
        value = float(raw)
    except ValueError:
        raise TraceFileError(
            source, line, f"job {job_id}: {what} must be a number of seconds, got {raw!r}"
        ) from None
    if not math.isfinite(value) or value < 0:
        raise TraceFileError(source, line, f"job {job_id}: {what} must be >= 0, got {raw!r}")
    return value


def check_tiers(jobs: Iterable[TraceJob], tiers: Sequence[Tier], source: str = "<trace>") -> None:
    """Every `min_tier` and `oom_on` name must be a tier of the cluster."""
    names = {t.name for t in tiers}
    known = ", ".join(sorted(names))
    for job in jobs:
        if job.min_tier is not None and job.min_tier not in names:
            raise TraceFileError(
                source,
                job.line,
                f"job {job.job_id}: min_tier {job.min_tier!r} is not a tier of the cluster "
                f"({known})",
            )
        for t in sorted(job.oom_on):
            if t not in names:
                raise TraceFileError(
                    source,
                    job.line,
                    f"job {job.job_id}: oom_on names {t!r}, not a tier of the cluster ({known})",
                )
