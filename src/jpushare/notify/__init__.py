"""Notifications: mail to a job's owner (sbatch's --mail-type / --mail-user) through the
operator's SMTP relay, and a JSON POST per job event to the operator's webhook
(`JPUSHARE_NOTIFY_URL`).

An outbox read from the ledger: every transition already writes a `job_events` row;
each channel reads the events after its own cursor in the database (`store.notifications`)
on a thread of its own (`worker`), so a restart neither loses nor repeats a notification
and a dead relay or webhook never slows the dispatch cycle. Modules: `settings` (the
environment), `messages` (pure: the mail types an event sends, subjects, the webhook's
JSON), `array_mail` (pure: an array's mail as a whole, Slurm's "Array Summary"),
`senders` (smtplib, urllib), `delivery` (retries with backoff), `gaps` (ids that
commit out of order), `channels`, `worker`; `start_notifier` is what `serve` calls.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from sqlalchemy.orm import Session, sessionmaker

from jpushare.notify.channels import Count, MailChannel, WebhookChannel, _no_count
from jpushare.notify.settings import NotifySettings, load_notify_settings
from jpushare.notify.worker import Channel, ChannelWorker

log = logging.getLogger(__name__)

__all__ = ["NotifySettings", "load_notify_settings", "start_notifier"]


def start_notifier(
    settings: NotifySettings,
    sessions: sessionmaker[Session],
    stop: threading.Event,
    may_act: Callable[[], bool] = lambda: True,
    count: Count = _no_count,
) -> list[threading.Thread]:
    """A daemon thread per configured channel (none when neither is set)."""
    channels: list[Channel] = []
    if settings.smtp is not None:
        channels.append(MailChannel(settings.smtp, sessions, settings.retries, count))
        log.info("notify: mail through %s:%d", settings.smtp.host, settings.smtp.port)
    if settings.webhook_url is not None:
        channels.append(
            WebhookChannel(
                settings.webhook_url, settings.webhook_timeout_s, settings.retries, count
            )
        )
        log.info("notify: every job event to the webhook")
    threads = []
    for channel in channels:
        worker = ChannelWorker(channel, sessions, settings.poll_s, may_act)
        thread = threading.Thread(
            target=worker.run_forever, args=(stop,), name=f"notify-{channel.name}", daemon=True
        )
        thread.start()
        threads.append(thread)
    return threads
