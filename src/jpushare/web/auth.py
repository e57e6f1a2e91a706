"""Sign-in for the dashboard: the API's own bearer tokens, kept in a cookie.

A person pastes their token into `/signin` (or follows the link `jpushare web` prints,
`/signin#token=…`: the part after `#` never reaches the server or its logs, and the page's
script posts it at once). The token is checked with `store.authenticate`, exactly as the API
checks a bearer token, and stored in an HttpOnly, SameSite=Strict cookie: scripts cannot
read it and other sites cannot make the browser send it. Every page checks it again, so a
revoked token signs the browser out at its next refresh. Signing in and out refuse a
form another site posted (`cross_site`: 403 CROSS_SITE_REQUEST).
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


def cross_site(request: Request) -> str | None:
    """Why the browser says this form was posted from another site, or None (login CSRF:
    another page may not sign this browser in to an account of its choosing, nor out).

    As Django and the Fetch Metadata guidance do: `Sec-Fetch-Site` where the browser sends
    it (only `same-origin`, or `none` for a person's own navigation, pass; `same-site` is a
    sibling host, not this one), else `Origin` (its host must be the request's `Host`;
    `null`, from a sandboxed frame or a redirect, is refused), else `Referer` likewise. A
    request with none of them is no browser's form post (curl, a script): it passes, and
    the token it carries is what counts."""
    host = request.headers.get("host", "")
    fetch_site = request.headers.get("sec-fetch-site")
    if fetch_site is not None and fetch_site.strip().lower() not in ("same-origin", "none"):
        return f"Sec-Fetch-Site: {fetch_site}"
    origin = request.headers.get("origin")
    if origin is not None:
        return None if _host_of(origin) == host else f"Origin: {origin}"
    referer = request.headers.get("referer")
    if fetch_site is None and referer is not None and _host_of(referer) != host:
        return f"Referer: {referer}"
    return None


def _host_of(url: str) -> str | None:
    """The host[:port] of an http(s) URL; None for anything else (`null`, a path)."""
    try:
        parts = urlsplit(url.strip())
    except ValueError:
        return None
    return parts.netloc if parts.scheme in ("http", "https") and parts.netloc else None


def signin_url(next_path: str) -> str:
    return "/signin" if next_path == "/" else f"/signin?next={quote(next_path, safe='/')}"


def parse_form(body: bytes) -> dict[str, str]:
    """An `application/x-www-form-urlencoded` body (the sign-in form), first value of each."""
    if len(body) > MAX_FORM_BYTES:
        return {}
    fields = parse_qs(body.decode("utf-8", "replace"), keep_blank_values=True)
    return {k: v[0] for k, v in fields.items() if v}
