"""The shared trace arguments: the same checks and requirements in every command."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path

import pytest

from jpushare.formats.arguments import (
    add_trace_arguments,
    not_negative,
    positive,
    positive_seconds,
)


@pytest.mark.parametrize(
    ("check", "raw", "message"),
    [
        (positive, "0", "must be > 0, got '0'"),
        (positive, "inf", "must be > 0, got 'inf'"),
        (positive, "nan", "must be > 0, got 'nan'"),
        (positive, "x", "not a number: 'x'"),
        (not_negative, "-1", "must be >= 0, got '-1'"),
        (positive_seconds, "0", "must be > 0 seconds, got '0'"),
        (positive_seconds, "x", "not a number of seconds: 'x'"),
    ],
)
def test_a_bad_number_is_a_usage_error_that_says_why(
    check: Callable[[str], float], raw: str, message: str
) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match=f"^{message}$"):
        check(raw)


def test_good_numbers_read_as_floats() -> None:
    assert positive("2.5") == 2.5 and not_negative("0") == 0.0 and positive_seconds("5") == 5.0


def test_required_arguments_and_a_default_speed() -> None:
    strict = argparse.ArgumentParser()
    add_trace_arguments(strict, speed=True)
    with pytest.raises(SystemExit):  # --speed is missing
        strict.parse_args(["--cluster", "c.yaml", "--trace", "t.csv"])
    args = strict.parse_args(["--cluster", "c.yaml", "--trace", "t.csv", "--speed", "60"])
    assert (args.cluster, args.trace, args.speed) == (Path("c.yaml"), Path("t.csv"), 60.0)

    loose = argparse.ArgumentParser()
    add_trace_arguments(loose, required=False, cluster=None, speed=True, default_speed=30.0)
    args = loose.parse_args([])
    assert (args.trace, args.speed) == (None, 30.0) and not hasattr(args, "cluster")
