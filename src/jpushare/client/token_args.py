"""Tokens never on the command line: `--token-file PATH` (`-`: stdin) and a refusing `--token`.

A process's arguments are public on a Linux host: every user reads them in
`/proc/PID/cmdline` (and `ps`), for as long as it runs. So a token is read from the
environment, the client's config file or a file named here, and an option that would take
one in argv (`--token`, `--admin-token`) stops the command at once with one line that says
how to pass it instead (exit 2), without echoing it.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NoReturn, TextIO

from jpushare.client.config import ClientConfigError

EXIT_USAGE = 2


class TokenFileError(ClientConfigError):
    """The token file cannot be read, or holds no token; the message names it."""


def read_token_file(path: str, stdin: TextIO | None = None) -> str:
    """The token in `path` (its first line, surrounding white space dropped), or on stdin
    for `-`."""
    if path == "-":
        text = (stdin if stdin is not None else sys.stdin).readline()
        where = "stdin"
    else:
        where = path
        try:
            with Path(path).expanduser().open(encoding="utf-8") as f:
                text = f.readline()
        except (OSError, UnicodeDecodeError) as exc:
            raise TokenFileError(f"{path}: cannot read the token: {exc}") from exc
    token = text.strip()
    if not token:
        raise TokenFileError(f"{where}: no token in it (one line: the token)")
    return token


def refuse_token_in_argv(option: str, instead: str) -> NoReturn:
    print(
        f"error USAGE: {option} would show the token to every user of this host (in the "
        f"process list); {instead}",
        file=sys.stderr,
    )
    raise SystemExit(EXIT_USAGE)


class RefuseTokenAction(argparse.Action):
    """An option that takes a secret on the command line: stops with how to pass it instead."""

    def __init__(self, option_strings: Sequence[str], dest: str, instead: str, **kw: Any) -> None:
        kw.setdefault("nargs", "?")
        kw.setdefault("help", argparse.SUPPRESS)
        super().__init__(option_strings, dest, **kw)
        self.instead = instead

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: str | Sequence[Any] | None,
        option_string: str | None = None,
    ) -> None:
        refuse_token_in_argv(option_string or self.option_strings[0], self.instead)


def add_token_options(
    group: argparse._ActionsContainer,
    *,
    option: str = "--token",
    env: str = "JPUSHARE_TOKEN",
    default_help: str = "$JPUSHARE_TOKEN, the config file",
    config_file: bool = True,
) -> None:
    """`OPTION-file PATH` (dest `<option>_file`), and `OPTION` itself refused; its message
    names `env` (and the client's config file where `config_file`)."""
    group.add_argument(
        f"{option}-file",
        metavar="PATH",
        help=f"read the token from PATH, '-': stdin (default: {default_help})",
    )
    group.add_argument(
        option,
        action=RefuseTokenAction,
        instead=f"set {env}{', put it in the config file' if config_file else ''}, or use "
        f"{option}-file PATH ('-' reads it from stdin)",
    )
