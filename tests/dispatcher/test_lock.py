"""The dispatcher lock on both databases: one holder at a time, released by release() and
by the death of its holder (the connection or file closes)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

from jpushare.dispatcher.lock import FileLock, NoLock, PostgresAdvisoryLock, lock_for
from tests.database import postgres_schema_url, postgres_url
from tests.dispatcher.conftest import wait_for


def test_only_one_lock_holder_at_a_time_and_release_hands_it_over(db_url: str) -> None:
    first, second = lock_for(db_url), lock_for(db_url)
    assert isinstance(first, FileLock | PostgresAdvisoryLock)
    try:
        assert first.hold() is True
        assert first.hold() is True  # held: still ours next cycle
        assert second.hold() is False
        first.release()
        assert second.hold() is True
        assert first.hold() is False
    finally:
        first.release()
        second.release()


def test_a_killed_holder_loses_the_lock(db_url: str) -> None:
    script = textwrap.dedent(
        f"""
        import sys, time
        from jpushare.dispatcher.lock import lock_for
        lock = lock_for({db_url!r})
        assert lock.hold()
        print("held", flush=True)
        time.sleep(600)
        """
    )
    holder = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        mine = lock_for(db_url)
        assert mine.hold() is False
        holder.kill()
        holder.wait(timeout=60)
        wait_for(mine.hold, "the lock is free once its holder is dead")
        mine.release()
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait(timeout=60)


def test_postgres_locks_of_two_schemas_do_not_exclude_each_other(db_url: str) -> None:
    if not db_url.startswith("postgresql"):
        return
    other = postgres_schema_url(postgres_url(), "public")
    a, b = PostgresAdvisoryLock(db_url), PostgresAdvisoryLock(other)
    try:
        assert a.hold() and b.hold()
    finally:
        a.close()
        b.close()


def test_an_in_memory_database_needs_no_lock() -> None:
    assert isinstance(lock_for("sqlite://"), NoLock)
    assert isinstance(lock_for("sqlite:///:memory:"), NoLock)
