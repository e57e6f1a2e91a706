"""Schema migrations, run programmatically: `upgrade(url)`, `downgrade(url)`, `current(url)`.

The Alembic scripts live in `migrations/` inside the package, so this works from an
installed wheel as well as from a checkout; no alembic.ini is needed.
"""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from sqlalchemy.engine import URL

from jpushare.store.engine import database_url, make_engine

MIGRATIONS_DIR = Path(__file__).resolve().parent / "migrations"


def alembic_config(url: str | URL | None = None) -> Config:
    """An Alembic config for `url` (default: `database_url()`), built in code."""
    if url is None:
        url = database_url()
    rendered = url if isinstance(url, str) else url.render_as_string(hide_password=False)
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    cfg.set_main_option("path_separator", "os")
    cfg.set_main_option("sqlalchemy.url", rendered.replace("%", "%%"))
    return cfg


def upgrade(url: str | URL | None = None, revision: str = "head") -> None:
    """Bring the database at `url` up to `revision` (default: the newest)."""
    command.upgrade(alembic_config(url), revision)


def downgrade(url: str | URL | None = None, revision: str = "base") -> None:
    """Take the database at `url` down to `revision` (default: drop everything)."""
    command.downgrade(alembic_config(url), revision)


def current(url: str | URL | None = None) -> str | None:
    """The revision the database is at, or None if it was never migrated."""
    engine = make_engine(url)
    try:
        with engine.connect() as connection:
            return MigrationContext.configure(connection).get_current_revision()
    finally:
        engine.dispose()
