"""The shared vocabulary: a leaf every layer may import, whose values are the stored text."""

from __future__ import annotations

import importlib
import json
import subprocess
import sys

import pytest

from jpushare.api.schemas.queue import WhyPublic
from jpushare.vocabulary import (
    STARTING,
    JobState,
    NodeState,
    ReleaseReason,
    WhyCode,
    job_id,
    store_job_id,
)

FIRST_MIGRATION = importlib.import_module(
    "jpushare.store.migrations.versions.0001_create_everything"
)


def test_it_imports_nothing_of_the_project() -> None:
    code = (
        "import json, sys\n"
        "import jpushare.vocabulary\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.startswith('jpushare'))))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert json.loads(out.stdout) == ["jpushare", "jpushare.vocabulary"]


def test_the_states_are_the_text_the_database_holds() -> None:
    # The first migration's CHECKs spell the values out; the enums must not drift from them.
    assert tuple(JobState) == FIRST_MIGRATION.JOB_STATES
    assert tuple(NodeState) == FIRST_MIGRATION.NODE_STATES
    assert [s for s in JobState if s.ended] == [
        JobState.COMPLETED,
        JobState.FAILED,
        JobState.CANCELLED,
    ]
    assert [s for s in JobState if s.active] == [JobState.DISPATCHED, JobState.RUNNING]


def test_a_member_is_its_text_in_json_and_comparisons() -> None:
    assert json.dumps({"state": JobState.RUNNING}) == '{"state": "RUNNING"}'
    assert ReleaseReason("r3") is ReleaseReason.R3 and f"{ReleaseReason.R3}" == "r3"


@pytest.mark.parametrize("reason", list(ReleaseReason))
def test_every_release_reason_says_itself_now_and_afterwards(reason: ReleaseReason) -> None:
    assert reason.sentence and reason.sentence_then
    assert reason.sentence != reason.sentence_then


def test_job_ids_convert_at_the_store_boundary() -> None:
    assert job_id(42) == "42" and store_job_id(job_id(42)) == 42
    with pytest.raises(ValueError):
        store_job_id("jobA")


@pytest.mark.parametrize("code", [*WhyCode, STARTING, *JobState])
def test_the_why_answer_accepts_every_code_and_only_those(code: str) -> None:
    body = {"job_id": 1, "state": "GLOBAL_QUEUE_WAIT", "sentence": "s", "num_gpus": 1}
    assert WhyPublic.model_validate({**body, "code": code}).model_dump(mode="json")["code"] == code
    with pytest.raises(ValueError):
        WhyPublic.model_validate({**body, "code": "MAYBE_LATER"})
