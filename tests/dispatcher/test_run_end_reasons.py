"""A run's end gets the same recorded reason whether the cycle records it in a batch (the
common path) or alone (the fallback): "FAILED (time limit)" reads that reason everywhere."""

from __future__ import annotations

import pytest

from jpushare.dispatcher.reconcile import RunEnded
from jpushare.dispatcher.run_transitions import _end_reason, _run_end
from jpushare.executors.base import RunState
from jpushare.time_limits import ended_by_time_limit


@pytest.mark.parametrize(
    "state", [RunState.COMPLETED, RunState.FAILED, RunState.CANCELLED, RunState.TIMEOUT]
)
@pytest.mark.parametrize("reason", [None, "TimeLimit", "exit 3"])
def test_the_batch_path_records_the_reason_the_one_by_one_path_does(
    state: RunState, reason: str | None
) -> None:
    ended = RunEnded("7", 1, state, 100.0, 160.0, 1, reason)
    assert _run_end(7, ended).reason == _end_reason(ended)


def test_a_run_slurm_stopped_at_its_limit_reads_as_time_limit_in_a_batch() -> None:
    ended = RunEnded("7", 1, RunState.TIMEOUT, 100.0, 160.0, None, "TimeLimit")
    end = _run_end(7, ended)
    assert ended_by_time_limit(end.state, end.reason), end.reason
