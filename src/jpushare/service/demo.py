"""`jpushare serve --demo`: a fresh machine becomes a working service with ready tokens.

If the database has no inventory yet, it is initialised from the example cluster file
(tiers, nodes with declared GPUs, labs with their starting usage), with one student per lab
and an admin; tokens for them go to `<state dir>/demo-tokens.env`, which a shell sources
(`. var/demo-tokens.env`) to point the `jpushare` client at the service. A database that
already has an inventory is left as it is; its tokens file is kept if there is one, and
rewritten with fresh tokens for the demo users otherwise. The demo users are the Unix
account that runs the service (a service that is not root may run jobs only as itself,
`account_rule`), also in a demo database made by an earlier version or another account.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from sqlalchemy.orm import Session, sessionmaker

from jpushare import store
from jpushare.formats.cluster_file import ClusterSpec
from jpushare.store.cluster_setup import inventory_is_empty, load_cluster_spec
from jpushare.unix_accounts import service_account

DEMO_CLUSTER = Path("examples") / "cluster.yaml"
TOKENS_FILE = "demo-tokens.env"
DEFAULT_LABS = ("lab-a", "lab-b")  # when the cluster file names none
ADMIN_USER = "admin"


@dataclass(frozen=True, slots=True)
class DemoUser:
    name: str
    lab: str
    role: str
    token: str


@dataclass(frozen=True, slots=True)
class Demo:
    tokens_file: Path
    initialised: bool  # the database was empty and got the example cluster
    users: tuple[DemoUser, ...]  # empty when an existing tokens file was kept
    jobs: int = 0  # jobs already in the database (a reused one): the next job's id is higher


def user_name(lab: str) -> str:
    """The demo student of a lab: its name in lower case, then `-user` (`BCG` -> `bcg-user`)."""
    return re.sub(r"[^a-z0-9]+", "-", lab.lower()).strip("-") + "-user"


def prepare_demo(
    sessions: sessionmaker[Session], spec: ClusterSpec, state_dir: Path, url: str
) -> Demo:
    """Initialise an empty database from `spec`, then make sure a tokens file exists."""
    tokens_file = state_dir / TOKENS_FILE
    now = store.utc_now()
    with sessions.begin() as session:
        fresh = inventory_is_empty(session)
        if fresh:
            load_cluster_spec(session, spec, now)
            labs = sorted(spec.labs) or list(DEFAULT_LABS)
            existing = {lab.name for lab in store.list_labs(session)}
            for lab in labs:
                if lab not in existing:
                    store.create_lab(session, lab, now)
        _point_demo_users_at(session, service_account().name)
        jobs = store.job_count(session)
        if not fresh and tokens_file.exists():
            return Demo(tokens_file, False, (), jobs)
        users = _ensure_users(session, now)
    _write_tokens(tokens_file, url, users)
    return Demo(tokens_file, fresh, tuple(users), jobs)


def _wanted_users(session: Session) -> list[tuple[str, str, str]]:
    """(name, lab, role) of the demo users: a student per lab and an admin."""
    labs = sorted(lab.name for lab in store.list_labs(session))
    wanted = [(user_name(lab), lab, "student") for lab in labs]
    if labs:
        wanted.append((ADMIN_USER, labs[0], "admin"))
    return wanted


def _point_demo_users_at(session: Session, account: str) -> None:
    """Demo users that exist run as `account` (the service's)."""
    known = {u.name: u for u in store.list_users(session)}
    for name, _lab, _role in _wanted_users(session):
        user = known.get(name)
        if user is not None and user.unix_user != account:
            store.set_unix_user(session, name, account)


def _ensure_users(session: Session, now: datetime) -> list[DemoUser]:
    known = {u.name: u for u in store.list_users(session)}
    account = service_account().name
    out: list[DemoUser] = []
    for name, lab, role in _wanted_users(session):
        user = known.get(name) or store.create_user(session, name, lab, role, now, account)
        issued = store.issue_token(session, user.id, now, label="demo")
        out.append(DemoUser(user.name, user.lab_name, user.role, issued.secret))
    return out


def _env_name(user: str) -> str:
    return "JPUSHARE_TOKEN_" + re.sub(r"[^A-Z0-9]+", "_", user.upper()).strip("_")


def _write_tokens(path: Path, url: str, users: list[DemoUser]) -> None:
    first = users[0]
    lines = [
        "# JPU-Share demo: written by `jpushare serve --demo`. Use: . var/demo-tokens.env",
        "# Keep it private: these tokens act as the users below.",
        f"export JPUSHARE_URL={url}",
        f"# JPUSHARE_TOKEN acts as {first.name} (lab {first.lab}, {first.role}); to act as",
        "# someone else: export JPUSHARE_TOKEN=$JPUSHARE_TOKEN_<USER>",
        f"export JPUSHARE_TOKEN={first.token}",
    ]
    lines += [f"export {_env_name(u.name)}={u.token}  # lab {u.lab}, {u.role}" for u in users]
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
    os.replace(tmp, path)


def instructions(demo: Demo, url: str, database: str, state_dir: Path) -> str:
    """What to print once the service is up: where the API is, whether the database is new
    or reused (a reused one keeps its jobs, so the README's job numbers do not hold), and
    how to start fresh."""
    tokens = demo.tokens_file
    shown = os.path.relpath(tokens) if not tokens.is_absolute() else str(tokens)
    state = os.path.relpath(state_dir) if state_dir.is_absolute() else str(state_dir)
    if demo.initialised:
        db_line = f"  database: {database} (new, from the example cluster)"
    else:
        held = f"{demo.jobs} job{'s' if demo.jobs != 1 else ''}"
        db_line = (
            f"  database: {database} REUSED ({held} in it: new jobs are numbered from "
            f"{demo.jobs + 1}). To start fresh: stop the service, `rm -r {state}`, `make run`"
        )
    return "\n".join(
        [
            "",
            f"JPU-Share demo: API at {url} (dashboard at {url}/, OpenAPI at {url}/docs)",
            db_line,
            f"  tokens for the demo users: {shown}",
            "In another shell, in this directory:",
            "  . .venv/bin/activate",
            f"  . {shown}",
            "  jpushare submit --gpus 2 --wait -- sleep 30",
            "  jpushare queue",
            "  jpushare show 1" if demo.initialised else "  jpushare jobs --mine",
            "",
        ]
    )
