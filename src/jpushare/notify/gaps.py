"""Which of the events after the cursor may be handled now, given that an event id can
become visible after a higher one.

On PostgreSQL two transactions take event ids from one sequence and may commit in the
other order: the notifier can see event 101 while 100 is still uncommitted. Passing over
100 would lose its notification for ever (the cursor is past it), so a missing id holds
the cursor back until it appears or `grace_s` has passed since it was first missed (its
transaction rolled back: the id will never come). SQLite's writers take turns, so it has
no such gaps. Pure: ids and the time in, a count out.
"""

from __future__ import annotations

from collections.abc import Sequence

GAP_GRACE_S = 15.0


class GapWatch:
    """The missing ids seen, with when each was first missed (the caller's clock)."""

    def __init__(self, grace_s: float = GAP_GRACE_S) -> None:
        self.grace_s = grace_s
        self._first_missed: dict[int, float] = {}

    def ready(self, cursor: int, ids: Sequence[int], now: float) -> int:
        """How many of `ids` (ascending, all above `cursor`) may be handled now: those up
        to the first gap younger than the grace."""
        expected = cursor + 1
        count = 0
        for event_id in ids:
            if event_id != expected:
                missed = self._first_missed.setdefault(expected, now)
                if now - missed < self.grace_s:
                    break
            count += 1
            expected = event_id + 1
        self._first_missed = {i: t for i, t in self._first_missed.items() if i >= expected}
        return count
