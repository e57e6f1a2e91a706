"""Jobs with a mail request, written as the API writes them (one transaction)."""

from __future__ import annotations

from sqlalchemy.orm import Session, sessionmaker

from jpushare import store
from jpushare.mail_types import parse_mail_types
from jpushare.store.notifications import set_job_mail


def submit_with_mail(
    sessions: sessionmaker[Session],
    user_id: int,
    command: str,
    mail_type: str | None = None,
    mail_user: str | None = None,
    name: str = "",
) -> int:
    with sessions.begin() as s:
        job = store.submit(
            s, user_id=user_id, name=name, command=command, num_gpus=1, now=store.utc_now()
        ).job
        if mail_type is not None:
            set_job_mail(s, job.id, parse_mail_types(mail_type)[0], mail_user)
        return job.id
