#!/usr/bin/env python3
"""What the lab page's and the watch-list's longer windows cost on a long history, on
SQLite and PostgreSQL (if reachable).

    .venv/bin/python bench/bench_dashboard_windows.py [--jobs 100000]

The history of `bench_watch.py` (ended jobs over 60 days, 12 labs of one user each). Prints
the median milliseconds of the lab page's queries (`user_charges` over 7, 30 and 90 days and
`user_in_flight`) and of the watch-list page's work for a window of 7, 30 and 90 days (the
window's figures plus one per-day point per day, `history.watch_days`). Asserts nothing.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import uuid
from datetime import timedelta
from functools import partial
from pathlib import Path

import sqlalchemy as sa

sys.path.insert(0, str(Path(__file__).parent))

from bench_watch import T_END, median_ms, populate
from jpushare import store
from jpushare.policy.watch import watch_figures
from jpushare.store.aggregates import user_in_flight
from jpushare.store.usage_history import user_charges
from jpushare.store.watch_records import load_watch_records
from jpushare.web.history import watch_days

WINDOWS = (7, 30, 90)


def measure(name: str, url: str, n_jobs: int) -> None:
    store.upgrade(url)
    engine = store.make_engine(url)
    sessions = store.make_sessionmaker(engine)
    populate(sessions, n_jobs)
    with sessions.begin() as s:
        lab_id = store.get_lab(s, "lab00").id

    def lab(days: int) -> None:
        with sessions.begin() as s:
            user_charges(s, lab_id, T_END - timedelta(days=days), T_END)
            user_in_flight(s, T_END, lab_id)

    def watch(days: int) -> None:
        with sessions.begin() as s:
            watch_figures(*load_watch_records(s, T_END - timedelta(days=days), T_END))
            watch_days(s, T_END, days)

    labs = "  ".join(f"{d}d {median_ms(partial(lab, d)):7.1f}" for d in WINDOWS)
    print(f"{name:10}  {n_jobs:>7,} ended jobs  lab page (ms): {labs}", flush=True)
    watches = "  ".join(f"{d}d {median_ms(partial(watch, d), repeat=3):7.1f}" for d in WINDOWS)
    print(f"{name:10}  {n_jobs:>7,} ended jobs  watch page (ms): {watches}", flush=True)
    engine.dispose()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--jobs", type=int, default=100_000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        measure("SQLite", store.sqlite_url(Path(tmp) / "bench.sqlite"), args.jobs)
    base = "postgresql+psycopg://postgres@127.0.0.1:5432/test"
    schema = f"bench_windows_{uuid.uuid4().hex[:8]}"
    try:
        admin = sa.create_engine(base, isolation_level="AUTOCOMMIT")
        with admin.connect() as c:
            c.execute(sa.text(f"CREATE SCHEMA {schema}"))
    except sa.exc.SQLAlchemyError as exc:
        print(f"PostgreSQL skipped: {exc}", file=sys.stderr)
        return 0
    try:
        url = sa.make_url(base).update_query_dict({"options": f"-csearch_path={schema}"})
        measure("PostgreSQL", url.render_as_string(hide_password=False), args.jobs)
    finally:
        with admin.connect() as c:
            c.execute(sa.text(f"DROP SCHEMA {schema} CASCADE"))
        admin.dispose()
    return 0


if __name__ == "__main__":
    sys.exit(main())
