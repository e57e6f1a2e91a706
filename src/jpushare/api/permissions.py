"""Who may act on a job: a student on their own, a pi on their lab's, an admin on any.

Reading the queue, jobs, placements, labs and tiers is open to every authenticated user
(it is one shared cluster, and "why" needs to name the other jobs). Cancelling a job and
reading its log follow the rule above. A lab's page (each user's usage, in flight, GPUs)
is for the lab's own members and head, and admins (`may_read_lab`).
"""

from __future__ import annotations

from jpushare.api.errors import ApiError, ErrorCode
from jpushare.store.jobs import Shown
from jpushare.store.records import JobRecord, UserRecord
from jpushare.store.schema import Role


def managed_by(user: UserRecord) -> Shown:
    """The jobs `user` may manage, as the store selects them: an admin's every job, a
    pi's lab's, a student's own. Lists read the private columns of exactly these jobs."""
    if user.role == Role.ADMIN.value:
        return Shown(every_job=True)
    if user.role == Role.PI.value:
        return Shown(lab_id=user.lab_id)
    return Shown(user_id=user.id)


def may_manage(user: UserRecord, job: JobRecord) -> bool:
    return managed_by(user).covers(job)


def require_manage(user: UserRecord, job: JobRecord, action: str) -> None:
    """403 FORBIDDEN unless `user` may `action` (e.g. "cancel") the job."""
    if may_manage(user, job):
        return
    if user.role == Role.PI.value:
        rule = f"a pi may {action} only jobs of their lab ({user.lab_name})"
    else:
        rule = f"a student may {action} only their own jobs"
    raise ApiError(
        403,
        ErrorCode.FORBIDDEN,
        f"job {job.id} belongs to {job.user_name} ({job.lab_name}): {rule}",
        {"job_id": job.id, "owner": job.user_name, "lab": job.lab_name, "role": user.role},
    )


def may_read_lab(user: UserRecord, lab: str) -> bool:
    """Whether `user` may open `lab`'s page: its members (students and PIs) and admins."""
    return user.role == Role.ADMIN.value or user.lab_name == lab


def require_read_lab(user: UserRecord, lab: str) -> None:
    """403 FORBIDDEN unless `may_read_lab`."""
    if may_read_lab(user, lab):
        return
    raise ApiError(
        403,
        ErrorCode.FORBIDDEN,
        f"{user.name} is in lab {user.lab_name}: a lab's page is for its own members and admins",
        {"lab": lab, "your_lab": user.lab_name, "role": user.role},
    )
