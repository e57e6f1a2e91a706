"""The dispatcher's one job-id conversion, at its store boundary.

The executor and the policy name a job by a string (`LaunchSpec.job_id`, `RunInfo.job_id`,
`QueuedJob.job_id`), the store by its row's integer id. Inside the dispatcher a job id is
the string; these two functions are the only places it becomes the row id and back.
"""

from __future__ import annotations


def row_id(job_id: str) -> int | None:
    """The store's id of the job `job_id` names; None when it cannot be one of ours (a
    foreign run the executor lists under another name)."""
    return int(job_id) if job_id.isascii() and job_id.isdigit() else None


def job_id(row: int) -> str:
    """The executor's and the policy's name for the job with store id `row`."""
    return str(row)
