"""LLM backfill on Slurm: the servers are Slurm jobs of a backfill partition that research
jobs preempt, so Slurm itself frees exactly the GPUs a research job is given.

The site's slurm.conf (scripts/slurm/start-fake-cluster.sh does this for the fake cluster):
`PreemptType=preempt/partition_prio`, `PreemptMode=CANCEL`, the research partitions at a
higher `PriorityTier` than the backfill one, and `GraceTime=` on the backfill partition (the
seconds a server has between SIGTERM and SIGKILL). A research job that needs GPUs a backfill
job holds is started by Slurm once only as many backfill jobs as it needs have been
cancelled (cons_tres picks them; tests/executors/test_slurm_backfill.py shows it).

What JPU-Share makes of them (SPEC §1: GPUs a backfill server holds are not busy):
- `backfill_gpus`: the GPUs running backfill jobs hold per (node, GRES type), which
  `SlurmExecutor.inventory` takes out of `used`, so observe counts them free for research,
  never as a foreign job's, and charges them to no lab (no JPU-Share job is behind them);
- the keeper's own jobs are named `<prefix>.llm.<node>.<tier>.<slot>` (`backfill_name`): a
  name no run name (`<prefix>-<job>-<attempt>`) can be, so `runs()` never lists them and a
  restarted keeper finds its jobs by name.

Pure functions here; `SlurmBackfill` runs the commands through the executor's `_run`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC
from pathlib import Path
from typing import TYPE_CHECKING

from jpushare.executors.base import RunState, SubmitRefused
from jpushare.executors.slurm_commands import ALREADY_GONE, TRANSIENT, SlurmError
from jpushare.executors.slurm_parse import (
    SQUEUE_FORMAT,
    SlurmJob,
    parse_sbatch,
    parse_squeue,
    run_state,
    sbatch_error,
)

if TYPE_CHECKING:
    from jpushare.executors.slurm import SlurmExecutor

DEFAULT_PARTITION = "backfill"
_NAME = re.compile(
    r"(?P<prefix>[A-Za-z][A-Za-z0-9_]*)\.llm\.(?P<node>.+)\.(?P<tier>[^.]+)\.(?P<slot>\d+)"
)


@dataclass(frozen=True, slots=True)
class BackfillSlot:
    """Where one keeper job runs: node, tier (JPU-Share's name), and its number there."""

    node: str
    tier: str
    slot: int


def backfill_name(prefix: str, slot: BackfillSlot) -> str:
    """The Slurm job name of a keeper job: `<prefix>.llm.<node>.<tier>.<slot>`."""
    return f"{prefix}.llm.{slot.node}.{slot.tier}.{slot.slot}"


def parse_backfill_name(name: str, prefix: str) -> BackfillSlot | None:
    """The slot a keeper job name names; None for any other job (runs included)."""
    m = _NAME.fullmatch(name)
    if m is None or m["prefix"] != prefix:
        return None
    return BackfillSlot(m["node"], m["tier"], int(m["slot"]))


def holds_gpus(job: SlurmJob) -> bool:
    """Whether the job holds its GPUs now (running, or ending: COMPLETING keeps them)."""
    return job.nodes is not None and run_state(job.state) is RunState.RUNNING


def backfill_gpus(
    jobs: Iterable[SlurmJob], node_types: Mapping[str, Sequence[str | None]]
) -> dict[tuple[str, str | None], int]:
    """(node, GRES type) -> GPUs the backfill partition's jobs hold (one-node jobs: their
    GRES per node). An untyped request counts on a node of one GPU type only; on a mixed
    node its type is unknown and it stays counted as used (busy: the safe side)."""
    out: dict[tuple[str, str | None], int] = {}
    for job in jobs:
        if not holds_gpus(job) or job.gpu is None or job.nodes is None:
            continue
        gres_type = job.gpu.type
        if gres_type is None:
            types = node_types.get(job.nodes, ())
            if len(types) != 1:
                continue
            gres_type = types[0]
        key = (job.nodes, gres_type)
        out[key] = out.get(key, 0) + job.gpu.count
    return out


class SlurmBackfill:
    """The backfill partition's jobs through one `SlurmExecutor` (its commands and names)."""

    def __init__(self, executor: SlurmExecutor, partition: str) -> None:
        self.executor = executor
        self.partition = partition

    def jobs(self, *, states: str = "all") -> list[SlurmJob]:
        """Every job of the partition (any user's: the keeper's and a lab's own alike)."""
        ex = self.executor
        argv = [ex.commands.squeue, "-h", "-t", states, "-p", self.partition]
        return parse_squeue(ex._checked([*argv, "-O", SQUEUE_FORMAT]), UTC)

    def holding(self) -> list[SlurmJob]:
        """The partition's jobs that hold GPUs now."""
        return [j for j in self.jobs(states="running,completing,suspended") if holds_gpus(j)]

    def keeper_jobs(self) -> dict[str, tuple[BackfillSlot, SlurmJob]]:
        """Slurm id -> (slot, job) of this installation's keeper jobs squeue still shows."""
        out: dict[str, tuple[BackfillSlot, SlurmJob]] = {}
        for job in self.jobs():
            slot = parse_backfill_name(job.name, self.executor.name_prefix)
            if slot is not None and not job.refused:
                out[job.slurm_id] = (slot, job)
        return out

    def gpus_file(self, slot: BackfillSlot) -> Path:
        """Where a keeper job writes the GPUs Slurm gave it (`$SLURM_JOB_GPUS`, `0,2`)."""
        return self.executor.log_dir / f"{backfill_name(self.executor.name_prefix, slot)}.gpus"

    def submit(
        self, slot: BackfillSlot, num_gpus: int, command: str, env: Mapping[str, str]
    ) -> str:
        """sbatch one server into the backfill partition, pinned to its node and GPU type;
        Slurm sets CUDA_VISIBLE_DEVICES. The job writes its GPUs (`gpus_file`), then
        becomes `command` (bash). `env`: exported in the batch script."""
        ex = self.executor
        ex.log_dir.mkdir(parents=True, exist_ok=True)
        name = backfill_name(ex.name_prefix, slot)
        argv = [
            ex.commands.sbatch,
            "--parsable",
            f"--job-name={name}",
            f"--comment=jpushare backfill {slot.node} {slot.tier} {slot.slot}",
            f"--partition={self.partition}",
            f"--nodelist={slot.node}",
            "--nodes=1",
            "--ntasks=1",
            f"--gres={ex.gres(slot.tier, num_gpus)}",
            f"--output={ex.log_dir / (name + '.log')}",
            "--open-mode=append",
            "--no-requeue",
        ]
        exports = {**env, "JPUSHARE_BACKFILL_CMD": command}
        script = "#!/bin/bash\n" + "".join(f"export {k}={_quote(v)}\n" for k, v in exports.items())
        script += f'echo "$SLURM_JOB_GPUS" > {_quote(str(self.gpus_file(slot)))}\n'
        script += 'exec bash -c "$JPUSHARE_BACKFILL_CMD"\n'
        result = ex._run(argv, script, submit=True)
        if result.returncode != 0:
            message = sbatch_error(result.stderr or result.stdout)
            if TRANSIENT.search(result.stderr):
                raise SlurmError(f"sbatch failed: {message}")
            raise SubmitRefused(f"Slurm refused the backfill job: {message}")
        return parse_sbatch(result.stdout)

    def preemptor(self, victim: SlurmJob) -> SlurmJob | None:
        """The job that a preempted backfill job gave its GPUs to: on its node, of another
        partition, submitted before the victim ended and started at or after it (the
        first such); None when squeue shows none."""
        if victim.nodes is None or victim.ended_at is None:
            return None
        ex = self.executor
        argv = [ex.commands.squeue, "-h", "-t", "all", "-w", victim.nodes, "-O", SQUEUE_FORMAT]
        end = victim.ended_at
        candidates = [
            j
            for j in parse_squeue(ex._checked(argv), UTC)
            if j.partition != self.partition
            and j.submitted_at is not None
            and j.started_at is not None
            and j.submitted_at <= end
            and j.started_at >= end - 1.0  # Slurm prints whole seconds
            and run_state(j.state) is not RunState.PENDING
        ]
        return min(candidates, key=lambda j: j.started_at or 0.0, default=None)

    def cancel(self, slurm_id: str) -> None:
        """scancel (an ended or unknown job is fine)."""
        ex = self.executor
        result = ex._run([ex.commands.scancel, slurm_id])
        if result.returncode != 0 and not ALREADY_GONE.search(result.stderr):
            raise SlurmError(f"scancel {slurm_id} failed: {result.stderr.strip()}")


def _quote(value: str) -> str:
    return "'" + value.replace("'", "'\\''") + "'"
