"""The keepers' loop (`backfill.ticking.run_ticks`): a failing tick is logged and the loop
goes on; every server is stopped on the way out."""

from __future__ import annotations

import logging
import threading

import pytest

from jpushare.backfill.ticking import run_ticks


def test_a_failing_tick_is_logged_and_the_loop_goes_on(caplog: pytest.LogCaptureFixture) -> None:
    stop = threading.Event()
    ticks: list[int] = []
    stopped: list[bool] = []

    def tick() -> None:
        ticks.append(len(ticks))
        if len(ticks) == 1:
            raise RuntimeError("Slurm down a moment")
        if len(ticks) == 3:
            stop.set()

    log = logging.getLogger("jpushare.backfill.keeper")
    with caplog.at_level(logging.ERROR, logger=log.name):
        run_ticks(log, tick, 0.0, stop, lambda: stopped.append(True))
    assert ticks == [0, 1, 2]
    assert stopped == [True]
    assert [(r.name, r.message) for r in caplog.records] == [
        ("jpushare.backfill.keeper", "backfill tick failed")
    ]


def test_every_server_is_stopped_when_the_loop_is_left_by_an_error() -> None:
    stopped: list[bool] = []

    def tick() -> None:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_ticks(
            logging.getLogger(__name__), tick, 0.0, threading.Event(), lambda: stopped.append(True)
        )
    assert stopped == [True]
