"""--mail-type / --mail-user as submit options and as #SBATCH directives, through the CLI
against a real server (both databases): what the job asked for is stored for the
notifier; what sbatch knows and JPU-Share does not send is a warning; a bad address or
type is refused before anything is stored (the API's 422 for a client that skips the CLI)."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from jpushare.mail_types import ALL_MAIL_TYPES, MailType
from jpushare.store.notifications import job_mail
from tests.client.test_cli_server import Served, cli, served  # noqa: F401 (the fixture)

SCRIPT = """#!/bin/bash
#SBATCH --gpus=1
#SBATCH --mail-type=END,FAIL
#SBATCH --mail-user=alice@uni.example.edu
python train.py
"""


def _mail(server: Served, job_id: int) -> tuple[frozenset[MailType], str | None]:
    with server.sessions() as s:
        return job_mail(s, job_id)


def test_a_scripts_mail_directives_are_the_jobs_and_the_command_line_wins(
    served: Served,  # noqa: F811
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
) -> None:
    script = tmp_path / "train.sh"
    script.write_text(SCRIPT)
    code, out, err = cli(served, "alice", "submit", "--json", str(script), capsys=capsys)
    assert code == 0, err
    assert "mail" not in err  # no "ignored" warning any more
    job = json.loads(out)["id"]
    assert _mail(served, job) == (frozenset({MailType.END, MailType.FAIL}), "alice@uni.example.edu")

    code, out, err = cli(served, "alice", "submit", "--json", "--mail-type", "ALL,TIME_LIMIT_80",
                         str(script), capsys=capsys)  # fmt: skip
    assert code == 0, err
    assert "warning: --mail-type TIME_LIMIT_80 ignored: JPU-Share does not send it" in err
    assert _mail(served, json.loads(out)["id"]) == (ALL_MAIL_TYPES, "alice@uni.example.edu")

    code, out, err = cli(served, "alice", "submit", "--json", "--mail-type", "NONE",
                         str(script), capsys=capsys)  # fmt: skip
    assert code == 0, err
    assert _mail(served, json.loads(out)["id"]) == (frozenset(), None)

    code, out, _ = cli(served, "bob", "submit", "--json", "-G", "1", "--", "true", capsys=capsys)
    assert _mail(served, json.loads(out)["id"]) == (frozenset(), None)  # sbatch's default


@pytest.mark.parametrize(
    ("option", "value", "says"),
    [
        ("--mail-user", "a@b.org, eve@c.org", "one mail address"),
        ("--mail-type", "END,SOMETIMES", "'SOMETIMES' is not a mail type"),
    ],
)
def test_a_bad_mail_option_is_refused_and_nothing_is_stored(
    served: Served,  # noqa: F811
    capsys: pytest.CaptureFixture[str],
    option: str,
    value: str,
    says: str,
) -> None:
    try:
        code, _, err = cli(served, "alice", "submit", "-G", "1", option, value, "--", "true",
                           capsys=capsys)  # fmt: skip
    except SystemExit as exc:  # argparse's own usage error
        code, err = int(str(exc.code)), capsys.readouterr().err
    assert code == 2 and says in err
    code, out, _ = cli(served, "alice", "jobs", "--json", capsys=capsys)
    assert json.loads(out)["data"] == []


def test_the_api_refuses_what_the_cli_would(served: Served) -> None:  # noqa: F811
    headers = {"Authorization": f"Bearer {served.tokens['alice']}"}
    job = {"command": "true", "num_gpus": 1, "workdir": "/tmp"}
    for extra in ({"mail_type": ["SOMETIMES"]}, {"mail_type": ["END"], "mail_user": "a\nb@c"}):
        answer = httpx.post(f"{served.url}/v1/jobs", json=job | extra, headers=headers)
        assert answer.status_code == 422, answer.text
        assert answer.json()["error"]["code"] == "VALIDATION_ERROR"
    answer = httpx.post(
        f"{served.url}/v1/jobs", json=job | {"mail_type": ["BEGIN", "REQUEUE"]}, headers=headers
    )
    assert answer.status_code == 201
    asked = frozenset({MailType.BEGIN, MailType.REQUEUE})
    assert _mail(served, answer.json()["id"]) == (asked, None)


def test_show_says_the_mail_request_and_the_address_only_to_those_who_manage_the_job(
    served: Served,  # noqa: F811
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
) -> None:
    script = tmp_path / "train.sh"
    script.write_text(SCRIPT)
    code, out, err = cli(served, "alice", "submit", "--json", str(script), capsys=capsys)
    assert code == 0, err
    answer = json.loads(out)
    assert (answer["mail_type"], answer["mail_user"]) == (["END", "FAIL"], "alice@uni.example.edu")
    job = answer["id"]
    for viewer, sees in [("alice", True), ("pia", True), ("root", True), ("bob", False)]:
        code, out, err = cli(served, viewer, "show", "--json", str(job), capsys=capsys)
        assert code == 0, err
        shown = json.loads(out)["job"]
        assert shown["mail_type"] == ["END", "FAIL"]  # as scontrol's MailType, for all
        if sees:
            assert shown["mail_user"] == "alice@uni.example.edu", viewer
        else:
            assert shown["mail_user"] is None and "mail_user" in shown["hidden"], viewer
    code, out, _ = cli(served, "alice", "show", str(job), capsys=capsys)
    assert "  mail:      END,FAIL to alice@uni.example.edu" in out.splitlines()
    code, out, _ = cli(served, "bob", "show", str(job), capsys=capsys)
    assert "  mail:      END,FAIL to (hidden)" in out.splitlines()
    code, out, _ = cli(served, "alice", "submit", "--json", "--mail-type", "BEGIN", "-G", "1",
                       "--", "true", capsys=capsys)  # fmt: skip
    code, out, _ = cli(served, "alice", "show", str(json.loads(out)["id"]), capsys=capsys)
    assert "  mail:      BEGIN to its owner's account at the mail domain" in out.splitlines()
    code, out, _ = cli(served, "alice", "jobs", "--json", capsys=capsys)
    assert {j["mail_type"] for j in json.loads(out)["data"]} == {None}  # lists: not read
