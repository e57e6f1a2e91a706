"""Unix accounts the tests create (root only) and MUNGE credentials made as them.

`make_accounts(n)` adds `n` accounts named `jpst<random>` with `useradd` (no home, no
login shell) and removes them with `userdel` when the block ends. `credential_as(account,
payload)` runs `munge` as that account (subprocess `user=`), so the credential carries its
uid, as the CLI of that user would make it. Without root or a working munged the tests
that need them are skipped, except with `CI=true`, where they fail: CI runs as root with
munged (scripts/ensure-services.sh).
"""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

PREFIX = "jpst"


def _in_ci() -> bool:
    return os.environ.get("CI", "").lower() == "true"


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
        if _in_ci():
            pytest.fail(f"{problem} (CI=true: scripts/ensure-services.sh starts munged)")
        pytest.skip(problem)


def account_command(args: list[str]) -> None:
    """useradd / userdel, again while another process holds /etc/passwd's lock (tests of
    other worktrees make accounts too)."""
    for _ in range(50):
        done = subprocess.run(args, capture_output=True, check=False)
        if done.returncode == 0:
            return
        if b"lock" not in done.stderr:
            break
        time.sleep(0.1)
    raise RuntimeError(f"{' '.join(args)}: {done.stderr.decode().strip()}")


@contextmanager
def make_accounts(n: int) -> Iterator[list[str]]:
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
