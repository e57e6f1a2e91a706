"""Sign-in with a MUNGE credential (`Authorization: MUNGE <credential>`), as Slurm does it.

The CLI on a host of the cluster asks its munged for a credential per request, whose
payload names the request (`munge.request_payload`: method, path, query, the body's
SHA-256). The service's
munged decodes it: the signature (the cluster's key), the time to live, and a replay cache
(a credential decodes once). Then, here: the payload must name this very request; the
credential must have been made within `max_age_s` of the service's clock (munged's TTL is
the client's choice, up to the key's maximum); its uid must be a Unix account of this host,
and exactly one JPU-Share user must run as that account (`users.unix_user`). Every refusal
is 401 UNAUTHENTICATED with `details.reason` (below); munged not answering is 503.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum

from fastapi import Request
from sqlalchemy.orm import Session

from jpushare import store
from jpushare.api.errors import ApiError, ErrorCode
from jpushare.munge import UNAVAILABLE_STATUSES, Munge, MungeError, MungeStatus, request_payload
from jpushare.store.records import UserRecord
from jpushare.unix_accounts import UnknownAccount, account_of_uid

DEFAULT_MAX_AGE_S = 60.0


class MungeRefusal(StrEnum):
    """`details.reason` of a 401 for a MUNGE credential."""

    UNAVAILABLE = "MUNGE_UNAVAILABLE"  # this service does not take MUNGE credentials
    INVALID = "MUNGE_INVALID"  # not a credential of this cluster's key, or damaged
    EXPIRED = "MUNGE_EXPIRED"  # past its TTL, or made too long ago (or ahead) by our clock
    REPLAYED = "MUNGE_REPLAYED"  # decoded before: a credential is good for one request
    WRONG_REQUEST = "MUNGE_WRONG_REQUEST"  # made for another method, path, query or body
    UNMAPPED = "MUNGE_UNMAPPED"  # its uid is no account here, or no user runs as it
    AMBIGUOUS = "MUNGE_AMBIGUOUS"  # several users run as its account: a token must say who


@dataclass(frozen=True, slots=True)
class MungeSignIn:
    """How this API decodes MUNGE credentials."""

    munge: Munge
    max_age_s: float = DEFAULT_MAX_AGE_S


def _refuse(reason: MungeRefusal, message: str, **details: object) -> ApiError:
    return ApiError(401, ErrorCode.UNAUTHENTICATED, message, {"reason": reason.value, **details})


async def body_of_munge_request(request: Request) -> bytes | None:
    """The request's body when it is signed with MUNGE (the credential covers it), else
    None. Async, so it reads on the event loop; FastAPI has read the body already for a
    route that takes one, and `api.body_limit` bounds it for every route."""
    scheme = request.headers.get("authorization", "").lstrip().partition(" ")[0]
    if scheme.lower() != "munge":
        return None
    return await request.body()


def munge_user(
    session: Session,
    sign_in: MungeSignIn | None,
    request: Request,
    body: bytes,
    credential: str,
    now: datetime,
) -> UserRecord:
    """The user a MUNGE credential for `request` (with `body`) stands for, or ApiError
    (401, or 503 when munged does not answer)."""
    if sign_in is None:
        raise _refuse(
            MungeRefusal.UNAVAILABLE,
            "this service does not accept MUNGE credentials (no munge on its host): use a "
            "token (JPUSHARE_TOKEN)",
        )
    try:
        decoded = sign_in.munge.decode(credential)
    except MungeError as exc:
        if exc.status in UNAVAILABLE_STATUSES:
            raise ApiError(
                503,
                ErrorCode.UNAVAILABLE,
                f"the service's munged does not answer ({exc.message}); use a token meanwhile",
            ) from exc
        if exc.status == MungeStatus.CRED_REPLAYED:
            raise _refuse(
                MungeRefusal.REPLAYED,
                "replayed MUNGE credential: each one is good for one request",
            ) from exc
        if exc.status in (MungeStatus.CRED_EXPIRED, MungeStatus.CRED_REWOUND):
            raise _refuse(
                MungeRefusal.EXPIRED,
                f"MUNGE credential refused: {exc.message.lower()} (check the clocks of the "
                "two hosts)",
            ) from exc
        raise _refuse(
            MungeRefusal.INVALID,
            f"MUNGE credential refused: {exc.message.lower()} (made with another cluster's "
            "key, or damaged)",
        ) from exc
    wanted = request_payload(request.method, request.url.path, request.url.query, body)
    if decoded.payload != wanted:
        raise _refuse(
            MungeRefusal.WRONG_REQUEST,
            f"the MUNGE credential was made for another request, not this {request.method} "
            f"{request.url.path} with this body",
        )
    age_s = (now - decoded.encoded_at) / timedelta(seconds=1)
    if abs(age_s) > sign_in.max_age_s:
        raise _refuse(
            MungeRefusal.EXPIRED,
            f"the MUNGE credential was made {abs(age_s):.0f} s "
            f"{'ago' if age_s > 0 else 'ahead of this clock'}; the service takes credentials "
            f"up to {sign_in.max_age_s:g} s old (check the clocks of the two hosts)",
            age_s=round(age_s, 3),
        )
    try:
        account = account_of_uid(decoded.uid)
    except UnknownAccount:
        raise _refuse(
            MungeRefusal.UNMAPPED,
            f"uid {decoded.uid} is no Unix account on the service's host: ask an admin to "
            "add you (jpushare admin user add NAME --unix-user ACCOUNT)",
            uid=decoded.uid,
        ) from None
    users = store.users_of_unix_account(session, account.name)
    if not users:
        raise _refuse(
            MungeRefusal.UNMAPPED,
            f"no JPU-Share user runs as the Unix account {account.name} (uid {decoded.uid}): "
            "ask an admin to add you, or use a token",
            unix_user=account.name,
        )
    if len(users) > 1:
        names = ", ".join(u.name for u in users)
        raise _refuse(
            MungeRefusal.AMBIGUOUS,
            f"several JPU-Share users run as the Unix account {account.name} ({names}): a "
            "MUNGE credential cannot say which; use a token (JPUSHARE_TOKEN)",
            unix_user=account.name,
            users=[u.name for u in users],
        )
    return users[0]
