"""TRACE.csv parsing: required and optional columns, defaults, errors with file and line."""

from __future__ import annotations

from pathlib import Path

import pytest

from jpushare.formats.errors import TraceFileError
from jpushare.formats.trace_file import TraceJob, check_tiers, load_trace, parse_trace
from jpushare.policy.model import Tier

HEADER = "job_id,submit_time,duration,num_gpus,lab,min_tier,cancel_time,oom_on,time_limit\n"


def test_every_column_is_read_and_empty_optionals_take_defaults() -> None:
    jobs = parse_trace(
        HEADER + "a,0,100,2,BCG,rtx4090,50,rtx3080ti;rtx4090,300\n" + "b,12.5,7,1,KDG,,,,\n",
        "t.csv",
    )
    assert jobs == [
        TraceJob(
            "a",
            0.0,
            100.0,
            2,
            "BCG",
            "rtx4090",
            50.0,
            frozenset({"rtx3080ti", "rtx4090"}),
            300.0,
            2,
        ),
        TraceJob("b", 12.5, 7.0, 1, "KDG", None, None, frozenset(), None, 3),
    ]
    assert jobs[0].time_limit_s == 300.0
    assert jobs[1].time_limit_s == 7.0  # default: the duration


def test_only_the_required_columns_in_any_order_and_blank_lines_skipped() -> None:
    jobs = parse_trace("lab,num_gpus,duration,submit_time,job_id\nX,4,60,5,j1\n\nY,1,1,6,j2\n")
    assert [(j.job_id, j.lab, j.num_gpus, j.duration, j.submit_time, j.line) for j in jobs] == [
        ("j1", "X", 4, 60.0, 5.0, 2),
        ("j2", "Y", 1, 1.0, 6.0, 4),
    ]


@pytest.mark.parametrize(
    ("text", "line", "words"),
    [
        ("job_id,submit_time,duration,lab\n", 1, "missing column(s): num_gpus"),
        (HEADER.rstrip("\n") + ",user\n", 1, "unknown column 'user'"),
        ("job_id,job_id,submit_time,duration,num_gpus,lab\n", 1, "appears twice"),
        ("", 1, "empty file"),
        (HEADER + "a,0,10,1,L,,,,\nb,soon,10,1,L,,,,\n", 3, "submit_time must be a number"),
        (HEADER + "a,0,-1,1,L,,,,\n", 2, "duration must be >= 0"),
        (HEADER + "a,0,10,9,L,,,,\n", 2, "num_gpus must be 1-8"),
        (HEADER + "a,0,10,1.5,L,,,,\n", 2, "num_gpus must be a whole number"),
        (HEADER + "a,0,10,1,L,,,,\na,1,10,1,L,,,,\n", 3, "already used on line 2"),
        (HEADER + "a,100,10,1,L,,50,,\n", 2, "cancel_time 50 is before submit_time 100"),
        (HEADER + "a,0,10,1,L\n", 2, "expected 9 fields, found 5"),
        (HEADER + ",0,10,1,L,,,,\n", 2, "job_id is empty"),
        (HEADER + "a,0,10,1,,,,,\n", 2, "lab is empty"),
        (HEADER + "a,0,10,1,L,,,,nan\n", 2, "time_limit must be >= 0"),
    ],
)
def test_a_bad_trace_names_the_line_and_the_problem(text: str, line: int, words: str) -> None:
    with pytest.raises(TraceFileError) as info:
        parse_trace(text, "bad.csv")
    assert info.value.line == line
    assert words in str(info.value)
    assert str(info.value).startswith(f"bad.csv:{line}: ")


def test_tier_names_are_checked_against_the_cluster() -> None:
    tiers = [Tier("rtx4090", 82.6, 20)]
    ok = parse_trace(HEADER + "a,0,1,1,L,rtx4090,,rtx4090,\n")
    check_tiers(ok, tiers, "t.csv")  # no error
    bad_min = parse_trace(HEADER + "a,0,1,1,L,,,,\nb,0,1,1,L,h100,,,\n")
    with pytest.raises(TraceFileError, match=r"t.csv:3: job b: min_tier 'h100' is not a tier"):
        check_tiers(bad_min, tiers, "t.csv")
    bad_oom = parse_trace(HEADER + "a,0,1,1,L,,,rtx4090;a100,\n")
    with pytest.raises(TraceFileError, match=r"t.csv:2: job a: oom_on names 'a100'"):
        check_tiers(bad_oom, tiers, "t.csv")


def test_the_shipped_example_trace_loads(tmp_path: Path) -> None:
    jobs = load_trace(Path(__file__).parents[2] / "examples" / "trace.csv")
    assert len(jobs) >= 30
    assert any(j.cancel_time is not None for j in jobs)
    assert any(j.oom_on for j in jobs)
    assert any(j.min_tier for j in jobs)
    with pytest.raises(TraceFileError, match="cannot read the trace file"):
        load_trace(tmp_path / "missing.csv")
