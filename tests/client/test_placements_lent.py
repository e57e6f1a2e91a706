"""`jpushare placements` with lent GPUs (`reserved_gpus: lend-by-limit`): a LENT TO column
appears only when some placement lends, naming the borrower, its lender and its end."""

from __future__ import annotations

import argparse
import io
from datetime import UTC, datetime
from typing import Any

from jpushare.client.cluster_views import placements

NOW = datetime(2026, 1, 5, 9, 0, 10, tzinfo=UTC)


def place(node: str, busy: int, reserved: int, loans: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "node": node,
        "tier": "rtx4090",
        "capacity": 4,
        "busy": busy,
        "reserved": reserved,
        "idle": 4 - busy - reserved,
        "node_state": "up",
        "drained": False,
        "reservations": [{"job_id": 2, "gpus": 2, "of": 4}] if reserved else [],
        "lent": sum(x["gpus"] for x in loans),
        "loans": loans,
    }


class Api:
    def __init__(self, data: list[dict[str, Any]]) -> None:
        self.data = data

    def placements(self) -> dict[str, Any]:
        return {"data": self.data, "count": len(self.data)}


def printed(data: list[dict[str, Any]]) -> str:
    out = io.StringIO()
    placements(Api(data), argparse.Namespace(json=False), out, NOW)  # type: ignore[arg-type]
    return out.getvalue()


def test_a_loan_is_listed_with_its_lender_and_end() -> None:
    loan = {"job_id": 3, "gpus": 1, "lent_from_job_id": 2, "until": "2026-01-05T09:01:10Z"}
    text = printed([place("node-c", 3, 1, [loan]), place("node-b", 0, 0, [])])
    header, row_c, row_b, note = text.splitlines()
    assert header.split()[-3:] == ["FOR", "LENT", "TO"]
    cells = row_c.split("up", 1)[1]
    assert cells.split() == "job 2: 2/4 job 3: 1 of job 2's, ends in 1m".split()  # noqa: SIM905
    assert row_b.endswith("-")
    assert "lent GPUs count as BUSY" in note


def test_no_lent_to_column_without_loans() -> None:
    text = printed([place("node-c", 2, 2, [])])
    assert "LENT TO" not in text and "lent" not in text
