"""One notification tried until it goes, `Retries.tries` times at most, with exponential
backoff between tries; the wait is the stop event's, so a service that stops does not wait
out a backoff."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

from jpushare.notify.senders import Undeliverable
from jpushare.notify.settings import Retries

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Outcome:
    delivered: bool
    tries: int
    stopped: bool = False  # the service stopped before it was delivered or given up
    error: str | None = None


def deliver(
    send: Callable[[], None],
    retries: Retries,
    wait: Callable[[float], bool],
    what: str,
    on_failed_try: Callable[[], None] = lambda: None,
) -> Outcome:
    """Call `send` until it returns, a failure is not worth another try, or `retries.tries`
    tries failed. `wait(seconds)` waits and returns True when the service is stopping."""
    error: str | None = None
    for attempt in range(1, retries.tries + 1):
        if attempt > 1 and wait(retries.wait_before(attempt)):
            return Outcome(False, attempt - 1, stopped=True, error=error)
        try:
            send()
            return Outcome(True, attempt)
        except Undeliverable as exc:
            error = str(exc)
            on_failed_try()
            if not exc.retry:
                log.warning("notification %s given up at try %d: %s", what, attempt, exc)
                return Outcome(False, attempt, error=error)
            log.info("notification %s: try %d of %d failed: %s", what, attempt, retries.tries, exc)
    log.warning("notification %s given up after %d tries: %s", what, retries.tries, error)
    return Outcome(False, retries.tries, error=error)
