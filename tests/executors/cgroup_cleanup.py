"""What a test of the local executor leaves in the cgroup hierarchies: nothing. Its runs'
cgroups (killed, then removed) and its state directory's namespace, whatever the test did
(a run it never waited for, a process group it killed by hand)."""

from __future__ import annotations

import json
from pathlib import Path

from jpushare.executors.cgroups import RunCgroup, detect


def remove_cgroups(state_dir: Path) -> None:
    """Kill every process left in the runs' cgroups of `state_dir`, remove them and the
    namespace."""
    for record in (state_dir / "runs").glob("*.json"):
        data = json.loads(record.read_text()).get("cgroup")
        if data:
            cgroup = RunCgroup.from_json(data)
            cgroup.kill()
            cgroup.remove()
    detect(state_dir).prune()
