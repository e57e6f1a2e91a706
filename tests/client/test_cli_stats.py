"""`jpushare stats`: the SPEC §10 watch-list from a real server, on SQLite and PostgreSQL."""

from __future__ import annotations

import json

import pytest
from sqlalchemy.orm import Session, sessionmaker

from jpushare import store
from jpushare.policy import decide
from tests.api.conftest import T0
from tests.client.test_cli_server import Served, cli, served  # noqa: F401 (the fixture)
from tests.database import db_url, empty_db_url, engine, sessions  # noqa: F401


def test_stats_reports_a_cancelled_reservation_as_failed(
    served: Served,  # noqa: F811 (the fixture)
    sessions: sessionmaker[Session],  # noqa: F811 (the fixture)
    capsys: pytest.CaptureFixture[str],
) -> None:
    served.busy[("node-c", "rtx5090")] = 2
    code, _, err = cli(served, "bob", "submit", "--gpus", "4", "--", "x", capsys=capsys)
    assert code == 0, err
    with sessions.begin() as s:  # one dispatcher cycle: job 1 reserves the 2 idle 5090s
        store.record_decisions(s, decide(store.load_snapshot(s, T0, served.busy)), T0)
    assert cli(served, "bob", "cancel", "1", capsys=capsys)[0] == 0

    code, out, err = cli(served, "alice", "stats", "--since", "1d", capsys=capsys)
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0].startswith("watch-list (SPEC §10) since 2026-01-04T09:00:00")
    assert lines[1] == (
        "reservations: 1 started, 1 failed (100.0%: r3 0, r5 0, cancel 1); "
        "filled 0, swap 0, still held 0"
    )
    assert lines[2] == "hold: mean 0s, p95 0s, max 0s (1 released)"
    # Held for no time, and no backfill keeper here: nothing reserved, nothing served.
    assert any(
        line.startswith("LLM backfill: 0.00 of 0.00 reserved GPU-hours served") for line in lines
    )
    assert "failed reservations per lab:" in lines
    assert any(line.split() == ["beta", "1", "1", "100.0%"] for line in lines)
    assert any(line.split()[:3] == ["4", "1", "-"] for line in lines)  # ran nothing: no burden

    code, out, _ = cli(served, "alice", "stats", "--json", capsys=capsys)
    assert code == 0 and json.loads(out)["reservations"]["failed"] == 1

    code, out, err = cli(served, "alice", "stats", "--since", "last week", capsys=capsys)
    assert (code, out) == (1, "")
    assert err.startswith("error VALIDATION_ERROR: since='last week' is neither a duration")
