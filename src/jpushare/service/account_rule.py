"""The single-account rule of `serve`: a service that is not root runs jobs as itself only.

Only root can start a process as another Unix account (and only root, or Slurm's
SlurmUser, can `sbatch --uid` for another account). A service that is neither would run
every user's job as its own account, and one user's job could read another's output, the
service's database... So it refuses to start while any user maps to an account other than
its own, and says which, and its API refuses new users of other accounts (422
ACCOUNT_NOT_SERVED); `--demo` points its demo users at the service's account, so `make
run` works as any user.
"""

from __future__ import annotations

import os
import re
import subprocess

from sqlalchemy.orm import Session, sessionmaker

from jpushare import store
from jpushare.config import ConfigError
from jpushare.unix_accounts import service_account

_SLURM_USER = re.compile(r"^SlurmUser\s*=\s*([^\s(]+)", re.MULTILINE)


def slurm_user() -> str | None:
    """Slurm's SlurmUser (`scontrol show config`), or None when Slurm does not answer."""
    try:
        done = subprocess.run(
            ["scontrol", "show", "config"], capture_output=True, text=True, timeout=15, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    found = _SLURM_USER.search(done.stdout) if done.returncode == 0 else None
    return found.group(1) if found else None


def may_run_as_others(executor: str) -> bool:
    """Root may; so may SlurmUser when Slurm starts the jobs (`sbatch --uid`)."""
    if os.geteuid() == 0:
        return True
    return executor == "slurm" and slurm_user() == service_account().name


def served_account(executor: str) -> str | None:
    """The one Unix account this service may serve, or None when it may serve any."""
    return None if may_run_as_others(executor) else service_account().name


def check_service_account(sessions: sessionmaker[Session], executor: str) -> str | None:
    """ConfigError (one line) if the service cannot run some user's jobs as their account;
    else the one account it serves (None: any), for the API to hold new users to it."""
    me = served_account(executor)
    if me is None:
        return None
    with sessions() as session:
        accounts = store.unix_accounts(session)
    others = {account: users for account, users in accounts.items() if account != me}
    if not others:
        return me
    shown = "; ".join(
        f"{', '.join(users)} as {account}" for account, users in sorted(others.items())[:5]
    )
    more = f" (and {len(others) - 5} more accounts)" if len(others) > 5 else ""
    raise ConfigError(
        f"this service runs as the Unix account {me}, not root, so it can run jobs only as "
        f"{me}, but users map to other accounts: {shown}{more}. Run the service as root (or "
        "as Slurm's SlurmUser with JPUSHARE_EXECUTOR=slurm), or serve only users of the "
        f"account {me}"
    )
