"""Alembic environment: runs the migrations online against the URL `migrate.py` gives it.

Works from an installed package: `jpushare.store.migrate.upgrade(url)` builds the Alembic
config in code; `alembic.ini` next to this file is only for running `alembic` by hand.
"""

from __future__ import annotations

from alembic import context

from jpushare.store.engine import database_url, make_engine
from jpushare.store.schema import Base

config = context.config
target_metadata = Base.metadata


def run_migrations_online() -> None:
    url = config.get_main_option("sqlalchemy.url") or database_url()
    engine = make_engine(url)
    try:
        with engine.connect() as connection:
            context.configure(
                connection=connection,
                target_metadata=target_metadata,
                render_as_batch=connection.dialect.name == "sqlite",
                compare_type=True,
            )
            with context.begin_transaction():
                context.run_migrations()
    finally:
        engine.dispose()


if context.is_offline_mode():
    raise SystemExit("offline (--sql) migrations are not supported; run them against a database")
run_migrations_online()
