"""The loop both keepers run (`jpushare backfill`): a tick every interval, then stop all."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable


def run_ticks(
    log: logging.Logger,
    tick: Callable[[], None],
    interval_s: float,
    stop: threading.Event,
    stop_all: Callable[[], None],
) -> None:
    """`tick` every `interval_s` until `stop` is set, then `stop_all`, even on the way out
    of an error. A failing tick is logged to the keeper's `log`: one must not end it."""
    try:
        while not stop.is_set():
            try:
                tick()
            except Exception:
                log.exception("backfill tick failed")
            stop.wait(interval_s)
    finally:
        stop_all()
