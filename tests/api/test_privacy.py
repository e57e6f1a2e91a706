"""A job's command (and working directory, environment, output) is its owner's, its lab's
PIs' and admins'; everyone else sees what `squeue` shows (README, "Privacy")."""

from __future__ import annotations

import typing

import pytest

from jpushare.api.privacy import PRIVATE_JOB_FIELDS
from jpushare.api.schemas.jobs import JobPublic
from jpushare.api.schemas.queue import QueueEntryPublic, WhyPublic
from tests.api.conftest import ApiWorld

# What squeue shows of anyone's job, and the other fields JPU-Share shows everyone (the
# queue and "why" name other jobs, and labs' bills are public). A field in neither list
# nor in PRIVATE_JOB_FIELDS fails the classification test: decide where it belongs.
SQUEUE_FIELDS = {
    "id", "job_id", "name", "user", "lab", "num_gpus", "state", "node", "tier", "rank",
    "submitted_at", "queue_entered_at", "dispatched_at", "started_at", "ended_at",
    "cpus_per_gpu", "mem_per_gpu_mb", "estimated_start", "state_label",
    # squeue's array ids (%F, %K), dependency (%E) and reason (%r): holds and dependencies
    "display_id", "array_job_id", "array_task_id", "array_limit", "array_task_ids",
    "waiting", "held", "dependency", "kill_on_invalid_dep",
}  # fmt: skip
OTHER_PUBLIC_FIELDS = {
    "min_tier", "minimum_tier_sort_order", "attempts", "exit_code", "reason", "time_limit_s",
    "run_cost_tflop_s", "reservation_cost_tflop_s", "charged_tflop_s", "reservation",
    "hidden", "lab_usage_tflop_s", "code", "sentence", "queue_length", "top_job_id",
    "fit_placements", "schedulable_fit_placements", "best_idle", "blocking", "dispatch",
    "placements", "notes", "next_cycle", "charge_provisional", "estimate_basis",
    "estimate_sentence", "lent_from_job_id", "lent_until", "mail_type",
}  # fmt: skip

# (viewer, sees alice's command): alice's own, her lab's pi, an admin; not another
# student of her lab, not another lab's student or pi.
VIEWERS = [
    ("alice", True),
    ("pia", True),
    ("root", True),
    ("carol", False),
    ("bob", False),
    ("piet", False),
]


@pytest.mark.parametrize("model", [JobPublic, QueueEntryPublic, WhyPublic])
def test_every_field_of_a_job_view_is_classified_and_private_ones_are_nullable(
    model: type[JobPublic | QueueEntryPublic | WhyPublic],
) -> None:
    for name, field in model.model_fields.items():
        assert name in SQUEUE_FIELDS | OTHER_PUBLIC_FIELDS | set(PRIVATE_JOB_FIELDS), (
            f"{model.__name__}.{name}: public (SQUEUE/OTHER_PUBLIC) or PRIVATE_JOB_FIELDS?"
        )
        if name in PRIVATE_JOB_FIELDS:
            assert type(None) in typing.get_args(field.annotation), f"{name} must be nullable"


def test_a_job_command_is_shown_to_its_owner_lab_pi_and_admins_only(api: ApiWorld) -> None:
    api.busy.update({("node-a", "rtx3080ti"): 4, ("node-b", "rtx4090"): 4})
    job = api.submit("alice", 1, command="python train.py --secret s3cr3t")
    api.submit("bob", 1, command="bob-only")
    for viewer, sees in VIEWERS:
        one = api.get(f"/v1/jobs/{job}", viewer).json()
        listed = {j["id"]: j for j in api.get("/v1/jobs", viewer).json()["data"]}[job]
        for seen in (one, listed):
            # what squeue shows is there for everyone
            assert (seen["id"], seen["user"], seen["lab"], seen["num_gpus"]) == (
                job,
                "alice",
                "alpha",
                1,
            )
            assert seen["state"] == "GLOBAL_QUEUE_WAIT" and seen["name"] == "alice-1"
            if sees:
                assert seen["command"] == "python train.py --secret s3cr3t", viewer
                assert seen["hidden"] == []
            else:
                assert seen["command"] is None, viewer
                assert seen["hidden"] == [f for f in PRIVATE_JOB_FIELDS if f in seen]
        # the queue and "why" name the job to everyone, without its command
        queue = api.get("/v1/queue", viewer).json()["data"]
        entry = next(e for e in queue if e["job_id"] == job)
        assert entry["user"] == "alice" and "s3cr3t" not in str(queue)
        why = api.get(f"/v1/jobs/{job}/why", viewer)
        assert why.status_code == 200 and "s3cr3t" not in why.text
    # a student's own job is theirs even among others'
    mine = api.get("/v1/jobs", "bob").json()["data"]
    assert {j["user"]: j["command"] for j in mine} == {"bob": "bob-only", "alice": None}


def test_the_openapi_schema_says_who_sees_what(api: ApiWorld) -> None:
    schema = api.client.get("/openapi.json").json()
    job = schema["components"]["schemas"]["JobPublic"]
    assert "its lab's PIs and admins" in job["description"]
    assert "PIs and admins only" in job["properties"]["hidden"]["description"]
    assert "null when hidden" in job["properties"]["command"]["description"]
    assert "MUNGE" in schema["info"]["description"] and "PAYLOAD_TOO_LARGE" in str(schema)
