"""`jpushare serve` with the local executor mails what each job asked for through a real
SMTP server, sends nothing twice across a restart, and keeps dispatching while its relay
hangs."""

from __future__ import annotations

import re
from pathlib import Path

from sqlalchemy.orm import Session, sessionmaker

from jpushare.store.notifications import NotifyCursorRow
from tests.dispatcher.conftest import wait_for
from tests.dispatcher.processes import LEADER, Service, World
from tests.notify.conftest import BlackHole, MailBox
from tests.notify.helpers import submit_with_mail


def _cursor_ready(world: World, channel: str = "mail") -> bool:
    with world.sessions() as s:
        row = s.get(NotifyCursorRow, channel)
        return row is not None


def _start(world: World, name: str, host: str, port: int, **extra: str) -> Service:
    service = world.start(
        name,
        JPUSHARE_SMTP_HOST=host,
        JPUSHARE_SMTP_PORT=str(port),
        JPUSHARE_MAIL_DOMAIN="example.org",
        JPUSHARE_MAIL_FROM="jpushare@cluster.example.org",
        JPUSHARE_NOTIFY_POLL_S="0.1",
        **extra,
    )
    wait_for(lambda: LEADER in service.log(), "the service leads")
    # Jobs submitted before the mail cursor exists would be history (not mailed).
    wait_for(lambda: _cursor_ready(world), "the notifier's cursor")
    return service


def _state(world: World, job_id: int) -> str:
    return str(world.job(job_id).state)


def _plain(subject: str) -> str:
    return re.sub(r"\d+(-\d\d)?:\d\d:\d\d", "T", subject)


def test_the_service_mails_what_each_job_asked_for_once_across_a_restart(
    sessions: sessionmaker[Session], db_url: str, tmp_path: Path, mailbox: MailBox
) -> None:
    world = World(sessions, db_url, tmp_path)
    me = world.users["bob"].unix_user
    service = _start(world, "mail", mailbox.host, mailbox.port)
    try:
        alice, bob = world.users["alice"].id, world.users["bob"].id
        ok = submit_with_mail(sessions, alice, "sleep 1", "ALL", "alice@example.org", "train")
        bad = submit_with_mail(sessions, bob, "exit 3", "END,FAIL", None, "broken")
        quiet = submit_with_mail(sessions, alice, "true", None, None, "quiet")
        wait_for(
            lambda: (
                [_state(world, j) for j in (ok, bad, quiet)] == ["COMPLETED", "FAILED", "COMPLETED"]
            ),
            "the three jobs end",
        )
        # Channels go in event order: once a later job's mail is in, all before it are.
        last = submit_with_mail(sessions, alice, "true", "END", "last@example.org", "last")
        wait_for(lambda: any("Name=last " in s for s in mailbox.subjects()), "the last mail")
        got = sorted((m.rcpt[0], _plain(m.subject)) for m in mailbox.received())
        assert got == sorted(
            [
                ("alice@example.org", f"JPU-Share Job_id={ok} Name=train Began, Queued time T"),
                (
                    "alice@example.org",
                    f"JPU-Share Job_id={ok} Name=train Ended, Run time T, COMPLETED, ExitCode 0",
                ),
                (
                    f"{me}@example.org",  # no --mail-user: the account at JPUSHARE_MAIL_DOMAIN
                    f"JPU-Share Job_id={bad} Name=broken Failed, Run time T, FAILED, ExitCode 3",
                ),
                (
                    "last@example.org",
                    f"JPU-Share Job_id={last} Name=last Ended, Run time T, COMPLETED, ExitCode 0",
                ),
            ]
        )
        first = mailbox.received()[0].message
        assert first["From"] == "jpushare@cluster.example.org"
        assert first["X-JPU-Share-Mail-Type"] in ("BEGIN", "END", "FAIL")
        assert service.stop() == 0
        again = _start(world, "mail-again", mailbox.host, mailbox.port)
        world.services.append(again)
        after = submit_with_mail(sessions, alice, "true", "END", "after@example.org", "after")
        wait_for(lambda: any("Name=after " in s for s in mailbox.subjects()), "the new mail")
        subjects = mailbox.subjects()
        assert len(subjects) == 5, subjects  # nothing sent before the restart came again
        assert _plain(subjects[-1]) == (
            f"JPU-Share Job_id={after} Name=after Ended, Run time T, COMPLETED, ExitCode 0"
        )
        assert "Traceback" not in service.log() + again.log()
    finally:
        for s in world.services:
            s.kill()


def test_a_hung_relay_does_not_hold_the_dispatcher_back(
    sessions: sessionmaker[Session], db_url: str, tmp_path: Path, black_hole: BlackHole
) -> None:
    world = World(sessions, db_url, tmp_path)
    _start(world, "hung", "127.0.0.1", black_hole.port, JPUSHARE_SMTP_TIMEOUT_S="300")
    try:
        alice = world.users["alice"].id
        mailed = submit_with_mail(sessions, alice, "true", "ALL", "alice@example.org")
        wait_for(lambda: black_hole.accepted == 1, "the notifier is stuck in the relay")
        later = [submit_with_mail(sessions, alice, "true") for _ in range(3)]
        wait_for(
            lambda: all(_state(world, j) == "COMPLETED" for j in [mailed, *later]),
            "jobs dispatched and run while the relay hangs",
        )
        assert black_hole.accepted == 1  # still waiting for its greeting all along
    finally:
        for s in world.services:
            s.kill()
