"""The dispatcher lease on both databases: one holder at a time, handed over by release()
or by expiry, and fencing: a transaction of a holder whose lease was taken rolls back."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.orm import Session, sessionmaker

from jpushare import store
from jpushare.dispatcher.lock import DispatcherLease, LeaseLost, NoLock, lock_for
from jpushare.store.leadership import get_lease
from jpushare.store.migrate import upgrade
from tests.database import new_database


@pytest.fixture
def leases(sessions: sessionmaker[Session]) -> Iterator[list[DispatcherLease]]:
    made: list[DispatcherLease] = []
    yield made
    for lease in made:
        lease.release()


def _lease(
    made: list[DispatcherLease], sessions: sessionmaker[Session], lease_s: float, name: str
) -> DispatcherLease:
    lease = DispatcherLease(sessions, lease_s, holder=name)
    made.append(lease)
    return lease


def _expire(sessions: sessionmaker[Session]) -> None:
    """Make the lease look as if its holder stopped renewing it long ago."""
    with sessions.begin() as s:
        s.execute(
            sa.text("UPDATE dispatcher_leases SET expires_at = :at"),
            {"at": store.utc_now().replace(year=2000)},
        )


def test_only_one_holder_at_a_time_and_release_hands_it_over(
    sessions: sessionmaker[Session], leases: list[DispatcherLease]
) -> None:
    first = _lease(leases, sessions, 60.0, "first")
    second = _lease(leases, sessions, 60.0, "second")
    assert first.hold() is True and first.epoch == 1
    assert first.hold() is True and first.epoch == 1  # renewed, same epoch
    assert second.hold() is False and second.epoch is None
    first.release()
    assert second.hold() is True and second.epoch == 2
    assert first.hold() is False
    with sessions() as s:
        lease = get_lease(s)
    assert lease is not None and (lease.holder, lease.epoch) == ("second", 2)


def test_an_expired_lease_is_taken_with_a_new_epoch_and_its_old_holder_is_fenced(
    sessions: sessionmaker[Session], leases: list[DispatcherLease]
) -> None:
    old = _lease(leases, sessions, 60.0, "old")
    new = _lease(leases, sessions, 60.0, "new")
    assert old.hold() and old.may_act()
    _expire(sessions)  # the old holder froze for longer than its lease
    assert new.hold() is True and new.epoch == 2

    # The old holder wakes mid-cycle: what it writes now rolls back, and it steps down.
    with pytest.raises(LeaseLost), old.transaction(sessions) as s:
        store.create_lab(s, "written-by-the-old-leader", store.utc_now())
    with sessions() as s:
        assert "written-by-the-old-leader" not in [lab.name for lab in store.list_labs(s)]
    assert old.epoch is None and not old.may_act()
    assert old.hold() is False  # the new holder's lease is fresh

    with new.transaction(sessions) as s:  # the new holder's writes commit
        store.create_lab(s, "written-by-the-new-leader", store.utc_now())
    with sessions() as s:
        assert "written-by-the-new-leader" in [lab.name for lab in store.list_labs(s)]


def test_an_expired_lease_nobody_took_is_renewed_by_its_holder(
    sessions: sessionmaker[Session], leases: list[DispatcherLease]
) -> None:
    holder = _lease(leases, sessions, 60.0, "holder")
    assert holder.hold() and holder.epoch == 1
    _expire(sessions)
    assert holder.hold() is True and holder.epoch == 1  # nobody acted under another epoch
    with sessions() as s:
        lease = get_lease(s)
    assert lease is not None and lease.expires_at is not None
    assert lease.expires_at > store.utc_now()


def test_a_holder_past_its_own_deadline_may_not_act_until_it_renews(
    sessions: sessionmaker[Session], leases: list[DispatcherLease]
) -> None:
    clock = [1000.0]
    lease = DispatcherLease(sessions, 10.0, holder="clocked", monotonic=lambda: clock[0])
    leases.append(lease)
    assert lease.hold() and lease.may_act()
    clock[0] += 8.9  # within 0.9 of the lease: the holder trusts it
    assert lease.may_act()
    clock[0] += 0.2  # past it: the database may soon let another process take over
    assert not lease.may_act()
    assert lease.hold() and lease.may_act()  # nobody took it: renewed under the same epoch
    assert lease.epoch == 1


def test_two_schemas_have_leases_of_their_own(
    db_url: str, sessions: sessionmaker[Session], leases: list[DispatcherLease], tmp_path: Path
) -> None:
    if not db_url.startswith("postgresql"):
        return
    with contextlib.contextmanager(new_database)("postgresql", tmp_path) as other_url:
        upgrade(other_url)
        a = _lease(leases, sessions, 60.0, "a")
        b = lock_for(other_url, lease_s=60.0, holder="b")
        assert isinstance(b, DispatcherLease)
        try:
            assert a.hold() and a.epoch == 1
            assert b.hold() and b.epoch == 1
        finally:
            b.close()


def test_an_in_memory_database_needs_no_lock() -> None:
    assert isinstance(lock_for("sqlite://"), NoLock)
    assert isinstance(lock_for("sqlite:///:memory:"), NoLock)
