"""The Slurm output parsers, on output captured from a real Slurm 22.05 cluster.

Fixtures: tests/executors/fixtures/slurm/, made by scripts/slurm/capture-fixtures.sh on the
fake cluster (jobs.env names the Slurm job id of each provoked case). No cluster needed.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest

from jpushare.executors.base import NodeState, RunState
from jpushare.executors.cuda_oom import find_cuda_oom
from jpushare.executors.slurm_parse import (
    SINFO_FORMAT,
    SQUEUE_FORMAT,
    ExitStatus,
    Gres,
    SlurmJob,
    SlurmNode,
    exit_status_from_wait,
    find_host_oom,
    gpus_by_type,
    job_state_word,
    parse_exit_code,
    parse_gres,
    parse_node_state,
    parse_run_name,
    parse_sbatch,
    parse_sinfo,
    parse_squeue,
    parse_time,
    parse_tres_per_node,
    run_name,
    run_state,
    sbatch_error,
    text_or_none,
)

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = Path(__file__).parent / "fixtures" / "slurm"


def fixture(name: str) -> str:
    return (FIXTURES / name).read_text()


def job_ids() -> dict[str, str]:
    """jobs.env: `C=14` ... -> {"C": "14"}."""
    out: dict[str, str] = {}
    for line in fixture("jobs.env").splitlines():
        if line and not line.startswith("#"):
            key, _, value = line.partition("=")
            out[key] = value
    return out


def by_id(jobs: list[SlurmJob]) -> dict[str, SlurmJob]:
    return {j.slurm_id: j for j in jobs}


def by_name(nodes: list[SlurmNode]) -> dict[str, SlurmNode]:
    return {n.name: n for n in nodes}


# ------------------------------------------------------------------ format strings


def test_the_capture_script_uses_the_parsers_format_strings() -> None:
    script = (ROOT / "scripts" / "slurm" / "capture-fixtures.sh").read_text()
    assert f"SINFO_FORMAT='{SINFO_FORMAT}'" in script
    assert f"SQUEUE_FORMAT='{SQUEUE_FORMAT}'" in script


# --------------------------------------------------------------------------- nodes


def sinfo(snap: str) -> list[SlurmNode]:
    return parse_sinfo(fixture(f"sinfo-{snap}.txt"))


def test_an_idle_cluster_has_the_fake_layout_all_free_and_up() -> None:
    nodes = sinfo("idle")

    assert [(n.name, dict(n.gpus), n.partitions, n.state) for n in nodes] == [
        ("node-a", {"rtx4090": 2}, ("gpu",), NodeState.UP),
        ("node-b", {"rtx5090": 4}, ("gpu",), NodeState.UP),
        ("node-c", {"rtx4090": 4, "rtx5090": 4}, ("gpu",), NodeState.UP),
        ("node-d", {"rtx3080ti": 2}, ("gpu", "legacy"), NodeState.UP),
    ]
    assert all(sum(n.gpus_used.values()) == 0 for n in nodes)
    assert all(n.reason is None for n in nodes)


def test_a_busy_cluster_counts_every_jobs_gpus_and_unschedulable_nodes() -> None:
    # node-a: a 2-GPU JPU-Share job; node-b: draining under the TIMEOUT job; node-c: a
    # foreign job on 2 rtx5090 and a JPU-Share job on 1 rtx4090; node-d: set down.
    nodes = by_name(sinfo("busy"))

    assert dict(nodes["node-a"].gpus_used) == {"rtx4090": 2}
    assert nodes["node-a"].state is NodeState.UP
    assert dict(nodes["node-b"].gpus_used) == {"rtx5090": 1}
    assert nodes["node-b"].state is NodeState.DRAIN
    assert nodes["node-b"].reason == "capture: maintenance"
    assert dict(nodes["node-c"].gpus_used) == {"rtx4090": 1, "rtx5090": 2}
    assert nodes["node-c"].state is NodeState.UP
    assert dict(nodes["node-d"].gpus_used) == {"rtx3080ti": 0}
    assert nodes["node-d"].state is NodeState.DOWN
    assert nodes["node-d"].reason == "capture: node failure"
    assert nodes["node-d"].partitions == ("gpu", "legacy")


def test_a_drained_node_stays_unschedulable_once_its_job_is_gone() -> None:
    nodes = by_name(sinfo("drained"))

    assert nodes["node-b"].state is NodeState.DRAIN
    assert dict(nodes["node-b"].gpus_used) == {"rtx5090": 0}


def test_the_state_words_slurm_printed_are_kept_for_people() -> None:
    text = {n.name: n.state_text for n in parse_sinfo(fixture("sinfo-busy.txt"))}

    assert text == {"node-a": "mixed", "node-b": "draining", "node-c": "mixed", "node-d": "down"}


NODE_STATES = {
    "idle": NodeState.UP,
    "mixed": NodeState.UP,
    "mix": NodeState.UP,
    "allocated": NodeState.UP,
    "alloc": NodeState.UP,
    "completing": NodeState.UP,
    "mixed-": NodeState.UP,  # planned by backfill
    "idle~": NodeState.UP,  # powered off by power saving: Slurm boots it for a job
    "IDLE": NodeState.UP,
    "idle*": NodeState.DOWN,  # not responding
    "mixed*": NodeState.DOWN,
    "down": NodeState.DOWN,
    "down*": NodeState.DOWN,
    "DOWN+NOT_RESPONDING": NodeState.DOWN,
    "DOWN+DRAIN": NodeState.DOWN,
    "fail": NodeState.DOWN,
    "inval": NodeState.DOWN,
    "unk": NodeState.DOWN,
    "unknown*": NodeState.DOWN,
    "drain": NodeState.DRAIN,
    "drained": NodeState.DRAIN,
    "DRAINED": NodeState.DRAIN,
    "draining": NodeState.DRAIN,
    "drng": NodeState.DRAIN,
    "drained*": NodeState.DOWN,
    "IDLE+DRAIN": NodeState.DRAIN,
    "MIXED+DRAIN": NodeState.DRAIN,
    "failing": NodeState.DRAIN,
    "maint": NodeState.DRAIN,
    "idle$": NodeState.DRAIN,  # maintenance reservation
    "something-new": NodeState.DOWN,  # never schedule onto a state we do not know
    "": NodeState.DOWN,
}


@pytest.mark.parametrize(("text", "want"), NODE_STATES.items())
def test_a_node_state_word_maps_to_up_drain_or_down(text: str, want: NodeState) -> None:
    assert parse_node_state(text) is want


# ---------------------------------------------------------------------------- GRES

GRES = {
    "gpu:rtx4090:2": [Gres("gpu", "rtx4090", 2)],
    "gpu:rtx4090:4,gpu:rtx5090:4": [Gres("gpu", "rtx4090", 4), Gres("gpu", "rtx5090", 4)],
    "gpu:rtx4090:0(IDX:N/A),gpu:rtx5090:2(IDX:4-5)": [
        Gres("gpu", "rtx4090", 0),
        Gres("gpu", "rtx5090", 2),
    ],
    "gpu:rtx4090:2(IDX:0,2),gpu:rtx5090:1(IDX:5)": [
        Gres("gpu", "rtx4090", 2),
        Gres("gpu", "rtx5090", 1),
    ],
    "gpu:a100:4(S:0-1)": [Gres("gpu", "a100", 4)],
    "gpu:2": [Gres("gpu", None, 2)],
    "gpu": [Gres("gpu", None, 1)],
    "gpu:h100:8(S:0-1),shard:h100:64(S:0-1)": [Gres("gpu", "h100", 8), Gres("shard", "h100", 64)],
    "mps:1K": [Gres("mps", None, 1024)],
    "(null)": [],
    "": [],
}


@pytest.mark.parametrize(("text", "want"), GRES.items())
def test_a_gres_string_parses_into_entries(text: str, want: list[Gres]) -> None:
    assert parse_gres(text) == want


def test_gpu_counts_ignore_other_gres_kinds() -> None:
    assert gpus_by_type("gpu:h100:8(S:0-1),shard:h100:64") == {"h100": 8}
    assert gpus_by_type("gpu:2,gpu:a100:1") == {None: 2, "a100": 1}


def test_tres_per_node_names_the_gpus_a_job_asked_for() -> None:
    assert parse_tres_per_node("gres:gpu:rtx5090:2") == Gres("gpu", "rtx5090", 2)
    assert parse_tres_per_node("gres/gpu:rtx5090=2") == Gres("gpu", "rtx5090", 2)
    assert parse_tres_per_node("N/A") is None


# -------------------------------------------------------------------------- sbatch


def test_sbatch_prints_the_job_id_plain_or_parsable() -> None:
    assert parse_sbatch(fixture("sbatch-submitted.txt")).isdigit()
    assert (
        parse_sbatch(fixture("sbatch-submitted.txt")) == fixture("sbatch-submitted.txt").split()[-1]
    )
    assert parse_sbatch(fixture("sbatch-parsable.txt")) == fixture("sbatch-parsable.txt").strip()
    assert parse_sbatch("41;fakegpu\n") == "41"
    with pytest.raises(ValueError):
        parse_sbatch("sbatch: error: something\n")


@pytest.mark.parametrize(
    ("name", "want"),
    [
        ("gres-type", "Requested node configuration is not available"),
        ("too-many", "Requested node configuration is not available"),
        ("partition", "Invalid partition name specified"),
        ("node", "Invalid node name specified"),
    ],
)
def test_a_refusal_keeps_sbatchs_own_sentence(name: str, want: str) -> None:
    assert sbatch_error(fixture(f"sbatch-refused-{name}.txt")) == want


# ---------------------------------------------------------------------- exit codes


def test_sacct_exit_codes_are_code_and_signal() -> None:
    assert parse_exit_code("3:0") == ExitStatus(3, 0)
    assert parse_exit_code("0:9") == ExitStatus(0, 9)
    assert parse_exit_code("0:125") == ExitStatus(0, 125)
    assert parse_exit_code("") is None


def test_squeue_exit_codes_are_raw_wait_statuses() -> None:
    assert exit_status_from_wait(768) == ExitStatus(3, 0)
    assert exit_status_from_wait(9) == ExitStatus(0, 9)
    assert exit_status_from_wait(15) == ExitStatus(0, 15)
    assert exit_status_from_wait(0) == ExitStatus(0, 0)
    assert ExitStatus(0, 9).shell_code == 137
    assert ExitStatus(3, 0).shell_code == 3


# ---------------------------------------------------------------------------- jobs

# Provoked case -> (Slurm state, reason, node, exit status) for the ended snapshot.
ENDED = {
    "C": ("COMPLETED", None, "node-b", ExitStatus(0, 0)),
    "X": ("FAILED", "NonZeroExitCode", "node-d", ExitStatus(3, 0)),
    "K": ("FAILED", "JobLaunchFailure", "node-c", ExitStatus(0, 9)),
    "G": ("FAILED", "NonZeroExitCode", "node-c", ExitStatus(1, 0)),
    "M": ("OUT_OF_MEMORY", "OutOfMemory", "node-b", ExitStatus(0, 125)),
    "T": ("TIMEOUT", "TimeLimit", "node-b", ExitStatus(0, 15)),
    "Q": ("CANCELLED", None, "node-c", ExitStatus(0, 15)),
    "P": ("CANCELLED", "Resources", None, ExitStatus(0, 0)),  # cancelled while pending
    "NF": ("NODE_FAIL", "NodeDown", "node-d", ExitStatus(0, 15)),
    "RUN": ("RUNNING", None, "node-a", ExitStatus(0, 0)),
    "F": ("RUNNING", None, "node-c", ExitStatus(0, 0)),
    "RQ": ("PENDING", "BeginTime", None, ExitStatus(0, 0)),  # requeued by Slurm
}


def squeue(snap: str) -> list[SlurmJob]:
    return parse_squeue(fixture(f"squeue-{snap}.txt"), UTC)


@pytest.mark.parametrize("case", ENDED)
def test_every_provoked_job_state_parses(case: str) -> None:
    job = by_id(squeue("ended"))[job_ids()[case]]
    state, reason, node, exit_status = ENDED[case]

    assert (job.state, job.reason, job.nodes) == (state, reason, node)
    assert job.exit == exit_status


def test_a_running_job_has_its_start_time_and_no_end() -> None:
    jobs = by_id(squeue("busy"))
    run = jobs[job_ids()["RUN"]]

    assert run.state == "RUNNING"
    assert run.started_at is not None and run.started_at >= (run.submitted_at or 0)
    assert run.ended_at is None  # squeue prints NONE
    assert run.gpu == Gres("gpu", "rtx4090", 2)


def test_a_job_pending_on_resources_says_so() -> None:
    pending = by_id(squeue("busy"))[job_ids()["P"]]

    assert (pending.state, pending.reason, pending.nodes, pending.started_at) == (
        "PENDING",
        "Resources",
        None,
        None,
    )


def test_times_printed_in_another_zone_are_the_same_instants() -> None:
    utc = by_id(parse_squeue(fixture("squeue-ended.txt"), UTC))
    seoul = by_id(parse_squeue(fixture("squeue-ended-seoul.txt"), ZoneInfo("Asia/Seoul")))

    assert utc.keys() == seoul.keys()
    for sid, job in utc.items():
        assert (seoul[sid].started_at, seoul[sid].ended_at) == (job.started_at, job.ended_at)
    assert fixture("squeue-ended.txt") != fixture("squeue-ended-seoul.txt")


def test_parse_time_handles_slurms_non_times_and_zones() -> None:
    assert (
        parse_time("2026-11-30T22:52:38", UTC)
        == datetime(2026, 11, 30, 22, 52, 38, tzinfo=UTC).timestamp()
    )
    assert parse_time("1970-01-01T00:00:10", UTC) == 10.0
    assert parse_time("1970-01-01T09:00:10", ZoneInfo("Asia/Seoul")) == 10.0
    # New York, summer (UTC-4) and winter (UTC-5)
    assert parse_time("2026-07-01T08:00:00", ZoneInfo("America/New_York")) == parse_time(
        "2026-07-01T12:00:00", UTC
    )
    assert parse_time("2026-01-01T07:00:00", ZoneInfo("America/New_York")) == parse_time(
        "2026-01-01T12:00:00", UTC
    )
    for nothing in ("Unknown", "N/A", "NONE", "None", "(null)", "", "garbage"):
        assert parse_time(nothing, UTC) is None


def test_slurms_nothings_and_state_words_read_the_same_from_every_command() -> None:
    """squeue, sinfo and both sacct parsers (the executor's, slurm-peer's) share these."""
    for nothing in ("Unknown", "N/A", "None", "None assigned", "(null)", "INVALID", " ", None):
        assert text_or_none(nothing) is None
    assert text_or_none(" node-[a-b] ") == "node-[a-b]"
    words = ("CANCELLED by 0", "CANCELLED+", " running ", "", None)
    assert [job_state_word(w) for w in words] == ["CANCELLED", "CANCELLED", "RUNNING", "", ""]


def test_a_job_sbatch_refused_is_recognised_as_never_run() -> None:
    jobs = parse_squeue(fixture("squeue-ended.txt"), UTC)
    refused = sorted(j.name for j in jobs if j.refused)

    assert refused == ["jps-cap-refused-1", "jps-cap-refused-2"]


def test_a_job_name_with_separators_in_it_is_kept_whole() -> None:
    t = "2026-11-30T22:53:28"
    line = f"7|COMPLETED|None|node-d|gpu|{t}|{t}|{t}|0|N/A|root|a|b c"

    (job,) = parse_squeue(line, UTC)

    assert job.name == "a|b c" and job.gpu is None


# ---------------------------------------------------------------- runs and logs

RUN_STATES = {
    "PENDING": RunState.PENDING,
    "CONFIGURING": RunState.PENDING,
    "REQUEUED": RunState.PENDING,
    "RUNNING": RunState.RUNNING,
    "COMPLETING": RunState.RUNNING,
    "SUSPENDED": RunState.RUNNING,
    "COMPLETED": RunState.COMPLETED,
    "FAILED": RunState.FAILED,
    "CANCELLED": RunState.CANCELLED,
    "CANCELLED by 0": RunState.CANCELLED,
    "TIMEOUT": RunState.TIMEOUT,
    "DEADLINE": RunState.TIMEOUT,
    "OUT_OF_MEMORY": RunState.OOM,
    "NODE_FAIL": RunState.NODE_FAIL,
    "BOOT_FAIL": RunState.NODE_FAIL,
    "PREEMPTED": RunState.NODE_FAIL,
    "SOMETHING_NEW": RunState.FAILED,
}


@pytest.mark.parametrize(("word", "want"), RUN_STATES.items())
def test_a_slurm_job_state_maps_to_a_run_state(word: str, want: RunState) -> None:
    assert run_state(word) is want


def test_run_names_carry_the_job_id_and_attempt() -> None:
    job_id = "3f2a9c1e-7b7d-4e0b-9a57-0c5b3c1d2e4f"
    name = run_name("jps", job_id, 2)

    assert name == f"jps-{job_id}-2"
    assert parse_run_name(name, "jps") == (job_id, 2)
    assert parse_run_name("jps-cap-running-1", "jps") == ("cap-running", 1)
    assert parse_run_name("foreign-train", "jps") is None
    assert parse_run_name("jps-nodigits-x", "jps") is None
    assert parse_run_name("jpsx-a-1", "jps") is None


def test_oom_lines_in_captured_job_output() -> None:
    assert find_cuda_oom(fixture("log-cudaoom.out")) is not None
    oom = find_host_oom(fixture("log-oom.out"))
    assert oom is not None and "oom-kill" in oom
    assert find_host_oom(fixture("log-running.out")) is None
    assert find_host_oom("slurmstepd: error: Job 9 exceeded memory limit (600 > 100), being killed")


def test_a_pinned_two_gpu_job_saw_two_devices() -> None:
    line = fixture("log-running.out").strip()

    assert line == "CUDA_VISIBLE_DEVICES=0,1 SLURM_JOB_GPUS=0,1 NODE=node-a"
