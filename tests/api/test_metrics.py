"""GET /metrics: figures from the database at scrape time, and the dispatcher's histogram."""

from __future__ import annotations

import re

import pytest
from sqlalchemy.orm import Session, sessionmaker

from jpushare.api import create_app, metrics_of
from jpushare.metrics import ServiceMetrics
from tests.api.conftest import ALL_BUSY, ApiWorld


def sample(text: str, name: str, **labels: str) -> float:
    """The value of one sample in an exposition (labels in any order)."""
    for line in text.splitlines():
        if line.startswith("#"):
            continue
        m = re.match(r"^([a-zA-Z_:][\w:]*)(?:\{(.*)\})? (\S+)$", line)
        if not m or m.group(1) != name:
            continue
        got = dict(re.findall(r'(\w+)="([^"]*)"', m.group(2) or ""))
        if got == labels:
            return float(m.group(3))
    raise AssertionError(f"no sample {name}{labels}")


def test_metrics_follow_the_database(api: ApiWorld) -> None:
    api.busy.update(ALL_BUSY)
    api.busy[("node-c", "rtx5090")] = 2
    big = api.submit("bob", 4)  # reserves the 2 idle 5090s
    small = api.submit("alice", 1)
    api.cycle()
    text = api.client.get("/metrics")
    assert text.status_code == 200
    assert text.headers["content-type"].startswith("text/plain")
    m = text.text
    assert sample(m, "jpushare_database_up") == 1
    assert sample(m, "jpushare_queue_length") == 2
    assert sample(m, "jpushare_jobs", state="GLOBAL_QUEUE_WAIT") == 2
    assert sample(m, "jpushare_jobs", state="RUNNING") == 0
    assert sample(m, "jpushare_jobs_submitted_total") == 2
    assert sample(m, "jpushare_gpus", tier="rtx5090", status="running") == 2
    assert sample(m, "jpushare_gpus", tier="rtx5090", status="reserved") == 2
    assert sample(m, "jpushare_gpus", tier="rtx5090", status="idle") == 0
    assert sample(m, "jpushare_gpus", tier="rtx4090", status="running") == 8
    assert sample(m, "jpushare_gpu_capacity", tier="rtx4090") == 8
    assert sample(m, "jpushare_reservations_active") == 1
    assert sample(m, "jpushare_reservations_started_total") == 1
    assert sample(m, "jpushare_reservation_hold_seconds_count") == 0

    # The 5090s free up 40 s later: the reservation fills and the job dispatches.
    api.busy[("node-c", "rtx5090")] = 0
    api.clock.advance(40)
    _, recorded = api.cycle()
    assert [d.job_id for d in recorded.dispatched] == [big]
    # A second reservation ends by cancel after 10 s (its event has no held_s).
    assert api.post(f"/v1/jobs/{small}/cancel", "alice").status_code == 200
    api.busy[("node-c", "rtx5090")] = 4
    api.busy[("node-b", "rtx4090")] = 1
    other = api.submit("bob", 4)
    api.cycle()
    api.clock.advance(10)
    assert api.post(f"/v1/jobs/{other}/cancel", "bob").status_code == 200

    m = api.client.get("/metrics").text
    assert sample(m, "jpushare_reservations_started_total") == 2
    assert sample(m, "jpushare_reservations_ended_total", reason="filled") == 1
    assert sample(m, "jpushare_reservations_ended_total", reason="cancel") == 1
    assert sample(m, "jpushare_reservations_ended_total", reason="r3") == 0
    assert sample(m, "jpushare_reservation_hold_seconds_count") == 2
    assert sample(m, "jpushare_reservation_hold_seconds_sum") == pytest.approx(50)
    assert sample(m, "jpushare_reservation_hold_seconds_bucket", le="5") == 0
    assert sample(m, "jpushare_reservation_hold_seconds_bucket", le="15") == 1
    assert sample(m, "jpushare_reservation_hold_seconds_bucket", le="60") == 2
    assert sample(m, "jpushare_reservation_hold_seconds_bucket", le="+Inf") == 2
    assert sample(m, "jpushare_jobs", state="DISPATCHED") == 1
    assert sample(m, "jpushare_jobs", state="CANCELLED") == 2
    assert sample(m, "jpushare_lab_usage_tflop_seconds", lab="beta") == pytest.approx(3 * 10 * 82.6)
    assert sample(m, "jpushare_lab_usage_tflop_seconds", lab="alpha") == 0


def test_the_dispatcher_hook_shares_the_registry(sessions: sessionmaker[Session]) -> None:
    metrics = ServiceMetrics()
    app = create_app(sessions, metrics=metrics)
    assert metrics_of(app) is metrics
    metrics.observe_dispatch_cycle(0.02)
    metrics.observe_dispatch_cycle(0.01)
    from fastapi.testclient import TestClient

    with TestClient(app) as client:
        m = client.get("/metrics").text
    assert sample(m, "jpushare_dispatch_cycle_seconds_count") == 2
    assert sample(m, "jpushare_dispatch_cycle_seconds_bucket", le="0.025") == 2
    # An empty database still answers, with zeros.
    assert sample(m, "jpushare_queue_length") == 0


def test_two_apps_do_not_share_metrics(sessions: sessionmaker[Session]) -> None:
    a, b = create_app(sessions), create_app(sessions)
    metrics_of(a).observe_dispatch_cycle(1.0)
    assert "jpushare_dispatch_cycle_seconds_count 0.0" in metrics_of(b).exposition().decode()


def test_a_database_failure_is_reported_not_raised(sessions: sessionmaker[Session]) -> None:
    def broken(_session: Session) -> dict[tuple[str, str], int]:
        raise RuntimeError("observation lost")

    app = create_app(sessions, observed_busy=broken)
    text = metrics_of(app).exposition().decode()
    assert "jpushare_database_up 0.0" in text
    assert "jpushare_queue_length" not in text
