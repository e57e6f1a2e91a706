"""The notifications' tables on both databases: a job's mail request, the cursors, the
events read after a cursor with what a message needs of their job."""

from __future__ import annotations

from sqlalchemy.orm import Session, sessionmaker

from jpushare import store
from jpushare.mail_types import MailType
from jpushare.store.notifications import events_after, job_mail, move_cursor, start_cursor
from tests.dispatcher.conftest import init_cluster
from tests.notify.helpers import submit_with_mail


def test_a_jobs_mail_request_is_kept_and_read_with_its_events(
    sessions: sessionmaker[Session],
) -> None:
    users = init_cluster(sessions)
    asked = submit_with_mail(sessions, users["alice"].id, "true", "END,FAIL", "a@example.org")
    silent = submit_with_mail(sessions, users["bob"].id, "true", name="quiet")
    with sessions() as s:
        assert job_mail(s, asked) == (frozenset({MailType.END, MailType.FAIL}), "a@example.org")
        assert job_mail(s, silent) == (frozenset(), None)
        events = events_after(s, 0, 100)
    assert [(e.job_id, e.kind) for e in events] == [(asked, "submitted"), (silent, "submitted")]
    first, second = events
    assert first.mail_types == {MailType.END, MailType.FAIL}
    assert first.mail_user == "a@example.org"
    assert (first.user, first.lab, first.num_gpus) == ("alice", "alpha", 1)
    assert first.unix_user == users["alice"].unix_user
    assert second.mail_types == frozenset() and second.job_name == "quiet"
    with sessions() as s:
        assert [e.event_id for e in events_after(s, first.event_id, 100)] == [second.event_id]
        assert events_after(s, second.event_id, 100) == []


def test_a_new_cursor_starts_after_the_history_and_moves_only_from_where_it_is(
    sessions: sessionmaker[Session],
) -> None:
    users = init_cluster(sessions)
    submit_with_mail(sessions, users["alice"].id, "true", "ALL")
    now = store.utc_now()
    with sessions.begin() as s:
        newest = events_after(s, 0, 100)[-1].event_id
        assert start_cursor(s, "mail", now) == newest  # history is not sent
        assert start_cursor(s, "webhook", now) == newest
    with sessions.begin() as s:
        assert move_cursor(s, "mail", newest, newest + 5, now)
        assert not move_cursor(s, "mail", newest, newest + 9, now)  # another moved it
    with sessions.begin() as s:
        assert start_cursor(s, "mail", now) == newest + 5  # kept across "restarts"
        assert start_cursor(s, "webhook", now) == newest  # each channel its own
