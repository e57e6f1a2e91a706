"""The webhook channel against a real HTTP server that fails its first answers: each
event is posted until it goes, with backoff between the tries, and the cursor moves past
it only then; an answer that no retry can change is given up at once and counted."""

from __future__ import annotations

import threading
from collections import Counter

from sqlalchemy.orm import Session, sessionmaker

from jpushare import store
from jpushare.notify.channels import WebhookChannel
from jpushare.notify.settings import Retries
from jpushare.notify.worker import ChannelWorker
from jpushare.store.notifications import events_after, start_cursor
from tests.dispatcher.conftest import init_cluster
from tests.notify.conftest import Webhook
from tests.notify.helpers import submit_with_mail


class RecordingStop(threading.Event):
    """The stop event, keeping every wait it was asked for (the backoff)."""

    def __init__(self) -> None:
        super().__init__()
        self.waits: list[float] = []

    def wait(self, timeout: float | None = None) -> bool:
        self.waits.append(timeout if timeout is not None else -1.0)
        return super().wait(timeout)


def _worker(
    sessions: sessionmaker[Session], hook: Webhook, retries: Retries, counts: Counter[str]
) -> ChannelWorker:
    def count(channel: str, outcome: str) -> None:
        counts[f"{channel}/{outcome}"] += 1

    channel = WebhookChannel(hook.url, 5.0, retries, count)
    return ChannelWorker(channel, sessions, poll_s=0.01)


def test_an_event_is_posted_again_with_backoff_until_it_goes(
    sessions: sessionmaker[Session], webhook: Webhook
) -> None:
    users = init_cluster(sessions)
    counts: Counter[str] = Counter()
    worker = _worker(sessions, webhook, Retries(tries=5, backoff_s=0.01), counts)
    stop = RecordingStop()
    assert worker.step(stop) is False  # the cursor starts after the history: nothing yet
    webhook.fail_first = 2
    job = submit_with_mail(sessions, users["alice"].id, "true", name="hooked")
    worker.step(stop)
    assert webhook.statuses == [503, 503, 204]
    assert stop.waits == [0.01, 0.02]  # backoff × 2^(tries so far - 1)
    assert webhook.bodies[0] == webhook.bodies[1] == webhook.bodies[2]
    body = webhook.bodies[-1]
    assert (body["kind"], body["job"]["id"], body["job"]["name"]) == ("submitted", job, "hooked")
    assert body["to_state"] == "GLOBAL_QUEUE_WAIT"
    assert counts == {"webhook/failed_try": 2, "webhook/sent": 1}
    with sessions.begin() as s:  # the cursor is past the delivered event, in the database
        assert start_cursor(s, "webhook", store.utc_now()) == body["event_id"]
        assert events_after(s, body["event_id"], 10) == []
    worker.step(stop)
    assert len(webhook.bodies) == 3  # delivered once: not posted again


def test_a_refusal_no_retry_can_change_is_given_up_and_the_next_event_goes(
    sessions: sessionmaker[Session], webhook: Webhook
) -> None:
    users = init_cluster(sessions)
    counts: Counter[str] = Counter()
    worker = _worker(sessions, webhook, Retries(tries=5, backoff_s=0.01), counts)
    stop = RecordingStop()
    worker.step(stop)
    webhook.fail_first, webhook.fail_status = 1, 400
    first = submit_with_mail(sessions, users["alice"].id, "true")
    second = submit_with_mail(sessions, users["bob"].id, "true")
    worker.step(stop)
    assert webhook.statuses == [400, 204]
    assert [b["job"]["id"] for b in webhook.bodies] == [first, second]
    assert stop.waits == []  # no retry of a 400
    assert counts == {"webhook/failed_try": 1, "webhook/given_up": 1, "webhook/sent": 1}


def test_a_dead_webhook_is_given_up_after_its_tries_without_holding_the_cursor(
    sessions: sessionmaker[Session], webhook: Webhook
) -> None:
    users = init_cluster(sessions)
    counts: Counter[str] = Counter()
    worker = _worker(sessions, webhook, Retries(tries=3, backoff_s=0.01), counts)
    stop = RecordingStop()
    worker.step(stop)
    webhook.fail_first = 3
    submit_with_mail(sessions, users["alice"].id, "true")
    worker.step(stop)
    assert webhook.statuses == [503, 503, 503]
    assert counts == {"webhook/failed_try": 3, "webhook/given_up": 1}
    submit_with_mail(sessions, users["bob"].id, "true")
    worker.step(stop)
    assert webhook.statuses == [503, 503, 503, 204]  # the next event was not held back


def test_an_event_its_channel_cannot_handle_is_given_up_not_a_wall(
    sessions: sessionmaker[Session], webhook: Webhook
) -> None:
    users = init_cluster(sessions)
    posted: list[int] = []

    def post(url: str, body: dict[str, object], timeout_s: float) -> None:
        job = body["job"]
        assert isinstance(job, dict)
        if job["name"] == "poison":
            raise RuntimeError("a bug about this one event")
        posted.append(int(job["id"]))

    channel = WebhookChannel(webhook.url, 5.0, Retries(tries=2, backoff_s=0.01), post=post)
    worker = ChannelWorker(channel, sessions, poll_s=0.01)
    stop = threading.Event()
    worker.step(stop)
    submit_with_mail(sessions, users["alice"].id, "true", name="poison")
    fine = submit_with_mail(sessions, users["bob"].id, "true", name="fine")
    worker.step(stop)
    assert posted == [fine]
