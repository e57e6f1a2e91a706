"""The dashboard and /docs in a real browser (Debian's headless Chromium via Playwright).

Every page is loaded from a real server (tests/web/conftest.py) with the network closed to
any host but 127.0.0.1; its figures are compared with the JSON API's for the same state;
a screenshot of each page is saved (see `screenshots`).
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest

from jpushare.client.web import dashboard_link
from jpushare.web.render import duration, percent
from tests.web.conftest import REFRESH_S, Served, save_screenshot
from tests.web.scenario import XSS_NAME

LOCAL_HOSTS = {"127.0.0.1", "localhost"}


class Visit:
    """One browser context: its page, the requests that tried to leave the machine, and
    the dialogs a script opened (an injected `alert` would show up there)."""

    def __init__(self, browser: Any, served: Served) -> None:
        self.served = served
        self.context = browser.new_context(viewport={"width": 1280, "height": 800})
        self.left: list[str] = []
        self.dialogs: list[str] = []
        self.context.route("**/*", self._guard)
        self.page = self.context.new_page()
        self.page.on("dialog", self._dialog)

    def _guard(self, route: Any) -> None:
        url = route.request.url
        if urlsplit(url).hostname in LOCAL_HOSTS or url.startswith("data:"):
            route.continue_()
        else:
            self.left.append(url)
            route.abort()

    def _dialog(self, dialog: Any) -> None:
        self.dialogs.append(dialog.message)
        dialog.dismiss()

    def goto(self, path: str) -> Any:
        response = self.page.goto(self.served.url + path)
        self.page.wait_for_load_state("load")
        return response

    def sign_in(self, user: str = "alice") -> None:
        self.goto("/signin")
        self.page.fill("#token", self.served.scenario.tokens[user])
        self.page.click("#signin button")
        self.page.wait_for_url(self.served.url + "/")

    def close(self) -> None:
        self.context.close()
        assert self.left == [], f"requests left for other hosts: {self.left}"
        assert self.dialogs == [], f"a script opened dialogs: {self.dialogs}"


@pytest.fixture
def visit(browser: Any, served: Served) -> Iterator[Visit]:
    v = Visit(browser, served)
    yield v
    v.close()


def attrs(visit: Visit, selector: str, *names: str) -> list[dict[str, str | None]]:
    """The data-* attributes `names` of every element matching `selector`."""
    rows = visit.page.locator(selector)
    return [{n: rows.nth(i).get_attribute(f"data-{n}") for n in names} for i in range(rows.count())]


def test_a_visitor_signs_in_with_a_token_and_out_again(visit: Visit) -> None:
    visit.goto("/placements")
    assert visit.page.url == visit.served.url + "/signin?next=/placements"
    visit.page.fill("#token", "jps_not-a-token")
    visit.page.click("#signin button")
    assert "not valid" in visit.page.inner_text("p.error")
    visit.page.fill("#token", visit.served.scenario.tokens["bob"])
    visit.page.click("#signin button")
    visit.page.wait_for_url(visit.served.url + "/placements")
    assert "bob · beta · student" in visit.page.inner_text("header .who")
    (cookie,) = visit.context.cookies()
    assert (cookie["httpOnly"], cookie["sameSite"]) == (True, "Strict")
    assert cookie["value"] == visit.served.scenario.tokens["bob"]
    visit.page.click("header .who button")
    visit.page.wait_for_url(visit.served.url + "/signin")
    assert visit.context.cookies() == []
    visit.goto("/labs")
    assert visit.page.url == visit.served.url + "/signin?next=/labs"


def test_the_link_jpushare_web_prints_signs_in_and_leaves_no_token_in_the_address(
    visit: Visit,
) -> None:
    link = dashboard_link(visit.served.url, visit.served.scenario.tokens["carol"])
    visit.page.goto(link)
    visit.page.wait_for_url(visit.served.url + "/")
    assert "carol" in visit.page.inner_text("header .who")
    assert visit.served.scenario.tokens["carol"] not in visit.page.url


def test_the_queue_page_shows_the_apis_queue_and_a_script_name_as_text(
    visit: Visit, screenshots: Path
) -> None:
    visit.sign_in()
    api = visit.served.api("/v1/queue")
    rows = visit.page.locator("#queue tbody tr")
    assert rows.count() == len(api["data"]) == 3
    for i, entry in enumerate(api["data"]):
        row = rows.nth(i)
        assert row.get_attribute("data-job-id") == str(entry["job_id"])
        field = {
            k: row.locator(f'[data-field="{k}"]').inner_text()
            for k in ("rank", "name", "lab", "num_gpus", "min_tier", "sentence")
        }
        assert field == {
            "rank": str(entry["rank"]),
            "name": entry["name"],
            "lab": entry["lab"],
            "num_gpus": str(entry["num_gpus"]),
            "min_tier": entry["min_tier"],
            "sentence": entry["sentence"],
        }
        start = entry["estimated_start"]
        shown = row.locator('[data-field="estimated_start"]').inner_text()
        if start is None:
            assert shown == "—"
        else:  # the API's estimate, to the second, with its basis
            at = datetime.fromisoformat(start.replace("Z", "+00:00"))
            basis = entry["estimate_basis"].replace("_", " ")
            assert shown == f"{at:%Y-%m-%d %H:%M:%S} UTC {basis}"
    assert rows.nth(0).locator('[data-field="name"]').inner_text() == XSS_NAME
    assert f"{api['queue_length']} waiting, top job {api['top_job_id']}" in visit.page.inner_text(
        "h1"
    )
    refresh = visit.page.locator('meta[http-equiv="refresh"]').get_attribute("content")
    assert refresh == str(REFRESH_S)
    save_screenshot(visit.page, screenshots, "1-queue")


def test_the_placements_grid_shows_the_apis_gpus_and_why_nodes_are_closed(
    visit: Visit, screenshots: Path
) -> None:
    visit.sign_in()
    visit.goto("/placements")
    api = visit.served.api("/v1/placements")["data"]
    cells = attrs(visit, "td.cell[data-node]", "node", "tier", "busy", "reserved", "idle", "llm")
    by_place = lambda c: (c["node"], c["tier"])  # noqa: E731
    assert sorted(cells, key=by_place) == [
        {
            "node": p["node"],
            "tier": p["tier"],
            "busy": str(p["busy"]),
            "reserved": str(p["reserved"]),
            "idle": str(p["idle"]),
            "llm": str(p["llm_backfill_gpus"]),
        }
        for p in sorted(api, key=by_place)
    ]
    for p in api:
        cell = visit.page.locator(f'td.cell[data-node="{p["node"]}"][data-tier="{p["tier"]}"]')
        assert cell.locator(".gpu.busy").count() == p["busy"]
        reserved = cell.locator(".gpu.reserved")
        assert reserved.all_inner_texts() == [
            str(r["job_id"]) for r in p["reservations"] for _ in range(r["gpus"])
        ]
        closed = cell.locator(".gpu.unavailable").count()
        assert closed == (0 if p["schedulable"] else p["capacity"] - p["busy"])
        assert cell.locator(".gpu.idle").count() == (p["idle"] if p["schedulable"] else 0)
    node_a = visit.page.locator("th.node", has_text="node-a").inner_text()
    node_b = visit.page.locator("th.node", has_text="node-b").inner_text()
    assert "down: power supply failure" in node_a
    assert "drained: disk swap" in node_b
    save_screenshot(visit.page, screenshots, "2-placements")


def test_the_labs_page_shows_the_apis_usage_shares_and_a_chart_ending_there(
    visit: Visit, screenshots: Path
) -> None:
    visit.sign_in()
    visit.goto("/labs")
    api = visit.served.api("/v1/labs")["data"]
    total = sum(lab["usage_tflop_s"] for lab in api)
    rows = attrs(visit, "#labs tbody tr", "lab", "usage", "running", "queued")
    assert rows == [
        {
            "lab": lab["name"],
            "usage": str(lab["usage_tflop_s"]),
            "running": str(lab["running_jobs"]),
            "queued": str(lab["queued_jobs"]),
        }
        for lab in api
    ]
    shares = visit.page.locator('#labs tbody [data-field="share"]').all_inner_texts()
    assert shares == [percent(lab["usage_tflop_s"] / total) for lab in api]
    chart = visit.page.evaluate("JSON.parse(document.getElementById('chart-usage').textContent)")
    assert {name: line[-1] for name, line in chart["lines"].items()} == {
        lab["name"]: lab["usage_tflop_s"] for lab in api
    }
    assert visit.page.locator(".chart[data-chart=usage] canvas").count() == 1  # uPlot drew it
    legend = visit.page.locator(".chart[data-chart=usage] .u-legend").inner_text()
    assert "alpha" in legend and "beta" in legend
    save_screenshot(visit.page, screenshots, "3-labs")


def test_my_jobs_and_the_live_output_of_a_running_job(visit: Visit, screenshots: Path) -> None:
    visit.sign_in("alice")
    visit.goto("/jobs")
    api = visit.served.api("/v1/jobs?mine=true")["data"]
    assert attrs(visit, "#jobs tbody tr", "job-id", "state") == [
        {"job-id": str(j["id"]), "state": j["state"]} for j in api
    ]
    save_screenshot(visit.page, screenshots, "4-my-jobs")

    job = visit.served.scenario.jobs["llm-finetune"]
    visit.page.click(f'#jobs a[href="/jobs/{job}"]')
    visit.page.wait_for_url(f"{visit.served.url}/jobs/{job}")
    log = visit.served.api(f"/v1/jobs/{job}/log")["log"].splitlines()
    assert visit.page.inner_text("#log").splitlines() == log[-200:]
    assert "<b>not bold</b>" in visit.page.inner_text("#log")  # shown as text
    assert visit.page.locator("#log b").count() == 0
    assert f"the last 200 of {len(log)} lines" in visit.page.inner_text("#log-note")
    details = visit.page.inner_text("#details")
    assert "python llm-finetune.py --epochs 3" in details
    assert visit.served.api(f"/v1/jobs/{job}/why")["sentence"] in visit.page.inner_text("#why")
    save_screenshot(visit.page, screenshots, "5-job")


def test_another_users_job_page_hides_what_the_api_hides(visit: Visit) -> None:
    visit.sign_in("bob")
    job = visit.served.scenario.jobs["llm-finetune"]
    visit.goto(f"/jobs/{job}")
    assert visit.served.api(f"/v1/jobs/{job}", "bob")["command"] is None
    assert "python llm-finetune.py" not in visit.page.content()
    assert "hidden" in visit.page.inner_text("#details")
    assert "a student may read the log of only their own jobs" in visit.page.inner_text("#log-note")
    assert visit.page.locator("#log").count() == 0


def test_the_watch_list_page_shows_the_apis_figures_and_a_chart_per_day(
    visit: Visit, screenshots: Path
) -> None:
    visit.sign_in()
    visit.goto("/watch")
    api = visit.served.api("/v1/stats/watch")
    texts = {
        k: visit.page.locator(f'#watch [data-field="{k}"]').inner_text()
        for k in ("failed_rate", "hold_mean", "reservation_share", "backfill_served")
    }
    assert texts == {
        "failed_rate": percent(api["reservations"]["failed_rate"]),
        "hold_mean": duration(api["hold_s"]["mean"]),
        "reservation_share": percent(api["usage"]["reservation_share"]),
        "backfill_served": percent(api["backfill"]["served_share_of_reserved"]),
    }
    assert attrs(visit, "#sizes tbody tr", "gpus", "jobs", "burden") == [
        {"gpus": gpus, "jobs": str(c["jobs"]), "burden": str(c["burden"])}
        for gpus, c in api["by_gpus"].items()
    ]
    chart = visit.page.evaluate("JSON.parse(document.getElementById('chart-watch').textContent)")
    assert len(chart["x"]) == 7
    assert visit.page.locator(".chart[data-chart=watch] canvas").count() == 1
    save_screenshot(visit.page, screenshots, "6-watch")


def test_docs_render_every_operation_with_the_network_closed(
    visit: Visit, served: Served, screenshots: Path
) -> None:
    spec = httpx.get(served.url + "/openapi.json").json()
    operations = sum(len(methods) for methods in spec["paths"].values())
    visit.goto("/docs")
    visit.page.wait_for_selector(".opblock", timeout=15_000)
    assert visit.page.locator(".opblock").count() == operations
    assert "JPU-Share" in visit.page.inner_text(".info .title")
    scripts = visit.page.locator("script[src]").evaluate_all("els => els.map(e => e.src)")
    assert scripts and all(urlsplit(s).hostname in LOCAL_HOSTS for s in scripts)
    save_screenshot(visit.page, screenshots, "7-docs")


PAGES = ("/", "/placements", "/labs", "/jobs", "/watch")
ADMIN_PAGES = ("/labs/alpha", "/operator", "/operator/nodes/node-c/drain", "/watch?since=30d")


@pytest.mark.parametrize("width", [390, 1366])
def test_no_page_is_wider_than_the_screen(
    browser: Any, served: Served, screenshots: Path, width: int
) -> None:
    """README: no page scrolls sideways, on a phone (390 px) or a laptop (1366 px); a
    table too wide for the screen scrolls inside its own box."""
    visit = Visit(browser, served)
    visit.page.set_viewport_size({"width": width, "height": 900})
    try:
        visit.sign_in("alice")
        job, ended, top = (served.scenario.jobs[n] for n in ("llm-finetune", "sweep", XSS_NAME))
        held, after, shard = (
            served.scenario.jobs[n] for n in ("on-hold", "after-finetune", "shard")
        )
        paths = (
            f"/jobs/{job}",
            f"/jobs/{ended}",
            f"/jobs/{top}",
            f"/jobs/{top}/cancel",
            f"/jobs/{held}",  # QUEUED (HELD), another's
            f"/jobs/{after}",  # QUEUED (DEPENDENCY) with its why
            f"/jobs/{after}/hold",
            f"/jobs/{shard + 1}",  # an array's task, its siblings listed
        )
        for path in (*PAGES, *paths, "/jobs/abc"):
            visit.goto(path)
            wide = visit.page.evaluate("document.documentElement.scrollWidth")
            assert wide <= width, f"{path} is {wide} px wide at {width} px"
            name = path.strip("/").replace("/", "-") or "queue"
            save_screenshot(visit.page, screenshots, f"w{width}-{name}")
        visit.sign_in("root")  # the pages of a lab and of an operator (admins only)
        for path in (*ADMIN_PAGES, f"/jobs/{shard}/release"):
            visit.goto(path)
            wide = visit.page.evaluate("document.documentElement.scrollWidth")
            assert wide <= width, f"{path} is {wide} px wide at {width} px"
            name = path.strip("/").replace("/", "-").replace("?", "-").replace("=", "")
            save_screenshot(visit.page, screenshots, f"w{width}-{name}")
    finally:
        visit.close()
