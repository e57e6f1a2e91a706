"""A job's attempts and reservations, rebuilt from its `job_events` (`jpushare show`).

No I/O: the events in, the answer out. An attempt opens with `dispatched` (node, tier,
attempt number) and closes with the event that ended it: completed, failed, cancelled, or
an OOM or node-failure requeue; a reservation opens with
`reservation_started` and closes with `released` (its reason and hold).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from jpushare.api.schemas.jobs import AttemptPublic, ReservationSpanPublic
from jpushare.store.records import JobEventRecord
from jpushare.store.schema import EventKind

_OUTCOMES: dict[str, str] = {
    EventKind.COMPLETED.value: "COMPLETED",
    EventKind.FAILED.value: "FAILED",
    EventKind.CANCELLED.value: "CANCELLED",
    EventKind.OOM_REQUEUED.value: "OOM_REQUEUED",
    EventKind.NODE_FAIL_REQUEUED.value: "NODE_FAIL_REQUEUED",
}


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _float(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def job_attempts(
    history: Sequence[JobEventRecord],
) -> tuple[list[AttemptPublic], list[ReservationSpanPublic]]:
    """Every attempt (oldest first) and every reservation the events record."""
    attempts: dict[int, AttemptPublic] = {}
    spans: list[ReservationSpanPublic] = []
    current: int | None = None
    for e in history:
        d = e.detail or {}
        number = _int(d.get("attempt"))
        if e.kind == EventKind.DISPATCHED.value and number is not None:
            current = number
            attempts[number] = AttemptPublic(
                attempt=number,
                node=_str(d.get("node")),
                tier=_str(d.get("tier")),
                num_gpus=_int(d.get("gpus")),
                dispatched_at=e.at,
                started_at=None,
                ended_at=None,
                outcome="DISPATCHED",
                exit_code=None,
                reason=None,
                run_cost_tflop_s=None,
            )
            continue
        if number is None:
            number = current
        if e.kind == EventKind.RESERVATION_STARTED.value:
            spans.append(_span(d, e.at))
        elif e.kind == EventKind.RELEASED.value:
            if spans and spans[-1].ended_at is None:
                held = _float(d.get("held_s"))  # a cancel's release does not say: from times
                if held is None:
                    held = max(0.0, (e.at - spans[-1].started_at).total_seconds())
                spans[-1] = spans[-1].model_copy(
                    update={"ended_at": e.at, "released": _str(d.get("reason")), "held_s": held}
                )
            else:  # a release whose start the events lack: its detail says where
                spans.append(_span(d, e.at).model_copy(update={"ended_at": e.at}))
        elif number is None or number not in attempts:
            continue
        elif e.kind == EventKind.STARTED.value:
            attempts[number] = attempts[number].model_copy(
                update={"started_at": e.at, "outcome": "RUNNING"}
            )
        elif e.kind in _OUTCOMES:
            attempts[number] = attempts[number].model_copy(
                update={
                    "ended_at": e.at,
                    "outcome": _OUTCOMES[e.kind],
                    "exit_code": _int(d.get("exit_code")),
                    "reason": _str(d.get("reason")),
                    "run_cost_tflop_s": _float(d.get("run_cost")) or 0.0,
                }
            )
    return [attempts[n] for n in sorted(attempts)], spans


def _span(detail: dict[str, Any], at: datetime) -> ReservationSpanPublic:
    since = _str(detail.get("since"))
    started = datetime.fromisoformat(since) if since else at
    return ReservationSpanPublic(
        node=_str(detail.get("node")),
        tier=_str(detail.get("tier")),
        started_at=started,
        ended_at=None,
        released=None,
        held_s=None,
    )
