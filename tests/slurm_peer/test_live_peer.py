"""The driver and sacct on the real peer cluster (FAKE_SLURM_PEER=1 start-fake-cluster.sh).

Starting the peer costs ~5 s (`make services` does it as root), so these run against it,
not a mock: missing, they skip here and fail under CI=true (tests/missing.py). ~20 s.
"""

from __future__ import annotations

import json
import os
import subprocess
import uuid
from pathlib import Path

import pytest

from jpushare.formats.cluster_file import load_cluster
from jpushare.formats.trace_file import load_trace
from jpushare.slurm_peer.driver import command_runner, run_trace
from jpushare.slurm_peer.sacct import SACCT_FORMAT, parse_sacct
from tests.missing import missing

pytestmark = pytest.mark.slurm

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = Path(__file__).parent / "fixtures"
PEER_CONF = "/etc/slurm-peer/slurm.conf"


def require_peer() -> None:
    hint = "make services starts it as root: FAKE_SLURM_PEER=1 scripts/slurm/start-fake-cluster.sh"
    if os.geteuid() != 0:
        missing("the peer run adds Slurm accounts: needs root", hint)
    run = command_runner(PEER_CONF, timeout_s=15)
    try:
        ping = run(["scontrol", "ping"], None)
        dbd = run(["sacctmgr", "-n", "-P", "show", "cluster", "format=cluster"], None)
    except (OSError, subprocess.TimeoutExpired) as e:
        missing(f"peer Slurm cluster unreachable ({e})", hint)
    if "is UP" not in ping[1] or dbd[0] != 0 or "fakepeer" not in dbd[1].split():
        missing(f"peer Slurm cluster unreachable ({ping[1].strip()} {dbd[2].strip()})", hint)


def test_tiny_trace_through_slurm_reads_back_in_trace_seconds(tmp_path: Path) -> None:
    require_peer()
    run = command_runner(PEER_CONF)
    prefix = f"jpt{uuid.uuid4().hex[:6]}-"
    trace = load_trace(FIXTURES / "tiny-trace.csv")
    cluster = load_cluster(ROOT / "examples" / "slurm-cluster.yaml")

    result, doc = run_trace(trace, cluster, 60.0, tmp_path, run=run, name_prefix=prefix)

    jobs = {j.job_id: j for j in result.jobs}
    assert {j: r.state.value for j, r in jobs.items()} == {
        "t1": "COMPLETED",
        "t2": "COMPLETED",
        "t3": "COMPLETED",
        "t4": "CANCELLED",  # scancel at trace 400 while it ran
        "t5": "REJECTED",  # 8 GPUs: no placement holds them
        "t6": "CANCELLED",  # cancelled at its submission: never submitted
        "t7": jobs["t7"].state.value,  # FAILED (oom) if Slurm chose node-d, else COMPLETED
    }
    assert jobs["t7"].state.value == (
        "FAILED" if jobs["t7"].attempts[0].tier == "rtx3080ti" else "COMPLETED"
    )
    # an idle cluster starts each job in the second it is submitted (Slurm keeps whole
    # seconds: at --speed 60 a second is 60 trace seconds)
    for j in ("t1", "t2", "t3", "t4", "t7"):
        a, wait = jobs[j].attempts[0], jobs[j].wait_s
        assert wait is not None and 0 <= wait <= 60, j
        if jobs[j].state.value == "COMPLETED":
            assert abs((a.end - a.start) - next(t.duration for t in trace if t.job_id == j)) <= 60
    assert jobs["t3"].attempts[0].tier == "rtx5090"  # min_tier rtx5090 -> gpu:rtx5090:2
    assert 340 <= jobs["t4"].attempts[0].end <= 460
    assert doc["states"]["REJECTED"] == 1 and (tmp_path / "jobs.csv").exists()
    assert (tmp_path / "peer.json").exists()

    # each job ran under its lab's account, as sacct records it
    ids = sorted(json.loads((tmp_path / "peer.json").read_text())["slurm_ids"].values())
    code, out, _ = run(
        ["sacct", "-X", "-n", "--parsable2", "-o", SACCT_FORMAT, "-j", ",".join(ids)], None
    )
    assert code == 0
    accounts = {r.name.removeprefix(prefix): r.account for r in parse_sacct(out)}
    assert accounts == {"t1": "bcg", "t2": "kdg", "t3": "nlp", "t4": "bcg", "t7": "nlp"}
