"""A channel's loop: read the events after its cursor, deliver what each says, move the
cursor on. One thread per channel, none the dispatcher's: a dead relay or webhook slows
only its own channel, and the dispatch cycle never waits for a notification.

The cursor moves once an event is delivered or given up (or has nothing to send), in a
transaction of its own after the delivery: a process killed between the two sends that
one notification again at its next start; nothing else is lost or repeated.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Protocol

from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker

from jpushare.notify.delivery import Outcome
from jpushare.notify.gaps import GapWatch
from jpushare.store.notifications import NotifyEvent, events_after, move_cursor, start_cursor
from jpushare.store.times import utc_now

log = logging.getLogger(__name__)

BATCH = 200  # events read at a time


class Channel(Protocol):
    name: str

    def handle(self, event: NotifyEvent, stop: threading.Event) -> Outcome | None:
        """Deliver what the event says on this channel (None: it says nothing here)."""
        ...


class ChannelWorker:
    """Runs one channel over the ledger (see the module docstring)."""

    def __init__(
        self,
        channel: Channel,
        sessions: sessionmaker[Session],
        poll_s: float,
        may_act: Callable[[], bool] = lambda: True,
        gaps: GapWatch | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.channel = channel
        self.sessions = sessions
        self.poll_s = poll_s
        self.may_act = may_act
        self.gaps = gaps or GapWatch()
        self.clock = clock
        self._cursor: int | None = None

    def step(self, stop: threading.Event) -> bool:
        """Handle the events that are ready; True if more may be waiting now."""
        if not self.may_act():  # a standby replica: the leader's notifier sends
            self._cursor = None
            return False
        name = self.channel.name
        if self._cursor is None:
            with self.sessions.begin() as session:
                self._cursor = start_cursor(session, name, utc_now())
        with self.sessions() as session:
            events = events_after(session, self._cursor, BATCH)
        ready = self.gaps.ready(self._cursor, [e.event_id for e in events], self.clock())
        passed = self._cursor
        for event in events[:ready]:
            try:
                outcome = self.channel.handle(event, stop)
            except SQLAlchemyError:
                raise  # the database: the whole step again later, this event included
            except Exception:  # a bug about this one event must not hold back every later one
                log.exception("notify %s: event %d given up", name, event.event_id)
                outcome = Outcome(False, 0, error="error")
            if outcome is None:
                passed = event.event_id  # nothing to send: moved over with the next one
                continue
            if outcome.stopped:
                break
            passed = event.event_id
            if not self._move(passed):
                return False
        else:
            if passed != self._cursor and not self._move(passed):
                return False
            return ready == len(events) == BATCH
        if passed != self._cursor:
            self._move(passed)
        return False

    def _move(self, to_id: int) -> bool:
        assert self._cursor is not None
        with self.sessions.begin() as session:
            moved = move_cursor(session, self.channel.name, self._cursor, to_id, utc_now())
        if not moved:
            log.warning(
                "notify %s: the cursor was moved by another process; reading it again",
                self.channel.name,
            )
            self._cursor = None
            return False
        self._cursor = to_id
        return True

    def run_forever(self, stop: threading.Event) -> None:
        """Steps until `stop` is set; an error is logged and the loop goes on."""
        log.info("notify %s: started", self.channel.name)
        while not stop.is_set():
            try:
                more = self.step(stop)
            except Exception:  # a database that is down, a bug: log, wait, go on
                log.exception("notify %s: a step failed", self.channel.name)
                self._cursor = None
                more = False
            if not more:
                stop.wait(self.poll_s)
        log.info("notify %s: stopped", self.channel.name)
