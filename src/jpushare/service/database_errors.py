"""One line for an operator whose `JPUSHARE_DATABASE_URL` does not work.

`serve`, `init` and `admin` open the database first thing; a refused port, an unknown
role, a missing database or an unknown scheme would otherwise end them in a ~130-line
traceback through Alembic and the driver. `database_problem(exc)` turns the errors that
say "this URL cannot be used" into one sentence naming the variable (the password never
shown); anything else is not ours to explain and returns None.
"""

from __future__ import annotations

import os
import re
import sys

from sqlalchemy import exc as sa_exc
from sqlalchemy.engine import make_url

VARIABLE = "JPUSHARE_DATABASE_URL"

# What a URL that cannot be used raises: the driver cannot connect or log in (Operational,
# Interface), SQLAlchemy cannot parse it (ArgumentError) or has no such dialect or driver
# (NoSuchModuleError).
URL_ERRORS: tuple[type[BaseException], ...] = (
    sa_exc.OperationalError,
    sa_exc.InterfaceError,
    sa_exc.ArgumentError,
    sa_exc.NoSuchModuleError,
    sa_exc.TimeoutError,
)

_DRIVER_PREFIX = re.compile(r"^\([\w.]+\)\s*")
_NOISE = re.compile(r"^(?:connection failed:\s*|FATAL:\s*)+")


def shown_url() -> str:
    """The variable's value with its password hidden, or what it defaults to."""
    raw = os.environ.get(VARIABLE, "").strip()
    if not raw:
        return "unset: the SQLite file in JPUSHARE_STATE_DIR"
    try:
        return make_url(raw).render_as_string(hide_password=True)
    except Exception:  # not a URL at all: show no part of it (it may hold a password)
        return "not a URL"


def _reason(exc: BaseException) -> str:
    if isinstance(exc, sa_exc.NoSuchModuleError):
        return (
            f"unknown scheme or driver ({_first_line(exc)}); "
            "use postgresql+psycopg:// or sqlite:///"
        )
    if isinstance(exc, sa_exc.ArgumentError):
        return "not a database URL (expected e.g. postgresql+psycopg://user@host/db)"
    orig = getattr(exc, "orig", None)
    text = _first_line(orig if orig is not None else exc)
    text = _NOISE.sub("", _DRIVER_PREFIX.sub("", text)).strip()
    lowered = text.lower()
    if "connection refused" in lowered:
        return f"nothing listens there: {text}"
    if "role" in lowered and "does not exist" in lowered:
        return f"unknown role: {text}"
    if "database" in lowered and "does not exist" in lowered:
        return f"missing database: {text}"
    if "password authentication failed" in lowered or "no password supplied" in lowered:
        return f"login refused: {text}"
    if "unable to open database file" in lowered:
        return f"the SQLite file cannot be opened: {text}"
    return f"cannot connect: {text}"


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0].strip() if text else type(exc).__name__


def report_database_problem(exc: BaseException, command: str) -> int:
    """For a command's `except URL_ERRORS`: print the one line and return exit code 2, or
    re-raise `exc` when it is not about the database URL (a real bug keeps its traceback)."""
    problem = database_problem(exc)
    if problem is None:
        raise exc
    print(f"{command}: {problem}", file=sys.stderr)
    return 2


def database_problem(exc: BaseException) -> str | None:
    """The one line for `exc` if it says the database URL cannot be used, else None."""
    if not isinstance(exc, URL_ERRORS):
        return None
    return f"{VARIABLE} ({shown_url()}): {_reason(exc)}"
