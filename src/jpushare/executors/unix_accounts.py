"""Unix accounts as the executors need them: who a job runs as, and whether we may switch.

A job runs as its owner's account only when the service can become that account (it runs
as root); otherwise every job runs as the service's own account (a service that is not
root serves one account). Private to the executors; the API's account checks at
`admin user add` are elsewhere.
"""

from __future__ import annotations

import os
import pwd
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class UnixAccount:
    """One account from the system's account database, resolved once at launch."""

    name: str
    uid: int
    gid: int
    groups: tuple[int, ...]  # supplementary groups (initgroups), primary group included
    home: str
    shell: str

    def login_env(self) -> dict[str, str]:
        """The variables a login sets for this account (sbatch jobs have them too)."""
        return {"HOME": self.home, "USER": self.name, "LOGNAME": self.name, "SHELL": self.shell}


class NoSuchAccount(LookupError):
    """The account is not in the system's account database."""


def resolve_account(name: str) -> UnixAccount:
    """The account `name`; NoSuchAccount if this machine does not know it."""
    try:
        entry = pwd.getpwnam(name)
    except KeyError as exc:
        raise NoSuchAccount(f"Unix account {name!r} does not exist on this machine") from exc
    return _account(entry)


def service_account() -> UnixAccount:
    """The account this process runs as (its effective uid)."""
    uid = os.geteuid()
    try:
        return _account(pwd.getpwuid(uid))
    except KeyError:  # a uid without a passwd entry (containers): still an account
        gid = os.getegid()
        return UnixAccount(str(uid), uid, gid, (gid,), os.environ.get("HOME", "/"), "/bin/sh")


def can_switch_accounts() -> bool:
    """Whether jobs can run as other accounts: only root can set another uid."""
    return os.geteuid() == 0


def _account(entry: pwd.struct_passwd) -> UnixAccount:
    try:
        groups = tuple(os.getgrouplist(entry.pw_name, entry.pw_gid))
    except OSError:
        groups = (entry.pw_gid,)
    return UnixAccount(
        name=entry.pw_name,
        uid=entry.pw_uid,
        gid=entry.pw_gid,
        groups=groups,
        home=entry.pw_dir,
        shell=entry.pw_shell or "/bin/sh",
    )
