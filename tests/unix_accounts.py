"""Throw-away Unix accounts for the tests that run as their owners (root only), and MUNGE
credentials made as them: the one helper every such test uses.

`made_accounts(*roles)` creates accounts named `jpst<random>-<role>` with a home directory
(0755: only the files' own modes protect them); `make_accounts(n)` creates `n` bare ones
(no home, no login shell). Both delete what they made when the block ends. `useradd` and
`userdel` are retried while another process holds /etc/passwd's lock (tests of other
worktrees make accounts too). `credential_as(account, payload)` runs `munge` as that
account, so the credential carries its uid, as the CLI of that user would make it.

Outside root (or without a working munged, for `require_root_and_munge`) the tests skip,
except under CI=true, where they fail: CI runs as root with munged
(scripts/ensure-services.sh), so that the attack on the service is replayed.
"""

from __future__ import annotations

import os
import pwd
import secrets
import shutil
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass

from tests.missing import missing

PREFIX = "jpst"


def _skip_or_fail(problem: str) -> None:
    missing(problem, "CI=true: scripts/ensure-services.sh starts munged")


def require_root(why: str) -> None:
    """Skip unless root with useradd/userdel (fail under CI=true)."""
    if os.geteuid() == 0 and shutil.which("useradd") and shutil.which("userdel"):
        return
    _skip_or_fail(f"needs root and useradd/userdel: {why}")


def require_root_and_munge() -> None:
    """Skip (fail in CI) unless this process is root and munged answers."""
    problem = None
    if os.geteuid() != 0:
        problem = "creating Unix accounts needs root"
    elif shutil.which("munge") is None or shutil.which("useradd") is None:
        problem = "munge or useradd is not installed"
    else:
        done = subprocess.run(["munge", "-n"], capture_output=True, check=False)
        if done.returncode != 0:
            problem = f"munged does not answer: {done.stderr.decode().strip()}"
    if problem is not None:
        _skip_or_fail(problem)


def account_command(args: list[str]) -> None:
    """useradd / userdel / groupadd ..., again while another process holds the lock."""
    for _ in range(50):
        done = subprocess.run(args, capture_output=True, check=False)
        if done.returncode == 0:
            return
        if b"lock" not in done.stderr:
            break
        time.sleep(0.1)
    raise RuntimeError(f"{' '.join(args)}: {done.stderr.decode().strip()}")


@dataclass(frozen=True)
class MadeAccount:
    name: str
    uid: int
    gid: int
    home: str


@contextmanager
def made_accounts(*roles: str) -> Iterator[dict[str, MadeAccount]]:
    """One new account per role (each with its own group and home, 0755), removed after."""
    tag = secrets.token_hex(3)
    made: list[str] = []
    try:
        out: dict[str, MadeAccount] = {}
        for role in roles:
            name = f"{PREFIX}{tag}-{role}"[:32]
            account_command(
                ["useradd", "--create-home", "--shell", "/bin/bash", "--user-group", name]
            )
            made.append(name)
            entry = pwd.getpwnam(name)
            os.chmod(entry.pw_dir, 0o755)  # only the files' own modes protect them
            out[role] = MadeAccount(name, entry.pw_uid, entry.pw_gid, entry.pw_dir)
        yield out
    finally:
        for name in made:  # the tests stop their jobs first; --force: even so
            with suppress(RuntimeError):
                account_command(["userdel", "--force", "--remove", name])


@contextmanager
def make_accounts(n: int) -> Iterator[list[str]]:
    """`n` new accounts without a home or a login shell (names only), removed after."""
    names = [f"{PREFIX}{secrets.token_hex(4)}" for _ in range(n)]
    made: list[str] = []
    try:
        for name in names:
            account_command(["useradd", "--no-create-home", "--shell", "/usr/sbin/nologin", name])
            made.append(name)
        yield names
    finally:
        for name in made:
            account_command(["userdel", name])


def credential_as(account: str | int, payload: bytes, ttl_s: int | None = None) -> str:
    """A MUNGE credential made by `account` (a name, or a bare uid) for `payload`."""
    args = ["munge", "--input", "-"]
    if ttl_s is not None:
        args += ["--ttl", str(ttl_s)]
    done = subprocess.run(
        args, input=payload, user=account, group=None, capture_output=True, check=True
    )
    return done.stdout.decode().strip()
