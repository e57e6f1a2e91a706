"""The Slurm executor's backfill arithmetic without a cluster (scripted runner, as in
test_slurm_commands.py): which GPUs leave `used`, and why only jobs seen in both squeue
reads around sinfo do. The same against the real cluster: test_slurm_backfill.py."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from jpushare.executors.slurm_backfill import backfill_gpus
from jpushare.executors.slurm_commands import CommandResult
from jpushare.executors.slurm_parse import SlurmJob, parse_tres_per_node
from tests.executors.test_slurm_commands import ScriptedSlurm, make, ok

T = "2026-12-03T17:00:00"
SINFO = (
    "node-b|gpu*|gpu:rtx5090:4|gpu:rtx5090:3(IDX:0-2)|mixed|none\n"
    "node-b|backfill|gpu:rtx5090:4|gpu:rtx5090:3(IDX:0-2)|mixed|none\n"
    "node-c|gpu*|gpu:rtx4090:4,gpu:rtx5090:4|gpu:rtx4090:1(IDX:0),gpu:rtx5090:0(IDX:N/A)|mixed|none\n"
    "node-c|backfill|gpu:rtx4090:4,gpu:rtx5090:4|gpu:rtx4090:1(IDX:0),gpu:rtx5090:0(IDX:N/A)|mixed|none\n"
)


def line(
    sid: str, node: str, gres: str, name: str = "jps.llm.x.y.0", state: str = "RUNNING"
) -> str:
    return f"{sid}|{state}|None|{node}|backfill|{T}|{T}|NONE|0|{gres}|root|{name}\n"


def job(node: str, gres: str, state: str = "RUNNING") -> SlurmJob:
    return SlurmJob("1", "x", state, nodes=node, gpu=parse_tres_per_node(gres))


def test_backfill_gpus_counts_running_jobs_per_node_and_type() -> None:
    held = backfill_gpus(
        [
            job("node-b", "gres:gpu:rtx5090:1"),
            job("node-b", "gres:gpu:rtx5090:2"),
            job("node-b", "gres:gpu:rtx5090:1", state="PENDING"),  # holds nothing yet
            job("node-b", "gres:gpu:rtx5090:1", state="COMPLETING"),  # still holds it
            job("node-b", "gres:gpu:1"),  # untyped, one type on the node: that type
            job("node-c", "gres:gpu:1"),  # untyped on a mixed node: stays busy
        ],
        {"node-b": ("rtx5090",), "node-c": ("rtx4090", "rtx5090")},
    )
    assert held == {("node-b", "rtx5090"): 5}


def test_only_backfill_jobs_in_both_reads_leave_used(tmp_path: Path) -> None:
    reads = iter(
        [
            line("10", "node-b", "gres:gpu:rtx5090:1") + line("11", "node-b", "gres:gpu:rtx5090:1"),
            # 11 ended and 12 started between: neither is surely in sinfo's GresUsed.
            line("10", "node-b", "gres:gpu:rtx5090:1") + line("12", "node-c", "gres:gpu:rtx4090:1"),
        ]
    )

    def squeue(argv: Sequence[str], stdin: str | None) -> CommandResult:
        assert argv[argv.index("-p") + 1] == "backfill"
        return ok(next(reads))

    slurm = ScriptedSlurm({"squeue": squeue, "sinfo": ok(SINFO)})
    groups = make(tmp_path, slurm, backfill_partition="backfill").inventory()

    got = {(g.node, g.gpu_type): (g.used, g.backfill, g.partitions) for g in groups}
    assert got == {
        ("node-b", "rtx5090"): (2, 1, ("gpu",)),  # 3 used, 1 of them backfill's
        ("node-c", "rtx4090"): (1, 0, ("gpu",)),
        ("node-c", "rtx5090"): (0, 0, ("gpu",)),
    }
    assert [a[0][0] for a in slurm.calls] == ["squeue", "sinfo", "squeue"]


def test_no_backfill_job_no_second_read(tmp_path: Path) -> None:
    slurm = ScriptedSlurm({"squeue": ok(""), "sinfo": ok(SINFO)})
    groups = make(tmp_path, slurm, backfill_partition="backfill").inventory()
    assert [g.used for g in groups] == [3, 1, 0]
    assert [a[0][0] for a in slurm.calls] == ["squeue", "sinfo"]
