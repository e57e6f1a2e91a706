"""What starting a job needs from its row and its owner's: command, account, directory,
environment, files, CPU/memory request. Read in chunks, for the dispatcher's launches."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from sqlalchemy import select
from sqlalchemy.orm import Session

from jpushare.store.records import DispatchedJob
from jpushare.store.schema import Job, User
from jpushare.store.transitions import id_chunks


@dataclass(frozen=True, slots=True)
class LaunchDetails:
    name: str
    command: str
    user_name: str
    unix_user: str
    time_limit_s: float | None
    workdir: str | None
    environment: dict[str, str] | None
    output_path: str | None
    error_path: str | None
    cpus_per_gpu: int | None  # the job's own request (None: its tier's default)
    mem_per_gpu_mb: int | None

    def dispatched(
        self,
        job_id: int,
        attempt: int,
        placement: tuple[str, str, str | None, int],
        tier_defaults: tuple[int | None, int | None],
    ) -> DispatchedJob:
        """The launch of attempt `attempt` on `placement` (node, tier, partition, GPUs),
        with the tier's CPU/memory defaults where the job asked for none."""
        node, tier, partition, num_gpus = placement
        tier_cpus, tier_mem = tier_defaults
        return DispatchedJob(
            job_id=job_id,
            attempt=attempt,
            name=self.name,
            command=self.command,
            user_name=self.user_name,
            node=node,
            tier=tier,
            partition=partition,
            num_gpus=num_gpus,
            time_limit_s=self.time_limit_s,
            unix_user=self.unix_user,
            workdir=self.workdir,
            environment=self.environment,
            output_path=self.output_path,
            error_path=self.error_path,
            cpus_per_gpu=self.cpus_per_gpu if self.cpus_per_gpu is not None else tier_cpus,
            mem_per_gpu_mb=self.mem_per_gpu_mb if self.mem_per_gpu_mb is not None else tier_mem,
        )


def launch_details(session: Session, job_ids: Iterable[int]) -> dict[int, LaunchDetails]:
    """Job id -> its launch details (missing ids are left out)."""
    out: dict[int, LaunchDetails] = {}
    for chunk in id_chunks(job_ids):
        rows = session.execute(
            select(
                Job.id,
                Job.name,
                Job.command,
                User.name,
                User.unix_user,
                Job.time_limit_s,
                Job.workdir,
                Job.environment,
                Job.output_path,
                Job.error_path,
                Job.cpus_per_gpu,
                Job.mem_per_gpu_mb,
            )
            .join(User, User.id == Job.user_id)
            .where(Job.id.in_(chunk))
        )
        for jid, *rest in rows:
            out[jid] = LaunchDetails(*rest)
    return out
