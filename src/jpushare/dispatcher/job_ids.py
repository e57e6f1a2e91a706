"""The dispatcher's one job-id conversion, at its store boundary.

The executor and the policy name a job by a string (`LaunchSpec.job_id`, `RunInfo.job_id`,
`QueuedJob.job_id`), the store by its row's integer id. Inside the dispatcher a job id is
the string; `row_id` (which also tells a foreign run's name from ours) and the vocabulary's
`job_id` are the only places it becomes the row id and back.
"""

from __future__ import annotations

from jpushare.vocabulary import JobId, store_job_id
from jpushare.vocabulary import job_id as job_id


def row_id(job: JobId) -> int | None:
    """The store's id of the job `job_id` names; None when it cannot be one of ours (a
    foreign run the executor lists under another name)."""
    return store_job_id(job) if job.isascii() and job.isdigit() else None
