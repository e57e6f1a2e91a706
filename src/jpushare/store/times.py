"""Timestamps at the store boundary: aware UTC `datetime` in Python, float UNIX seconds in
the policy, and a column type that keeps them UTC on both backends.

SQLite has no time zones: the column stores naive UTC there and hands back aware UTC.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import DateTime
from sqlalchemy.engine import Dialect
from sqlalchemy.types import TypeDecorator


def utc_now() -> datetime:
    return datetime.now(UTC)


def to_epoch(at: datetime) -> float:
    """Aware datetime -> UNIX seconds (the policy's clock)."""
    if at.tzinfo is None:
        raise ValueError(f"naive datetime {at!r}: the store only takes aware UTC times")
    return at.timestamp()


def from_epoch(seconds: float) -> datetime:
    """UNIX seconds -> aware UTC datetime (microsecond precision, like both databases)."""
    return datetime.fromtimestamp(seconds, UTC)


class UtcDateTime(TypeDecorator[datetime]):
    """TIMESTAMPTZ on PostgreSQL, naive-UTC DATETIME on SQLite; always aware UTC in Python."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError(f"naive datetime {value!r}: the store only takes aware UTC times")
        value = value.astimezone(UTC)
        if dialect.name == "sqlite":
            return value.replace(tzinfo=None)
        return value

    def process_result_value(self, value: Any, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        assert isinstance(value, datetime)
        if value.tzinfo is None:
            return value.replace(tzinfo=UTC)
        return value.astimezone(UTC)


def same_instant(a: datetime, b: datetime, tolerance_s: float = 1e-3) -> bool:
    """Whether two times are the same instant, to within what a database keeps of them."""
    return abs(to_epoch(a) - to_epoch(b)) <= tolerance_s
