"""The lab page, the operator page (drain and resume) and the watch-list's window, over HTTP
on SQLite and PostgreSQL: who may open them, that their figures are the API's, and that a
form acts only with its CSRF token, for an admin.
"""

from __future__ import annotations

import re
from datetime import timedelta

import pytest

from jpushare import store
from jpushare.dispatcher.cycle import CycleReport, Observed
from jpushare.service.dispatch_health import HealthRecorder
from jpushare.store.aggregates import LabInFlight
from jpushare.store.health import (
    CYCLE_FAILED,
    CYCLE_OK,
    HealthCount,
    add_health_counts,
    load_health,
)
from jpushare.store.leadership import take_lease
from jpushare.store.schema import JobState
from jpushare.store.usage_history import UserCharges
from jpushare.web.auth import COOKIE
from jpushare.web.csrf import FIELD, token_for
from jpushare.web.lab_page import user_rows
from jpushare.web.render import tflops
from tests.api.conftest import ALL_BUSY, ApiWorld

HTML = {"Accept": "text/html"}


def signed_in(api: ApiWorld, user: str) -> None:
    api.client.cookies.set(COOKIE, api.tokens[user])


def rows(html: str, table: str) -> dict[str, dict[str, str]]:
    """data-* attributes of each `<tr data-user=...>` (or data-node) of table `table`."""
    body = html.split(f'id="{table}"', 1)[1].split("</table>", 1)[0]
    out = {}
    for tr in re.findall(r"<tr (data-[^>]*)>", body):
        attrs = dict(re.findall(r'data-([\w-]+)="([^"]*)"', tr))
        out[attrs.get("user") or attrs["node"]] = attrs
    return out


def run_two_alpha_jobs(api: ApiWorld) -> tuple[int, int]:
    """alice's 2-GPU job runs 100 s and ends (charged); carol's 1-GPU job is still running."""
    api.busy.update(ALL_BUSY)
    api.busy[("node-c", "rtx5090")] = 0
    first = api.submit("alice", 2)
    second = api.submit("carol", 1)
    api.cycle()
    with api.sessions.begin() as s:
        store.mark_running(s, first, api.clock())
        store.mark_running(s, second, api.clock())
    api.clock.advance(100)
    with api.sessions.begin() as s:
        store.end_job(s, first, JobState.COMPLETED, api.clock(), exit_code=0)
    api.clock.advance(50)
    return first, second


def test_a_pi_sees_each_users_usage_in_flight_and_gpus_as_the_api_counts_them(
    api: ApiWorld,
) -> None:
    first, _ = run_two_alpha_jobs(api)
    signed_in(api, "pia")
    r = api.client.get("/labs/alpha")
    assert r.status_code == 200, r.text
    users = rows(r.text, "lab-users")
    assert set(users) == {"alice", "carol", "pia", "root"}  # every member, even idle ones
    charged = api.get(f"/v1/jobs/{first}", "pia").json()["charged_tflop_s"]
    assert charged > 0
    assert float(users["alice"]["charged"]) == pytest.approx(charged)
    assert float(users["carol"]["charged"]) == 0.0
    assert (users["alice"]["gpus"], users["carol"]["gpus"], users["pia"]["gpus"]) == ("0", "1", "0")
    (alpha,) = [lab for lab in api.get("/v1/labs", "pia").json()["data"] if lab["name"] == "alpha"]
    assert alpha["in_flight_tflop_s"] > 0
    assert sum(float(u["in-flight"]) for u in users.values()) == pytest.approx(
        alpha["in_flight_tflop_s"]
    )
    assert f'data-field="in_flight">{tflops(alpha["in_flight_tflop_s"])}<' in r.text
    assert f'data-field="window_total">{tflops(charged)}<' in r.text
    assert next(iter(users)) == "alice"  # most usage in the window first


def test_only_the_labs_members_and_admins_open_its_page(api: ApiWorld) -> None:
    signed_in(api, "bob")  # a student of beta
    r = api.client.get("/labs/alpha", headers=HTML)
    assert r.status_code == 403 and "a lab&#39;s page is for its own members" in r.text
    assert api.client.get("/labs/beta").status_code == 200
    signed_in(api, "carol")  # a student of alpha
    assert api.client.get("/labs/alpha").status_code == 200
    signed_in(api, "root")  # an admin of alpha opens beta's
    assert api.client.get("/labs/beta").status_code == 200
    missing = api.client.get("/labs/gamma", headers=HTML)
    assert missing.status_code == 404 and "gamma" in missing.text
    api.client.cookies.clear()
    out = api.client.get("/labs/alpha", follow_redirects=False)
    assert (out.status_code, out.headers["location"]) == (303, "/signin?next=/labs/alpha")


def test_the_lab_pages_window_is_7_30_or_90_days(api: ApiWorld) -> None:
    run_two_alpha_jobs(api)
    api.clock.advance(40 * 86400)  # alice's charge is now 40 days old
    signed_in(api, "pia")
    in_30 = rows(api.client.get("/labs/alpha?days=30").text, "lab-users")
    in_90 = rows(api.client.get("/labs/alpha?days=90").text, "lab-users")
    assert float(in_30["alice"]["charged"]) == 0.0
    assert float(in_90["alice"]["charged"]) > 0
    bad = api.client.get("/labs/alpha?days=14", headers=HTML)
    assert bad.status_code == 422 and "choose 7, 30 or 90" in bad.text
    api_bad = api.client.get("/labs/alpha?days=14")
    assert api_bad.json()["error"]["code"] == "VALIDATION_ERROR"


def test_user_rows_keep_someone_who_left_the_lab_but_was_charged_in_it() -> None:
    out = user_rows(
        {"ann": "pi", "ben": "student"},
        {"old": UserCharges(5.0, 1), "ben": UserCharges(9.0, 2)},
        {"ann": LabInFlight(1.0, 2, 0)},
    )
    assert [(r.name, r.role, r.gpus_now) for r in out] == [
        ("ben", "student", 0),
        ("old", None, 0),
        ("ann", "pi", 2),
    ]


def test_the_operator_page_is_for_admins_and_says_what_healthz_says(api: ApiWorld) -> None:
    signed_in(api, "pia")
    r = api.client.get("/operator", headers=HTML)
    assert r.status_code == 403 and "this needs role admin" in r.text
    signed_in(api, "root")
    page = api.client.get("/operator").text
    assert 'data-state="none"' in page and "nobody" in page
    with api.sessions.begin() as s:
        epoch = take_lease(s, "host-1:4242", 30.0)
        at = api.clock()
        add_health_counts(
            s,
            {CYCLE_OK: HealthCount(12, at), CYCLE_FAILED + "database": HealthCount(3, at)},
            holder="host-1:4242",
            cycle_s=5.0,
        )
    page = api.client.get("/operator").text
    health = api.client.get("/healthz").json()["dispatcher"]
    assert f'data-state="{health["state"]}"' in page
    assert '<td data-field="holder"><code>host-1:4242</code></td>' in page
    assert f'<td data-field="epoch">{epoch}</td>' in page
    assert '<span class="big" data-field="failed">3</span>' in page and "database 3" in page
    assert "12 cycles in all" in page


def test_the_operator_page_shows_the_last_cycles_duration_from_the_database(
    api: ApiWorld,
) -> None:
    """Written by the dispatching process (`HealthRecorder`), read by this one."""
    signed_in(api, "root")
    assert 'data-field="cycle_took">—<' in api.client.get("/operator").text
    health = HealthRecorder(api.sessions, holder="host-a:1", cycle_s=5.0, clock=api.clock)
    health.cycle_done(CycleReport(api.clock(), 0.042, Observed.__new__(Observed)))
    api.clock.advance(5)
    health.cycle_done(CycleReport(api.clock(), 0.018, None))  # failed: executor, still timed
    page = api.client.get("/operator").text
    assert 'data-field="cycle_took">18 ms<' in page and "mean 30 ms over 2 cycles" in page
    with api.sessions.begin() as s:
        loaded = load_health(s)
    assert (loaded.last_cycle_s, loaded.cycles_timed, loaded.cycle_ms_total) == (0.018, 2, 60)


def node(api: ApiWorld, name: str) -> dict[str, object]:
    nodes: list[dict[str, object]] = api.get("/v1/admin/nodes", "root").json()["data"]
    (n,) = [n for n in nodes if n["name"] == name]
    return n


def test_an_admin_drains_and_resumes_a_node_after_confirming(api: ApiWorld) -> None:
    signed_in(api, "root")
    confirm = api.client.get("/operator/nodes/node-c/drain")
    assert confirm.status_code == 200
    token = token_for(api.tokens["root"])
    assert f'name="{FIELD}" value="{token}"' in confirm.text
    done = api.client.post(
        "/operator/nodes/node-c/drain",
        data={FIELD: token, "reason": "fan noise"},
        follow_redirects=False,
    )
    assert (done.status_code, done.headers["location"]) == (303, "/operator?done=drained:node-c")
    assert (node(api, "node-c")["drained"], node(api, "node-c")["drain_reason"]) == (
        True,
        "fan noise",
    )
    shown = api.client.get(done.headers["location"]).text
    assert "node-c drained." in shown
    assert rows(shown, "nodes")["node-c"]["drained"] == "true"
    back = api.client.post(
        "/operator/nodes/node-c/resume", data={FIELD: token}, follow_redirects=False
    )
    assert back.status_code == 303 and node(api, "node-c")["drained"] is False


def test_a_drain_without_the_token_from_another_site_or_by_a_non_admin_does_nothing(
    api: ApiWorld,
) -> None:
    signed_in(api, "root")
    no_token = api.client.post("/operator/nodes/node-c/drain", data={"reason": "x"})
    assert no_token.status_code == 403
    assert no_token.json()["error"]["code"] == "CSRF_TOKEN_INVALID"
    evil = api.client.post(
        "/operator/nodes/node-c/drain",
        data={FIELD: token_for(api.tokens["root"]), "reason": "x"},
        headers={"Origin": "https://evil.example"},
    )
    assert evil.json()["error"]["code"] == "CROSS_SITE_REQUEST"
    no_reason = api.client.post(
        "/operator/nodes/node-c/drain",
        data={FIELD: token_for(api.tokens["root"]), "reason": "  "},
        headers=HTML,
    )
    assert no_reason.status_code == 422 and "say why the node is drained" in no_reason.text
    unknown = api.client.post(
        "/operator/nodes/node-z/drain", data={FIELD: token_for(api.tokens["root"]), "reason": "x"}
    )
    assert unknown.status_code == 404 and unknown.json()["error"]["code"] == "NOT_FOUND"
    signed_in(api, "pia")
    pi = api.client.post(
        "/operator/nodes/node-c/drain", data={FIELD: token_for(api.tokens["pia"]), "reason": "x"}
    )
    assert pi.status_code == 403 and pi.json()["error"]["code"] == "FORBIDDEN"
    assert api.client.get("/operator/nodes/node-c/drain").status_code == 403
    assert node(api, "node-c")["drained"] is False


def test_the_watch_list_takes_any_window_and_refuses_an_empty_one(api: ApiWorld) -> None:
    signed_in(api, "alice")
    api.clock.advance(30 * 86400)
    page = api.client.get("/watch?since=30d&until=2d").text
    end = api.clock() - timedelta(days=2)
    assert f"to {end:%Y-%m-%d %H:%M:%S} UTC" in page
    assert page.count('"x": [') + page.count('"x":[') == 1
    chart = page.split('id="chart-watch">', 1)[1].split("</script>", 1)[0]
    assert chart.count(",") >= 27  # one point per day: 28 days
    api_answer = api.get("/v1/stats/watch", params={"since": "30d", "until": "2d"}).json()
    assert api_answer["until"].startswith(f"{end:%Y-%m-%dT%H:%M:%S}")
    empty = api.get("/v1/stats/watch", params={"since": "1d", "until": "2d"})
    assert empty.status_code == 422 and "the window would be empty" in empty.text
    bad = api.client.get("/watch?since=soon", headers=HTML)
    assert bad.status_code == 422 and "neither a duration" in bad.text
