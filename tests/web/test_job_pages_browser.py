"""A lab member's pages in a real browser: My jobs, a job's page, who holds each busy GPU
on Placements, and cancelling from the pages (a confirmation, then the API's own cancel).

Against a real server of its own (this module's `served`: the cancels below change its
jobs, so they come last), Debian's Chromium, every outside request blocked (`Visit`).
Every figure is compared with the JSON API's for the same frozen instant; screenshots of
each page and of the confirmation go to the screenshots folder.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from jpushare.client.formatting import amount
from jpushare.client.job_commands import elapsed_s
from jpushare.web.csrf import token_for
from jpushare.web.render import duration, utc
from tests.web.conftest import Served, save_screenshot
from tests.web.scenario import XSS_NAME
from tests.web.test_browser import Visit, attrs
from tests.web.test_cross_site import evil  # noqa: F401 (the fixture)


@pytest.fixture
def visit(browser: Any, served: Served) -> Iterator[Visit]:
    v = Visit(browser, served)
    yield v
    v.close()


def at(value: str | None) -> datetime | None:
    return None if value is None else datetime.fromisoformat(value.replace("Z", "+00:00"))


def field(visit: Visit, scope: str, name: str) -> str:
    text: str = visit.page.locator(f'{scope} [data-field="{name}"]').inner_text()
    return text.strip()


def test_my_jobs_shows_elapsed_time_left_and_the_cost_so_far_of_a_running_job(
    visit: Visit, screenshots: Path
) -> None:
    visit.sign_in("alice")
    visit.goto("/jobs")
    served = visit.served
    now = served.clock()
    tflops = {t["name"]: t["tflops"] for t in served.api("/v1/tiers")["data"]}
    jobs = served.api("/v1/jobs?mine=true")["data"]
    assert attrs(visit, "#jobs tbody tr", "job-id") == [{"job-id": str(j["id"])} for j in jobs]
    running = next(j for j in jobs if j["name"] == "llm-finetune")
    ran = elapsed_s(running, now)
    assert ran is not None and ran > 0 and running["charged_tflop_s"] == 0
    row = f'#jobs tr[data-job-id="{running["id"]}"]'
    assert field(visit, row, "elapsed") == duration(ran)
    assert field(visit, row, "time_left") == duration(running["time_limit_s"] - ran)
    so_far = running["run_cost_tflop_s"] + running["num_gpus"] * ran * tflops[running["tier"]]
    assert field(visit, row, "cost").startswith(amount(so_far))  # not "charged 0"
    assert f"({amount(so_far)} in flight)" in field(visit, row, "cost")
    assert field(visit, row, "charged") == "0"
    ended = next(j for j in jobs if j["state"] == "COMPLETED")
    row = f'#jobs tr[data-job-id="{ended["id"]}"]'
    assert field(visit, row, "cost") == amount(ended["charged_tflop_s"])  # all of it charged
    assert visit.page.locator(f"{row} [data-action]").count() == 0  # nothing to cancel
    active = [j for j in jobs if j["state"] not in ("COMPLETED", "FAILED", "CANCELLED")]
    offered = visit.page.locator("#jobs [data-action=cancel]")
    assert offered.count() == len(active) == 3  # one held back by its dependency
    save_screenshot(visit.page, screenshots, "8-my-jobs-figures")


def test_a_queued_jobs_page_shows_its_estimate_and_basis_and_its_reservation(
    visit: Visit, screenshots: Path
) -> None:
    visit.sign_in("alice")
    served = visit.served
    for name in (XSS_NAME, "pretrain", "notebook"):
        job = served.scenario.jobs[name]
        visit.goto(f"/jobs/{job}")
        why = served.api(f"/v1/jobs/{job}/why")
        estimate = visit.page.inner_text("#estimate")
        if why["estimated_start"] is None:
            assert estimate.startswith("—")
        else:
            assert field(visit, "#estimate", "estimated_start") == utc(at(why["estimated_start"]))
            basis = why["estimate_basis"].replace("_", " ")
            assert field(visit, "#estimate", "estimate_basis") == basis
            assert field(visit, "#estimate", "estimate_sentence") == why["estimate_sentence"]
        assert visit.page.locator("#no-attempts").count() == 1  # never dispatched
    assert any(
        served.api(f"/v1/jobs/{served.scenario.jobs[n]}/why")["estimated_start"]
        for n in (XSS_NAME, "pretrain", "notebook")
    ), "the scenario should give at least one estimate"
    top = served.scenario.jobs[XSS_NAME]
    visit.goto(f"/jobs/{top}")
    spans = served.api(f"/v1/jobs/{top}/attempts")["reservations"]
    assert len(spans) == 1 and spans[0]["ended_at"] is None
    rows = visit.page.locator("#reservations tbody tr")
    assert rows.count() == 1 and "held now" in rows.inner_text()
    assert visit.page.locator("nav a.active").inner_text() == "My jobs"  # alice's own
    assert visit.page.locator("#actions [data-action=cancel]").count() == 1
    save_screenshot(visit.page, screenshots, "9-job-queued")


def test_an_ended_jobs_page_shows_its_attempts_reservations_and_costs(
    visit: Visit, screenshots: Path
) -> None:
    visit.sign_in("alice")  # bob's job: another user's, seen as squeue shows it
    served = visit.served
    job = served.scenario.jobs["sweep"]
    visit.goto(f"/jobs/{job}")
    history = served.api(f"/v1/jobs/{job}/attempts")
    answer = served.api(f"/v1/jobs/{job}")
    assert attrs(visit, "#attempts tbody tr", "attempt", "outcome") == [
        {"attempt": str(a["attempt"]), "outcome": a["outcome"]} for a in history["data"]
    ]
    runs = visit.page.locator('#attempts [data-field="run_cost"]').all_inner_texts()
    assert runs == [amount(a["run_cost_tflop_s"]) for a in history["data"]]
    assert attrs(visit, "#reservations tbody tr", "released") == [
        {"released": r["released"]} for r in history["reservations"]
    ]
    assert history["reservations"] and history["reservations"][0]["released"] == "filled"
    assert field(visit, "#cost", "run") == amount(answer["run_cost_tflop_s"])
    assert field(visit, "#cost", "reservation") == amount(answer["reservation_cost_tflop_s"])
    assert field(visit, "#cost", "charged") == amount(answer["charged_tflop_s"])
    assert visit.page.locator('#cost [data-field="in_flight"]').count() == 0
    assert visit.page.locator("nav a.active").count() == 0  # not "My jobs": bob's job
    assert visit.page.locator("#actions").count() == 0  # ended, and not hers
    save_screenshot(visit.page, screenshots, "10-job-ended")


def test_placements_names_the_job_user_and_lab_holding_each_busy_gpu(
    visit: Visit, screenshots: Path
) -> None:
    visit.sign_in("bob")
    visit.goto("/placements")
    served = visit.served
    active = served.api("/v1/jobs?state=RUNNING&state=DISPATCHED")["data"]
    assert active, "the scenario has running jobs"
    for p in served.api("/v1/placements")["data"]:
        cell = visit.page.locator(f'td.cell[data-node="{p["node"]}"][data-tier="{p["tier"]}"]')
        here = sorted(
            (j for j in active if (j["node"], j["tier"]) == (p["node"], p["tier"])),
            key=lambda j: j["id"],
        )
        held = cell.locator(".gpu.busy.held")
        assert held.all_inner_texts() == [str(j["id"]) for j in here for _ in range(j["num_gpus"])]
        outside = p["busy"] - sum(j["num_gpus"] for j in here)
        assert cell.locator(".gpu.busy:not(.held)").count() == outside
        holders = cell.locator("ul.holders li").all_inner_texts()
        assert [h.split(" · ")[:3] for h in holders] == [
            [f"job {j['id']} {j['name']}", j["user"], j["lab"]] for j in here
        ]
    node_c = visit.page.locator('td.cell[data-node="node-c"][data-tier="rtx5090"]')
    assert "llm-finetune · alice · alpha" in node_c.inner_text()
    save_screenshot(visit.page, screenshots, "11-placements-holders")


def test_another_sites_form_cannot_cancel_a_job(
    evil: tuple[Any, str, dict[str, str]],  # noqa: F811 (the fixture)
    served: Served,
) -> None:
    context, prefix, pages = evil
    job = served.scenario.jobs["notebook"]
    page = context.new_page()
    page.goto(served.url + "/signin")
    page.fill("#token", served.scenario.tokens["bob"])
    page.click("#signin button")
    page.wait_for_url(served.url + "/")
    token = page.goto(f"{served.url}/jobs/{job}/cancel")
    assert token is not None and token.status == 200
    value = page.locator('input[name="csrf_token"]').get_attribute("value")
    # Even a page that knew bob's form token: another site's post is refused.
    pages["cancel.html"] = (
        f'<form id="f" method="post" action="{served.url}/jobs/{job}/cancel">'
        f'<input name="csrf_token" value="{value}"></form>'
        '<script>document.getElementById("f").submit()</script>'
    )
    with page.expect_response(f"{served.url}/jobs/{job}/cancel") as answer:
        page.goto(f"{prefix}cancel.html")
    assert answer.value.status == 403
    assert served.api(f"/v1/jobs/{job}", "bob")["state"] == "GLOBAL_QUEUE_WAIT"


def test_held_and_waiting_jobs_read_as_the_cli_shows_them_with_the_apis_why(
    visit: Visit, screenshots: Path
) -> None:
    visit.sign_in("alice")
    served = visit.served
    jobs = served.scenario.jobs
    visit.goto("/")
    waiting = visit.page.locator("#waiting tbody tr")
    listed = {r.get_attribute("data-job-id"): r for r in waiting.all()}
    api = served.api("/v1/jobs?state=GLOBAL_QUEUE_WAIT&waiting=true")["data"]
    assert set(listed) == {str(j["id"]) for j in api} and len(api) == 5
    for j in api:
        row = listed[str(j["id"])]
        assert row.locator('[data-field="state"]').inner_text() == f"QUEUED ({j['waiting']})"
        assert row.locator("a").inner_text() == j["display_id"]
    save_screenshot(visit.page, screenshots, "15-queue-held-and-waiting")
    for name in ("on-hold", "after-finetune"):
        visit.goto(f"/jobs/{jobs[name]}")
        why = served.api(f"/v1/jobs/{jobs[name]}/why")
        job = served.api(f"/v1/jobs/{jobs[name]}")
        assert visit.page.inner_text("#job-state") == f"QUEUED ({job['waiting']})"
        assert visit.page.inner_text("#why") == f"{why['code']} {why['sentence']}"
        assert visit.page.inner_text("#estimate") == (
            f"— none while it waits outside the queue ({job['waiting']})"
        )
    assert f"job {jobs['llm-finetune']}" in why["sentence"]  # the dependency it waits for
    save_screenshot(visit.page, screenshots, "16-job-dependency")


def test_an_array_tasks_page_is_titled_id_task_and_links_its_siblings(
    visit: Visit, screenshots: Path
) -> None:
    visit.sign_in("carol")
    served = visit.served
    first = served.scenario.jobs["shard"]
    tasks = sorted(served.api(f"/v1/jobs?array={first}", "carol")["data"], key=lambda t: t["id"])
    assert [t["display_id"] for t in tasks] == [f"{first}_{i}" for i in range(3)]
    visit.goto(f"/jobs/{tasks[1]['id']}")
    assert visit.page.title().startswith(f"Job {first}_1")
    assert visit.page.inner_text("#job-id") == f"{first}_1"
    rows = visit.page.locator("#array-tasks tbody tr")
    assert [r.get_attribute("data-job-id") for r in rows.all()] == [str(t["id"]) for t in tasks]
    visit.page.click(f'#array-tasks a:text-is("{first}_2")')
    visit.page.wait_for_url(f"{served.url}/jobs/{tasks[2]['id']}")
    assert visit.page.inner_text("#job-state") == "QUEUED (HELD)"
    save_screenshot(visit.page, screenshots, "17-array-task")
    visit.goto("/jobs")
    shown = visit.page.locator("#jobs tbody tr td:first-child a").all_inner_texts()
    assert {t["display_id"] for t in tasks} <= set(shown)


# --- the holds and cancels change the scenario: last in this module ------------------------


def test_hold_then_release_from_the_job_page_as_the_api_sees_it(
    visit: Visit, screenshots: Path
) -> None:
    visit.sign_in("bob")
    served = visit.served
    job = served.scenario.jobs["notebook"]
    visit.goto(f"/jobs/{job}")
    assert visit.page.locator("#actions [data-action=release]").count() == 0
    visit.page.click("#actions [data-action=hold]")
    visit.page.wait_for_url(f"{served.url}/jobs/{job}/hold")
    assert "until someone releases it" in visit.page.inner_text("#confirm")
    assert served.api(f"/v1/jobs/{job}", "bob")["held"] is False  # only asked
    save_screenshot(visit.page, screenshots, "18-hold-confirm")
    visit.page.click("#confirm-form button")
    visit.page.wait_for_url(f"{served.url}/jobs/{job}?done=hold&job={job}")
    answer = served.api(f"/v1/jobs/{job}", "bob")
    assert (answer["state"], answer["held"], answer["waiting"]) == (
        "GLOBAL_QUEUE_WAIT",
        True,
        "HELD",
    )
    assert job not in [e["job_id"] for e in served.api("/v1/queue", "bob")["data"]]
    assert visit.page.inner_text("#notice") == f"Job {job} is held."
    assert visit.page.inner_text("#job-state") == "QUEUED (HELD)"
    assert "by bob" in visit.page.inner_text("#why")
    save_screenshot(visit.page, screenshots, "19-job-held")
    visit.page.click("#actions [data-action=release]")
    visit.page.wait_for_url(f"{served.url}/jobs/{job}/release")
    visit.page.click("#confirm-form button")
    visit.page.wait_for_url(f"{served.url}/jobs/{job}?done=release&job={job}")
    answer = served.api(f"/v1/jobs/{job}", "bob")
    assert (answer["held"], answer["waiting"]) == (False, None)
    assert job in [e["job_id"] for e in served.api("/v1/queue", "bob")["data"]]
    assert visit.page.inner_text("#job-state") == "QUEUED"
    assert visit.page.locator("#actions [data-action=hold]").count() == 1


def test_who_may_not_hold_gets_no_button_and_a_forged_post_is_refused(visit: Visit) -> None:
    visit.sign_in("carol")  # another lab's student
    served = visit.served
    job = served.scenario.jobs["pretrain"]
    visit.goto(f"/jobs/{job}")
    assert visit.page.locator("#actions").count() == 0
    # Posted from this site's page: without the form token, then with carol's own (what
    # her confirmation form would carry): still not hers to hold.
    mine = token_for(served.scenario.tokens["carol"])
    for token, code in (("", "CSRF_TOKEN_INVALID"), (mine, "FORBIDDEN")):
        status, text = visit.page.evaluate(
            """([job, token]) => fetch(`/jobs/${job}/hold`, {method: 'POST',
                 headers: {'Content-Type': 'application/x-www-form-urlencoded'},
                 body: new URLSearchParams({csrf_token: token})})
               .then(async r => [r.status, await r.text()])""",
            [job, token],
        )
        assert status == 403 and code in text
        assert served.api(f"/v1/jobs/{job}", "carol")["held"] is False


# --- the cancels change the scenario: last in this module ---------------------------------


def test_cancel_from_my_jobs_asks_first_then_cancels_as_the_api_does(
    visit: Visit, screenshots: Path
) -> None:
    visit.sign_in("bob")
    served = visit.served
    job = served.scenario.jobs["pretrain"]
    visit.goto("/jobs")
    visit.page.click(f'#jobs tr[data-job-id="{job}"] [data-action=cancel]')
    visit.page.wait_for_url(f"{served.url}/jobs/{job}/cancel?next=/jobs")
    assert "cannot be undone" in visit.page.inner_text("#confirm")
    assert served.api(f"/v1/jobs/{job}", "bob")["state"] == "GLOBAL_QUEUE_WAIT"  # only asked
    save_screenshot(visit.page, screenshots, "12-cancel-confirm")
    visit.page.click("#keep")  # changing one's mind changes nothing
    visit.page.wait_for_url(f"{served.url}/jobs")
    assert served.api(f"/v1/jobs/{job}", "bob")["state"] == "GLOBAL_QUEUE_WAIT"
    visit.page.click(f'#jobs tr[data-job-id="{job}"] [data-action=cancel]')
    visit.page.click("#confirm-form button")
    visit.page.wait_for_url(f"{served.url}/jobs?done=cancel&job={job}")
    assert visit.page.inner_text("#notice") == f"Job {job} was cancelled."
    answer = served.api(f"/v1/jobs/{job}", "bob")
    assert (answer["state"], answer["reason"]) == ("CANCELLED", "cancelled by bob")
    row = visit.page.locator(f'#jobs tr[data-job-id="{job}"]')
    assert row.get_attribute("data-state") == "CANCELLED"
    assert row.locator("[data-action]").count() == 0
    save_screenshot(visit.page, screenshots, "13-cancelled")


def test_cancel_a_running_job_from_its_page(visit: Visit, screenshots: Path) -> None:
    visit.sign_in("alice")
    served = visit.served
    job = served.scenario.jobs["llm-finetune"]
    visit.goto(f"/jobs/{job}")
    visit.page.click("#actions [data-action=cancel]")
    visit.page.wait_for_url(f"{served.url}/jobs/{job}/cancel")
    visit.page.click("#confirm-form button")
    visit.page.wait_for_url(f"{served.url}/jobs/{job}?done=cancel&job={job}")
    answer = served.api(f"/v1/jobs/{job}")
    assert answer["state"] == "CANCELLED" and answer["charged_tflop_s"] > 0
    assert field(visit, "#cost", "charged") == amount(answer["charged_tflop_s"])
    assert visit.page.locator("#actions").count() == 0
    assert visit.page.locator("#attempts tbody tr").get_attribute("data-outcome") == "CANCELLED"
    save_screenshot(visit.page, screenshots, "14-job-cancelled")
