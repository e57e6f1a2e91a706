"""The replay's plan: when things happen, what each job runs, who submits it."""

from __future__ import annotations

import subprocess
from pathlib import Path

from jpushare.executors.cuda_oom import find_cuda_oom
from jpushare.formats.trace_file import TraceJob
from jpushare.replay import plan


def job(job_id: str, submit: float, duration: float = 60, **kw: object) -> TraceJob:
    return TraceJob(job_id, submit, duration, 1, "NLP", **kw)  # type: ignore[arg-type]


def test_actions_are_scaled_and_a_submission_comes_before_a_cancel_at_the_same_time() -> None:
    jobs = [job("a", 120, cancel_time=240), job("b", 60), job("c", 240)]
    steps = plan.actions(jobs, speed=60)
    assert [(s.at_s, s.kind.value, jobs[s.index].job_id) for s in steps] == [
        (1.0, "submit", "b"),
        (2.0, "submit", "a"),
        (4.0, "submit", "c"),
        (4.0, "cancel", "a"),
    ]


def test_a_plain_job_sleeps_its_scaled_duration() -> None:
    assert plan.job_command(job("a", 0, duration=90), speed=60) == "sleep 1.500"


def test_the_trace_time_limit_is_sent_scaled_as_the_run_and_none_stays_none() -> None:
    # An hour-rounded limit of a 90 s run at --speed 60: 60 s, as Slurm's --time gets it.
    assert plan.time_limit_s(job("a", 0, duration=90, time_limit=3600.0), speed=60) == 60.0
    assert plan.time_limit_s(job("b", 0, duration=90), speed=60) is None
    # Never under the API's 1 s, never rounded below the scaled value.
    assert plan.time_limit_s(job("c", 0, duration=5, time_limit=10.0), speed=60) == 1.0
    assert plan.time_limit_s(job("d", 0, duration=90, time_limit=100.0), speed=60) == 1.667


def _run(command: str, cwd: Path, job_id: int, attempt: int) -> subprocess.CompletedProcess[str]:
    env = {
        "PATH": "/usr/bin:/bin",
        "JPUSHARE_JOB_ID": str(job_id),
        "JPUSHARE_ATTEMPT": str(attempt),
    }
    return subprocess.run(
        ["bash", "-c", command], cwd=cwd, env=env, capture_output=True, text=True, timeout=30
    )


def test_an_oom_job_runs_out_of_memory_as_pytorch_does_when_its_marker_says_so(
    tmp_path: Path,
) -> None:
    (tmp_path / plan.MARKER_DIR).mkdir()
    command = plan.job_command(job("x", 0, duration=6, oom_on=frozenset({"rtx4090"})), 60)
    (tmp_path / plan.marker(7, 1, oom=True)).touch()
    (tmp_path / plan.marker(7, 2, oom=False)).touch()

    first = _run(command, tmp_path, 7, 1)
    assert first.returncode == 1
    assert find_cuda_oom(first.stderr) is not None  # what the executors look for
    second = _run(command, tmp_path, 7, 2)
    assert (second.returncode, second.stderr) == (0, "")


def test_each_lab_gets_its_own_replay_user() -> None:
    names = plan.user_names(["NLP", "nlp", "Vision Lab", "NLP"])
    assert names == {"NLP": "replay-nlp", "Vision Lab": "replay-vision-lab", "nlp": "replay-nlp-2"}
