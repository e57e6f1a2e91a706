"""The mail channel against a real SMTP server: a relay that is down is tried again with
backoff and then given up, the next mail going once it is back; an address the relay
refuses for good is given up at once; a job without an address is counted."""

from __future__ import annotations

from collections import Counter
from typing import Any

from aiosmtpd.controller import Controller
from sqlalchemy.orm import Session, sessionmaker

from jpushare import store
from jpushare.notify.channels import MailChannel
from jpushare.notify.settings import Retries, SmtpSettings
from jpushare.notify.worker import ChannelWorker
from tests.dispatcher.conftest import init_cluster
from tests.notify.conftest import MailBox, free_port
from tests.notify.helpers import submit_with_mail
from tests.notify.test_webhook import RecordingStop


def _worker(
    sessions: sessionmaker[Session], port: int, counts: Counter[str], domain: str | None = None
) -> ChannelWorker:
    def count(channel: str, outcome: str) -> None:
        counts[outcome] += 1

    smtp = SmtpSettings("127.0.0.1", port, timeout_s=10.0, sender="jps@c.org", domain=domain)
    return ChannelWorker(
        MailChannel(smtp, sessions, Retries(tries=3, backoff_s=0.01), count), sessions, 0.01
    )


def test_a_relay_that_is_down_is_tried_with_backoff_then_given_up(
    sessions: sessionmaker[Session], mailbox: MailBox
) -> None:
    users = init_cluster(sessions)
    counts: Counter[str] = Counter()
    down = _worker(sessions, free_port(), counts)  # nothing listens there
    stop = RecordingStop()
    down.step(stop)
    # A queued job cancelled: its END mail.
    job = submit_with_mail(sessions, users["alice"].id, "true", "END", "a@example.org", "lost")
    with sessions.begin() as s:
        store.cancel_job(s, job, store.utc_now())
    down.step(stop)
    assert stop.waits == [0.01, 0.02]
    assert counts == {"failed_try": 3, "given_up": 1}
    up = _worker(sessions, mailbox.port, counts)  # the relay is back (same cursor, in the db)
    later = submit_with_mail(sessions, users["alice"].id, "true", "END", "a@example.org", "back")
    with sessions.begin() as s:
        store.cancel_job(s, later, store.utc_now())
    up.step(stop)
    assert [m.subject for m in mailbox.received()] == [
        f"JPU-Share Job_id={later} Name=back Ended, Run time 00:00:00, CANCELLED"
    ]
    assert counts["sent"] == 1


def test_a_refused_address_is_given_up_at_once_and_no_address_is_counted(
    sessions: sessionmaker[Session],
) -> None:
    class Refusing:
        async def handle_RCPT(
            self, server: Any, session: Any, envelope: Any, address: str, options: Any
        ) -> str:
            if address.startswith("nobody@"):
                return "550 no such user"
            envelope.rcpt_tos.append(address)
            return "250 OK"

        async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
            got.extend(envelope.rcpt_tos)
            return "250 OK"

    got: list[str] = []
    port = free_port()
    controller = Controller(Refusing(), hostname="127.0.0.1", port=port)
    controller.start()
    try:
        users = init_cluster(sessions)
        counts: Counter[str] = Counter()
        worker = _worker(sessions, port, counts)
        stop = RecordingStop()
        worker.step(stop)
        ids = [
            submit_with_mail(sessions, users["alice"].id, "true", "END", "nobody@c.org"),
            submit_with_mail(sessions, users["alice"].id, "true", "END", None),  # no domain
            submit_with_mail(sessions, users["alice"].id, "true", "END", "alice@c.org"),
        ]
        with sessions.begin() as s:
            for job in ids:
                store.cancel_job(s, job, store.utc_now())
        worker.step(stop)
        assert stop.waits == []  # a 550 is not tried again
        assert counts == {"failed_try": 1, "given_up": 1, "no_address": 1, "sent": 1}
        assert got == ["alice@c.org"]
    finally:
        controller.stop()
