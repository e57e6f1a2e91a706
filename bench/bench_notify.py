"""Benchmark of the notifier's outbox: how fast a channel works through the ledger.

For each backend (a SQLite file, a PostgreSQL schema) it builds a database with the
dispatcher tests' small cluster and `--jobs` submitted jobs (one `submitted` event each;
every `--mail-every`-th asks for mail), then times two channels over every event, each
from its cursor at 0 with its delivery replaced by a function that keeps the message
(so what is measured is the outbox: reading the events, building the messages and the
job histories they need, moving the cursor in the database):

- webhook: one JSON body per event, the cursor moved after each;
- mail: events without a mail request passed over (the cursor moved once per batch), a
  `submitted` event sends no mail, so to give the mail channel work each mail job also gets
  a `cancelled` event (END), whose message reads the job's history.

Nothing is asserted: it prints events per second per channel and backend.

Run: `.venv/bin/python bench/bench_notify.py [--backend sqlite|postgresql|both]
[--jobs 5000] [--mail-every 10]`; PostgreSQL is `JPUSHARE_TEST_POSTGRES_URL` (default
postgresql+psycopg://postgres@127.0.0.1:5432/test), in a schema dropped at the end.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import sqlalchemy as sa
from sqlalchemy import func, select
from sqlalchemy.engine import make_url
from sqlalchemy.orm import Session, sessionmaker

from jpushare import store
from jpushare.formats.cluster_file import parse_cluster
from jpushare.mail_types import MailType
from jpushare.notify.channels import MailChannel, WebhookChannel
from jpushare.notify.settings import Retries, SmtpSettings
from jpushare.notify.worker import Channel, ChannelWorker
from jpushare.store.cluster_setup import load_cluster_spec
from jpushare.store.notifications import NotifyCursorRow, set_job_mail
from jpushare.store.schema import JobEvent

CLUSTER = """
tiers:
  - {name: rtx4090, tflops: 82.6, sort_order: 20}
nodes:
  - {name: node-a, gpus: {rtx4090: 8}}
"""
DEFAULT_POSTGRES_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/test"


def _admin(base: str, sql: str) -> None:
    engine = sa.create_engine(base, isolation_level="AUTOCOMMIT")
    try:
        with engine.connect() as connection:
            connection.execute(sa.text(sql))
    finally:
        engine.dispose()


@contextmanager
def database(backend: str) -> Iterator[str]:
    """An empty database: a SQLite file, or a PostgreSQL schema dropped after."""
    if backend == "sqlite":
        with tempfile.TemporaryDirectory() as tmp:
            yield store.sqlite_url(Path(tmp) / "bench.sqlite")
        return
    base = os.environ.get("JPUSHARE_TEST_POSTGRES_URL") or DEFAULT_POSTGRES_URL
    schema = f"bench_{uuid.uuid4().hex[:12]}"
    _admin(base, f'CREATE SCHEMA "{schema}"')
    try:
        url = make_url(base).update_query_dict({"options": f"-csearch_path={schema}"})
        yield url.render_as_string(hide_password=False)
    finally:
        _admin(base, f'DROP SCHEMA "{schema}" CASCADE')


def fill(url: str, jobs: int, mail_every: int) -> sessionmaker[Session]:
    store.upgrade(url)
    sessions = store.make_sessionmaker(store.make_engine(url))
    now = store.utc_now()
    with sessions.begin() as s:
        load_cluster_spec(s, parse_cluster(CLUSTER), now)
        store.create_lab(s, "NLP", now)
        user = store.create_user(s, "alice", "NLP", "student", now)
    with sessions.begin() as s:
        for i in range(jobs):
            job = store.submit(
                s, user_id=user.id, name=f"j{i}", command="true", num_gpus=1, now=now
            ).job
            if i % mail_every == 0:
                set_job_mail(s, job.id, {MailType.END}, "alice@example.org")
                store.cancel_job(s, job.id, now)
    return sessions


def run(channel_name: str, sessions: sessionmaker[Session]) -> tuple[int, float]:
    sent: list[object] = []
    channel: Channel
    if channel_name == "webhook":
        channel = WebhookChannel(
            "http://unused/", 1.0, Retries(tries=1), post=lambda u, b, t: sent.append(b)
        )
    else:
        channel = MailChannel(
            SmtpSettings("unused"), sessions, Retries(tries=1),
            send=lambda smtp, mail: sent.append(mail),
        )  # fmt: skip
    with sessions.begin() as s:
        s.add(NotifyCursorRow(channel=channel_name, last_event_id=0, updated_at=store.utc_now()))
    worker = ChannelWorker(channel, sessions, poll_s=0.0)
    stop = threading.Event()
    began = time.perf_counter()
    while worker.step(stop):
        pass
    return len(sent), time.perf_counter() - began


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", choices=["sqlite", "postgresql", "both"], default="both")
    parser.add_argument("--jobs", type=int, default=5000)
    parser.add_argument("--mail-every", type=int, default=10)
    args = parser.parse_args()
    backends = ["sqlite", "postgresql"] if args.backend == "both" else [args.backend]
    print("| backend | channel | events | messages | seconds | events/s |")
    print("|---|---|---|---|---|---|")
    for backend in backends:
        with database(backend) as url:
            sessions = fill(url, args.jobs, args.mail_every)
            with sessions() as s:
                events = int(s.scalar(select(func.count()).select_from(JobEvent)) or 0)
            for name in ("webhook", "mail"):
                messages, seconds = run(name, sessions)
                print(
                    f"| {backend} | {name} | {events} | {messages} | {seconds:.2f} "
                    f"| {events / seconds:,.0f} |"
                )
            bind = sessions.kw["bind"]
            bind.dispose()


if __name__ == "__main__":
    main()
