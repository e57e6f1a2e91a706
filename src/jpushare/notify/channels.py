"""The mail channel (the job's owner, as sbatch's --mail-type asks) and the webhook
channel (the operator, every event), as `worker.Channel`s.

`count(channel, outcome)` is the metrics hook: outcome `sent`, `failed_try` (one try
failed; another may follow), `given_up` (not delivered, after every try or a permanent
refusal) or `no_address` (mail asked for, no --mail-user and no JPUSHARE_MAIL_DOMAIN).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence

from sqlalchemy.orm import Session, sessionmaker

from jpushare.notify.array_mail import (
    mails_as_a_whole,
    needs_begin_check,
    needs_end_check,
    plan,
    summary_mails,
)
from jpushare.notify.delivery import Outcome, deliver
from jpushare.notify.messages import Mail, address_of, mail_types_of, mails_for, webhook_body
from jpushare.notify.senders import post_json, send_mail
from jpushare.notify.settings import Retries, SmtpSettings
from jpushare.store.array_mail import array_began_before, array_ends
from jpushare.store.jobs import job_history
from jpushare.store.notifications import NotifyEvent
from jpushare.store.records import JobEventRecord

log = logging.getLogger(__name__)

Count = Callable[[str, str], None]


def _no_count(channel: str, outcome: str) -> None:
    return None


class MailChannel:
    name = "mail"

    def __init__(
        self,
        smtp: SmtpSettings,
        sessions: sessionmaker[Session],
        retries: Retries,
        count: Count = _no_count,
        send: Callable[[SmtpSettings, Mail], None] = send_mail,
    ) -> None:
        self.smtp, self.sessions, self.retries = smtp, sessions, retries
        self.count, self.send = count, send

    def handle(self, event: NotifyEvent, stop: threading.Event) -> Outcome | None:
        whole = mails_as_a_whole(event)
        if not mail_types_of(event) and not (whole and needs_end_check(event)):
            return None
        address = address_of(event, self.smtp.domain)
        if address is None:
            log.warning(
                "job %d asked for mail without --mail-user and JPUSHARE_MAIL_DOMAIN is not "
                "set: event %d (%s) not mailed",
                event.job_id,
                event.event_id,
                event.kind,
            )
            self.count(self.name, "no_address")
            return Outcome(False, 0, error="no address")
        with self.sessions() as session:
            history = job_history(session, event.job_id)
            mails = self._mails(session, event, history, address, whole)
        if not mails:
            return None
        outcome = Outcome(True, 0)
        for mail in mails:
            outcome = deliver(
                lambda mail=mail: self.send(self.smtp, mail),  # type: ignore[misc]
                self.retries,
                stop.wait,
                f"mail {mail.mail_type.value} of job {event.job_id} to {address}",
                lambda: self.count(self.name, "failed_try"),
            )
            if outcome.stopped:
                return outcome
            self.count(self.name, "sent" if outcome.delivered else "given_up")
        return outcome

    @staticmethod
    def _mails(
        session: Session,
        event: NotifyEvent,
        history: Sequence[JobEventRecord],
        address: str,
        whole: bool,
    ) -> list[Mail]:
        """The event's mails: its task's own, or (an array mailing as a whole) the
        array's summary ones (`array_mail`)."""
        if not whole:
            return mails_for(event, history, address)
        assert event.array_job_id is not None
        began = needs_begin_check(event) and array_began_before(
            session, event.array_job_id, event.event_id
        )
        ends = (
            array_ends(session, event.array_job_id, event.event_id)
            if needs_end_check(event)
            else None
        )
        todo = plan(event, began, ends)
        own = mails_for(event, history, address, todo.task_types) if todo.task_types else []
        return summary_mails(event, todo.summary, ends, address) + own


class WebhookChannel:
    name = "webhook"

    def __init__(
        self,
        url: str,
        timeout_s: float,
        retries: Retries,
        count: Count = _no_count,
        post: Callable[[str, dict[str, object], float], None] = post_json,
    ) -> None:
        self.url, self.timeout_s, self.retries = url, timeout_s, retries
        self.count, self.post = count, post

    def handle(self, event: NotifyEvent, stop: threading.Event) -> Outcome | None:
        body = webhook_body(event)
        outcome = deliver(
            lambda: self.post(self.url, body, self.timeout_s),
            self.retries,
            stop.wait,
            f"event {event.event_id} ({event.kind} of job {event.job_id}) to the webhook",
            lambda: self.count(self.name, "failed_try"),
        )
        if not outcome.stopped:
            self.count(self.name, "sent" if outcome.delivered else "given_up")
        return outcome
