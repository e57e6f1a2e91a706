"""Who sees a job's private fields: its owner, its lab's PIs and admins (`may_manage`).

Everyone else sees what `squeue` shows of another user's job (id, name, user, lab, GPUs,
state, placement, times): the fields in `PRIVATE_JOB_FIELDS` are null for them and named
in the answer's `hidden` list. One list, one function, applied by every route that shows a
job (`GET /v1/jobs`, `GET /v1/jobs/{id}`, the queue, "why"): a new private field joins the
list and is hidden everywhere it appears (it must be nullable in its models; a test checks
that every job field is classified). The job's output (`/log`) is refused outright to
others (`require_manage`). Lists and the queue read lean (`managed_by`): the store loads a
private column only for the jobs whose viewer may see it, and never the environment.
"""

from __future__ import annotations

from typing import TypeVar

from pydantic import BaseModel

from jpushare.api.permissions import may_manage
from jpushare.store.jobs import PRIVATE_JOB_COLUMNS
from jpushare.store.records import JobRecord, UserRecord

# A job's fields that only its owner, its lab's PIs and admins see: the store's list, so
# that lean reads (`managed_by`) leave out exactly what this hides.
# `mail_user` is no jobs column (job_mail's): only `GET /v1/jobs/{id}` and a submit's
# answer read it, and lists leave it null.
PRIVATE_JOB_FIELDS: tuple[str, ...] = (*PRIVATE_JOB_COLUMNS, "mail_user")

View = TypeVar("View", bound=BaseModel)


def for_viewer(public: View, job: JobRecord, viewer: UserRecord) -> View:
    """`public` (a view of `job`) as `viewer` may see it: unchanged for those who may manage
    the job, else with its private fields null and listed in `hidden`."""
    if may_manage(viewer, job):
        return public
    fields = type(public).model_fields
    hidden = [name for name in PRIVATE_JOB_FIELDS if name in fields]
    if not hidden:
        return public
    update: dict[str, object] = dict.fromkeys(hidden)
    if "hidden" in fields:
        update["hidden"] = hidden
    return public.model_copy(update=update)
