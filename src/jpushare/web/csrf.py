"""Cross-site request forgery: a dashboard form that acts (cancel, ...) must come from this
site's own page, signed in as the person who posts it.

Two checks, both needed, in this order (`check_csrf`):

1. where the form was posted from: `auth.cross_site` (Sec-Fetch-Site, else Origin, else
   Referer), the check sign-in and sign-out use; another site's page: 403
   CROSS_SITE_REQUEST;
2. a per-session token in a hidden field (`FIELD`), which only a page this site rendered
   for this browser's cookie holds; missing or wrong: 403 CSRF_TOKEN_INVALID. This covers
   what the first check lets pass: a request without any of those headers (an old browser,
   a plugin) that still carries the cookie.

The token is HMAC-SHA256 of the session cookie (the user's API token) under a fixed,
purpose-named key. A server secret would add nothing here: whoever has the cookie can act
through the API anyway, and without the cookie the token cannot be computed, nor the cookie
recovered from a token seen in a page. So every API process (`--workers N`, a restart)
agrees on the token with no shared state, and a new sign-in (another token) gets a new one.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from collections.abc import Mapping
from typing import Any

from fastapi import Request
from fastapi.responses import HTMLResponse, Response

from jpushare.api.errors import ErrorCode, error_response
from jpushare.web.auth import COOKIE, MAX_TOKEN_CHARS, cross_site
from jpushare.web.pages import SECURITY_HEADERS
from jpushare.web.render import render

FIELD = "csrf_token"  # the hidden field's name in every acting form
_KEY = b"jpushare dashboard form token v1"  # a purpose label, not a secret (see above)


def token_for(cookie: str) -> str:
    """The form token of a session cookie ('' for no cookie: no form can be valid)."""
    cookie = cookie.strip()
    if not cookie or len(cookie) > MAX_TOKEN_CHARS:
        return ""
    digest = hmac.new(_KEY, cookie.encode("utf-8"), hashlib.sha256).digest()
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode("ascii")


def csrf_token(request: Request) -> str:
    """The token a page puts in its acting forms' hidden `FIELD`, for this browser's cookie."""
    return token_for(request.cookies.get(COOKIE, ""))


def check_csrf(
    request: Request, form: Mapping[str, str], action: str = "submit this form"
) -> Response | None:
    """None when the form may act; else the 403 to answer (nothing was done).

    `form`: the posted fields (`auth.parse_form`); `action`: what the form does, for the
    message ("cancel job 7")."""
    why = cross_site(request)
    if why is not None:
        return refusal(
            request,
            403,
            ErrorCode.CROSS_SITE_REQUEST,
            f"another site may not {action} for this browser ({why}): use this site's own page",
            {"action": action},
        )
    expected = csrf_token(request)
    sent = form.get(FIELD, "")
    if not expected or not hmac.compare_digest(sent.encode(), expected.encode()):
        return refusal(
            request,
            403,
            ErrorCode.CSRF_TOKEN_INVALID,
            f"this form's token is missing or out of date, so it may not {action}: "
            "reload the page and try again",
            {"action": action},
        )
    return None


def refusal(
    request: Request,
    status: int,
    code: ErrorCode,
    message: str,
    details: Mapping[str, Any] | None = None,
) -> Response:
    """An error for a posted form: the dashboard's error page for a browser (its Accept
    names text/html), the API's JSON envelope for anything else (curl, a script)."""
    if "text/html" not in request.headers.get("accept", ""):
        return error_response(status, code, message, details, SECURITY_HEADERS)
    html = render("error.html", user=None, message=message, code=code.value, status=status)
    return HTMLResponse(html, status_code=status, headers=SECURITY_HEADERS)
