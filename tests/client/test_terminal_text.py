"""Text other people wrote reaches the CLI user's terminal without control characters.

A job name, command or reason is anyone's text; a terminal obeys what it is sent (OSC 0
retitles the window, OSC 52 writes the clipboard, CSI 2J clears the screen, CR and bidi
overrides hide what follows). The CLI prints each such string through
`formatting.clean`; `--json` stays the API's exact answer.
"""

from __future__ import annotations

import json
import re

import pytest

from jpushare import store
from jpushare.client import Client
from jpushare.client.cli import main
from jpushare.client.formatting import clean, clean_output, json_text, printable, table
from tests.client.test_cli_server import Served, served  # noqa: F401 (the fixture)
from tests.database import db_url, empty_db_url, engine, sessions  # noqa: F401

EVIL_NAME = "\x1b]0;pwned\x07ok\x1b[2J\x9b2J\u202eeman\r\x1b[1Amore\tname"
EVIL_COMMAND = "echo \x1b]52;c;cm0gLXJmIH4=\x07hi\nrm -rf /tmp/x\x1b[8m"
# (the store writes C0 controls of a reason as U+FFFD; 8-bit ones pass)
EVIL_REASON = "killed\x9b2K\x9d0;title\x9c db_password=\x1b[8mhunter2\x07"
# What a terminal acts on: ESC, BEL, CR, the 8-bit CSI/OSC/ST, other C0/C1, bidi marks.
UNSAFE = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]")


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("\x1b]0;pwned\x07x", "x"),  # OSC, BEL-terminated: the window title
        ("a\x1b]52;c;aGk=\x1b\\b", "ab"),  # OSC 52 (clipboard), ST-terminated
        ("a\x1b[2Jb\x1b[31mc\x1b[0m", "abc"),  # CSI: clear screen, colours
        ("x\x9b2Jy\x9d0;t\x9cz", "xyz"),  # 8-bit CSI and OSC ... ST
        ("a\x1bPq#0;2;0\x1b\\b", "ab"),  # DCS (sixel) ... ST
        ("a\x1b(Bb\x1bcc", "abc"),  # charset selection, full reset
        ("tail\x1b]0;never ends", "tail"),  # a string with no end: the terminal eats the rest
        ("col1\tcol2\nline2\r\nline3", "col1 col2 line2 line3"),
        ("bell\x07 del\x7f nul\x00", "bell del nul"),
        ("evil\u202etxt.exe\u2066", "eviltxt.exe"),  # bidi override, isolate
        ("Zürich – 東京 🚀", "Zürich – 東京 🚀"),  # printable text is left alone
    ],
)
def test_clean_drops_sequences_whole_and_keeps_text(text: str, shown: str) -> None:
    assert clean(text) == shown
    assert not UNSAFE.search(clean(text))


def test_another_users_output_keeps_its_lines() -> None:
    text = "step 1\r\x1b[2Kstep 2\r\n\x1b[32mok\x1b[0m\tdone\n"
    assert clean_output(text) == "step 1\nstep 2\nok\tdone\n"


def test_tables_and_answers_are_cleaned_and_json_stays_exact() -> None:
    text = table(("NAME", "N"), [(EVIL_NAME, 1)])
    assert not UNSAFE.search(text) and text.count("\n") == 1
    answer = {"data": [{"name": EVIL_NAME, "n": 1, "tags": [EVIL_REASON]}]}
    shown = printable(answer)
    assert shown["data"][0]["n"] == 1 and not UNSAFE.search(json.dumps(shown, ensure_ascii=False))
    out = json_text(answer)
    assert json.loads(out) == answer  # the same data, to the character
    assert not UNSAFE.search(out.replace("\n", " "))  # and nothing a terminal acts on


def as_user(
    served: Served,  # noqa: F811
    user: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The CLI's next commands act as `user` (token and URL from the environment)."""
    monkeypatch.setenv("JPUSHARE_TOKEN", served.tokens[user])
    monkeypatch.setenv("JPUSHARE_URL", served.url)


def test_every_printing_path_of_the_cli_strips_control_characters(
    served: Served,  # noqa: F811
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Through the real CLI against a real service: nothing alice put in her job's name,
    command or reason reaches bob's (or her own) terminal as a control character."""
    as_user(served, "alice", monkeypatch)
    argv = ["submit", "--json", "--gpus", "1", "--name", EVIL_NAME, "--", EVIL_COMMAND]
    assert main(argv) == 0
    job = json.loads(capsys.readouterr().out)["id"]
    capsys.readouterr()
    served.busy.clear()
    served.cycle()
    with served.sessions.begin() as s:
        assert store.end_job(
            s, job, store.JobState.FAILED, served.clock(), exit_code=1, reason=EVIL_REASON
        )
    printed: list[str] = []
    for user, argv in [
        ("bob", ["jobs"]),
        ("bob", ["jobs", "--format", "csv"]),
        ("bob", ["show", "1"]),
        ("bob", ["why", "1"]),
        ("alice", ["show", "1"]),
        ("alice", ["wait", "1"]),
        ("alice", ["jobs", "--name", EVIL_NAME]),
        ("alice", ["cancel", "1"]),  # refused: the job ended (the server's message)
    ]:
        as_user(served, user, monkeypatch)
        main(argv)
        out, err = capsys.readouterr()
        printed.append(out + err)
        assert not UNSAFE.search(out.replace("\n", "")), (user, argv, out)
        assert not UNSAFE.search(err.replace("\n", "")), (user, argv, err)
    jobs, csv_rows, bobs_show, why, alices_show, waited, by_name, cancel = printed
    # Still readable: the text is there, less its controls, one line per row.
    assert "okeman more name" in jobs.splitlines()[1] and len(jobs.splitlines()) == 2
    assert "okeman more name" in csv_rows and "killed db_password=" in csv_rows
    assert "FAILED (killed db_password=" in bobs_show and "hunter2" in bobs_show
    assert "command:   echo hi rm -rf /tmp/x" in alices_show
    assert "okeman more name" in waited and "okeman more name" in by_name
    assert why.startswith("job 1: ")
    assert cancel.startswith("error CONFLICT: ")

    # The exact text is there for scripts: --json.
    as_user(served, "alice", monkeypatch)
    assert main(["show", "1", "--json"]) == 0
    out = capsys.readouterr().out
    shown = json.loads(out)["job"]
    assert (shown["name"], shown["command"]) == (EVIL_NAME, EVIL_COMMAND)
    assert shown["reason"].startswith("killed\x9b2K\x9d0;title\x9c db_password=")
    assert not UNSAFE.search(out.replace("\n", ""))


def test_a_server_error_message_and_lab_names_are_cleaned(
    served: Served,  # noqa: F811
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A message the server words with names in it (whose job it is), and the labs table."""
    lab = "\x1b]0;owned\x07gamma\x1b[2J"
    with Client(served.url, served.tokens["root"]) as admin:
        admin.create_lab(lab)
        admin.create_user("gil", lab, unix_user="nobody")
        secret = admin.issue_token("gil")["secret"]
    with Client(served.url, secret) as gil:
        job = gil.submit("x", "true", 1, workdir="/tmp")["id"]
    as_user(served, "bob", monkeypatch)
    assert main(["cancel", str(job)]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"error FORBIDDEN: job {job} belongs to gil (gamma)")
    assert not UNSAFE.search(err.replace("\n", ""))
    assert main(["labs"]) == 0
    out = capsys.readouterr().out
    assert " gamma " in out and not UNSAFE.search(out.replace("\n", ""))
