"""The first migration creates everything, on both backends, and matches the ORM schema."""

from __future__ import annotations

import importlib
import pkgutil
from pathlib import Path

import pytest
import sqlalchemy as sa
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory

import jpushare.store
from jpushare.store.engine import make_engine, sqlite_url
from jpushare.store.migrate import alembic_config, current, downgrade, upgrade
from jpushare.store.schema import Base

TABLES = {
    "labs",
    "users",
    "api_tokens",
    "gpu_tiers",
    "nodes",
    "gpu_resources",
    "jobs",
    "job_events",
    "lab_events",
    "job_mail",
    "notify_cursors",
}

SPEC_7_COLUMNS = {
    "reserved_gpus",
    "reserved_node_name",
    "reserved_tier_id",
    "reservation_last_accrued_at",
    "reservation_gpu_seconds",
}


def _head() -> str | None:
    return ScriptDirectory.from_config(alembic_config()).get_current_head()


def _import_every_store_module() -> None:
    """So that every ORM class of the store, wherever it lives, is in Base.metadata."""
    for info in pkgutil.iter_modules(jpushare.store.__path__, "jpushare.store."):
        if not info.name.endswith(".migrations"):
            importlib.import_module(info.name)


def test_upgrade_creates_every_table_and_downgrade_removes_them(empty_db_url: str) -> None:
    assert current(empty_db_url) is None
    upgrade(empty_db_url, "0001")  # the first migration creates everything
    assert current(empty_db_url) == "0001"
    upgrade(empty_db_url)
    assert current(empty_db_url) == _head()
    engine = make_engine(empty_db_url)
    try:
        names = set(sa.inspect(engine).get_table_names())
        assert names >= TABLES
        downgrade(empty_db_url)
        sa.inspect(engine).clear_cache()
        assert not set(sa.inspect(engine).get_table_names()) & TABLES
        upgrade(empty_db_url)  # and back up again: the migrations are reversible
        assert set(sa.inspect(engine).get_table_names()) >= TABLES
    finally:
        engine.dispose()


def test_migrations_and_orm_schema_agree(engine: sa.Engine) -> None:
    _import_every_store_module()
    with engine.connect() as connection:
        context = MigrationContext.configure(connection, opts={"compare_type": True})
        assert compare_metadata(context, Base.metadata) == []


def test_spec_7_columns_exist_with_their_defaults(engine: sa.Engine) -> None:
    columns = {c["name"]: c for c in sa.inspect(engine).get_columns("jobs")}
    assert set(columns) >= SPEC_7_COLUMNS | {"reservation_since"}
    assert columns["reserved_gpus"]["nullable"] is False
    assert columns["reservation_gpu_seconds"]["nullable"] is False
    assert columns["reserved_node_name"]["nullable"] is True
    assert columns["reserved_tier_id"]["nullable"] is True
    assert columns["reservation_last_accrued_at"]["nullable"] is True
    fks = sa.inspect(engine).get_foreign_keys("jobs")
    assert any(
        fk["constrained_columns"] == ["reserved_tier_id"] and fk["referred_table"] == "gpu_tiers"
        for fk in fks
    )


def test_the_reservation_index_is_partial_on_both_backends(engine: sa.Engine) -> None:
    with engine.connect() as connection:
        if engine.dialect.name == "postgresql":
            sql = connection.execute(
                sa.text(
                    "SELECT indexdef FROM pg_indexes "
                    "WHERE tablename = 'jobs' AND indexname = 'ix_jobs_reserved' "
                    "AND schemaname = current_schema()"
                )
            ).scalar_one()
            column_type = connection.execute(
                sa.text(
                    "SELECT data_type FROM information_schema.columns WHERE table_name = 'jobs' "
                    "AND column_name = 'reservation_last_accrued_at' "
                    "AND table_schema = current_schema()"
                )
            ).scalar_one()
            assert column_type == "timestamp with time zone"
        else:
            sql = connection.execute(
                sa.text("SELECT sql FROM sqlite_master WHERE name = 'ix_jobs_reserved'")
            ).scalar_one()
    assert "WHERE" in sql.upper()
    assert "reserved_gpus > 0" in sql


@pytest.mark.parametrize(
    ("column", "value"),
    [("num_gpus", 9), ("num_gpus", 0), ("state", "LIMBO"), ("reserved_gpus", 2)],
)
def test_check_constraints_reject_bad_rows(engine: sa.Engine, column: str, value: object) -> None:
    """num_gpus 1-8, the state set, and "a reservation is all its columns or none"."""
    with engine.begin() as connection:
        connection.execute(
            sa.text("INSERT INTO labs (name, cumulative_usage, created_at) VALUES ('l', 0, :t)"),
            {"t": "2026-01-01 00:00:00"},
        )
        connection.execute(
            sa.text(
                "INSERT INTO users (name, lab_id, role, unix_user, created_at)"
                " VALUES ('u', 1, 'pi', 'u', :t)"
            ),
            {"t": "2026-01-01 00:00:00"},
        )
    row = {
        "name": "j",
        "command": "true",
        "user_id": 1,
        "lab_id": 1,
        "num_gpus": 2,
        "minimum_tier_sort_order": 0,
        "state": "GLOBAL_QUEUE_WAIT",
        "submitted_at": "2026-01-01 00:00:00",
        "queue_entered_at": "2026-01-01 00:00:00",
        "reserved_gpus": 0,
    }
    insert = sa.text(
        "INSERT INTO jobs (name, command, user_id, lab_id, num_gpus, minimum_tier_sort_order,"
        " state, submitted_at, queue_entered_at, reserved_gpus) VALUES (:name, :command,"
        " :user_id, :lab_id, :num_gpus, :minimum_tier_sort_order, :state, :submitted_at,"
        " :queue_entered_at, :reserved_gpus)"
    )
    with engine.begin() as connection:
        connection.execute(insert, row)  # the good row goes in
    with pytest.raises(sa.exc.IntegrityError), engine.begin() as connection:
        connection.execute(insert, {**row, column: value})


def test_role_must_be_student_pi_or_admin(engine: sa.Engine) -> None:
    with engine.begin() as connection:
        connection.execute(
            sa.text("INSERT INTO labs (name, cumulative_usage, created_at) VALUES ('l', 0, :t)"),
            {"t": "2026-01-01 00:00:00"},
        )
    with pytest.raises(sa.exc.IntegrityError), engine.begin() as connection:
        connection.execute(
            sa.text(
                "INSERT INTO users (name, lab_id, role, unix_user, created_at)"
                " VALUES ('u', 1, 'root', 'u', :t)"
            ),
            {"t": "2026-01-01 00:00:00"},
        )


def test_sqlite_connections_enforce_foreign_keys_and_use_wal(tmp_path: Path) -> None:
    """SQLite only: the settings `make_engine` gives every SQLite connection."""
    url = sqlite_url(tmp_path / "nested" / "db.sqlite")  # the directory is created
    upgrade(url)
    engine = make_engine(url)
    try:
        with engine.connect() as connection:
            assert connection.exec_driver_sql("PRAGMA foreign_keys").scalar() == 1
            assert connection.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
            assert connection.exec_driver_sql("PRAGMA busy_timeout").scalar() == 30_000
        with pytest.raises(sa.exc.IntegrityError), engine.begin() as connection:
            connection.execute(
                sa.text(
                    "INSERT INTO users (name, lab_id, role, unix_user, created_at)"
                    " VALUES ('u', 42, 'pi', 'u', :t)"
                ),
                {"t": "2026-01-01 00:00:00"},
            )
    finally:
        engine.dispose()


def test_revision_0003_names_each_existing_user_s_unix_account_after_the_user(
    empty_db_url: str,
) -> None:
    """Users from before jobs ran as their owner keep a Unix account: their own name."""
    upgrade(empty_db_url, "0002")
    engine = make_engine(empty_db_url)
    try:
        with engine.begin() as connection:
            connection.execute(
                sa.text("INSERT INTO labs (id, name, created_at) VALUES (1, 'kdg', :t)"),
                {"t": "2026-01-01 00:00:00"},
            )
            connection.execute(
                sa.text(
                    "INSERT INTO users (name, lab_id, role, created_at)"
                    " VALUES ('alice', 1, 'student', :t)"
                ),
                {"t": "2026-01-01 00:00:00"},
            )
        upgrade(empty_db_url)
        with engine.connect() as connection:
            row = connection.execute(sa.text("SELECT name, unix_user FROM users")).one()
        assert tuple(row) == ("alice", "alice")
        downgrade(empty_db_url, "0002")
        sa.inspect(engine).clear_cache()
        assert "unix_user" not in {c["name"] for c in sa.inspect(engine).get_columns("users")}
    finally:
        engine.dispose()
