"""The eligibility rules (holds, dependencies, array throttles) and sbatch's --array values,
as pure functions."""

from __future__ import annotations

import pytest

from jpushare.ledger.eligibility import (
    Dependency,
    Met,
    Term,
    Verdict,
    dependency_status,
    parse_dependency,
    term_status,
    verdict,
)
from jpushare.ledger.job_arrays import parse_array, task_pattern, task_variables
from jpushare.vocabulary import JobState, Waiting

Q, R, C, F, X = (
    JobState.GLOBAL_QUEUE_WAIT,
    JobState.RUNNING,
    JobState.COMPLETED,
    JobState.FAILED,
    JobState.CANCELLED,
)


@pytest.mark.parametrize(
    ("kind", "state", "met"),
    [
        ("after", Q, Met.WAIT),
        ("after", R, Met.MET),
        ("after", X, Met.MET),
        ("afterok", R, Met.WAIT),
        ("afterok", C, Met.MET),
        ("afterok", F, Met.NEVER),
        ("afterok", X, Met.NEVER),
        ("afternotok", C, Met.NEVER),
        ("afternotok", F, Met.MET),
        ("afternotok", X, Met.MET),
        ("afternotok", Q, Met.WAIT),
        ("afterany", R, Met.WAIT),
        ("afterany", F, Met.MET),
        ("afterany", None, Met.MET),  # a job the store no longer has (Slurm: purged)
    ],
)
def test_each_kind_against_each_state(kind: str, state: JobState | None, met: Met) -> None:
    assert term_status(kind, state) is met


def test_parse_keeps_the_terms_and_the_joiner() -> None:
    dep = parse_dependency("afterok:12:13_2,afterany:9")
    assert dep == Dependency((Term("afterok", ("12", "13_2")), Term("afterany", ("9",))))
    assert dep.text() == "afterok:12:13_2,afterany:9"
    either = parse_dependency("afterok:1?afternotok:2")
    assert either.any_of and either.text() == "afterok:1?afternotok:2"
    assert parse_dependency("singleton").singleton
    assert parse_dependency("afterok:3,singleton").text() == "afterok:3,singleton"


@pytest.mark.parametrize(
    "text",
    [
        "",
        "afterok",
        "afterok:",
        "afterok:x",
        "before:1",
        "afterok:1,afterok:2?afterok:3",
        "afterok:0",
        "afterok:1+30",
        "singleton?afterok:1",
    ],
)
def test_parse_refuses_what_is_not_a_dependency(text: str) -> None:
    with pytest.raises(ValueError):
        parse_dependency(text)


def _status(text: str, states: dict[int, JobState]) -> tuple[Met, str]:
    dep = parse_dependency(text)
    return dependency_status({i: (int(i),) for t in dep.terms for i in t.ids}, dep, states)


def test_all_of_waits_for_each_and_fails_on_any() -> None:
    assert _status("afterok:1:2", {1: C, 2: R}) == (Met.WAIT, "afterok:2 (job 2 is RUNNING)")
    assert _status("afterok:1:2", {1: C, 2: C})[0] is Met.MET
    met, words = _status("afterok:1,afterany:2", {1: F, 2: R})
    assert met is Met.NEVER and words == "afterok:1 (job 1 ended FAILED)"


def test_any_of_is_met_by_one_and_never_only_when_all_are() -> None:
    assert _status("afterok:1?afterok:2", {1: F, 2: C})[0] is Met.MET
    assert _status("afterok:1?afterok:2", {1: F, 2: R})[0] is Met.WAIT
    assert _status("afterok:1?afterok:2", {1: F, 2: X})[0] is Met.NEVER


def test_an_array_id_names_every_task() -> None:
    dep = parse_dependency("afterok:10")
    met, words = dependency_status({"10": (10, 11, 12)}, dep, {10: C, 11: C, 12: R})
    assert (met, words) == (Met.WAIT, "afterok:12 (job 12 is RUNNING)")


def test_verdict_order_hold_never_dependency_singleton_array() -> None:
    never = (Met.NEVER, "afterok:1 (job 1 ended FAILED)")
    assert verdict(held=True, dependency=never).waiting is Waiting.HELD
    assert verdict(held=False, dependency=never).waiting is Waiting.DEPENDENCY_NEVER_SATISFIED
    wait = verdict(held=False, dependency=(Met.WAIT, "afterok:1 (job 1 is RUNNING)"))
    assert wait == Verdict(Waiting.DEPENDENCY, "dependency: waits for afterok:1 (job 1 is RUNNING)")
    single = verdict(held=False, singleton_busy=7)
    assert single.waiting is Waiting.DEPENDENCY and "job 7" in single.waits_for
    full = verdict(held=False, array_active=4, array_limit=4)
    assert full.waiting is Waiting.ARRAY_LIMIT and full.waits_for == "array limit: 4 of 4 running"
    assert verdict(held=False, array_active=3, array_limit=4).waiting is None
    assert verdict(held=False).waiting is None


@pytest.mark.parametrize(
    ("text", "tasks", "limit"),
    [
        ("0-15", tuple(range(16)), None),
        ("1,3,5-9:2", (1, 3, 5, 7, 9), None),
        ("0-99%4", tuple(range(100)), 4),
        ("7", (7,), None),
        ("3,1,3", (1, 3), None),
    ],
)
def test_parse_array(text: str, tasks: tuple[int, ...], limit: int | None) -> None:
    assert parse_array(text) == (tasks, limit)


@pytest.mark.parametrize("text", ["", "a-b", "5-1", "0-10:0", "0-3%0", "0-3%x", "0-5000", "1-"])
def test_parse_array_refuses(text: str) -> None:
    with pytest.raises(ValueError, match="--array"):
        parse_array(text)


def test_task_pattern_and_variables() -> None:
    assert task_pattern("out_%A_%a_%j_%%a.txt", 12, 3) == "out_12_3_%j_%%a.txt"
    env = task_variables(12, 3, (1, 3, 5))
    assert env["SLURM_ARRAY_JOB_ID"] == env["JPUSHARE_ARRAY_JOB_ID"] == "12"
    assert env["SLURM_ARRAY_TASK_ID"] == "3"
    assert (env["SLURM_ARRAY_TASK_COUNT"], env["SLURM_ARRAY_TASK_MIN"]) == ("3", "1")
    assert env["JPUSHARE_ARRAY_TASK_MAX"] == "5"
