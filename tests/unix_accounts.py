"""Throw-away Unix accounts for the tests that run jobs as their owners (root only).

`made_accounts(...)` creates accounts named `jpst<random>-<role>` with a home directory,
and deletes them (and their homes) afterwards. Outside root the tests skip, except under
CI=true, where they fail: CI runs as root so that the attack on the service is replayed.
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import pytest

PREFIX = "jpst"


def require_root(why: str) -> None:
    """Skip unless root (fail under CI=true)."""
    if os.geteuid() == 0 and shutil.which("useradd") and shutil.which("userdel"):
        return
    message = f"needs root and useradd/userdel: {why}"
    if os.environ.get("CI") == "true":
        pytest.fail(message)
    pytest.skip(message)


@dataclass(frozen=True)
class MadeAccount:
    name: str
    uid: int
    gid: int
    home: str


@contextmanager
def made_accounts(*roles: str) -> Iterator[dict[str, MadeAccount]]:
    """One new account per role (each with its own group and home, 0755), removed after."""
    tag = uuid.uuid4().hex[:6]
    made: list[str] = []
    try:
        out: dict[str, MadeAccount] = {}
        for role in roles:
            name = f"{PREFIX}{tag}-{role}"[:32]
            subprocess.run(
                ["useradd", "--create-home", "--shell", "/bin/bash", "--user-group", name],
                check=True,
                capture_output=True,
            )
            made.append(name)
            entry = pwd.getpwnam(name)
            os.chmod(entry.pw_dir, 0o755)  # only the files' own modes protect them
            out[role] = MadeAccount(name, entry.pw_uid, entry.pw_gid, entry.pw_dir)
        yield out
    finally:
        for name in made:  # the tests stop their jobs first; --force: even so
            subprocess.run(
                ["userdel", "--force", "--remove", name], check=False, capture_output=True
            )
