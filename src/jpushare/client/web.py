"""`jpushare web`: the dashboard link that signs the CLI's user in.

It prints `URL/signin#token=TOKEN` for the token the CLI uses (`--token`, $JPUSHARE_TOKEN or
the config file): the part after `#` stays in the browser (it is not sent to the server, so
it is in no access log) and the sign-in page posts it, after which the browser holds it in
an HttpOnly cookie. `--open` also opens it in the default browser. The dashboard signs in
with tokens only: a user who signs in to the CLI with MUNGE asks an admin for a token.
Imports nothing of the server, so it starts at once.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any, TextIO
from urllib.parse import quote

from jpushare.client.config import ClientConfigError, config_path, load_client_config

EXIT_OK = 0
EXIT_ERROR = 1


def dashboard_link(url: str, token: str) -> str:
    return f"{url.rstrip('/')}/signin#token={quote(token, safe='')}"


def run_web(args: argparse.Namespace, out: TextIO | None = None) -> int:
    out = out if out is not None else sys.stdout
    try:
        config = load_client_config(args.url, args.token)
    except ClientConfigError as exc:
        print(f"error CONFIG: {exc}", file=sys.stderr)
        return EXIT_ERROR
    if not config.token:
        print(
            "error UNAUTHENTICATED: the dashboard signs in with a token, and this CLI has none "
            f"(set JPUSHARE_TOKEN, pass --token, or put it in {config_path(os.environ)}; "
            "ask an admin for one)",
            file=sys.stderr,
        )
        return EXIT_ERROR
    link = dashboard_link(config.url, config.token)
    print(link, file=out)
    print("(the link holds your token: do not share it)", file=sys.stderr)
    if args.open:
        import webbrowser  # only here: every CLI command imports this module

        webbrowser.open(link)
    return EXIT_OK


def register_web(subparsers: Any) -> None:
    """Add `jpushare web [--open]`."""
    text = "print (or --open) a link that signs you in to the web dashboard"
    p: argparse.ArgumentParser = subparsers.add_parser("web", help=text, description=text)
    p.add_argument("--url", help="the API (default: $JPUSHARE_URL, the config file, localhost)")
    p.add_argument("--token", help="an API token (default: $JPUSHARE_TOKEN, the config file)")
    p.add_argument("--open", action="store_true", help="also open it in the default browser")
    p.set_defaults(func=run_web)
