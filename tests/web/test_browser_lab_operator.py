"""The lab page, the operator page and its drain / resume forms, in a real browser.

Debian's headless Chromium over a real server (tests/web/conftest.py), every request to
another host blocked; each page's figures are compared with the JSON API's, and a
screenshot of each is saved (see `screenshots`). This module has its own server: the drain
test changes a node, which the other browser tests must not see.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from jpushare.web.render import percent, tflops
from tests.web.conftest import Served, save_screenshot
from tests.web.test_browser import Visit, attrs


@pytest.fixture
def visit(browser: Any, served: Served) -> Iterator[Visit]:
    v = Visit(browser, served)
    yield v
    v.close()


def test_a_pi_opens_my_lab_and_sees_each_users_usage_in_flight_and_gpus(
    visit: Visit, screenshots: Path
) -> None:
    visit.sign_in("pia")
    visit.page.click("nav >> text=My lab")
    visit.page.wait_for_url(visit.served.url + "/labs/alpha")
    jobs = visit.served.api("/v1/jobs?lab=alpha&limit=500", "pia")["data"]
    charged: dict[str, float] = defaultdict(float)
    gpus: dict[str, int] = defaultdict(int)
    for j in jobs:
        charged[j["user"]] += j["charged_tflop_s"]
        if j["state"] in ("DISPATCHED", "RUNNING"):
            gpus[j["user"]] += j["num_gpus"]
        if j["reservation"]:
            gpus[j["user"]] += j["reservation"]["gpus"]
    shown = attrs(visit, "#lab-users tbody tr", "user", "charged", "gpus")
    assert {r["user"] for r in shown} == {"alice", "carol", "pia", "root"}
    for r in shown:
        assert float(r["charged"] or 0) == pytest.approx(charged[str(r["user"])]), r
        assert r["gpus"] == str(gpus[str(r["user"])]), r
    assert gpus["alice"] == 3  # llm-finetune's two, and the top job's reserved one
    (alpha,) = [x for x in visit.served.api("/v1/labs", "pia")["data"] if x["name"] == "alpha"]
    in_flight = visit.page.locator('#lab [data-field="in_flight"]').inner_text()
    assert in_flight == tflops(alpha["in_flight_tflop_s"])
    assert visit.page.locator('#lab [data-field="gpus"]').inner_text() == str(
        alpha["running_gpus"] + alpha["reserved_gpus"]
    )
    assert "My lab" in visit.page.locator("nav a.active").inner_text()
    save_screenshot(visit.page, screenshots, "8-lab")
    visit.page.click("#windows >> text=7 days")
    visit.page.wait_for_url(visit.served.url + "/labs/alpha?days=7")
    assert "last 7 days" in visit.page.inner_text("h2")


def test_a_student_of_another_lab_is_refused_the_labs_page(visit: Visit) -> None:
    visit.sign_in("bob")
    response = visit.goto("/labs/alpha")
    assert response.status == 403
    assert "for its own members and admins" in visit.page.inner_text("#error-message")
    assert visit.page.locator("nav >> text=Operator").count() == 0


def test_the_operator_page_shows_the_dispatcher_and_the_nodes_as_the_api_does(
    visit: Visit, screenshots: Path
) -> None:
    visit.sign_in("root")
    visit.page.click("nav >> text=Operator")
    visit.page.wait_for_url(visit.served.url + "/operator")
    health = visit.served.api("/healthz")["dispatcher"]
    assert visit.page.get_attribute("#dispatcher", "data-state") == health["state"]
    assert visit.page.inner_text('#lease [data-field="holder"]') == "nobody"
    nodes = visit.served.api("/v1/admin/nodes", "root")["data"]
    assert attrs(visit, "#nodes tbody tr", "node", "drained", "state") == [
        {"node": n["name"], "drained": str(n["drained"]).lower(), "state": n["state"]}
        for n in nodes
    ]
    assert visit.page.locator('#nodes tr[data-node="node-b"] a.action').inner_text() == "Resume…"
    save_screenshot(visit.page, screenshots, "9-operator")


def test_an_admin_drains_a_node_after_confirming_and_resumes_it(
    visit: Visit, screenshots: Path
) -> None:
    visit.sign_in("root")
    visit.goto("/operator")
    visit.page.click('#nodes tr[data-node="node-c"] a.action')
    visit.page.wait_for_url(visit.served.url + "/operator/nodes/node-c/drain")
    assert "Drain node node-c?" in visit.page.inner_text("h1")
    assert visit.page.locator('meta[http-equiv="refresh"]').count() == 0  # the reason stays
    visit.page.fill('#confirm input[name="reason"]', "fan replacement")
    save_screenshot(visit.page, screenshots, "10-operator-confirm-drain")
    visit.page.click("#confirm button")
    visit.page.wait_for_url(visit.served.url + "/operator?done=drained:node-c")
    assert visit.page.inner_text("#done") == "node-c drained."
    (c,) = [n for n in visit.served.api("/v1/admin/nodes", "root")["data"] if n["name"] == "node-c"]
    assert (c["drained"], c["drain_reason"]) == (True, "fan replacement")
    visit.goto("/placements")
    node_c = visit.page.locator("th.node", has_text="node-c").inner_text()
    assert "drained: fan replacement" in node_c
    visit.goto("/operator")
    visit.page.click('#nodes tr[data-node="node-c"] a.action')
    visit.page.wait_for_url(visit.served.url + "/operator/nodes/node-c/resume")
    visit.page.click("#confirm button")
    visit.page.wait_for_url(visit.served.url + "/operator?done=resumed:node-c")
    (c,) = [n for n in visit.served.api("/v1/admin/nodes", "root")["data"] if n["name"] == "node-c"]
    assert c["drained"] is False


def test_the_watch_list_over_a_window_from_the_operator_page_and_its_form(
    visit: Visit, screenshots: Path
) -> None:
    visit.sign_in("root")
    visit.goto("/operator")
    visit.page.click("#watch-windows >> text=90 days")
    visit.page.wait_for_url("**/watch?since=90d")
    chart = visit.page.evaluate("JSON.parse(document.getElementById('chart-watch').textContent)")
    assert len(chart["x"]) == 90
    day = visit.served.api("/v1/stats/watch?since=1d", "root")  # the last point's window
    assert day["reservations"]["started"] > 0
    assert chart["lines"]["failed reservations"][-1] == round(
        day["reservations"]["failed_rate"] * 100, 2
    )
    hold = day["hold_s"]["mean"]
    assert chart["lines"]["mean hold"][-1] == (None if hold is None else round(hold / 60, 2))
    assert all(v is None for v in chart["lines"]["failed reservations"][:-1])  # nothing before
    visit.page.fill('#watch-window input[name="since"]', "14d")
    visit.page.fill('#watch-window input[name="until"]', "1d")
    visit.page.click("#watch-window button")
    visit.page.wait_for_url("**/watch?since=14d&until=1d")
    api = visit.served.api("/v1/stats/watch?since=14d&until=1d", "root")
    chart = visit.page.evaluate("JSON.parse(document.getElementById('chart-watch').textContent)")
    until = datetime.fromisoformat(api["until"].replace("Z", "+00:00"))
    assert len(chart["x"]) == 13 and chart["x"][-1] == pytest.approx(until.timestamp())
    failed = visit.page.locator('#watch [data-field="failed_rate"]').inner_text()
    assert failed == percent(api["reservations"]["failed_rate"])
    assert visit.page.input_value('#watch-window input[name="until"]') == "1d"
    assert visit.page.locator('meta[http-equiv="refresh"]').count() == 0  # the form stays
    save_screenshot(visit.page, screenshots, "11-watch-14d-to-1d")
