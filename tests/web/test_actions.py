"""Cancelling a job from the dashboard, over HTTP on SQLite and PostgreSQL: a confirmation
page that changes nothing, then a post that must carry this session's token from this
site's page, and that is allowed or refused exactly as `POST /v1/jobs/{id}/cancel` is.

The browser's side (clicking through, what a person sees) is in test_job_pages_browser.py.
"""

from __future__ import annotations

import html
import re
from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy.orm import Session, sessionmaker

from jpushare import store
from jpushare.client.formatting import amount
from jpushare.store.aggregates import lab_in_flight
from jpushare.store.jobs import Shown
from jpushare.web.auth import COOKIE
from jpushare.web.csrf import FIELD, token_for
from jpushare.web.job_figures import bill_so_far
from tests.api.conftest import ALL_BUSY, ApiWorld, make_world

QUEUED = "GLOBAL_QUEUE_WAIT"
PAGE = {"Accept": "text/html", "Origin": "http://testserver"}  # this site's form, a browser


def as_user(api: ApiWorld, user: str) -> None:
    api.client.cookies.set(COOKIE, api.tokens[user])


def state(api: ApiWorld, job: int) -> str:
    value: str = api.get(f"/v1/jobs/{job}").json()["state"]
    return value


def form_of(html: str) -> dict[str, str]:
    """The hidden fields of the confirmation page's form."""
    return dict(re.findall(r'<input type="hidden" name="([^"]+)" value="([^"]*)">', html))


def cancel(api: ApiWorld, job: int, fields: dict[str, str], **headers: str) -> Any:
    return api.client.post(
        f"/jobs/{job}/cancel", data=fields, headers={**PAGE, **headers}, follow_redirects=False
    )


def test_the_confirmation_changes_nothing_and_its_form_cancels_the_job(api: ApiWorld) -> None:
    job = api.submit("alice", 1)
    as_user(api, "alice")
    page = api.client.get(f"/jobs/{job}/cancel?next=/jobs")
    assert page.status_code == 200 and state(api, job) == "GLOBAL_QUEUE_WAIT"
    assert f"Cancel job {job}" in page.text and "cannot be undone" in page.text
    fields = form_of(page.text)
    assert fields == {FIELD: token_for(api.tokens["alice"]), "next": "/jobs"}
    r = cancel(api, job, fields)
    assert r.status_code == 303 and r.headers["location"] == f"/jobs?done=cancel&job={job}"
    answer = api.get(f"/v1/jobs/{job}").json()
    assert (answer["state"], answer["reason"]) == ("CANCELLED", "cancelled by alice")
    shown = api.client.get(r.headers["location"]).text
    assert f"Job {job} was cancelled." in shown


@pytest.mark.parametrize(
    ("fields", "headers", "code"),
    [
        ({}, {}, "CSRF_TOKEN_INVALID"),  # no token
        ({FIELD: "forged"}, {}, "CSRF_TOKEN_INVALID"),
        (None, {"Origin": "http://evil.test"}, "CROSS_SITE_REQUEST"),  # None: the right token
        (None, {"Sec-Fetch-Site": "cross-site"}, "CROSS_SITE_REQUEST"),
    ],
)
def test_a_forged_or_foreign_form_cancels_nothing(
    api: ApiWorld, fields: dict[str, str] | None, headers: dict[str, str], code: str
) -> None:
    job = api.submit("alice", 1)
    as_user(api, "alice")
    sent = {FIELD: token_for(api.tokens["alice"])} if fields is None else fields
    r = cancel(api, job, sent, **headers)
    assert r.status_code == 403 and code in r.text
    assert r.headers["content-type"].startswith("text/html")
    assert state(api, job) == "GLOBAL_QUEUE_WAIT"
    # a client that does not ask for a page gets the API's envelope
    r = api.client.post(f"/jobs/{job}/cancel", data=sent, headers=headers)
    assert r.status_code == 403 and r.json()["error"]["code"] == code


def test_a_token_from_another_sign_in_is_refused(api: ApiWorld) -> None:
    job = api.submit("alice", 1)
    as_user(api, "alice")
    r = cancel(api, job, {FIELD: token_for(api.tokens["bob"])})
    assert r.status_code == 403 and "CSRF_TOKEN_INVALID" in r.text
    assert state(api, job) == "GLOBAL_QUEUE_WAIT"


def test_a_signed_out_browser_cannot_cancel(api: ApiWorld) -> None:
    job = api.submit("alice", 1)
    r = cancel(api, job, {FIELD: token_for(api.tokens["alice"])})  # no cookie: no token
    assert r.status_code == 403 and state(api, job) == "GLOBAL_QUEUE_WAIT"


def test_the_page_refuses_whom_the_api_refuses_with_the_apis_sentence(api: ApiWorld) -> None:
    job = api.submit("alice", 1)
    api_answer = api.post(f"/v1/jobs/{job}/cancel", "bob").json()["error"]
    as_user(api, "bob")
    assert "Cancel job" not in api.client.get(f"/jobs/{job}").text  # not offered
    asked = api.client.get(f"/jobs/{job}/cancel", headers={"Accept": "text/html"})
    assert asked.status_code == 403 and api_answer["message"] in asked.text
    r = cancel(api, job, {FIELD: token_for(api.tokens["bob"])})
    assert r.status_code == 403
    assert api_answer["code"] in r.text and api_answer["message"] in r.text
    assert state(api, job) == "GLOBAL_QUEUE_WAIT"


def test_the_labs_pi_may_cancel_a_students_job_as_the_api_allows(api: ApiWorld) -> None:
    job = api.submit("alice", 1)
    as_user(api, "pia")
    assert f'href="/jobs/{job}/cancel"' in api.client.get(f"/jobs/{job}").text
    r = cancel(api, job, {FIELD: token_for(api.tokens["pia"])})
    assert r.status_code == 303 and r.headers["location"] == f"/jobs/{job}?done=cancel&job={job}"
    assert api.get(f"/v1/jobs/{job}").json()["reason"] == "cancelled by pia"


def test_an_ended_job_offers_no_cancel_and_its_post_is_the_apis_conflict(api: ApiWorld) -> None:
    job = api.submit("alice", 1)
    api.post(f"/v1/jobs/{job}/cancel")
    as_user(api, "alice")
    assert f'href="/jobs/{job}/cancel' not in api.client.get(f"/jobs/{job}").text
    assert f'href="/jobs/{job}/cancel' not in api.client.get("/jobs").text
    asked = api.client.get(f"/jobs/{job}/cancel")
    assert asked.status_code == 409 and "has ended" in asked.text
    assert 'id="confirm-form"' not in asked.text
    api_answer = api.post(f"/v1/jobs/{job}/cancel").json()["error"]
    r = cancel(api, job, {FIELD: token_for(api.tokens["alice"])})
    assert r.status_code == 409 and api_answer["message"] in r.text


@pytest.mark.parametrize("path", ["/jobs/999/cancel", "/jobs/1/explode"])
def test_an_unknown_job_or_action_is_a_404(api: ApiWorld, path: str) -> None:
    api.submit("alice", 1)
    as_user(api, "alice")
    assert api.client.get(path, headers={"Accept": "text/html"}).status_code == 404
    token = {FIELD: token_for(api.tokens["alice"])}
    r = api.client.post(path, data=token, headers=PAGE)
    assert r.status_code == 404 and r.headers["content-type"].startswith("text/html")
    assert "NOT_FOUND" in r.text


def test_after_an_action_the_browser_goes_only_to_a_page_of_this_site(api: ApiWorld) -> None:
    job = api.submit("alice", 1)
    as_user(api, "alice")
    r = cancel(api, job, {FIELD: token_for(api.tokens["alice"]), "next": "//evil.test/x"})
    assert r.status_code == 303 and r.headers["location"] == f"/?done=cancel&job={job}"


class StopRecorder:
    """An executor that records which runs it was asked to stop."""

    def __init__(self) -> None:
        self.stopped: list[str] = []

    def find(self, job_id: str, attempt: int) -> Any:
        return None

    def cancel(self, executor_id: str) -> None:
        self.stopped.append(executor_id)


@pytest.fixture
def api_with_executor(sessions: sessionmaker[Session]) -> Iterator[tuple[ApiWorld, StopRecorder]]:
    executor = StopRecorder()
    for world in make_world(sessions, executor=executor):  # type: ignore[arg-type]
        yield world, executor


def test_cancelling_a_running_job_stops_its_run_and_bills_what_the_page_showed(
    api_with_executor: tuple[ApiWorld, StopRecorder],
) -> None:
    api, executor = api_with_executor
    job = api.submit("alice", 2)
    api.cycle()
    with api.sessions.begin() as s:
        assert store.mark_running(s, job, api.clock(), executor_id="run-7")
    api.clock.advance(600)
    as_user(api, "alice")
    row = api.client.get("/jobs").text
    shown = re.search(rf'data-job-id="{job}".*?data-field="cost">([^<]+)', row, re.S)
    assert shown is not None
    r = cancel(api, job, {FIELD: token_for(api.tokens["alice"])})
    assert r.status_code == 303
    assert executor.stopped == ["run-7"]  # as the API's cancel does, after the response
    charged = api.get(f"/v1/jobs/{job}").json()["charged_tflop_s"]
    assert charged > 0 and shown.group(1).strip() == amount(charged)


def test_the_pages_bills_so_far_add_up_to_each_labs_in_flight_figure(api: ApiWorld) -> None:
    """`bill_so_far` counts as `lab_in_flight` does: a running job, a reservation held for a
    while since it was last accrued, a queued job, an ended one."""
    api.busy.update(ALL_BUSY)
    api.busy[("node-c", "rtx5090")] = 0
    running = api.submit("alice", 3, min_tier="rtx5090")
    api.cycle()
    with api.sessions.begin() as s:
        store.mark_running(s, running, api.clock())
    reserving = api.submit("bob", 4, min_tier="rtx5090")
    api.submit("carol", 1)
    api.clock.advance(30)
    api.cycle()  # bob's job reserves the idle 5090
    api.clock.advance(45)
    now = api.clock()
    with api.sessions() as s:
        tflops = {t.name: t.tflops for t in store.list_tiers(s)}
        bills: dict[str, float] = {}
        for job in store.list_jobs(s, store.JobFilter(limit=100), shown=Shown()):
            if not job.state.ended:
                bill = bill_so_far(job, tflops, now)
                bills[job.lab_name] = bills.get(job.lab_name, 0.0) + bill.in_flight
        assert store.get_job(s, reserving).reserved_gpus == 1
        expected = {lab: held.tflop_s for lab, held in lab_in_flight(s, now).items()}
    assert bills == pytest.approx(expected) and all(v > 0 for v in expected.values())


def act(api: ApiWorld, job: int, action: str, fields: dict[str, str]) -> Any:
    return api.client.post(
        f"/jobs/{job}/{action}", data=fields, headers=PAGE, follow_redirects=False
    )


def offers(html: str, job: int) -> set[str]:
    """The actions a page links to for `job`."""
    return set(re.findall(rf'href="/jobs/{job}/(\w+)', html))


def test_hold_then_release_from_the_job_page_as_the_api_does_them(api: ApiWorld) -> None:
    """Each is one `JobAction`: offered where it applies, confirmed, CSRF-checked, then the
    API's own route; the page then reads as the CLI does ("QUEUED (HELD)", the why)."""
    job = api.submit("alice", 1)
    as_user(api, "alice")
    assert offers(api.client.get(f"/jobs/{job}").text, job) == {"hold", "cancel"}
    asked = api.client.get(f"/jobs/{job}/hold")
    assert asked.status_code == 200 and "not started until someone releases it" in asked.text
    assert api.get(f"/v1/jobs/{job}").json()["held"] is False  # asking changed nothing
    assert act(api, job, "hold", {}).status_code == 403  # no token
    assert api.get(f"/v1/jobs/{job}").json()["held"] is False
    r = act(api, job, "hold", form_of(asked.text))
    assert r.status_code == 303 and r.headers["location"] == f"/jobs/{job}?done=hold&job={job}"
    answer = api.get(f"/v1/jobs/{job}").json()
    assert (answer["state"], answer["held"], answer["waiting"]) == (
        "GLOBAL_QUEUE_WAIT",
        True,
        "HELD",
    )
    page = api.client.get(r.headers["location"]).text
    assert f"Job {job} is held." in page and "QUEUED (HELD)" in page
    why = api.get(f"/v1/jobs/{job}/why").json()
    assert why["code"] == "HELD" and "by alice" in why["sentence"]
    assert html.escape(why["sentence"], quote=False) in page  # the API's sentence
    assert offers(page, job) == {"release", "cancel"}
    r = act(api, job, "release", form_of(api.client.get(f"/jobs/{job}/release").text))
    assert r.status_code == 303
    answer = api.get(f"/v1/jobs/{job}").json()
    assert (answer["state"], answer["held"], answer["waiting"]) == (
        "GLOBAL_QUEUE_WAIT",
        False,
        None,
    )
    page = api.client.get(r.headers["location"]).text
    assert f"Job {job} was released." in page and "(HELD)" not in page
    assert offers(page, job) == {"hold", "cancel"}


def test_my_jobs_offers_hold_or_release_by_the_jobs_state(api: ApiWorld) -> None:
    queued = api.submit("alice", 1)
    held = api.submit("alice", 1, hold=True)
    ended = api.submit("alice", 1)
    api.post(f"/v1/jobs/{ended}/cancel")
    as_user(api, "alice")
    listing = api.client.get("/jobs").text
    assert offers(listing, queued) == {"hold", "cancel"}
    assert offers(listing, held) == {"release", "cancel"}
    assert offers(listing, ended) == set()
    row = re.search(rf'data-job-id="{held}".*?data-field="state">([^<]+)', listing, re.S)
    assert row is not None and row.group(1) == "QUEUED (HELD)"
    r = act(api, held, "release", {FIELD: token_for(api.tokens["alice"]), "next": "/jobs"})
    assert r.status_code == 303 and r.headers["location"] == f"/jobs?done=release&job={held}"
    assert api.get(f"/v1/jobs/{held}").json()["held"] is False


def test_who_may_not_hold_gets_no_button_and_a_forged_post_is_the_apis_refusal(
    api: ApiWorld,
) -> None:
    job = api.submit("alice", 1)
    held = api.submit("alice", 1, hold=True)
    refusals = {
        "hold": api.post(f"/v1/jobs/{job}/hold", "bob").json()["error"],
        "release": api.post(f"/v1/jobs/{held}/release", "bob").json()["error"],
    }
    as_user(api, "bob")
    for target, name in ((job, "hold"), (held, "release")):
        assert offers(api.client.get(f"/jobs/{target}").text, target) == set()
        asked = api.client.get(f"/jobs/{target}/{name}", headers={"Accept": "text/html"})
        assert asked.status_code == 403 and refusals[name]["message"] in asked.text
        # bob's own session token, from this site's page: still the API's FORBIDDEN
        r = act(api, target, name, {FIELD: token_for(api.tokens["bob"])})
        assert r.status_code == 403 and refusals[name]["code"] == "FORBIDDEN"
        assert "FORBIDDEN" in r.text and refusals[name]["message"] in r.text
    assert api.get(f"/v1/jobs/{job}").json()["held"] is False
    assert api.get(f"/v1/jobs/{held}").json()["held"] is True
    as_user(api, "pia")  # the lab's PI may, as the API allows
    assert offers(api.client.get(f"/jobs/{job}").text, job) == {"hold", "cancel"}


def test_holding_a_running_job_is_not_offered_and_its_post_is_the_apis_conflict(
    api: ApiWorld,
) -> None:
    job = api.submit("alice", 1)
    api.cycle()
    with api.sessions.begin() as s:
        assert store.mark_running(s, job, api.clock())
    as_user(api, "alice")
    assert offers(api.client.get(f"/jobs/{job}").text, job) == {"cancel"}
    asked = api.client.get(f"/jobs/{job}/hold")
    assert (
        asked.status_code == 409 and "is not a queued job that is not held (RUNNING)" in asked.text
    )
    assert 'id="confirm-form"' not in asked.text
    api_answer = api.post(f"/v1/jobs/{job}/hold").json()["error"]
    r = act(api, job, "hold", {FIELD: token_for(api.tokens["alice"])})
    assert r.status_code == 409 and api_answer["message"] in r.text
    assert state(api, job) == "RUNNING"


def test_an_array_task_is_named_id_task_and_its_page_lists_its_siblings(api: ApiWorld) -> None:
    first = api.submit("alice", 1, array="0-2%1")
    tasks = api.get(f"/v1/jobs?array={first}").json()["data"]
    shown = sorted(t["display_id"] for t in tasks)
    assert shown == [f"{first}_0", f"{first}_1", f"{first}_2"]
    second = next(t for t in tasks if t["display_id"] == f"{first}_1")
    as_user(api, "alice")
    page = api.client.get(f"/jobs/{second['id']}").text
    assert f"<title>Job {first}_1" in page
    listed = re.findall(r'<tr data-job-id="(\d+)" data-state="[A-Z_]+"', page)
    assert sorted(int(i) for i in listed) == sorted(t["id"] for t in tasks)
    assert "QUEUED (ARRAY_LIMIT)" in page and "at most 1 at once" in page
    mine = api.client.get("/jobs").text
    assert all(f">{s}</a>" in mine for s in shown)
    queue = api.client.get("/").text
    assert f">{first}_0</a>" in queue  # in the queue
    assert f">{first}_1</a>" in queue and f">{first}_2</a>" in queue  # waiting, after it
