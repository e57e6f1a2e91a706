"""`jpushare.unix_accounts`: what a job needs to run as its owner, from the real account
database (accounts and a group made for the test, as root)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from jpushare.unix_accounts import (
    UnknownAccount,
    account_of_uid,
    resolve_account,
    service_account,
    valid_account_name,
)
from tests.unix_accounts import account_command, make_accounts, require_root_and_munge


@pytest.fixture
def account_in_a_group() -> Iterator[tuple[str, str]]:
    require_root_and_munge()
    with make_accounts(1) as [name]:
        group = name + "g"
        account_command(["groupadd", group])
        try:
            account_command(["usermod", "-aG", group, name])
            yield name, group
        finally:
            account_command(["groupdel", group])


def test_an_account_resolves_to_what_su_would_set(account_in_a_group: tuple[str, str]) -> None:
    import grp
    import pwd

    name, group = account_in_a_group
    account = resolve_account(name)
    entry = pwd.getpwnam(name)
    assert (account.name, account.uid, account.gid) == (name, entry.pw_uid, entry.pw_gid)
    assert (account.home, account.shell) == (entry.pw_dir, "/usr/sbin/nologin")
    assert set(account.groups) == {entry.pw_gid, grp.getgrnam(group).gr_gid}
    assert account_of_uid(entry.pw_uid) == account


def test_unknown_and_malformed_accounts_say_so() -> None:
    with pytest.raises(UnknownAccount, match="there is no Unix account 'jpst-none'"):
        resolve_account("jpst-none")
    for bad in ("", "-rf", "../x", "a b", "a\x00b", "x" * 65, "é"):
        assert not valid_account_name(bad)
        with pytest.raises(UnknownAccount, match="is not a Unix account name"):
            resolve_account(bad)
    for good in ("alice", "a.smith", "svc_ml-1", "user@realm", "host$"):
        assert valid_account_name(good)
    with pytest.raises(UnknownAccount, match="no Unix account on this host has uid 54321"):
        account_of_uid(54321)


def test_the_service_account_is_the_effective_uid() -> None:
    import os

    assert service_account().uid == os.geteuid()
