"""The database fixtures (both backends) for the API attacks."""

from tests.database import db_url, empty_db_url, engine, sessions  # noqa: F401
