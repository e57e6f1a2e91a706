"""What `jpushare submit` sends of its directory and environment (sbatch's --chdir and
--export), and how `jpushare log` reads and follows a job's output."""

from __future__ import annotations

import argparse
import io
from datetime import UTC, datetime
from typing import Any

import pytest

from jpushare.client.arguments import UsageError
from jpushare.client.log_command import log as _log
from jpushare.client.submit_command import export_environment
from jpushare.memory_sizes import format_mem_mb, parse_mem_mb

ENV = {
    "PATH": "/usr/bin",
    "MYVAR": "x",
    "JPUSHARE_TOKEN": "secret",
    "BASH_FUNC_f%%": "() { :; }",
}


@pytest.mark.parametrize(
    ("spec", "want"),
    [
        ("ALL", {"PATH": "/usr/bin", "MYVAR": "x"}),
        ("NONE", {}),
        ("MYVAR", {"MYVAR": "x"}),
        ("MYVAR,NEW=1,ABSENT", {"MYVAR": "x", "NEW": "1"}),
        ("ALL,MYVAR=y", {"PATH": "/usr/bin", "MYVAR": "y"}),
        ("JPUSHARE_TOKEN", {"JPUSHARE_TOKEN": "secret"}),  # named: sent
    ],
)
def test_export_takes_sbatchs_forms(spec: str, want: dict[str, str]) -> None:
    assert export_environment(spec, ENV) == want


@pytest.mark.parametrize("spec", ["", "1BAD", "ALL,A-B=1"])
def test_export_refuses_what_is_not_a_variable(spec: str) -> None:
    with pytest.raises(UsageError):
        export_environment(spec, ENV)


@pytest.mark.parametrize(
    ("text", "mb"), [("16G", 16384), ("512M", 512), ("512", 512), ("1T", 1 << 20), ("1536K", 2)]
)
def test_sizes_read_as_sbatch_reads_them(text: str, mb: int) -> None:
    assert parse_mem_mb(text) == mb


def test_sizes_print_in_their_shortest_exact_form() -> None:
    assert [format_mem_mb(m) for m in (16384, 1536, 1 << 20)] == ["16G", "1536M", "1T"]
    with pytest.raises(ValueError):
        parse_mem_mb("16Q")


class StubApi:
    """Answers `log` from a list of pages, recording the offsets asked."""

    def __init__(self, pages: list[dict[str, Any]], mine: bool = True) -> None:
        self.pages = pages
        self.offsets: list[int] = []
        self.mine = mine

    def jobs(self, *, mine: bool, before_id: int, limit: int) -> Any:
        """The caller's newest job up to `before_id - 1`: job 7 when it is theirs."""
        assert mine and limit == 1
        return {"data": [{"id": 7}] if self.mine and before_id > 7 else [{"id": 3}]}

    def log(self, job: int, attempt: int | None, *, stderr: bool, offset: int = 0) -> Any:
        self.offsets.append(offset)
        return self.pages.pop(0)


def page(log: str, state: str, offset: int, next_offset: int) -> dict[str, Any]:
    return {
        "job_id": 7,
        "attempt": 1,
        "log": log,
        "state": state,
        "path": "/w/jpushare-7.out",
        "offset": offset,
        "next_offset": next_offset,
    }


def args(**kw: Any) -> argparse.Namespace:
    base = {"job": 7, "attempt": None, "stderr": False, "follow": False, "poll": 0.001}
    base["raw"] = False
    return argparse.Namespace(json=False, **(base | kw))


def test_a_running_job_without_output_says_so() -> None:
    out = io.StringIO()
    _log(StubApi([page("", "RUNNING", 0, 0)]), args(), out, datetime.now(UTC))  # type: ignore[arg-type]
    assert out.getvalue() == "(job 7 has no output yet)\n"


def test_follow_reads_on_from_where_it_stopped_until_the_job_ends() -> None:
    api = StubApi(
        [
            page("a\n", "RUNNING", 0, 2),
            page("", "RUNNING", 2, 2),
            page("b\n", "COMPLETED", 2, 4),
            page("", "COMPLETED", 4, 4),
        ]
    )
    out = io.StringIO()
    _log(api, args(follow=True), out, datetime.now(UTC))  # type: ignore[arg-type]
    assert out.getvalue() == "a\nb\n"
    assert api.offsets == [0, 2, 2, 4]


OUTPUT = "epoch 1\r\x1b[2K\x1b[32mepoch 2\x1b[0m\n\x1b]52;c;cm0gLXJmIH4=\x07done\ttab\n"


def test_the_owners_log_is_their_output_as_it_is() -> None:
    out = io.StringIO()
    _log(StubApi([page(OUTPUT, "COMPLETED", 0, 9)]), args(), out, datetime.now(UTC))  # type: ignore[arg-type]
    assert out.getvalue() == OUTPUT


def test_another_users_log_reaches_the_terminal_without_control_characters(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A pi (or an admin) reading a student's output: no escape sequence of the job's
    (screen clears, OSC 52 clipboard writes) is passed on, unless --raw."""
    api = StubApi([page(OUTPUT, "COMPLETED", 0, 9)], mine=False)
    out = io.StringIO()
    _log(api, args(), out, datetime.now(UTC))  # type: ignore[arg-type]
    assert out.getvalue() == "epoch 1\nepoch 2\ndone\ttab\n"
    assert "another user's" in capsys.readouterr().err
    raw = io.StringIO()
    api = StubApi([page(OUTPUT, "COMPLETED", 0, 9)], mine=False)
    _log(api, args(raw=True), raw, datetime.now(UTC))  # type: ignore[arg-type]
    assert raw.getvalue() == OUTPUT
