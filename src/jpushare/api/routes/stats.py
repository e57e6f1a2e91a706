"""Operational figures for every authenticated user: the SPEC §10 watch-list over a window."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from typing import Annotated

from fastapi import APIRouter, Query

from jpushare.api.deps import ContextDep, CurrentUser, SessionDep
from jpushare.api.errors import ApiError, ErrorCode
from jpushare.api.routes.backfill import keeper_dir, keeper_totals
from jpushare.api.schemas.common import SIGNED_IN_ERRORS
from jpushare.api.schemas.health import WatchBackfillPublic, WatchPublic
from jpushare.api.time_window import parse_when
from jpushare.policy.watch import backfill_split, watch_figures
from jpushare.store.times import to_epoch
from jpushare.store.watch_records import load_watch_records

router = APIRouter(prefix="/v1/stats", tags=["stats"])

_ERRORS = SIGNED_IN_ERRORS

DEFAULT_SINCE = "7d"
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw])\s*$")


def parse_since(raw: str, now: datetime) -> datetime:
    """A window start: a duration back from now (`90m`, `12h`, `7d`, `2w`) or an ISO time
    (`2026-01-05T09:00:00Z`; no zone = UTC). ValueError with a sentence otherwise."""
    m = _DURATION.match(raw)
    if m:
        seconds = float(m.group(1)) * _UNITS[m.group(2)]
        if seconds > 100 * 365 * 86400:
            raise ValueError(f"since={raw!r} reaches back more than 100 years")
        return now - timedelta(seconds=seconds)
    try:
        at = datetime.fromisoformat(raw.strip().replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(
            f"since={raw!r} is neither a duration (e.g. 30m, 12h, 7d, 2w) nor an ISO time "
            "(e.g. 2026-01-05T09:00:00Z)"
        ) from None
    at = at if at.tzinfo else at.replace(tzinfo=UTC)
    if at > now:
        raise ValueError(f"since={raw!r} is in the future (now is {now.isoformat()})")
    return at


@router.get("/watch", responses=_ERRORS)
def watch(
    session: SessionDep,
    user: CurrentUser,
    ctx: ContextDep,
    since: Annotated[
        str,
        Query(
            max_length=64,
            description="window start: a duration back from now (30m, 12h, 7d, 2w) or an "
            "ISO time; default 7d",
        ),
    ] = DEFAULT_SINCE,
    until: Annotated[
        str | None,
        Query(
            max_length=64,
            description="window end: a duration back from now or an ISO time; default now",
        ),
    ] = None,
) -> WatchPublic:
    """The operational watch-list (SPEC §10) from `since` to `until` (default now): failed
    reservations (R3, R5, cancel) overall and per lab, reservation hold, reservation share
    of the usage charged, per job size the burden (charged / run TFLOP-s) and the mean
    wait, and the LLM backfill split: reserved GPU-hours in the window, and the GPU-hours the
    backfill keeper served on reserved and on idle GPUs, idle GPU-hours and its yields."""
    now = ctx.clock()
    try:
        start = parse_since(since, now)
    except ValueError as exc:
        raise ApiError(
            422, ErrorCode.VALIDATION_ERROR, str(exc), {"field": "since", "value": since}
        ) from None
    end = now if until is None or not until.strip() else min(parse_when(until, now, "until"), now)
    if end <= start:
        raise ApiError(
            422,
            ErrorCode.VALIDATION_ERROR,
            f"until={until!r} ({end.isoformat()}) is not after since={since!r} "
            f"({start.isoformat()}): the window would be empty",
            {"field": "until", "value": until},
        )
    spans, ended = load_watch_records(session, start, end)
    split = backfill_split(spans, to_epoch(start), to_epoch(end), keeper_totals(keeper_dir(ctx)))
    return WatchPublic(
        since=start,
        until=end,
        **watch_figures(spans, ended).as_dict(),
        backfill=WatchBackfillPublic(**split.as_dict()),
    )
