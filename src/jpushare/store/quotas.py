"""The per-user limits on jobs that have not ended: how many, and their stored command and
environment bytes."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from sqlalchemy import LargeBinary, Select, Text, bindparam, cast, func, select
from sqlalchemy.engine import Connection
from sqlalchemy.sql.elements import ColumnElement

from jpushare.store.errors import StoreError
from jpushare.store.schema import ENDED_STATES, Job


class QuotaExceeded(StoreError):
    """A submission would take its user over a per-user limit; nothing was stored."""

    def __init__(self, user: str, limit: str, maximum: int, current: int, adding: int) -> None:
        self.user, self.limit = user, limit
        self.maximum, self.current, self.adding = maximum, current, adding
        if limit == "active_jobs":
            text = (
                f"{user} has {current} active jobs (queued or running), the most one user "
                f"may have is {maximum}: wait for some to end, or cancel some"
            )
        else:
            text = (
                f"{user}'s active jobs hold {current} bytes of commands and environments; "
                f"this job's {adding} more would pass the limit of {maximum} per user: "
                "put long commands and variables in a script, or wait for jobs to end"
            )
        super().__init__(text + "; nothing was stored")


def _stored_bytes(dialect: str) -> ColumnElement[Any]:
    """A job's command and environment as stored, in bytes (PostgreSQL's octet_length reads
    a value's size without decompressing it)."""
    if dialect == "postgresql":
        env = func.octet_length(cast(Job.environment, Text))
        command = func.octet_length(Job.command)
    else:
        env = func.length(cast(Job.environment, LargeBinary))
        command = func.length(cast(Job.command, LargeBinary))
    return command + func.coalesce(env, 0)


def _active_usage(dialect: str) -> Select[Any]:
    """One user's jobs that have not ended: how many, and their stored bytes."""
    return select(func.count(), func.coalesce(func.sum(_stored_bytes(dialect)), 0)).where(
        Job.user_id == bindparam("user_id"),
        Job.state.not_in([state.value for state in ENDED_STATES]),
    )


_ACTIVE_USAGE = {name: _active_usage(name) for name in ("postgresql", "sqlite")}


def job_bytes(command: str, environment: Mapping[str, str] | None) -> int:
    """What a new job adds to its user's stored bytes (the environment as JSON)."""
    env = 0 if environment is None else len(json.dumps(dict(environment)).encode())
    return len(command.encode()) + env


def check_quota(
    connection: Connection,
    user_id: int,
    user_name: str,
    adding: int,
    max_active_jobs: int | None,
    max_job_bytes: int | None,
    jobs: int = 1,
) -> None:
    """QuotaExceeded if `jobs` more jobs, holding `adding` more bytes, would take the user
    over either limit (None: no limit)."""
    usage = _ACTIVE_USAGE.get(connection.dialect.name, _ACTIVE_USAGE["sqlite"])
    count, stored = connection.execute(usage, {"user_id": user_id}).one()
    if max_active_jobs is not None and count + jobs > max_active_jobs:
        raise QuotaExceeded(user_name, "active_jobs", max_active_jobs, int(count), jobs)
    if max_job_bytes is not None and stored + adding > max_job_bytes:
        raise QuotaExceeded(user_name, "job_bytes", max_job_bytes, int(stored), adding)
