"""`jpushare web`: the dashboard link that signs the CLI's user in.

It prints `URL/signin#token=TOKEN` for the token the CLI uses (`--token-file`,
$JPUSHARE_TOKEN or the config file): the part after `#` stays in the browser (it is not
sent to the server, so it is in no access log) and the sign-in page posts it, after which
the browser holds it in an HttpOnly cookie. The dashboard signs in with tokens only: a
user who signs in to the CLI with MUNGE asks an admin for a token.

`--open` opens it in the default browser without putting the token in any process's
arguments (which every user of the host can read in /proc/PID/cmdline): the link goes
into a small page that sends the browser on to it, written only-you-can-read (0600) in a
private directory (0700), and the browser is given that page's file:// address. The page
is removed once the browser has read it (its access time moves), or after
`PAGE_LIFETIME_S` at the latest, or at Ctrl-C. Imports nothing of the server, so it starts
at once.
"""

from __future__ import annotations

import argparse
import html
import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO
from urllib.parse import quote

from jpushare.client.config import ClientConfigError, config_path, load_client_config
from jpushare.client.formatting import clean
from jpushare.client.token_args import add_token_options, read_token_file

EXIT_OK = 0
EXIT_ERROR = 1
PAGE_LIFETIME_S = 60.0  # the most a slow browser start gets to read the page
_POLL_S = 0.1


def dashboard_link(url: str, token: str) -> str:
    return f"{url.rstrip('/')}/signin#token={quote(token, safe='')}"


def signin_page(link: str) -> str:
    """A page that sends the browser on to `link` (script, with a refresh and a link as
    fallbacks); the link's characters are escaped for each place it appears."""
    attr = html.escape(link, quote=True)
    script = json.dumps(link).replace("<", "\\u003c").replace(">", "\\u003e")
    return (
        '<!doctype html>\n<html><head><meta charset="utf-8">\n'
        '<meta name="referrer" content="no-referrer">\n'
        f'<meta http-equiv="refresh" content="0;url={attr}">\n'
        "<title>JPU-Share sign-in</title>\n"
        f"<script>location.replace({script});</script>\n"
        f'</head><body><p><a href="{attr}">Sign in to JPU-Share</a></p></body></html>\n'
    )


def write_private_page(link: str) -> Path:
    """The sign-in page in a new directory only this user may enter (mkdtemp: 0700), the
    file created exclusively, never through a link, mode 0600."""
    directory = Path(tempfile.mkdtemp(prefix="jpushare-web-"))
    page = directory / "signin.html"
    fd = os.open(page, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(signin_page(link))
    return page


def _was_read(page: Path) -> bool:
    """The page was read since it was written (atime past mtime: relatime and strictatime
    mounts; on noatime the lifetime ends the wait)."""
    try:
        st = page.stat()
    except FileNotFoundError:
        return True
    return st.st_atime_ns > st.st_mtime_ns


def open_privately(
    link: str,
    opener: Callable[[str], bool] | None = None,
    lifetime_s: float = PAGE_LIFETIME_S,
) -> bool:
    """Open `link` in the browser through a private page; remove the page once read (or
    after `lifetime_s`). Whether the browser was started."""
    if opener is None:
        import webbrowser  # only here: every CLI command imports this module

        opener = webbrowser.open
    page = write_private_page(link)
    try:
        opened = opener(page.as_uri())
        deadline = time.monotonic() + lifetime_s
        while opened and not _was_read(page) and time.monotonic() < deadline:
            time.sleep(_POLL_S)
    finally:
        shutil.rmtree(page.parent, ignore_errors=True)
    return opened


def run_web(args: argparse.Namespace, out: TextIO | None = None) -> int:
    out = out if out is not None else sys.stdout
    try:
        token = read_token_file(args.token_file) if args.token_file else None
        config = load_client_config(args.url, token)
    except ClientConfigError as exc:
        print(f"error CONFIG: {clean(exc)}", file=sys.stderr)
        return EXIT_ERROR
    if not config.token:
        print(
            "error UNAUTHENTICATED: the dashboard signs in with a token, and this CLI has none "
            f"(set JPUSHARE_TOKEN, use --token-file PATH, or put it in "
            f"{config_path(os.environ)}; ask an admin for one)",
            file=sys.stderr,
        )
        return EXIT_ERROR
    link = dashboard_link(config.url, config.token)
    print(link, file=out, flush=True)
    print("(the link holds your token: do not share it)", file=sys.stderr)
    if args.open:
        print(
            "(opening it through a page only you can read; it is removed once your browser "
            f"has read it, within {PAGE_LIFETIME_S:.0f} s)",
            file=sys.stderr,
            flush=True,
        )
        try:
            opened = open_privately(link, lifetime_s=args.page_lifetime)
        except KeyboardInterrupt:
            return 130
        if not opened:
            print(
                "error BROWSER: no browser could be started: open the link above", file=sys.stderr
            )
            return EXIT_ERROR
    return EXIT_OK


def register_web(subparsers: Any) -> None:
    """Add `jpushare web [--open]`."""
    text = "print (or --open) a link that signs you in to the web dashboard"
    p: argparse.ArgumentParser = subparsers.add_parser("web", help=text, description=text)
    p.add_argument("--url", help="the API (default: $JPUSHARE_URL, the config file, localhost)")
    add_token_options(p)
    p.add_argument("--open", action="store_true", help="also open it in the default browser")
    p.add_argument("--page-lifetime", type=float, default=PAGE_LIFETIME_S, help=argparse.SUPPRESS)
    p.set_defaults(func=run_web)
