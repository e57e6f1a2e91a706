"""TRACE.csv writer, window selection, time limits, offered load and the `trace` CLI."""

from __future__ import annotations

import argparse
import csv
import io
from pathlib import Path

import pytest

from jpushare.traces import (
    DAY_S,
    HOUR_S,
    TRACE_HEADER,
    TraceRow,
    format_trace,
    hour_time_limit,
    offered_load,
    parse_window,
    place_in_window,
    rebase,
    select_last_window,
    write_trace,
)
from jpushare.traces.cli import register

HEADER_LINE = "job_id,submit_time,duration,num_gpus,lab,min_tier,cancel_time,oom_on,time_limit"


def test_header_is_exactly_the_trace_format() -> None:
    assert ",".join(TRACE_HEADER) == HEADER_LINE
    assert format_trace([]).splitlines() == [HEADER_LINE]


def test_rows_are_written_with_empty_optional_columns() -> None:
    rows = [
        TraceRow("j1", 0, 60, 2, "A"),
        TraceRow("j2", 5, 70, 1, "B", "rtx4090", 100, ("rtx3080ti", "rtx4090"), 3600),
    ]
    text = format_trace(rows)
    assert text.splitlines() == [
        HEADER_LINE,
        "j1,0,60,2,A,,,,",
        "j2,5,70,1,B,rtx4090,100,rtx3080ti;rtx4090,3600",
    ]


def test_write_trace_creates_the_file(tmp_path: Path) -> None:
    target = tmp_path / "sub" / "trace.csv"
    assert write_trace([TraceRow("j1", 0, 60, 2, "A")], target) == 1
    with target.open(newline="") as f:
        assert list(csv.reader(f)) == [
            list(TRACE_HEADER),
            ["j1", "0", "60", "2", "A", "", "", "", ""],
        ]


@pytest.mark.parametrize(
    ("duration", "limit"),
    [
        (1, HOUR_S),
        (3599, HOUR_S),
        (3600, HOUR_S),
        (3601, 2 * HOUR_S),
        (90_000, 25 * HOUR_S),
        (90_001, 26 * HOUR_S),
    ],
)
def test_hour_time_limit(duration: int, limit: int) -> None:
    assert hour_time_limit(duration) == limit


def test_parse_window() -> None:
    assert parse_window("all") is None
    assert parse_window("last10d") == 10 * DAY_S
    assert parse_window("last36h") == 36 * HOUR_S
    for bad in ("last", "last0d", "10d", "lastxd"):
        with pytest.raises(ValueError):
            parse_window(bad)


def test_select_last_window_keeps_the_tail_and_rebases() -> None:
    rows = [TraceRow(f"j{t}", t, 10, 1, "A", cancel_time=t + 5) for t in (0, 50, 100, 150)]
    kept = select_last_window(rows, 60)
    assert [(r.job_id, r.submit_time, r.cancel_time) for r in kept] == [
        ("j100", 0, 5),
        ("j150", 50, 55),
    ]
    assert select_last_window([], 60) == []
    assert [r.submit_time for r in rebase(rows, origin=-10)] == [10, 60, 110, 160]


def test_place_in_window() -> None:
    assert place_in_window(5, 10, None, False) == (5, 10)
    assert place_in_window(100, 10, 50, False) == (100, 10)
    assert place_in_window(40, 30, 50, False) is None
    assert place_in_window(40, 30, 50, True) == (50, 20)
    assert place_in_window(10, 30, 50, True) is None


def test_offered_load() -> None:
    rows = [TraceRow("a", 0, 100, 2, "A"), TraceRow("b", 100, 300, 1, "A")]
    assert offered_load(rows, 4) == pytest.approx((200 + 300) / (100 * 4))
    assert offered_load(rows, 4, clip=True) == pytest.approx(200 / (100 * 4))
    assert offered_load([], 4) == 0.0


def _run(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="jpushare")
    register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    code: int = args.func(args)
    return code


def test_cli_philly_writes_the_window_and_prints_counts(
    tmp_path: Path, philly_csv: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "philly.csv"
    cluster = tmp_path / "c.yaml"
    assert _run(["trace", "cluster", "philly", "--out", str(cluster)]) == 0
    argv = ["trace", "philly", "--in", str(philly_csv), "--out", str(out)]
    assert _run([*argv, "--window", "last10d", "--cluster", str(cluster)]) == 0
    err = capsys.readouterr().err
    assert "dropped" in err and "submitted before the window" in err
    assert "offered load on 1024 GPUs" in err
    lines = out.read_text().splitlines()
    assert lines[0] == HEADER_LINE
    assert len(lines) - 1 == int(err.split("kept ")[1].split(",")[0])


def test_cli_alibaba_and_cluster(
    tmp_path: Path, alibaba_pods_csv: Path, alibaba_nodes_csv: Path
) -> None:
    out = tmp_path / "ali.csv"
    assert _run(["trace", "alibaba", "--in", str(alibaba_pods_csv), "--out", str(out)]) == 0
    assert out.read_text().splitlines()[0] == HEADER_LINE
    cluster = tmp_path / "ali.yaml"
    argv = ["trace", "cluster", "alibaba", "--nodes", str(alibaba_nodes_csv), "--every", "200"]
    assert _run([*argv, "--out", str(cluster)]) == 0
    assert cluster.read_text().startswith("# ")


def test_cli_rejects_a_bad_window(tmp_path: Path) -> None:
    with pytest.raises(SystemExit):
        _run(["trace", "philly", "--out", str(tmp_path / "x.csv"), "--window", "ten days"])


def test_format_trace_is_csv_readable() -> None:
    text = format_trace([TraceRow("a,b", 0, 1, 1, "L")])  # a comma in an id is quoted
    assert next(iter(csv.reader(io.StringIO(text.splitlines()[1])))) == [
        "a,b",
        "0",
        "1",
        "1",
        "L",
        "",
        "",
        "",
        "",
    ]
