"""The simulator's time-limit models (`--limits`, formats.md §3.1)."""

from __future__ import annotations

import math

import pytest

from jpushare.formats.trace_file import TraceJob
from jpushare.sim.limits import ROUND_LIMITS_S, parse_limits, round_up, with_limits

JOBS = [TraceJob(f"j{i}", 0.0, 60.0 * (i + 1), 1, "L", time_limit=7200.0) for i in range(200)]


def test_exact_is_the_run_trace_is_the_trace_and_none_is_no_end() -> None:
    assert [j.time_limit for j in with_limits(JOBS, "exact")] == [j.duration for j in JOBS]
    assert with_limits(JOBS, "trace") == JOBS
    assert {j.time_limit for j in with_limits(JOBS, "none")} == {math.inf}


def test_user_estimates_are_round_between_2_and_10_times_the_run_and_seeded() -> None:
    drawn = with_limits(JOBS, "user:7")
    assert drawn == with_limits(JOBS, "user:7")
    assert drawn != with_limits(JOBS, "user:8")
    factors = []
    for j in drawn:
        assert j.time_limit is not None
        assert j.time_limit in ROUND_LIMITS_S or j.time_limit % 86400 == 0
        assert j.time_limit >= 2 * j.duration
        # Rounding up adds at most the step to the next round value.
        assert j.time_limit <= round_up(10 * j.duration)
        factors.append(j.time_limit / j.duration)
    # A heavy tail: most estimates are modest, a few are near the top.
    factors.sort()
    assert factors[len(factors) // 2] < 5 < factors[-1]


def test_round_up_takes_the_next_round_value() -> None:
    assert round_up(1.0) == 300.0
    assert round_up(3600.0) == 3600.0
    assert round_up(3601.0) == 7200.0
    assert round_up(73 * 3600.0) == 4 * 86400.0


@pytest.mark.parametrize("bad", ["user", "user:x", "exactly", "none:1", ""])
def test_a_bad_mode_names_the_modes(bad: str) -> None:
    with pytest.raises(ValueError, match="exact, trace, user:SEED, none"):
        parse_limits(bad)
