"""sacct --parsable2 output of the real peer cluster (fixtures/README.md) -> records."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

from jpushare.slurm_peer.sacct import alloc_gpus, parse_sacct

FIXTURES = Path(__file__).parent / "fixtures"


def _ts(text: str) -> float:
    return datetime.fromisoformat(text).replace(tzinfo=UTC).timestamp()


def test_ended_jobs_read_with_their_gpus_nodes_and_whole_second_times() -> None:
    jobs = {j.name: j for j in parse_sacct((FIXTURES / "sacct-ended.txt").read_text())}
    assert sorted(jobs) == ["cap-t1", "cap-t2", "cap-t3", "cap-t4", "cap-t7"]
    t2 = jobs["cap-t2"]
    assert (t2.slurm_id, t2.account, t2.state, t2.nodes) == ("7", "kdg", "COMPLETED", "node-c")
    assert t2.gpus == {"rtx4090": 4}
    assert t2.submit == _ts("2026-12-01T16:30:20")
    assert t2.start == _ts("2026-12-01T16:30:20")
    assert t2.end == _ts("2026-12-01T16:30:30")
    assert t2.time_limit_min == 1
    assert t2.final and t2.ran
    # "CANCELLED by 0" is the state CANCELLED; a job cancelled while running ran
    t4 = jobs["cap-t4"]
    assert t4.state == "CANCELLED" and t4.ran and t4.gpus == {"rtx4090": 1}
    assert jobs["cap-t7"].gpus == {"rtx3080ti": 2}


def test_running_and_pending_jobs_have_unknown_times_and_no_allocation() -> None:
    jobs = {j.slurm_id: j for j in parse_sacct((FIXTURES / "sacct-active.txt").read_text())}
    running, pending = jobs["12"], jobs["14"]
    assert running.state == "RUNNING" and running.end is None and not running.final
    assert running.ran and running.nodes == "node-b"
    assert pending.state == "PENDING"
    assert pending.start is None and pending.end is None and pending.nodes is None
    assert pending.gpus == {} and not pending.ran
    assert pending.name == "cap-pending|odd name"  # the name is last: a "|" stays in it


def test_times_in_another_zone_and_lines_that_are_not_allocations() -> None:
    seoul = timezone(timedelta(hours=9))
    text = (
        "5|lab|COMPLETED|0:0|2026-12-01T10:00:00|2026-12-01T10:00:01|2026-12-01T10:00:09|"
        "node-a|billing=82,gres/gpu:rtx4090=1,gres/gpu=1|60|x\n"
        "5.batch|lab|COMPLETED|0:0|2026-12-01T10:00:00|2026-12-01T10:00:01|"
        "2026-12-01T10:00:09|node-a||UNLIMITED|batch\n"
        "6_1|lab|COMPLETED|0:0|||||||y\n"
        "short|line\n"
    )
    (job,) = parse_sacct(text, seoul)
    assert job.start == _ts("2026-12-01T01:00:01")
    assert job.time_limit_min == 60


def test_alloc_gpus_keeps_each_type_of_a_mixed_allocation() -> None:
    tres = "billing=187,cpu=1,gres/gpu:rtx4090=1,gres/gpu:rtx5090=1,gres/gpu=2,mem=500M,node=1"
    assert alloc_gpus(tres) == {"rtx4090": 1, "rtx5090": 1}
    assert alloc_gpus("cpu=1,mem=500M,node=1") == {}
