"""Jobs as users see them: read one, several, a filtered list, a job's history.

Submission lives in `submissions.py` (with its per-user limits in `quotas.py`), state
changes after it in `lifecycle.py` (one job at a time) and `snapshot_and_decisions.py` (the
dispatcher's decisions). Job ids are integers here; the policy knows them as text.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, fields
from datetime import datetime
from typing import Any

from sqlalchemy import Select, Text, case, func, literal, null, or_, select
from sqlalchemy.orm import Session, aliased
from sqlalchemy.sql.elements import ColumnElement

from jpushare.store.errors import InvalidRequest, NotFound
from jpushare.store.records import JobEventRecord, JobRecord
from jpushare.store.schema import EventKind, GpuTier, Job, JobEvent, JobState, Lab, User
from jpushare.store.transitions import id_chunks

_Tier = aliased(GpuTier, name="placed_tier")
_ReservedTier = aliased(GpuTier, name="reserved_tier")


def parse_job_id(value: str | int) -> int:
    """A job id from the policy or a person ('42', 42); InvalidRequest if it is not one."""
    try:
        job_id = int(value)
    except (TypeError, ValueError) as exc:
        raise InvalidRequest(f"not a job id: {value!r}") from exc
    if job_id <= 0:
        raise InvalidRequest(f"not a job id: {value!r}")
    return job_id


JOB_COLUMNS = tuple(Job.__table__.c)
# The record's fields that are the job's own columns, under the same names but one (SPEC
# §7's column name says GPU-seconds; it holds TFLOP-seconds); the rest are joined names.
_RENAMED = {"reservation_cost_tflop_s": "reservation_gpu_seconds"}
_COLUMN_FIELDS = tuple(
    (f.name, _RENAMED.get(f.name, f.name))
    for f in fields(JobRecord)
    if _RENAMED.get(f.name, f.name) in Job.__table__.c
)


def job_record(
    columns: Mapping[Any, Any],
    *,
    user_name: str,
    lab_name: str,
    tier_name: str | None,
    reserved_tier_name: str | None,
) -> JobRecord:
    """The one mapping of a `jobs` row (its columns by name) to a record."""
    values = {name: columns[column] for name, column in _COLUMN_FIELDS}
    values["state"] = JobState(values["state"])
    return JobRecord(
        **values,
        user_name=user_name,
        lab_name=lab_name,
        tier_name=tier_name,
        reserved_tier_name=reserved_tier_name,
    )


# A job's columns that only its owner, its lab's PIs and admins see (`api.privacy` names
# them in every answer's `hidden` list): a read for a list loads them only where they are
# shown, and never loads `environment`, which no list shows.
PRIVATE_JOB_COLUMNS: tuple[str, ...] = (
    "command",
    "workdir",
    "environment",
    "output_path",
    "error_path",
)
_NEVER_IN_LISTS = frozenset({"environment"})


@dataclass(frozen=True, slots=True)
class Shown:
    """Whose private columns a lean read loads: every job's (`every_job`, an admin's view),
    or only those of the jobs of `user_id` (a student's own) or of `lab_id` (a pi's lab).
    `Shown()`: nobody's. Where they are not loaded the record holds "" for the command and
    None for the others; the environment is never loaded."""

    every_job: bool = False
    user_id: int | None = None
    lab_id: int | None = None

    def covers(self, job: JobRecord) -> bool:
        """Whether `job`'s private columns are shown: `condition` in Python, for one job."""
        return (
            self.every_job
            or job.user_id == self.user_id
            or (self.lab_id is not None and job.lab_id == self.lab_id)
        )

    def condition(self) -> ColumnElement[bool] | bool:
        """The rows whose private columns are loaded: True every row, False none."""
        if self.every_job:
            return True
        mine = [] if self.user_id is None else [Job.user_id == self.user_id]
        lab = [] if self.lab_id is None else [Job.lab_id == self.lab_id]
        return or_(*mine, *lab) if mine or lab else False


def _lean_columns(shown: Shown) -> list[ColumnElement[Any]]:
    """The job's columns for `shown`: private ones only where shown, under their own names."""
    condition = shown.condition()
    out: list[ColumnElement[Any]] = []
    for column in JOB_COLUMNS:
        if column.name not in PRIVATE_JOB_COLUMNS:
            out.append(column)
            continue
        blank = literal("", Text) if column.name == "command" else null()
        if column.name in _NEVER_IN_LISTS or condition is False:
            out.append(blank.label(column.name))
        elif condition is True:
            out.append(column)
        else:
            out.append(case((condition, column), else_=blank).label(column.name))
    return out


def _record_select(shown: Shown | None = None) -> Select[Any]:
    """Every column of the job (`shown` None), or the lean columns of a list read."""
    columns = JOB_COLUMNS if shown is None else _lean_columns(shown)
    return (
        select(
            *columns,
            User.name.label("_user_name"),
            Lab.name.label("_lab_name"),
            _Tier.name.label("_tier_name"),
            _ReservedTier.name.label("_reserved_tier_name"),
        )
        .join(User, User.id == Job.user_id)
        .join(Lab, Lab.id == Job.lab_id)
        .outerjoin(_Tier, _Tier.id == Job.tier_id)
        .outerjoin(_ReservedTier, _ReservedTier.id == Job.reserved_tier_id)
    )


def _record(row: Any) -> JobRecord:
    m = row._mapping
    return job_record(
        m,
        user_name=m["_user_name"],
        lab_name=m["_lab_name"],
        tier_name=m["_tier_name"],
        reserved_tier_name=m["_reserved_tier_name"],
    )


def get_job(session: Session, job_id: int) -> JobRecord:
    """The job, as it is now in this transaction; NotFound if there is none."""
    row = session.execute(_record_select().where(Job.id == job_id)).one_or_none()
    if row is None:
        raise NotFound("job", job_id)
    return _record(row)


@dataclass(frozen=True, slots=True)
class JobFilter:
    """Which jobs `list_jobs` returns; every field narrows, None means any."""

    states: tuple[JobState, ...] | None = None
    lab: str | None = None  # lab name
    user_id: int | None = None
    before_id: int | None = None  # paging: only jobs with a smaller id
    limit: int = 100
    user: str | None = None  # user name
    name: str | None = None  # job name, exactly
    # sacct's window: jobs that existed and had not ended during [since, until): submitted
    # before `until`, and still active or ended at or after `since`.
    since: datetime | None = None
    until: datetime | None = None
    array_job_id: int | None = None  # the tasks of one array
    waiting: bool | None = None  # True: only the held and waiting (queued, not in the queue)


def list_jobs(
    session: Session, filters: JobFilter | None = None, *, shown: Shown | None = None
) -> list[JobRecord]:
    """Jobs matching `filters`, newest first; with `shown`, lean (see `Shown`)."""
    f = filters or JobFilter()
    stmt = _record_select(shown).order_by(Job.id.desc()).limit(max(1, min(f.limit, 10_000)))
    equal = (
        (Lab.name, f.lab),
        (Job.user_id, f.user_id),
        (User.name, f.user),
        (Job.name, f.name),
        (Job.array_job_id, f.array_job_id),
    )
    stmt = stmt.where(*(column == value for column, value in equal if value is not None))
    if f.states:
        stmt = stmt.where(Job.state.in_([s.value for s in f.states]))
    if f.before_id is not None:
        stmt = stmt.where(Job.id < f.before_id)
    if f.until is not None:
        stmt = stmt.where(Job.submitted_at < f.until)
    if f.since is not None:
        stmt = stmt.where(or_(Job.ended_at.is_(None), Job.ended_at >= f.since))
    if f.waiting is not None:
        stmt = stmt.where(Job.waiting.is_not(None) if f.waiting else Job.waiting.is_(None))
    return [_record(row) for row in session.execute(stmt)]


def get_jobs(
    session: Session, job_ids: Iterable[int], *, shown: Shown | None = None
) -> dict[int, JobRecord]:
    """Several jobs by id (missing ids are left out); with `shown`, lean (see `Shown`)."""
    out: dict[int, JobRecord] = {}
    for chunk in id_chunks(job_ids):
        for row in session.execute(_record_select(shown).where(Job.id.in_(chunk))):
            record = _record(row)
            out[record.id] = record
    return out


def job_history(session: Session, job_id: int) -> list[JobEventRecord]:
    """Everything that happened to the job, oldest first; NotFound if there is no job."""
    if session.get(Job, job_id) is None:
        raise NotFound("job", job_id)
    events = session.scalars(
        select(JobEvent).where(JobEvent.job_id == job_id).order_by(JobEvent.id)
    )
    return [
        JobEventRecord(
            e.id,
            e.job_id,
            e.at,
            EventKind(e.kind),
            _state_or_none(e.from_state),
            _state_or_none(e.to_state),
            e.detail,
        )
        for e in events
    ]


def _state_or_none(value: str | None) -> JobState | None:
    return None if value is None else JobState(value)


def job_count(session: Session) -> int:
    """How many jobs the database holds (any state)."""
    return int(session.scalar(select(func.count()).select_from(Job)) or 0)
