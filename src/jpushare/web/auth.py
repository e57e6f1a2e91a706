"""Sign-in for the dashboard: the API's own bearer tokens, kept in a cookie.

A person pastes their token into `/signin` (or follows the link `jpushare web` prints,
`/signin#token=…`: the part after `#` never reaches the server or its logs, and the page's
script posts it at once). The token is checked with `store.authenticate`, exactly as the API
checks a bearer token, and stored in an HttpOnly, SameSite=Strict cookie: scripts cannot
read it and other sites cannot make the browser send it. Every page checks it again, so a
revoked token signs the browser out at its next refresh.
"""

from __future__ import annotations

from urllib.parse import parse_qs, quote, urlsplit

from fastapi import Request
from sqlalchemy.orm import Session

from jpushare import store
from jpushare.store.records import UserRecord

COOKIE = "jpushare_token"
MAX_TOKEN_CHARS = 200  # as the API: longer is no token of ours
MAX_FORM_BYTES = 4096


def cookie_user(session: Session, request: Request) -> UserRecord | None:
    """The user whose token the browser's cookie holds, or None."""
    return token_user(session, request.cookies.get(COOKIE, ""))


def token_user(session: Session, token: str) -> UserRecord | None:
    token = token.strip()
    if not token or len(token) > MAX_TOKEN_CHARS:
        return None
    return store.authenticate(session, token)


def safe_next(raw: str | None) -> str:
    """Where to go after signing in: a path of this site only (no `//host`, no scheme)."""
    if not raw or not raw.startswith("/") or raw.startswith("//") or "\\" in raw:
        return "/"
    return raw


def same_origin(request: Request) -> bool:
    """False when a browser says the form was posted from another site (`Origin`); a
    request without the header (curl, an old browser) passes: the token is what counts."""
    origin = request.headers.get("origin")
    if origin is None:
        return True
    return urlsplit(origin).netloc == request.headers.get("host", "")


def signin_url(next_path: str) -> str:
    return "/signin" if next_path == "/" else f"/signin?next={quote(next_path, safe='/')}"


def parse_form(body: bytes) -> dict[str, str]:
    """An `application/x-www-form-urlencoded` body (the sign-in form), first value of each."""
    if len(body) > MAX_FORM_BYTES:
        return {}
    fields = parse_qs(body.decode("utf-8", "replace"), keep_blank_values=True)
    return {k: v[0] for k, v in fields.items() if v}
