"""The dashboard over HTTP on both databases: sign-in, escaping, headers, offline /docs.

The browser tests (test_browser.py) check what a person sees on SQLite; these check the
server's side of the same pages on SQLite and PostgreSQL, without a browser.
"""

from __future__ import annotations

import io
from argparse import Namespace
from datetime import timedelta
from pathlib import Path

import pytest
from sqlalchemy.orm import Session, sessionmaker

from jpushare import store
from jpushare.client.web import dashboard_link, run_web
from jpushare.store.usage_history import LabCharge
from jpushare.web import refresh_from_env
from jpushare.web.auth import COOKIE, safe_next
from jpushare.web.history import usage_from_charges
from tests.api.conftest import T0, ApiWorld, make_world

PAGES = ["/", "/placements", "/labs", "/jobs", "/jobs/1", "/jobs/1/cancel", "/watch"]


def signed_in(api: ApiWorld, user: str = "alice") -> None:
    api.client.cookies.set(COOKIE, api.tokens[user])


@pytest.mark.parametrize("path", PAGES)
def test_an_unauthenticated_visitor_is_sent_to_sign_in(api: ApiWorld, path: str) -> None:
    r = api.client.get(path, follow_redirects=False)
    assert r.status_code == 303
    assert r.headers["location"] == ("/signin" if path == "/" else f"/signin?next={path}")


def test_signing_in_sets_a_strict_httponly_cookie_and_a_bad_token_is_refused(
    api: ApiWorld,
) -> None:
    bad = api.client.post("/signin", data={"token": "jps_nope", "next": "/labs"})
    assert bad.status_code == 401
    assert "not valid" in bad.text and COOKIE not in bad.headers.get("set-cookie", "")
    r = api.client.post(
        "/signin", data={"token": api.tokens["bob"], "next": "/labs"}, follow_redirects=False
    )
    assert (r.status_code, r.headers["location"]) == (303, "/labs")
    cookie = r.headers["set-cookie"]
    assert cookie.startswith(f"{COOKIE}={api.tokens['bob']};")
    assert "HttpOnly" in cookie and "SameSite=strict" in cookie and "Path=/" in cookie
    page = api.client.get("/labs")
    assert page.status_code == 200 and "bob · beta · student" in page.text
    out = api.client.post("/signout", follow_redirects=False)
    assert out.headers["location"] == "/signin"
    assert api.client.get("/labs", follow_redirects=False).status_code == 303


def test_another_site_cannot_post_the_sign_in_form(api: ApiWorld) -> None:
    r = api.client.post(
        "/signin",
        data={"token": api.tokens["alice"]},
        headers={"Origin": "https://evil.example"},
        follow_redirects=False,
    )
    assert r.status_code == 403 and "set-cookie" not in r.headers
    same = api.client.post(
        "/signin",
        data={"token": api.tokens["alice"]},
        headers={"Origin": "http://testserver"},
        follow_redirects=False,
    )
    assert same.status_code == 303 and COOKIE in same.headers["set-cookie"]


def test_a_revoked_token_signs_the_browser_out_at_its_next_page(api: ApiWorld) -> None:
    signed_in(api, "carol")
    assert api.client.get("/", follow_redirects=False).status_code == 200
    with api.sessions.begin() as s:
        (token,) = store.list_tokens(s, api.users["carol"].id)
        store.revoke_token(s, token.id, api.clock())
    assert api.client.get("/", follow_redirects=False).status_code == 303


@pytest.mark.parametrize(
    ("raw", "expected"),
    [("/labs", "/labs"), ("//evil.example/x", "/"), ("https://evil.example", "/"), (None, "/")],
)
def test_after_sign_in_the_browser_goes_only_to_a_page_of_this_site(
    raw: str | None, expected: str
) -> None:
    assert safe_next(raw) == expected


def test_a_job_named_like_a_script_is_shown_as_text_on_every_page(api: ApiWorld) -> None:
    name = '<script>alert("x")</script><img src=x onerror=alert(1)>'
    job = api.submit("alice", 2, name=name)
    signed_in(api)
    for path in ["/", "/jobs", f"/jobs/{job}"]:
        r = api.client.get(path)
        assert r.status_code == 200
        assert "&lt;script&gt;alert(&#34;x&#34;)&lt;/script&gt;&lt;img src=x" in r.text, path
        assert "<script>alert" not in r.text and "<img src=x" not in r.text, path


def test_pages_forbid_inline_scripts_and_outside_origins(api: ApiWorld) -> None:
    signed_in(api)
    for path in [*PAGES[:4], "/watch", "/signin"]:
        r = api.client.get(path)
        policy = r.headers["content-security-policy"]
        assert "default-src 'self'" in policy and "script-src" not in policy, path
        assert "http://" not in r.text and "https://" not in r.text, path


def test_a_page_reloads_every_dispatch_cycle(
    sessions: sessionmaker[Session], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("JPUSHARE_CYCLE_S", "2.5")
    for world in make_world(sessions):
        signed_in(world)
        assert '<meta http-equiv="refresh" content="2.5">' in world.client.get("/labs").text
    assert refresh_from_env({}) == 5.0
    assert refresh_from_env({"JPUSHARE_CYCLE_S": "-1"}) == 5.0


def test_an_unknown_job_page_is_a_404_page(api: ApiWorld) -> None:
    signed_in(api)
    r = api.client.get("/jobs/999")
    assert r.status_code == 404 and "No job 999." in r.text


def test_docs_use_the_services_own_swagger_ui_assets(api: ApiWorld) -> None:
    page = api.client.get("/docs")
    assert page.status_code == 200
    assert "/static/docs/swagger-ui-bundle.js" in page.text
    assert "cdn" not in page.text.lower() and "https://" not in page.text
    js = api.client.get("/static/docs/swagger-ui-bundle.js")
    css = api.client.get("/static/docs/swagger-ui.css")
    assert js.status_code == css.status_code == 200
    assert "SwaggerUIBundle" in js.text and len(css.content) > 10_000
    assert api.client.get("/redoc").status_code == 404  # it needs a CDN: not offered


def test_the_dashboard_is_not_in_the_api_schema(api: ApiWorld) -> None:
    paths = api.client.get("/openapi.json").json()["paths"]
    assert all(p.startswith("/v1/") or p in ("/healthz", "/metrics") for p in paths)


def test_usage_over_time_walks_back_from_todays_figure_through_the_charges() -> None:
    start, now = T0, T0 + timedelta(hours=10)
    charges = [
        LabCharge(T0 + timedelta(hours=2), "alpha", 100.0),
        LabCharge(T0 + timedelta(hours=6), "beta", 50.0),
        LabCharge(T0 + timedelta(hours=6, minutes=1), "alpha", 30.0),
    ]
    series = usage_from_charges(charges, {"alpha": 1000.0, "beta": 50.0}, start, now, points=10)
    assert series.x[0] == start.timestamp() and series.x[-1] == now.timestamp()
    # a charge counts from its own instant on: at 6 h beta's is in, alpha's (6:01) not yet
    assert series.lines["alpha"] == [870.0] * 2 + [970.0] * 5 + [1000.0] * 4
    assert series.lines["beta"] == [0.0] * 6 + [50.0] * 5


def test_jpushare_web_prints_the_sign_in_link_of_its_token(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    (tmp_path / "client.json").write_text("{}")
    monkeypatch.setenv("JPUSHARE_CLIENT_CONFIG", str(tmp_path / "client.json"))
    monkeypatch.delenv("JPUSHARE_TOKEN", raising=False)
    out = io.StringIO()
    (tmp_path / "token").write_text("jps_a/b+c\n")
    args = Namespace(url="http://head:8000/", token_file=str(tmp_path / "token"), open=False)
    assert run_web(args, out) == 0
    assert out.getvalue() == "http://head:8000/signin#token=jps_a%2Fb%2Bc\n"
    assert out.getvalue().strip() == dashboard_link("http://head:8000", "jps_a/b+c")
    assert run_web(Namespace(url=None, token_file=None, open=False), io.StringIO()) == 1
    assert "error UNAUTHENTICATED" in capsys.readouterr().err


BROWSER = {"Accept": "text/html,application/xhtml+xml,*/*;q=0.8"}


@pytest.mark.parametrize(
    ("path", "status", "message"),
    [
        ("/nope", 404, "Not Found"),
        ("/jobs/abc", 422, "job_id: Input should be a valid integer"),
        ("/v1/jobs/abc", 422, None),  # the API answers JSON, whoever asks
    ],
)
def test_a_browser_gets_an_error_page_and_an_api_client_json(
    api: ApiWorld, path: str, status: int, message: str | None
) -> None:
    signed_in(api)
    page = api.client.get(path, headers={**BROWSER, **api.auth("alice")})
    assert page.status_code == status
    if message is None:
        assert page.headers["content-type"].startswith("application/json")
    else:
        assert page.headers["content-type"].startswith("text/html")
        assert message in page.text and '<a href="/">Back to the queue</a>' in page.text
        assert "frame-ancestors 'none'" in page.headers["content-security-policy"]
    client = api.client.get(path, headers={"Accept": "application/json", **api.auth("alice")})
    assert client.status_code == status
    assert client.json()["error"]["code"] in ("NOT_FOUND", "VALIDATION_ERROR")


def test_the_favicon_is_served_and_linked_from_every_page(api: ApiWorld) -> None:
    icon = api.client.get("/favicon.ico")
    assert icon.status_code == 200 and icon.headers["content-type"] == "image/svg+xml"
    assert icon.content.startswith(b"<svg")
    signed_in(api)
    assert 'rel="icon" href="/static/web/favicon.svg"' in api.client.get("/").text
    assert api.client.get("/static/web/favicon.svg").status_code == 200


def test_one_format_per_kind_for_the_cli_the_pages_and_the_csv() -> None:
    """README, "Number formats": the issue's one cost read 8.43k, 8,426 and
    8425.509185791016 in three places."""
    from datetime import UTC, datetime

    from jpushare.client.formatting import amount, csv_number, duration, timestamp
    from jpushare.web import render

    cost = 8425.509185791016
    assert amount(cost) == render.tflops(cost) == "8,426"
    assert (amount(12.5), amount(0.25), amount(0)) == ("12.5", "0.25", "0")
    assert csv_number(cost) == "8425.509" and csv_number(None) == ""
    assert render.duration(750) == duration(750) == "12.5m"
    at = datetime(2026, 1, 5, 9, 0, 5, tzinfo=UTC)
    assert render.utc(at) == timestamp(at) == "2026-01-05 09:00:05 UTC"
