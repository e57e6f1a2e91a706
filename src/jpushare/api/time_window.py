"""Query parameters that name a time: a duration back from now (`90m`, `12h`, `7d`, `2w`)
or an ISO time (`2026-01-05`, `2026-01-05T09:00:00Z`; no zone = UTC), as sacct's -S/-E."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

from jpushare.api.errors import ApiError, ErrorCode

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw])\s*$")


def parse_when(raw: str, now: datetime, field: str) -> datetime:
    """The time `raw` names; 422 VALIDATION_ERROR with a sentence when it names none."""
    m = _DURATION.match(raw)
    if m:
        seconds = float(m.group(1)) * _UNITS[m.group(2)]
        if seconds <= 100 * 365 * 86400:
            return now - timedelta(seconds=seconds)
        message = f"{field}={raw!r} reaches back more than 100 years"
    else:
        try:
            at = datetime.fromisoformat(raw.strip().replace("Z", "+00:00"))
        except ValueError:
            message = (
                f"{field}={raw!r} is neither a duration back from now (e.g. 12h, 7d, 2w) nor "
                "an ISO time (e.g. 2026-01-05 or 2026-01-05T09:00:00Z)"
            )
        else:
            return at if at.tzinfo else at.replace(tzinfo=UTC)
    raise ApiError(422, ErrorCode.VALIDATION_ERROR, message, {"field": field, "value": raw})
