"""Database fixtures: every test that uses them runs on SQLite and on PostgreSQL.

Import them into a conftest.py to use them (tests/store/conftest.py does):

    from tests.database import db_url, empty_db_url, engine, sessions  # noqa: F401

- `empty_db_url`: a URL of an empty database, parametrized over both backends: a SQLite
  file in the test's tmp_path, or a fresh PostgreSQL schema (dropped afterwards; the URL
  sets `search_path` to it, so every connection made from the URL lands there).
- `db_url`: the same, migrated to the newest revision with `jpushare.store.migrate`.
- `engine`, `sessions`: an engine and a sessionmaker on `db_url`.

PostgreSQL is `JPUSHARE_TEST_POSTGRES_URL` (default postgresql+psycopg://postgres@127.0.0.1:
5432/test). If it cannot be reached the PostgreSQL cases are skipped, except when
`CI=true`: then they fail, so CI cannot pass without having tested on PostgreSQL.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from functools import cache
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import make_url
from sqlalchemy.orm import Session, sessionmaker

from jpushare.store.engine import make_engine, make_sessionmaker, sqlite_url
from jpushare.store.migrate import upgrade
from tests.missing import missing

POSTGRES_URL_ENV = "JPUSHARE_TEST_POSTGRES_URL"
DEFAULT_POSTGRES_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/test"

BACKENDS = [
    pytest.param("sqlite", id="sqlite"),
    pytest.param("postgresql", id="postgresql", marks=pytest.mark.postgres),
]


def postgres_url() -> str:
    return os.environ.get(POSTGRES_URL_ENV, "").strip() or DEFAULT_POSTGRES_URL


@cache
def _postgres_problem(url: str) -> str | None:
    """Why PostgreSQL at `url` cannot be used, or None (asked once per test run)."""
    engine = sa.create_engine(url, connect_args={"connect_timeout": 5})
    try:
        with engine.connect() as connection:
            connection.execute(sa.text("SELECT 1"))
    except sa.exc.SQLAlchemyError as exc:
        return f"PostgreSQL at {make_url(url).render_as_string()} is unreachable: {exc}"
    finally:
        engine.dispose()
    return None


def require_postgres() -> str:
    """The PostgreSQL URL; skips the test (fails it under CI=true) if it is unreachable."""
    url = postgres_url()
    problem = _postgres_problem(url)
    if problem is not None:
        missing(problem, "CI=true: PostgreSQL tests must run")
    return url


def postgres_schema_url(base: str, schema: str) -> str:
    """`base` with every connection's search_path set to `schema`."""
    url = make_url(base).update_query_dict({"options": f"-csearch_path={schema}"})
    return url.render_as_string(hide_password=False)


def _admin(base: str, sql: str) -> None:
    engine = sa.create_engine(base, isolation_level="AUTOCOMMIT")
    try:
        with engine.connect() as connection:
            connection.execute(sa.text(sql))
    finally:
        engine.dispose()


def new_database(backend: str, tmp_path: Path) -> Iterator[str]:
    """Yield the URL of an empty database on `backend`, then remove it."""
    if backend == "sqlite":
        yield sqlite_url(tmp_path / "jpushare-test.sqlite")
        return
    base = require_postgres()
    schema = f"t_{uuid.uuid4().hex[:16]}"
    _admin(base, f'CREATE SCHEMA "{schema}"')
    try:
        yield postgres_schema_url(base, schema)
    finally:
        _admin(base, f"SET lock_timeout = '10s'; DROP SCHEMA \"{schema}\" CASCADE")


@pytest.fixture(params=BACKENDS)
def empty_db_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """An empty database (no tables), once on SQLite and once on PostgreSQL."""
    yield from new_database(request.param, tmp_path)


@pytest.fixture
def db_url(empty_db_url: str) -> str:
    """A database migrated to the newest revision, once per backend."""
    upgrade(empty_db_url)
    return empty_db_url


@pytest.fixture
def engine(db_url: str) -> Iterator[sa.Engine]:
    engine = make_engine(db_url)
    yield engine
    engine.dispose()


@pytest.fixture
def sessions(engine: sa.Engine) -> sessionmaker[Session]:
    return make_sessionmaker(engine)
