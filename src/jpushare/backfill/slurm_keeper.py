"""The backfill keeper on Slurm: LLM servers as Slurm jobs of the backfill partition.

`jpushare backfill` with JPUSHARE_EXECUTOR=slurm runs one `SlurmKeeper`. Slurm does the
yielding (`executors.slurm_backfill`: research jobs preempt the partition's jobs), so the
keeper only keeps the count right. Each tick (`tick`):

1. its jobs, found by name (`<prefix>.llm.<node>.<tier>.<slot>`, any state squeue still
   shows): those it did not know are adopted (a restarted keeper); a job it knew that has
   ended (preempted for a research job, crashed, exited, cancelled) frees its slot, which
   waits its backoff, as the local keeper's groups do (`backoff_s` x 2^(ends in a row), at
   most `backoff_max_s`; a server that ran `backoff_max_s` resets the count). A preempted
   one is a yield: its preemptor's dispatch (sbatch) -> start is the yield latency;
2. per placement, the GPU groups JPU-Share reports idle or reserved (`wanted`: idle +
   reserved GPUs of an open node, / `gpus_per_server`) are what it keeps: its running jobs
   first, then pending ones; any more are cancelled (pending first, then the youngest);
   any fewer, it submits into free slots whose backoff is over (`SlurmBackfill.submit`:
   the command template with {port}, {node} and {gpus} (`$SLURM_JOB_GPUS` in the job),
   CUDA_VISIBLE_DEVICES set by Slurm). A pending job starts when Slurm has the GPUs;
3. it writes a record per running server (`backfill_servers.ServerRecord`, GPUs as the
   job wrote them to `<name>.gpus`) in `<log dir>/backfill/`, which GET /v1/backfill and
   /v1/placements read, and integrates the GPU-seconds served on reserved GPUs, served on
   idle ones, and idle with nothing running (`usage.json`, as the local keeper).

Nothing here is a JPU-Share job: no database row, nothing charged to a lab (SPEC §1).
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from jpushare.backfill.ticking import run_ticks
from jpushare.config import BackfillSettings
from jpushare.executors.backfill_servers import (
    ServerRecord,
    Yielded,
    forget,
    load_all,
    read_usage,
    record_yield,
    save,
    server_key,
    write_usage,
)
from jpushare.executors.base import RunState, SubmitRefused
from jpushare.executors.slurm import SlurmExecutor
from jpushare.executors.slurm_backfill import BackfillSlot, SlurmBackfill, backfill_name
from jpushare.executors.slurm_commands import SlurmError
from jpushare.executors.slurm_parse import SlurmJob, run_state

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Want:
    """One placement as JPU-Share reports it: GPUs, and of them idle or reserved now."""

    capacity: int
    free: int  # idle + reserved on an open node (0 on a down or drained one)
    reserved: int = 0


Wanted = Callable[[], Mapping[tuple[str, str], Want]]  # (node, tier) -> Want


@dataclass(slots=True)
class _Backoff:
    ends_in_a_row: int = 0
    next_start_at: float = 0.0


@dataclass(frozen=True, slots=True)
class SlurmTickReport:
    submitted: tuple[str, ...] = ()  # Slurm ids
    cancelled: tuple[str, ...] = ()
    ended: tuple[str, ...] = ()
    adopted: tuple[str, ...] = ()
    running: tuple[str, ...] = ()


@dataclass(slots=True)
class _Tracked:
    slot: BackfillSlot
    since: float  # when the keeper first saw it running (or submitted it)
    running: bool = False


def _live(job: SlurmJob) -> bool:
    return not run_state(job.state).ended


def _running(job: SlurmJob) -> bool:
    return job.nodes is not None and run_state(job.state) is RunState.RUNNING


class SlurmKeeper:
    """Keeps the backfill jobs of one Slurm executor (module docstring)."""

    def __init__(
        self,
        executor: SlurmExecutor,
        settings: BackfillSettings,
        *,
        wanted: Wanted,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if executor.backfill is None:
            raise ValueError("the Slurm executor has no backfill partition")
        self.executor = executor
        self.backfill: SlurmBackfill = executor.backfill
        self.settings = settings
        self.dir = executor.log_dir / "backfill"
        self.dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        self._wanted = wanted
        self._clock = clock
        self._tracked: dict[str, _Tracked] = {}  # Slurm id -> what we know of it
        self._backoff: dict[BackfillSlot, _Backoff] = {}
        self._usage = read_usage(self.dir)
        self._last_tick: float | None = None
        self._first = True
        self.ports: dict[BackfillSlot, int] = {}

    # --- one tick --------------------------------------------------------------------------

    def tick(self) -> SlurmTickReport:
        now = self._clock()
        wanted = self._wanted()
        self._assign_ports(wanted)
        jobs = self.backfill.keeper_jobs()
        ended, adopted = self._settle(jobs, now)
        submitted: list[str] = []
        cancelled: list[str] = []
        live = dict(self._tracked)
        k = self.settings.gpus_per_server
        by_place: dict[tuple[str, str], list[str]] = {}
        for sid, t in live.items():
            by_place.setdefault((t.slot.node, t.slot.tier), []).append(sid)
        for place in sorted(set(by_place) | set(wanted)):
            want = wanted.get(place)
            n = 0 if want is None else want.free // k
            ids = sorted(
                by_place.get(place, []),
                key=lambda s: (not live[s].running, live[s].since, int(_num(s))),
            )
            for sid in ids[n:]:  # the extras: pending ones, then the youngest running
                if self._cancel(sid):
                    cancelled.append(sid)
            if want is None or len(ids) >= n:
                continue
            taken = {live[s].slot.slot for s in ids}
            count = len(ids)
            for slot_no in range(want.capacity // k):
                if count >= n:
                    break
                slot = BackfillSlot(place[0], place[1], slot_no)
                if slot_no in taken or now < self._backoff.get(slot, _Backoff()).next_start_at:
                    continue
                new_id = self._submit(slot, now)
                if new_id is not None:
                    submitted.append(new_id)
                    count += 1
        self._write_records(jobs)
        self._account(now, wanted, jobs)
        running = tuple(s for s, t in self._tracked.items() if t.running)
        return SlurmTickReport(
            tuple(submitted), tuple(cancelled), tuple(ended), tuple(adopted), running
        )

    def _settle(
        self, jobs: Mapping[str, tuple[BackfillSlot, SlurmJob]], now: float
    ) -> tuple[list[str], list[str]]:
        """Adopt jobs we did not know, forget ended ones (backoff, yields)."""
        ended: list[str] = []
        adopted: list[str] = []
        preempted: list[SlurmJob] = []
        for sid, (slot, job) in jobs.items():
            tracked = self._tracked.get(sid)
            if _live(job):
                if tracked is None:
                    adopted.append(sid)
                    tracked = self._tracked[sid] = _Tracked(slot, job.started_at or now)
                if _running(job) and not tracked.running:
                    tracked.running, tracked.since = True, job.started_at or now
                continue
            if tracked is None:
                continue  # ended before we saw it (a restart): not ours to count
            del self._tracked[sid]
            ended.append(sid)
            self._ended(tracked, now)
            if job.state == "PREEMPTED":
                preempted.append(job)
        for sid in [s for s in self._tracked if s not in jobs]:  # gone from squeue entirely
            self._ended(self._tracked.pop(sid), now)
            ended.append(sid)
        if preempted:
            self._record_yields(preempted)
        if self._first:
            self._first = False
            if adopted:
                log.info("backfill: adopted %d Slurm job(s) of a previous keeper", len(adopted))
        return ended, adopted

    def _ended(self, tracked: _Tracked, now: float) -> None:
        b = self._backoff.setdefault(tracked.slot, _Backoff())
        if tracked.running and now - tracked.since >= self.settings.backoff_max_s:
            b.ends_in_a_row = 0
        b.next_start_at = now + min(
            self.settings.backoff_s * 2**b.ends_in_a_row, self.settings.backoff_max_s
        )
        b.ends_in_a_row += 1

    def _record_yields(self, preempted: list[SlurmJob]) -> None:
        """One yield per preemptor: its sbatch -> start (whole seconds, Slurm's clock)."""
        by_preemptor: dict[str, tuple[SlurmJob, list[SlurmJob]]] = {}
        for job in preempted:
            try:
                who = self.backfill.preemptor(job)
            except SlurmError as exc:
                log.warning(
                    "backfill: the preemptor of %s could not be read: %s", job.slurm_id, exc
                )
                continue
            if who is not None:
                by_preemptor.setdefault(who.slurm_id, (who, []))[1].append(job)
        for who, victims in by_preemptor.values():
            assert who.started_at is not None and who.submitted_at is not None
            done = Yielded(
                keys=tuple(j.name for j in victims),
                gpus=sum(j.gpu.count if j.gpu else 0 for j in victims),
                seconds=max(0.0, who.started_at - who.submitted_at),
            )
            record_yield(self.dir, done)
            log.info(
                "Slurm job %s (%s) preempted %d backfill job(s) on %s: started %.0fs after sbatch",
                who.slurm_id,
                who.name,
                len(victims),
                who.nodes,
                done.seconds,
            )

    # --- submitting and cancelling ---------------------------------------------------------

    def _assign_ports(self, wanted: Mapping[tuple[str, str], Want]) -> None:
        """One port per slot, in (node, tier, slot) order, as the local keeper numbers them."""
        k = self.settings.gpus_per_server
        slots = [
            BackfillSlot(node, tier, i)
            for (node, tier), want in sorted(wanted.items())
            for i in range(want.capacity // k)
        ]
        for n, slot in enumerate(slots):
            self.ports.setdefault(slot, self.settings.port_base + n)

    def command(self, slot: BackfillSlot) -> str:
        port = self.ports.get(slot, self.settings.port_base)
        return self.settings.command.format(port=port, node=slot.node, gpus="${SLURM_JOB_GPUS}")

    def _submit(self, slot: BackfillSlot, now: float) -> str | None:
        name = backfill_name(self.executor.name_prefix, slot)
        port = self.ports.get(slot, self.settings.port_base)
        env = {"JPUSHARE_NODE": slot.node, "JPUSHARE_BACKFILL_PORT": str(port)}
        try:
            sid = self.backfill.submit(slot, self.settings.gpus_per_server, self.command(slot), env)
        except (SlurmError, SubmitRefused) as exc:
            log.error("backfill job %s could not be submitted: %s", name, exc)
            self._ended(_Tracked(slot, now), now)
            return None
        self._tracked[sid] = _Tracked(slot, now)
        log.info("backfill job %s submitted (Slurm job %s)", name, sid)
        return sid

    def _cancel(self, sid: str) -> bool:
        try:
            self.backfill.cancel(sid)
        except SlurmError as exc:
            log.warning("backfill job %s could not be cancelled: %s", sid, exc)
            return False
        tracked = self._tracked.pop(sid, None)
        if tracked is not None:
            self._backoff.pop(tracked.slot, None)  # not its fault: no backoff
        return True

    # --- what the API and metrics read ----------------------------------------------------

    def _write_records(self, jobs: Mapping[str, tuple[BackfillSlot, SlurmJob]]) -> None:
        """One ServerRecord per running server; records of the others are removed."""
        keep: set[str] = set()
        for sid, t in self._tracked.items():
            if not t.running or sid not in jobs:
                continue
            slot, job = jobs[sid]
            name = backfill_name(self.executor.name_prefix, slot)
            gpus = _gpus_of(self.backfill.gpus_file(slot))
            port = self.ports.get(slot, self.settings.port_base)
            rec = ServerRecord(
                key=server_key(slot.node, gpus) if gpus else f"{slot.node}~slot{slot.slot}",
                node=slot.node,
                gpu_type=slot.tier,
                gpu_indices=gpus,
                port=port,
                url=f"http://{slot.node}:{port}",
                command=self.command(slot),
                grace_s=0.0,
                created_at=t.since,
                started_at=job.started_at or t.since,
                extra={"slurm_job": sid, "name": name},
            )
            keep.add(rec.key)
            save(self.dir, rec)
        for rec in load_all(self.dir):
            if rec.key not in keep:
                forget(self.dir, rec)

    def _account(
        self,
        now: float,
        wanted: Mapping[tuple[str, str], Want],
        jobs: Mapping[str, tuple[BackfillSlot, SlurmJob]],
    ) -> None:
        """GPU-seconds since the last tick: served on reserved / on idle GPUs, idle."""
        if self._usage.since is None:
            self._usage.since = now
        if self._last_tick is not None and now > self._last_tick:
            dt = now - self._last_tick
            served: dict[tuple[str, str], int] = {}
            for slot, job in jobs.values():
                if _running(job):
                    n = job.gpu.count if job.gpu else self.settings.gpus_per_server
                    served[(slot.node, slot.tier)] = served.get((slot.node, slot.tier), 0) + n
            for place, want in wanted.items():
                s = min(served.get(place, 0), want.free)
                self._usage.add(dt, s, want.reserved, max(0, want.free - s))
            write_usage(self.dir, self._usage)
        self._last_tick = now

    # --- running ---------------------------------------------------------------------------

    def stop_all(self) -> None:
        """Cancel every job of ours (the keeper is shutting down); Slurm's KillWait is
        their grace."""
        for sid, (_, job) in self.backfill.keeper_jobs().items():
            if _live(job):
                self._cancel(sid)
        self._tracked.clear()
        for rec in load_all(self.dir):
            forget(self.dir, rec)

    def run(self, interval_s: float, stop: threading.Event) -> None:
        """Tick every `interval_s` until `stop` is set; then cancel every job of ours."""
        run_ticks(log, self._tick_logged, interval_s, stop, self.stop_all)

    def _tick_logged(self) -> None:
        report = self.tick()  # a failing one (Slurm down a moment) is logged by run_ticks
        if report.submitted or report.ended or report.cancelled or report.adopted:
            log.info(
                "backfill: submitted %s, cancelled %s, ended %s, adopted %s, running %d",
                list(report.submitted),
                list(report.cancelled),
                list(report.ended),
                list(report.adopted),
                len(report.running),
            )


def _num(sid: str) -> str:
    digits = "".join(c for c in sid.split("_")[0] if c.isdigit())
    return digits or "0"


def _gpus_of(path: Path) -> list[int]:
    """The GPU indices a job wrote (`$SLURM_JOB_GPUS`, `0,2`); [] before it did."""
    with contextlib.suppress(OSError, ValueError):
        text = path.read_text().strip()
        return sorted(int(x) for x in text.split(",") if x.strip())
    return []
