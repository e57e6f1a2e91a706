"""No token in any process's arguments: every user of a host reads /proc/PID/cmdline.

The CLI takes its token from $JPUSHARE_TOKEN, the config file or `--token-file PATH`
(`-`: stdin) and refuses one given as an argument; `jpushare web --open` hands the
browser a page only its user can read, never the link itself.
"""

from __future__ import annotations

import io
import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from jpushare.client.cli import main
from jpushare.client.web import open_privately, signin_page
from tests.client.test_cli_server import Served, served  # noqa: F401 (the fixture)
from tests.database import db_url, empty_db_url, engine, sessions  # noqa: F401
from tests.dispatcher.processes import REPO

SECRET = "jps_secret_that_must_not_leak"
COMMANDS = [
    ["submit", "--gpus", "1", "--", "true"],
    ["jobs"],
    ["show", "1"],
    ["queue"],
    ["why", "1"],
    ["wait", "1"],
    ["cancel", "1"],
    ["log", "1"],
    ["labs"],
    ["placements"],
    ["tiers"],
    ["stats"],
    ["web"],
]


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: c[0])
@pytest.mark.parametrize("form", ["separate", "joined", "bare"])
def test_a_token_given_as_an_argument_is_refused(
    command: list[str], form: str, capsys: pytest.CaptureFixture[str]
) -> None:
    given = {"separate": ["--token", SECRET], "joined": [f"--token={SECRET}"], "bare": ["--token"]}
    with pytest.raises(SystemExit) as exc:
        main([command[0], *given[form], *command[1:]])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and SECRET not in err
    assert err.startswith("error USAGE: --token would show the token to every user")
    assert "JPUSHARE_TOKEN" in err and "--token-file PATH" in err


def test_the_token_is_read_from_a_file_stdin_or_the_environment(
    served: Served,  # noqa: F811
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    queue = ["queue", "--url", served.url, "--json"]
    assert main([*queue, "--token-file", served.token_file(served.tokens["alice"])]) == 0
    assert json.loads(capsys.readouterr().out)["queue_length"] == 0
    monkeypatch.setattr(sys, "stdin", io.StringIO(served.tokens["alice"] + "\n"))
    assert main([*queue, "--token-file", "-"]) == 0
    assert json.loads(capsys.readouterr().out)["queue_length"] == 0
    monkeypatch.setenv("JPUSHARE_TOKEN", served.tokens["alice"])
    assert main(queue) == 0
    assert json.loads(capsys.readouterr().out)["queue_length"] == 0
    # A file wins over the environment: this one's token is refused by the service.
    assert main([*queue, "--token-file", served.token_file("jps_wrong")]) == 1
    assert capsys.readouterr().err.startswith("error UNAUTHENTICATED:")
    empty = served.tmp / "empty"
    empty.write_text("\n")
    assert main([*queue, "--token-file", str(empty)]) == 1
    assert (
        capsys.readouterr().err == f"error CONFIG: {empty}: no token in it (one line: the token)\n"
    )
    assert main([*queue, "--token-file", str(served.tmp / "missing")]) == 1
    assert capsys.readouterr().err.startswith(
        f"error CONFIG: {served.tmp / 'missing'}: cannot read"
    )


FAKE_BROWSER = """#!{python}
import json, os, stat, sys
record = {{
    "argv": sys.argv,
    "cmdline": open("/proc/self/cmdline", "rb").read().decode(errors="replace"),
    "parent": open(f"/proc/{{os.getppid()}}/cmdline", "rb").read().decode(errors="replace"),
}}
open({record!r}, "w").write(json.dumps(record))  # before anything can fail
page = sys.argv[1].removeprefix("file://")
record["page"] = open(page).read()
record["page_mode"] = stat.S_IMODE(os.stat(page).st_mode)
record["dir_mode"] = stat.S_IMODE(os.stat(os.path.dirname(page)).st_mode)
record["page_path"] = page
open({record!r}, "w").write(json.dumps(record))
"""


def test_web_open_hands_the_browser_a_private_page_not_the_token(tmp_path: Path) -> None:
    """The browser (here a fake one, named by $BROWSER as Python's webbrowser reads it)
    gets a file:// address; the link with the token is inside the page, which only the
    user may read and which is gone once the command returns."""
    record = tmp_path / "record.json"
    browser = tmp_path / "fake-browser"
    browser.write_text(FAKE_BROWSER.format(python=sys.executable, record=str(record)))
    browser.chmod(0o700)
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("JPUSHARE_")},
        "BROWSER": str(browser),
        "JPUSHARE_TOKEN": SECRET,
        "JPUSHARE_URL": "http://127.0.0.1:9",
        "JPUSHARE_CLIENT_CONFIG": str(tmp_path / "none.json"),
        "PYTHONPATH": f"{REPO / 'src'}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
        "TMPDIR": str(tmp_path),
    }
    (tmp_path / "none.json").write_text("{}")
    done = subprocess.run(
        # (the fake browser has read the page when it returns: a short wait is plenty on
        # a noatime mount, where the read cannot be seen)
        [sys.executable, "-m", "jpushare.client.cli", "web", "--open", "--page-lifetime", "5"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    seen = json.loads(record.read_text())
    for where in ("argv", "cmdline", "parent"):
        assert SECRET not in json.dumps(seen[where]), where
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"http://127.0.0.1:9/signin#token={SECRET}"
    assert seen["argv"][1].startswith("file://") and seen["argv"][1].endswith("/signin.html")
    assert f"http://127.0.0.1:9/signin#token={SECRET}" in seen["page"]
    assert (seen["page_mode"], seen["dir_mode"]) == (0o600, 0o700)
    assert not Path(seen["page_path"]).parent.exists()


def test_the_page_is_removed_even_when_no_browser_starts(tmp_path: Path) -> None:
    pages: list[Path] = []

    def no_browser(uri: str) -> bool:
        pages.append(Path(uri.removeprefix("file://")))
        assert stat.S_IMODE(pages[0].stat().st_mode) == 0o600
        return False

    assert open_privately("http://h/signin#token=x", no_browser, lifetime_s=30) is False
    assert not pages[0].parent.exists()


def test_the_page_escapes_the_link_where_it_appears() -> None:
    page = signin_page('http://h/"><script>alert(1)</script>#token=a%2Fb')
    assert "<script>alert(1)" not in page
    assert "location.replace(" in page and "&quot;&gt;&lt;script&gt;" in page
