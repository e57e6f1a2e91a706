"""Service test fixtures: both databases (from tests.database)."""

from tests.database import db_url, empty_db_url, engine, sessions  # noqa: F401
