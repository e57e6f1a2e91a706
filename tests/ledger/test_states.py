"""The ledger's one table of job transitions says what the store and the simulator do."""

from __future__ import annotations

import pytest

from jpushare.ledger import END_EVENTS, TRANSITIONS, EventKind, IllegalTransition, next_state
from jpushare.vocabulary import ACTIVE_STATES, ENDED_STATES, JobState

Q = JobState.GLOBAL_QUEUE_WAIT


def test_every_state_has_a_row_and_an_ended_job_goes_nowhere() -> None:
    assert set(TRANSITIONS) == set(JobState)
    for state in ENDED_STATES:
        assert TRANSITIONS[state] == {}
        with pytest.raises(IllegalTransition, match="cannot happen to a"):
            next_state(state, EventKind.CANCELLED)


@pytest.mark.parametrize("state", ACTIVE_STATES)
def test_an_attempt_ends_in_its_end_state_or_back_in_the_queue(state: JobState) -> None:
    for ended, kind in END_EVENTS.items():
        assert next_state(state, kind) is ended
    assert next_state(state, EventKind.OOM_REQUEUED) is Q
    assert next_state(state, EventKind.NODE_FAIL_REQUEUED) is Q


def test_only_a_dispatched_job_starts_and_only_a_queued_one_is_dispatched() -> None:
    assert next_state(JobState.DISPATCHED.value, EventKind.STARTED) is JobState.RUNNING
    assert next_state(Q, EventKind.DISPATCHED) is JobState.DISPATCHED
    for state, kind in [
        (JobState.RUNNING, EventKind.STARTED),
        (Q, EventKind.STARTED),
        (JobState.RUNNING, EventKind.DISPATCHED),
        (Q, EventKind.COMPLETED),  # a queued job never ran: it can only be cancelled
        (Q, EventKind.NODE_FAIL_REQUEUED),
    ]:
        with pytest.raises(IllegalTransition):
            next_state(state, kind)


def test_each_ended_state_has_its_own_event() -> None:
    assert set(END_EVENTS) == set(ENDED_STATES)
    assert {k.value for k in END_EVENTS.values()} == {s.value.lower() for s in ENDED_STATES}
