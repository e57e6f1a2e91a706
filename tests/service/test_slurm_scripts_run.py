"""Slurm users' scripts (tests/client/slurm_scripts/) under `jpushare submit` against a real
`serve --demo` (SQLite, local executor): an array throttled by `%K` whose tasks see
SLURM_ARRAY_* and write `%A_%a` files; a pipeline chained by afterok / afternotok with
--kill-on-invalid-dep; a held job released; singletons run one after the other; mail
directives answered through a real SMTP server (aiosmtpd): a job's END / FAIL, an array's
one Began and one Ended (Slurm's "Array Summary"), and every task's with ARRAY_TASKS."""

from __future__ import annotations

import json
import re
import sqlite3
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import pytest
from aiosmtpd.controller import Controller

from jpushare.cli import main
from tests.dispatcher.conftest import wait_for
from tests.notify.conftest import MailBox, free_port
from tests.service.demo_service import DemoService, demo_service

SCRIPTS = Path(__file__).parents[1] / "client" / "slurm_scripts"


@pytest.fixture(scope="module")
def mails() -> Iterator[MailBox]:
    """The relay the demo mails through: a real SMTP server that keeps what it gets."""
    box = MailBox("127.0.0.1", free_port())
    controller = Controller(box, hostname=box.host, port=box.port)
    controller.start()
    try:
        yield box
    finally:
        controller.stop()


def _mail_cursor(database: Path) -> bool:
    if not database.exists():
        return False
    with sqlite3.connect(database) as db:
        try:
            row = db.execute("SELECT 1 FROM notify_cursors WHERE channel = 'mail'").fetchone()
        except sqlite3.OperationalError:  # not created yet
            return False
    return row is not None


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory, mails: MailBox) -> Iterator[DemoService]:
    tmp = tmp_path_factory.mktemp("slurm-scripts")
    with demo_service(
        tmp,
        "slurm-scripts",
        JPUSHARE_CYCLE_S="0.3",
        JPUSHARE_SMTP_HOST=mails.host,
        JPUSHARE_SMTP_PORT=str(mails.port),
        JPUSHARE_NOTIFY_POLL_S="0.1",
    ) as served:
        # Jobs submitted before the mail channel's cursor exists are history, not mailed.
        wait_for(lambda: _mail_cursor(tmp / "var" / "jpushare.sqlite"), "the mail cursor")
        yield served


@pytest.fixture
def here(demo: DemoService, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The user's shell: the demo's URL and token, in a directory of their own."""
    monkeypatch.setenv("JPUSHARE_URL", demo.tokens["JPUSHARE_URL"])
    monkeypatch.setenv("JPUSHARE_TOKEN", demo.tokens["JPUSHARE_TOKEN"])
    (tmp_path / "client.json").write_text("{}")
    monkeypatch.setenv("JPUSHARE_CLIENT_CONFIG", str(tmp_path / "client.json"))
    monkeypatch.chdir(tmp_path)
    return tmp_path


def jpushare(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def submitted(capsys: pytest.CaptureFixture[str], *argv: str) -> dict[str, object]:
    code, out, err = jpushare(capsys, "submit", "--json", *argv)
    assert code == 0, err
    job: dict[str, object] = json.loads(out)
    return job


def show(capsys: pytest.CaptureFixture[str], job: object) -> dict[str, object]:
    code, out, err = jpushare(capsys, "show", "--json", str(job))
    assert code == 0, err
    answer: dict[str, object] = json.loads(out)
    return answer


def _attempts(answer: dict[str, object]) -> list[dict[str, object]]:
    attempts = answer["attempts"]
    assert isinstance(attempts, list)
    return attempts


def _time(value: object) -> datetime:
    assert isinstance(value, str)
    return datetime.fromisoformat(value)


def test_an_array_script_runs_every_task_at_most_k_at_once(
    here: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    head = submitted(capsys, str(SCRIPTS / "sweep.sh"))
    tasks = head["array_task_ids"]
    assert isinstance(tasks, list) and len(tasks) == 4 and head["array_limit"] == 2
    array = head["id"]
    code, _, err = jpushare(capsys, "wait", str(array), "--timeout", "120")  # every task
    assert code == 0, err
    code, out, _ = jpushare(capsys, "jobs", "-j", str(array))  # sacct -j: every task
    listed = [line.split()[0] for line in out.splitlines()[1:]]
    assert code == 0 and listed == [f"{array}_{t}" for t in range(4)]
    lrs = ["0.1", "0.03", "0.01", "0.003"]
    for task in range(4):
        text = (here / f"sweep_{array}_{task}.out").read_text()
        assert text == f"task {task} of array {array} ({task}/4): lr {lrs[task]}\n"
    runs = []
    for task, job_id in enumerate(tasks):
        answer = show(capsys, f"{array}_{task}")
        job = answer["job"]
        assert isinstance(job, dict) and job["id"] == job_id
        (attempt,) = _attempts(answer)
        runs.append((_time(attempt["dispatched_at"]), _time(attempt["ended_at"])))
    for start, _ in runs:  # %2: when each task left the queue, fewer than 2 others ran
        assert sum(1 for s, e in runs if s < start < e) < 2


def test_a_pipeline_of_dependencies_runs_as_sbatch_would(
    here: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pre = submitted(capsys, str(SCRIPTS / "preprocess.sh"))["id"]
    train = submitted(capsys, "--dependency", f"afterok:{pre}", str(SCRIPTS / "train_after.sh"))
    alert = submitted(capsys, "-d", f"afternotok:{pre}", str(SCRIPTS / "on_failure.sh"))
    assert train["dependency"] == f"afterok:{pre}" and alert["kill_on_invalid_dep"] is True
    code, _, err = jpushare(capsys, "wait", str(train["id"]), "--timeout", "120")
    assert code == 0, err
    assert (here / "train.out").read_text() == "tokenized\ntrained\n"
    code, _, _ = jpushare(capsys, "wait", str(alert["id"]), "--timeout", "60")
    assert code == 120  # cancelled: its afternotok can never be met
    job = show(capsys, alert["id"])["job"]
    assert isinstance(job, dict) and "dependency can never be met" in str(job["reason"])
    (pre_run,) = _attempts(show(capsys, pre))
    (train_run,) = _attempts(show(capsys, train["id"]))
    assert _time(train_run["dispatched_at"]) >= _time(pre_run["ended_at"])


def test_a_held_script_waits_for_release_and_update_changes_it(
    here: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    held = submitted(capsys, str(SCRIPTS / "held.sh"))
    assert held["waiting"] == "HELD"
    code, out, _ = jpushare(capsys, "why", str(held["id"]))
    assert code == 0 and "HELD" in out and f"jpushare release {held['id']}" in out
    code, out, _ = jpushare(capsys, "squeue", "--me")
    (row,) = [line.split() for line in out.splitlines() if line.split()[:1] == [str(held["id"])]]
    assert row[-3:] == ["0:00", "1", "(HELD)"] and row[-4] == "PD"
    code, out, _ = jpushare(capsys, "jobs", "--mine", "-s", "PD")
    assert f"{held['id']} " in out and "QUEUED (HELD)" in out
    code, out, err = jpushare(capsys, "update", str(held["id"]), "-t", "10", "-J", "later2")
    assert code == 0, err
    job = show(capsys, held["id"])["job"]
    assert isinstance(job, dict) and (job["name"], job["time_limit_s"]) == ("later2", 600.0)
    code, out, err = jpushare(capsys, "release", str(held["id"]))
    assert code == 0 and "released job" in out, err
    code, _, err = jpushare(capsys, "wait", str(held["id"]), "--timeout", "60")
    assert code == 0, err
    assert (here / "later.out").read_text() == "released and ran\n"


def test_singleton_scripts_run_one_after_the_other(
    here: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    first = submitted(capsys, str(SCRIPTS / "nightly.sh"))["id"]
    second = submitted(capsys, str(SCRIPTS / "nightly.sh"))["id"]
    code, _, err = jpushare(capsys, "wait", str(first), str(second), "--timeout", "120")
    assert code == 0, err
    (a,) = _attempts(show(capsys, first))
    (b,) = _attempts(show(capsys, second))
    assert _time(b["dispatched_at"]) >= _time(a["ended_at"])
    assert (here / f"nightly-{second}.out").read_text() == f"nightly nightly {second}\n"


def _plain(subject: str) -> str:
    return re.sub(r"\d+(-\d\d)?:\d\d:\d\d", "T", subject)


def _mails_about(mails: MailBox, job: object) -> list[tuple[str, str]]:
    """(recipient, subject with times as T) of the mails that name job or array `job`."""
    said = re.compile(rf"Job_id={job}[ _]")
    return [(m.rcpt[0], _plain(m.subject)) for m in mails.received() if said.search(m.subject)]


def _mailed_after(capsys: pytest.CaptureFixture[str], mails: MailBox) -> None:
    """Waits for a later job's mail: the channel goes in event order, so every mail of
    the jobs before it has been sent by then (none more will come)."""
    last = submitted(capsys, str(SCRIPTS / "mailed.sh"))["id"]
    wait_for(lambda: bool(_mails_about(mails, last)), "the later job's mail")


def test_a_scripts_mail_directives_mail_its_end_and_its_failure(
    here: Path, capsys: pytest.CaptureFixture[str], mails: MailBox
) -> None:
    ok = submitted(capsys, str(SCRIPTS / "mailed.sh"))["id"]
    bad = submitted(capsys, str(SCRIPTS / "mailed.sh"), "3")["id"]  # the script's $1
    code, _, _ = jpushare(capsys, "wait", str(ok), str(bad), "--timeout", "120")
    assert code == 3  # wait exits with the worst exit code (sbatch --wait's)
    wait_for(lambda: bool(_mails_about(mails, ok) and _mails_about(mails, bad)), "their mails")
    _mailed_after(capsys, mails)
    to = "alice@uni.example.edu"
    assert _mails_about(mails, ok) == [
        (to, f"JPU-Share Job_id={ok} Name=mailed Ended, Run time T, COMPLETED, ExitCode 0")
    ]
    assert _mails_about(mails, bad) == [
        (to, f"JPU-Share Job_id={bad} Name=mailed Failed, Run time T, FAILED, ExitCode 3")
    ]


def test_an_array_mails_as_a_whole_unless_array_tasks_is_asked_for(
    here: Path, capsys: pytest.CaptureFixture[str], mails: MailBox
) -> None:
    whole = submitted(capsys, str(SCRIPTS / "mailed_sweep.sh"))
    each = submitted(capsys, "--mail-type", "END,ARRAY_TASKS", str(SCRIPTS / "mailed_sweep.sh"))
    code, _, _ = jpushare(capsys, "wait", str(whole["id"]), str(each["id"]), "--timeout", "120")
    assert code == 2  # task 1 of each failed
    _mailed_after(capsys, mails)
    to, array = "alice@uni.example.edu", whole["id"]
    assert _mails_about(mails, array) == [
        (to, f"JPU-Share Array Summary Job_id={array}_* ({array}) Name=msweep Began"),
        (
            to,
            f"JPU-Share Array Summary Job_id={array}_* ({array}) Name=msweep Ended, Mixed, "
            "ExitCode [0-2]",
        ),
    ]
    tasks, array = each["array_task_ids"], each["id"]
    assert isinstance(tasks, list)
    states = ["COMPLETED, ExitCode 0", "FAILED, ExitCode 2", "COMPLETED, ExitCode 0"]
    assert sorted(_mails_about(mails, array)) == [
        (
            to,
            f"JPU-Share Array Task Job_id={array}_{t} ({tasks[t]}) Name=msweep Ended, "
            f"Run time T, {states[t]}",
        )
        for t in range(3)
    ]
