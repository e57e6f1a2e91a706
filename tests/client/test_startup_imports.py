"""A user command imports nothing of the server. Each case runs the CLI's entry in a fresh
interpreter and reads `sys.modules` afterwards (a behaviour test: what is imported, not how
long it takes; `bench/bench_cli_startup.py` prints the times)."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

import pytest

from jpushare.cli import COMMAND_HELP, COMMAND_MODULES, COMMANDS, build_parser, main

SERVER_MODULES = (
    "jpushare.store",
    "jpushare.api",
    "jpushare.service",
    "jpushare.dispatcher",
    "jpushare.executors",
    "jpushare.sim",
    "jpushare.web",
    "jpushare.policy",
    "sqlalchemy",
    "alembic",
    "fastapi",
    "starlette",
    "pydantic",
    "uvicorn",
    "matplotlib",
)

CLOSED = ["--url", "http://127.0.0.1:9"]  # port 9: refused at once (the token: in the env)


def modules_after(*argv: str) -> set[str]:
    code = (
        "import json, sys\n"
        f"sys.argv = ['jpushare', *{list(argv)!r}]\n"
        "from jpushare.cli import main\n"
        "try:\n    main()\nexcept SystemExit:\n    pass\n"
        "print(json.dumps(sorted(sys.modules)))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=60,
        env={
            "PATH": "/usr/bin:/bin",
            "JPUSHARE_CLIENT_CONFIG": "/nonexistent/client.json",
            "JPUSHARE_TOKEN": "jps_test",
            # the checkout under test (a worktree's src, where the editable install is another's)
            **{k: v for k, v in os.environ.items() if k == "PYTHONPATH"},
        },
    )
    last = done.stdout.strip().splitlines()[-1]
    return set(json.loads(last))


def server_modules(loaded: set[str]) -> list[str]:
    return sorted(m for m in loaded if m.split(".")[0] in SERVER_MODULES or
                  any(m == s or m.startswith(s + ".") for s in SERVER_MODULES))  # fmt: skip


@pytest.mark.parametrize(
    "argv",
    [
        ("jobs", "--help"),
        ("queue", *CLOSED),
        ("jobs", "--format", "csv", *CLOSED),
        ("show", "1", *CLOSED),
        ("labs", *CLOSED),
        ("cancel", "1", "2", *CLOSED),
        ("wait", "1", "--timeout", "1", *CLOSED),
        ("submit", "--gpus", "1", *CLOSED, "--", "true"),
        ("why", "not-a-job"),
    ],
    ids=lambda argv: " ".join(a for a in argv if a not in CLOSED),
)
def test_a_user_command_imports_nothing_of_the_server(argv: tuple[str, ...]) -> None:
    loaded = modules_after(*argv)
    assert "jpushare.client.cli" in loaded  # the command really ran
    assert server_modules(loaded) == []


def test_a_command_that_talks_to_the_api_got_as_far_as_the_request() -> None:
    """So the cases above are real: `queue` loaded httpx and failed only at the socket."""
    loaded = modules_after("queue", *CLOSED)
    assert "httpx" in loaded and "jpushare.client.api" in loaded
    assert not {m for m in loaded if m.split(".")[0] in ("click", "pygments", "rich")}


def test_help_starts_without_the_http_library() -> None:
    loaded = modules_after("jobs", "--help")
    assert not {m for m in loaded if m.split(".")[0] in ("httpx", "httpcore")}
    assert "jpushare.munge" not in loaded


def test_a_server_command_still_loads_the_server() -> None:
    """The check above can fail: the same probe sees the store behind `admin`."""
    loaded = modules_after("admin", "--help")
    assert "jpushare.store" in server_modules(loaded)


def test_every_command_is_dispatched_to_the_module_that_defines_it() -> None:
    parser = build_parser(COMMAND_MODULES)
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    assert set(sub.choices) == set(COMMANDS)
    for command, module in COMMANDS.items():
        alone = build_parser((module,))
        alone_sub = next(a for a in alone._actions if isinstance(a, argparse._SubParsersAction))
        assert command in alone_sub.choices, (command, module)


@pytest.mark.parametrize(
    "argv",
    [("--help",), (), ("sumbit", "--gpus", "1"), ("submit", "--help"), ("wait", "--help")],
    ids=lambda argv: " ".join(argv) or "(bare)",
)
def test_help_a_bare_command_and_a_typo_import_nothing_of_the_server(
    argv: tuple[str, ...],
) -> None:
    """`jpushare --help` lists every command from `COMMAND_HELP`, not from their modules."""
    loaded = modules_after(*argv)
    assert "jpushare.cli" in loaded
    assert server_modules(loaded) == []
    assert not {m for m in loaded if m.split(".")[0] in ("httpx", "httpcore")}


def test_the_listed_help_of_each_command_is_the_one_its_module_registers() -> None:
    parser = build_parser(COMMAND_MODULES)
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    registered = {a.dest: a.help for a in sub._choices_actions}
    assert registered == COMMAND_HELP


def test_a_typo_names_the_command_meant(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["sumbit", "--gpus", "1"])
    assert exc.value.code == 2
    assert "'sumbit' is not a jpushare command; did you mean submit?" in capsys.readouterr().err
