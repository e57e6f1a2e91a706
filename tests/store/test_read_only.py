"""Read-only sessions (`store.read_only_sessions`): on SQLite a deferred `BEGIN` under
`PRAGMA query_only`, so a reader holds no write lock and never blocks a writer; on
PostgreSQL the same transactions as any session (the option is ignored there).

Threads with Events, not timings: the only time bound is a generous one on the writer,
which with `BEGIN IMMEDIATE` readers would wait for the reader's whole transaction.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest
import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.orm import Session, sessionmaker

from jpushare import store
from tests.store.conftest import T0, World

BOUND_S = 20.0  # far above a commit, below SQLite's 30 s busy timeout


def _is_sqlite(sessions: sessionmaker[Session]) -> bool:
    bind = sessions.kw["bind"]
    assert isinstance(bind, sa.Engine)
    return bind.dialect.name == "sqlite"


@pytest.fixture
def begins(world: World) -> Iterator[list[str]]:
    """The BEGIN and PRAGMA query_only statements sent from now on."""
    sent: list[str] = []
    engine = world.sessions.kw["bind"]

    def record(_conn: object, _cursor: object, statement: str, *_args: object) -> None:
        if statement.startswith(("BEGIN", "PRAGMA query_only")):
            sent.append(statement)

    event.listen(engine, "before_cursor_execute", record)
    yield sent
    event.remove(engine, "before_cursor_execute", record)


def test_a_read_transaction_held_open_does_not_block_a_writer(world: World) -> None:
    reads = store.read_only_sessions(world.sessions)
    reading, written = threading.Event(), threading.Event()
    seen: list[int] = []

    def reader() -> None:
        with reads.begin() as s:
            seen.append(len(store.list_labs(s)))  # the transaction has read: a snapshot
            reading.set()
            written.wait(BOUND_S + 10)
            seen.append(len(store.list_labs(s)))

    thread = threading.Thread(target=reader)
    thread.start()
    try:
        assert reading.wait(BOUND_S)

        def writer() -> None:
            with world.sessions.begin() as s:
                store.create_lab(s, "gamma", T0)
            written.set()

        writing = threading.Thread(target=writer)
        writing.start()
        assert written.wait(BOUND_S), "the writer waited for the open read transaction"
        writing.join()
    finally:
        written.set()
        thread.join(BOUND_S + 20)
    if _is_sqlite(world.sessions):
        assert seen == [2, 2]  # the reader kept its snapshot (WAL)
    with reads.begin() as s:
        assert len(store.list_labs(s)) == 3


def test_sqlite_begins_deferred_for_reads_and_immediate_for_writes(
    world: World, begins: list[str]
) -> None:
    reads = store.read_only_sessions(world.sessions)
    for _ in range(2):
        with reads.begin() as s:
            store.list_labs(s)
    with world.sessions.begin() as s:
        store.create_lab(s, "gamma", T0)
    with reads() as s:  # autobegin
        store.list_labs(s)
    if not _is_sqlite(world.sessions):
        assert begins == []  # PostgreSQL: the driver's own transactions, no hook
        return
    # query_only is switched only when the kind of transaction changes on the connection
    assert begins == [
        "PRAGMA query_only = 1",
        "BEGIN",
        "BEGIN",
        "PRAGMA query_only = 0",
        "BEGIN IMMEDIATE",
        "PRAGMA query_only = 1",
        "BEGIN",
    ]


def test_a_write_in_a_read_only_session_fails_on_sqlite_and_not_elsewhere(
    world: World,
) -> None:
    reads = store.read_only_sessions(world.sessions)
    if _is_sqlite(world.sessions):
        with (
            pytest.raises(sa.exc.OperationalError, match="readonly database"),
            reads.begin() as s,
        ):
            store.create_lab(s, "gamma", T0)
    else:  # PostgreSQL: unchanged, the option means nothing there
        with reads.begin() as s:
            store.create_lab(s, "gamma", T0)
    # the connection goes back to the pool and writes again in a writing session
    with world.sessions.begin() as s:
        store.create_lab(s, "delta", T0)
    with reads.begin() as s:
        names = {lab.name for lab in store.list_labs(s)}
    assert "delta" in names
    assert ("gamma" in names) is not _is_sqlite(world.sessions)


def test_read_only_sessions_keep_the_settings_and_the_pool(world: World) -> None:
    reads = store.read_only_sessions(world.sessions)
    assert reads.kw["expire_on_commit"] is False
    assert issubclass(reads.class_, world.sessions.class_)
    assert reads.kw["bind"].pool is world.sessions.kw["bind"].pool
    unbound: sessionmaker[Session] = sessionmaker()
    assert store.read_only_sessions(unbound) is unbound
