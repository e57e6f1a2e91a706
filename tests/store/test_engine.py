"""Where the database is: JPUSHARE_DATABASE_URL, else a SQLite file (no database needed)."""

from __future__ import annotations

from pathlib import Path

from jpushare.store.engine import DEFAULT_SQLITE_PATH, database_url, is_sqlite, sqlite_url


def test_no_url_means_the_default_sqlite_file_under_var() -> None:
    url = database_url(env={})
    assert url == sqlite_url(DEFAULT_SQLITE_PATH)
    assert url.endswith("var/jpushare.sqlite")
    assert is_sqlite(url)


def test_the_sqlite_path_is_configurable(tmp_path: Path) -> None:
    assert database_url(env={"JPUSHARE_SQLITE_PATH": str(tmp_path / "x.db")}) == sqlite_url(
        tmp_path / "x.db"
    )
    assert database_url(env={}, default_sqlite_path=tmp_path / "y.db") == sqlite_url(
        tmp_path / "y.db"
    )


def test_a_postgresql_url_wins() -> None:
    url = "postgresql+psycopg://u@db:5432/jpushare"
    assert database_url(env={"JPUSHARE_DATABASE_URL": url, "JPUSHARE_SQLITE_PATH": "x"}) == url
    assert not is_sqlite(url)


def test_an_empty_url_counts_as_unset() -> None:
    assert is_sqlite(database_url(env={"JPUSHARE_DATABASE_URL": "  "}))
