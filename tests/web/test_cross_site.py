"""What another site may do with the service's pages: nothing. No response may be framed
(clickjacking, /docs included), and a form another site posts cannot sign a browser in
(login CSRF: into an account of the attacker's choosing) nor out.

Over HTTP on both databases, against a real server, and in Chromium from a page of another
site (`http://localhost:<another port>`).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, ClassVar

import httpx
import pytest

from jpushare.web.auth import COOKIE
from jpushare.web.framing import with_frame_ancestors
from tests.api.conftest import ApiWorld
from tests.web.conftest import Served
from tests.web.test_pages import PAGES, signed_in

EVIL = "http://evil.test"
OTHER_PATHS = ["/signin", "/docs", "/openapi.json", "/healthz", "/jobs/999", "/nope"]


def framing_refused(headers: httpx.Headers) -> bool:
    policy = headers.get("content-security-policy", "")
    return headers.get("x-frame-options") == "DENY" and "frame-ancestors 'none'" in policy


def test_no_page_nor_docs_may_be_framed(api: ApiWorld) -> None:
    signed_in(api)
    for path in [*PAGES, *OTHER_PATHS, "/static/docs/swagger-ui.css"]:
        r = api.client.get(path, follow_redirects=False)
        assert framing_refused(r.headers), (path, r.status_code, dict(r.headers))
    # the dashboard's own policy keeps its other rules
    policy = api.client.get("/labs").headers["content-security-policy"]
    assert policy.count("frame-ancestors") == 1 and "default-src 'self'" in policy
    # /docs needs its inline script: only the framing rule is added there
    assert api.client.get("/docs").headers["content-security-policy"] == "frame-ancestors 'none'"


def test_a_real_servers_docs_and_pages_refuse_framing(served: Served) -> None:
    for path in ["/docs", "/signin", "/", "/static/web/dashboard.js"]:
        r = httpx.get(served.url + path)
        assert framing_refused(r.headers), path


@pytest.mark.parametrize(
    ("policy", "expected"),
    [
        (None, "frame-ancestors 'none'"),
        ("", "frame-ancestors 'none'"),
        ("default-src 'self';", "default-src 'self'; frame-ancestors 'none'"),
        ("frame-ancestors 'self'", "frame-ancestors 'self'"),
    ],
)
def test_the_framing_rule_joins_a_routes_own_policy(policy: str | None, expected: str) -> None:
    assert with_frame_ancestors(policy) == expected


CROSS_SITE = [
    {"Origin": EVIL},
    {"Origin": "null"},  # a sandboxed frame, or a redirect from another site
    {"Origin": "http://testserver.evil.test"},
    {"Sec-Fetch-Site": "cross-site"},
    {"Sec-Fetch-Site": "same-site"},  # a sibling host is another site's page too
    {"Sec-Fetch-Site": "cross-site", "Origin": "http://testserver"},
    {"Referer": f"{EVIL}/login-csrf.html"},
]
SAME_SITE = [
    {},  # no browser: curl or a script, whose token is what counts
    {"Origin": "http://testserver"},
    {"Sec-Fetch-Site": "same-origin", "Origin": "http://testserver"},
    {"Sec-Fetch-Site": "none"},  # typed by the person
    {"Referer": "http://testserver/signin"},
]


@pytest.mark.parametrize("headers", CROSS_SITE)
def test_another_site_cannot_sign_a_browser_in(api: ApiWorld, headers: dict[str, str]) -> None:
    r = api.client.post(
        "/signin", data={"token": api.tokens["bob"]}, headers=headers, follow_redirects=False
    )
    assert r.status_code == 403 and "set-cookie" not in r.headers
    error = r.json()["error"]
    assert error["code"] == "CROSS_SITE_REQUEST" and "another site" in error["message"]
    assert framing_refused(r.headers)


@pytest.mark.parametrize("headers", CROSS_SITE)
def test_another_site_cannot_sign_a_browser_out(api: ApiWorld, headers: dict[str, str]) -> None:
    signed_in(api)
    r = api.client.post("/signout", headers=headers, follow_redirects=False)
    assert r.status_code == 403 and "set-cookie" not in r.headers
    assert r.json()["error"]["code"] == "CROSS_SITE_REQUEST"
    assert api.client.get("/labs", follow_redirects=False).status_code == 200


@pytest.mark.parametrize("headers", SAME_SITE)
def test_this_sites_own_forms_still_sign_in_and_out(api: ApiWorld, headers: dict[str, str]) -> None:
    r = api.client.post(
        "/signin", data={"token": api.tokens["bob"]}, headers=headers, follow_redirects=False
    )
    assert r.status_code == 303 and COOKIE in r.headers["set-cookie"]
    out = api.client.post("/signout", headers=headers, follow_redirects=False)
    assert out.status_code == 303 and out.headers["location"] == "/signin"


# --- in a browser ----------------------------------------------------------------------


class _Pages(BaseHTTPRequestHandler):
    pages: ClassVar[dict[str, str]] = {}

    def do_GET(self) -> None:
        body = self.pages.get(self.path.lstrip("/"), "").encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *_args: Any) -> None:
        pass


@pytest.fixture
def evil(browser: Any, served: Served) -> Iterator[tuple[Any, str, dict[str, str]]]:
    """A browser context, another site's URL prefix, and the pages it serves: a real
    server on another loopback port, as `localhost` (another site than the service's
    127.0.0.1; on loopback, so that Chromium's local-network checks let it frame and post
    to the service, as a page on the same network would). Every other host is closed."""
    pages: dict[str, str] = {}
    handler = type("Pages", (_Pages,), {"pages": pages})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    prefix = f"http://localhost:{server.server_address[1]}/"
    context = browser.new_context()
    allowed = (prefix, served.url + "/")
    context.route(
        "**/*", lambda r: r.continue_() if r.request.url.startswith(allowed) else r.abort()
    )
    yield context, prefix, pages
    context.close()
    server.shutdown()
    thread.join(timeout=10)


def test_in_a_browser_another_site_cannot_frame_the_docs_or_a_page(
    evil: tuple[Any, str, dict[str, str]], served: Served
) -> None:
    context, prefix, pages = evil
    pages["inner.html"] = "<p>a frame of this site's own loads</p>"
    pages["frame.html"] = (
        f'<iframe src="{prefix}inner.html"></iframe>'
        f'<iframe src="{served.url}/docs"></iframe>'
        f'<iframe src="{served.url}/signin"></iframe>'
    )
    page = context.new_page()
    page.goto(f"{prefix}frame.html")
    page.wait_for_load_state("load")
    inner, docs, signin = page.frames[1:]
    inner.wait_for_selector("p")  # frames load here: the control
    for frame in (docs, signin):
        frame.wait_for_load_state("load")
    assert "swagger-ui" not in docs.content()  # refused frames are left empty
    assert 'id="token"' not in signin.content()


def test_in_a_browser_another_sites_form_cannot_sign_it_in(
    evil: tuple[Any, str, dict[str, str]], served: Served
) -> None:
    context, prefix, pages = evil
    token = served.scenario.tokens["bob"]  # the attacker's own account
    pages["csrf.html"] = (
        f'<form id="f" method="post" action="{served.url}/signin">'
        f'<input name="token" value="{token}"><input name="next" value="/"></form>'
        '<script>document.getElementById("f").submit()</script>'
    )
    page = context.new_page()
    with page.expect_response(f"{served.url}/signin") as answer:
        page.goto(f"{prefix}csrf.html")
    assert answer.value.status == 403
    assert [c for c in context.cookies() if c["name"] == COOKIE] == []


def test_in_a_browser_another_sites_form_cannot_sign_it_out(
    evil: tuple[Any, str, dict[str, str]], served: Served
) -> None:
    context, prefix, pages = evil
    page = context.new_page()
    page.goto(served.url + "/signin")
    page.fill("#token", served.scenario.tokens["alice"])
    page.click("#signin button")
    page.wait_for_url(served.url + "/")
    pages["out.html"] = (
        f'<form id="f" method="post" action="{served.url}/signout"></form>'
        '<script>document.getElementById("f").submit()</script>'
    )
    with page.expect_response(f"{served.url}/signout") as answer:
        page.goto(f"{prefix}out.html")
    assert answer.value.status == 403
    assert [c["name"] for c in context.cookies(served.url)] == [COOKIE]
    page.goto(served.url + "/labs")
    assert page.url == served.url + "/labs"  # still signed in
    # this site's own sign-out button still works
    page.click("form[action='/signout'] button")
    page.wait_for_url(served.url + "/signin")
    assert context.cookies(served.url) == []
