"""The dashboard's form token (`web.csrf`): which posted forms may act and which are refused,
and with what answer. The actions' own routes are tested over HTTP in test_actions.py."""

from __future__ import annotations

import pytest
from starlette.requests import Request

from jpushare.web.auth import COOKIE
from jpushare.web.csrf import FIELD, check_csrf, csrf_token, token_for

COOKIE_VALUE = "jps_abcdefghijklmnopqrstuvwxyz0123456789"


def request(headers: dict[str, str], cookie: str | None = COOKIE_VALUE) -> Request:
    raw = {"host": "dash.test", **{k.lower(): v for k, v in headers.items()}}
    if cookie is not None:
        raw["cookie"] = f"{COOKIE}={cookie}"
    scope = {
        "type": "http",
        "method": "POST",
        "path": "/jobs/7/cancel",
        "headers": [(k.encode(), v.encode()) for k, v in raw.items()],
    }
    return Request(scope)


def test_the_token_is_bound_to_the_cookie_and_reveals_nothing_of_it() -> None:
    token = token_for(COOKIE_VALUE)
    assert token == token_for(COOKIE_VALUE)  # every process agrees, no shared state
    assert token != token_for(COOKIE_VALUE + "x")  # another sign-in, another token
    assert COOKIE_VALUE not in token and len(token) == 43  # 256 bits, base64url
    assert token_for("") == "" and token_for("x" * 201) == ""
    assert csrf_token(request({})) == token


SAME_ORIGIN = {"Origin": "http://dash.test", "Sec-Fetch-Site": "same-origin"}


def test_this_sites_form_with_its_token_may_act() -> None:
    form = {FIELD: token_for(COOKIE_VALUE)}
    assert check_csrf(request(SAME_ORIGIN), form) is None
    assert check_csrf(request({}), form) is None  # no browser headers: the token decides


@pytest.mark.parametrize(
    "headers",
    [
        {"Origin": "http://evil.test"},
        {"Origin": "null"},
        {"Sec-Fetch-Site": "cross-site"},
        {"Sec-Fetch-Site": "same-site"},
        {"Referer": "http://evil.test/page.html"},
    ],
)
def test_another_sites_form_is_refused_even_with_the_right_token(headers: dict[str, str]) -> None:
    refused = check_csrf(request(headers), {FIELD: token_for(COOKIE_VALUE)}, "cancel job 7")
    assert refused is not None and refused.status_code == 403
    assert b'"code":"CROSS_SITE_REQUEST"' in refused.body
    assert b"another site may not cancel job 7" in refused.body


@pytest.mark.parametrize(
    ("form", "cookie"),
    [
        ({}, COOKIE_VALUE),  # no token
        ({FIELD: ""}, COOKIE_VALUE),
        ({FIELD: token_for(COOKIE_VALUE + "x")}, COOKIE_VALUE),  # another session's
        ({FIELD: token_for(COOKIE_VALUE)[:-1]}, COOKIE_VALUE),
        ({FIELD: ""}, None),  # signed out: no token can match
    ],
)
def test_a_form_without_this_sessions_token_is_refused(
    form: dict[str, str], cookie: str | None
) -> None:
    refused = check_csrf(request(SAME_ORIGIN, cookie), form)
    assert refused is not None and refused.status_code == 403
    assert b'"code":"CSRF_TOKEN_INVALID"' in refused.body


def test_a_browser_is_answered_with_the_error_page() -> None:
    headers = {**SAME_ORIGIN, "Accept": "text/html,application/xhtml+xml"}
    refused = check_csrf(request(headers), {FIELD: "wrong"}, "cancel job 7")
    assert refused is not None and refused.status_code == 403
    assert refused.headers["content-type"].startswith("text/html")
    page = bytes(refused.body).decode()
    assert "CSRF_TOKEN_INVALID" in page and "reload the page" in page
    assert "frame-ancestors 'none'" in refused.headers["content-security-policy"]
