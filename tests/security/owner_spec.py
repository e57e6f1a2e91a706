"""A launch of a student's job on the local executor's test node, as its owner."""

from __future__ import annotations

from jpushare.executors.base import LaunchSpec
from tests.unix_accounts import MadeAccount

NODE = "ws1"


def owner_spec(job_id: str, owner: MadeAccount, command: str, **run: object) -> LaunchSpec:
    """One rtx4090 GPU on NODE, run as `owner` in their home (unless `workdir`), with only
    PATH in the environment (unless `environment`); `run` sets any other field."""
    run.setdefault("environment", {"PATH": "/usr/bin:/bin"})
    return LaunchSpec(
        job_id=job_id,
        attempt=1,
        name=job_id,
        command=command,
        node=NODE,
        gpu_type="rtx4090",
        num_gpus=1,
        unix_user=owner.name,
        workdir=run.pop("workdir", owner.home),  # type: ignore[arg-type]
        **run,  # type: ignore[arg-type]
    )
