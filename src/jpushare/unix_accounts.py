"""Unix accounts from the system's account database (pwd, grp): who a user's jobs run as.

A JPU-Share user names a Unix account (`users.unix_user`). `resolve_account(name)` turns it
into what a process needs to become that account (uid, gid, supplementary groups, home,
shell) or raises `UnknownAccount` with a sentence a person can act on. It is asked when an
admin adds a user, when a MUNGE credential's uid is mapped to a user, and at dispatch (the
account may have been removed since). Reads only; no caching, so a changed account counts
at once (NSS may cache, as `id` would).
"""

from __future__ import annotations

import os
import pwd
import re
from dataclasses import dataclass

# What `useradd` accepts, plus what directory services produce (`first.last`, `user@realm`,
# upper case): checked before asking NSS, so a name can never be a path or an option.
ACCOUNT_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.@-]{0,63}\$?")


class UnknownAccount(LookupError):
    """The Unix account does not exist on this host (or its name is not one)."""

    def __init__(self, name: str, why: str) -> None:
        super().__init__(why)
        self.name = name


@dataclass(frozen=True, slots=True)
class UnixAccount:
    """Everything a process needs to run as the account, as `su - name` would set it."""

    name: str
    uid: int
    gid: int
    groups: tuple[int, ...]  # supplementary group ids, the primary one included
    home: str
    shell: str

    def login_env(self) -> dict[str, str]:
        """The variables a login sets for this account (sbatch jobs have them too)."""
        return {"HOME": self.home, "USER": self.name, "LOGNAME": self.name, "SHELL": self.shell}


def valid_account_name(name: str) -> bool:
    return ACCOUNT_NAME.fullmatch(name) is not None


def resolve_account(name: str) -> UnixAccount:
    """The account `name` from the system's account database; UnknownAccount if none."""
    if not valid_account_name(name):
        raise UnknownAccount(name, f"{name!r} is not a Unix account name")
    try:
        entry = pwd.getpwnam(name)
    except KeyError:
        raise UnknownAccount(
            name,
            f"there is no Unix account {name!r} on this host (create it, or join the host to "
            "the directory the cluster uses, then try again)",
        ) from None
    return _account(entry)


def account_of_uid(uid: int) -> UnixAccount:
    """The account with user id `uid`; UnknownAccount if the host has no such uid."""
    try:
        entry = pwd.getpwuid(uid)
    except KeyError:
        raise UnknownAccount(str(uid), f"no Unix account on this host has uid {uid}") from None
    return _account(entry)


def service_account() -> UnixAccount:
    """The account this process runs as (its effective uid)."""
    uid = os.geteuid()
    try:
        return account_of_uid(uid)
    except UnknownAccount:  # a uid without a passwd entry (containers): still an account
        gid = os.getegid()
        return UnixAccount(str(uid), uid, gid, (gid,), os.environ.get("HOME", "/"), "/bin/sh")


def can_switch_accounts() -> bool:
    """Whether jobs can run as other accounts: only root can set another uid."""
    return os.geteuid() == 0


def _account(entry: pwd.struct_passwd) -> UnixAccount:
    try:
        groups = os.getgrouplist(entry.pw_name, entry.pw_gid)
    except OSError:  # NSS failure: the primary group alone is still right
        groups = [entry.pw_gid]
    return UnixAccount(
        name=entry.pw_name,
        uid=entry.pw_uid,
        gid=entry.pw_gid,
        groups=tuple(sorted(set(groups))),
        home=entry.pw_dir,
        shell=entry.pw_shell or "/bin/sh",
    )
