"""Labs, users and their API tokens.

A token's secret is `jps_` + 32 random bytes (URL-safe base64), returned once by
`issue_token`; only its SHA-256 is stored, so a leaked database grants no access.
"""

from __future__ import annotations

import hashlib
import secrets
from datetime import datetime

from sqlalchemy import ColumnElement, bindparam, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from jpushare.store.errors import AlreadyExists, InvalidRequest, NotFound
from jpushare.store.records import IssuedToken, LabRecord, TokenRecord, UserRecord
from jpushare.store.schema import ApiToken, Lab, Role, User

TOKEN_PREFIX = "jps_"


def hash_token(secret: str) -> str:
    """SHA-256 of the secret, hex: what `api_tokens.token_hash` holds."""
    return hashlib.sha256(secret.encode("utf-8")).hexdigest()


def _lab_record(lab: Lab) -> LabRecord:
    return LabRecord(lab.id, lab.name, lab.cumulative_usage, lab.created_at)


def _token_record(t: ApiToken) -> TokenRecord:
    return TokenRecord(t.id, t.user_id, t.label, t.created_at, t.revoked_at)


# --- labs --------------------------------------------------------------------------------


def create_lab(session: Session, name: str, now: datetime) -> LabRecord:
    name = name.strip()
    if not name:
        raise InvalidRequest("a lab needs a name")
    if session.scalars(select(Lab.id).where(Lab.name == name)).first() is not None:
        raise AlreadyExists("lab", name)
    lab = Lab(name=name, cumulative_usage=0.0, created_at=now)
    session.add(lab)
    try:
        session.flush()
    except IntegrityError as exc:  # a concurrent insert of the same name
        raise AlreadyExists("lab", name) from exc
    return _lab_record(lab)


def get_lab(session: Session, name: str) -> LabRecord:
    lab = session.scalars(select(Lab).where(Lab.name == name)).one_or_none()
    if lab is None:
        raise NotFound("lab", name)
    return _lab_record(lab)


def list_labs(session: Session) -> list[LabRecord]:
    """Every lab, least usage first (the fair-share order)."""
    labs = session.scalars(select(Lab).order_by(Lab.cumulative_usage, Lab.name))
    return [_lab_record(lab) for lab in labs]


# --- users -------------------------------------------------------------------------------


def _user_record(user: User, lab_name: str) -> UserRecord:
    return UserRecord(
        user.id, user.name, user.lab_id, lab_name, user.role, user.created_at, user.unix_user
    )


def create_user(
    session: Session,
    name: str,
    lab: str,
    role: Role | str,
    now: datetime,
    unix_user: str | None = None,
) -> UserRecord:
    """A user of lab `lab` (by name) with role student | pi | admin, whose jobs run as the
    Unix account `unix_user` (default: the user's name). Whether that account exists is the
    caller's check (the system's account database is I/O, not the store's)."""
    name = name.strip()
    if not name:
        raise InvalidRequest("a user needs a name")
    unix_user = name if unix_user is None else unix_user.strip()
    if not unix_user or len(unix_user) > 64:
        raise InvalidRequest("a Unix account name has 1 to 64 characters")
    try:
        role = Role(role)
    except ValueError as exc:
        raise InvalidRequest(f"role must be one of {', '.join(Role)}, got {role!r}") from exc
    lab_row = session.scalars(select(Lab).where(Lab.name == lab)).one_or_none()
    if lab_row is None:
        raise NotFound("lab", lab)
    if session.scalars(select(User.id).where(User.name == name)).first() is not None:
        raise AlreadyExists("user", name)
    user = User(name=name, lab_id=lab_row.id, role=role.value, unix_user=unix_user, created_at=now)
    session.add(user)
    try:
        session.flush()
    except IntegrityError as exc:
        raise AlreadyExists("user", name) from exc
    return _user_record(user, lab_row.name)


def _one_user(session: Session, where: ColumnElement[bool], key: str | int) -> UserRecord:
    row = session.execute(
        select(User, Lab.name).join(Lab, Lab.id == User.lab_id).where(where)
    ).one_or_none()
    if row is None:
        raise NotFound("user", key)
    return _user_record(row[0], row[1])


def get_user(session: Session, name: str) -> UserRecord:
    return _one_user(session, User.name == name, name)


def get_user_by_id(session: Session, user_id: int) -> UserRecord:
    return _one_user(session, User.id == user_id, user_id)


def list_users(session: Session, lab: str | None = None) -> list[UserRecord]:
    stmt = select(User, Lab.name).join(Lab, Lab.id == User.lab_id).order_by(User.name)
    if lab is not None:
        stmt = stmt.where(Lab.name == lab)
    return [_user_record(u, lab_name) for u, lab_name in session.execute(stmt)]


def users_of_unix_account(session: Session, unix_user: str) -> list[UserRecord]:
    """The users whose jobs run as the Unix account `unix_user` (MUNGE sign-in maps a
    credential's uid to its account, then here; several users on one account are allowed
    but then a MUNGE credential cannot say which one it is)."""
    stmt = (
        select(User, Lab.name)
        .join(Lab, Lab.id == User.lab_id)
        .where(User.unix_user == unix_user)
        .order_by(User.name)
    )
    return [_user_record(u, lab_name) for u, lab_name in session.execute(stmt)]


def unix_accounts(session: Session) -> dict[str, list[str]]:
    """Unix account -> the users that run as it (for the single-account rule of `serve`)."""
    out: dict[str, list[str]] = {}
    for name, unix_user in session.execute(select(User.name, User.unix_user).order_by(User.name)):
        out.setdefault(unix_user, []).append(name)
    return out


def set_unix_user(session: Session, name: str, unix_user: str) -> UserRecord:
    """Point user `name`'s jobs (and MUNGE sign-in) at another Unix account."""
    unix_user = unix_user.strip()
    if not unix_user or len(unix_user) > 64:
        raise InvalidRequest("a Unix account name has 1 to 64 characters")
    user = session.scalars(select(User).where(User.name == name)).one_or_none()
    if user is None:
        raise NotFound("user", name)
    user.unix_user = unix_user
    session.flush()
    return get_user(session, name)


# --- tokens ------------------------------------------------------------------------------


def issue_token(session: Session, user_id: int, now: datetime, label: str = "") -> IssuedToken:
    """A new bearer token for the user. The secret is in the result and nowhere else."""
    if session.get(User, user_id) is None:
        raise NotFound("user", user_id)
    secret = TOKEN_PREFIX + secrets.token_urlsafe(32)
    token = ApiToken(user_id=user_id, token_hash=hash_token(secret), label=label, created_at=now)
    session.add(token)
    session.flush()
    return IssuedToken(_token_record(token), secret)


# The token's user and lab in one prepared statement (Core, no ORM objects): every API
# request runs it.
_AUTHENTICATE = (
    select(User.id, User.name, User.lab_id, Lab.name, User.role, User.created_at, User.unix_user)
    .join(ApiToken, ApiToken.user_id == User.id)
    .join(Lab, Lab.id == User.lab_id)
    .where(ApiToken.token_hash == bindparam("token_hash"), ApiToken.revoked_at.is_(None))
)


def authenticate(session: Session, secret: str) -> UserRecord | None:
    """The user a bearer secret belongs to, or None (unknown, revoked or malformed).

    No cache: a revoked token is refused by the next request, in every process.
    """
    if not secret.startswith(TOKEN_PREFIX):
        return None
    session.flush()  # a Core statement below: make pending ORM changes visible first
    row = (
        session.connection()
        .execute(_AUTHENTICATE, {"token_hash": hash_token(secret)})
        .one_or_none()
    )
    if row is None:
        return None
    return UserRecord(*row)


def revoke_token(session: Session, token_id: int, now: datetime) -> bool:
    """Revoke the token; False if it was revoked already. Unknown ids raise NotFound."""
    if session.get(ApiToken, token_id) is None:
        raise NotFound("token", token_id)
    result = session.execute(
        update(ApiToken)
        .where(ApiToken.id == token_id, ApiToken.revoked_at.is_(None))
        .values(revoked_at=now)
        .execution_options(synchronize_session=False)
    )
    session.expire_all()
    return bool(result.rowcount)  # type: ignore[attr-defined]


def list_tokens(session: Session, user_id: int | None = None) -> list[TokenRecord]:
    stmt = select(ApiToken).order_by(ApiToken.id)
    if user_id is not None:
        stmt = stmt.where(ApiToken.user_id == user_id)
    return [_token_record(t) for t in session.scalars(stmt)]


def unix_user_of(session: Session, user_id: int) -> str:
    """The Unix account user `user_id`'s jobs run as; NotFound if there is no such user."""
    unix_user = session.scalars(select(User.unix_user).where(User.id == user_id)).first()
    if unix_user is None:
        raise NotFound("user", user_id)
    return unix_user
