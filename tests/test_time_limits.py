"""Time limits as Slurm users write them, and "FAILED (time limit)"."""

from __future__ import annotations

import pytest

from jpushare.time_limits import (
    TimeLimitError,
    parse_time_limit,
    state_label,
    time_limit_reason,
)

ACCEPTED = {
    "90 is minutes, as sbatch": ("90", 90 * 60),
    "MM:SS": ("1:30", 90),
    "HH:MM:SS": ("1:30:00", 5400),
    "D-HH:MM:SS": ("2-00:00:00", 2 * 86400),
    "D-HH": ("1-12", 36 * 3600),
    "D-HH:MM": ("1-01:30", 86400 + 5400),
    "hours and minutes": ("1h30m", 5400),
    "minutes alone": ("45m", 2700),
    "days and hours": ("1d12h", 36 * 3600),
    "seconds": ("90s", 90),
    "spaces and capitals": (" 2H ", 7200),
}


@pytest.mark.parametrize("text,seconds", ACCEPTED.values(), ids=ACCEPTED.keys())
def test_every_slurm_form_reads_as_seconds(text: str, seconds: int) -> None:
    assert parse_time_limit(text) == seconds


REFUSED = {
    "empty": "",
    "a fraction": "1.5",
    "negative": "-5",
    "minutes over 59": "1:75:00",
    "seconds over 59": "10:60",
    "hours over 23 after days": "1-24",
    "units out of order": "30m1h",
    "unknown unit": "3w",
    "words": "soon",
    "zero": "0",
    "more than 365 days": "400d",
}


@pytest.mark.parametrize("text", REFUSED.values(), ids=REFUSED.keys())
def test_a_bad_time_limit_is_refused_with_a_message(text: str) -> None:
    with pytest.raises(TimeLimitError) as caught:
        parse_time_limit(text)
    assert repr(text) in str(caught.value)


def test_an_unreadable_limit_names_the_accepted_forms() -> None:
    with pytest.raises(TimeLimitError, match=r"90.*1:30:00.*2-00:00:00.*1h30m"):
        parse_time_limit("soon")


def test_a_job_its_limit_ended_reads_failed_time_limit_whatever_the_executor_said() -> None:
    local = time_limit_reason("time limit of 3600 s reached")
    slurm = time_limit_reason("Slurm TIMEOUT")
    assert local == "time limit of 3600 s reached"
    assert slurm == "time limit reached (Slurm TIMEOUT)"
    for reason in (local, slurm, time_limit_reason(None)):
        assert state_label("FAILED", reason) == "FAILED (time limit)"
    assert state_label("FAILED", "exit code 3") == "FAILED"
    assert state_label("FAILED", None) == "FAILED"
    assert state_label("COMPLETED", local) == "COMPLETED"
