"""Drive a running service with a trace: the I/O half of `jpushare replay`.

Everything goes through the service's HTTP API: the admin token creates the labs and one
user per lab (`replay-<lab>`, whose jobs run as one Unix account, `--unix-user`) and
issues their tokens; each job is submitted with its lab's token, cancelled with the admin
token. Progress and the end of the replay are read from `GET /v1/labs` (queued and
running jobs per lab: one cheap request per poll, so polling does not load the service
whose timing is being measured); the records at the end from `GET /v1/jobs/{id}` and
`/attempts`.
"""

from __future__ import annotations

import json
import math
import os
import pwd
import re
import shutil
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from jpushare.client.api import ApiError, Client
from jpushare.formats.trace_file import TraceJob
from jpushare.replay import plan
from jpushare.replay.records import LiveJob, ServiceView, job_times, sim_result
from jpushare.sim.report import write_outputs
from jpushare.vocabulary import ACTIVE_STATES, ENDED_STATES, JobState

JSON = dict[str, Any]
NOT_ENDED = (JobState.GLOBAL_QUEUE_WAIT, *ACTIVE_STATES)  # queued or holding GPUs
REPLAY_FILE = "replay.json"


class ReplayError(Exception):
    """A replay that cannot go on: one line for the user, and the exit code."""

    def __init__(self, message: str, code: int = 1) -> None:
        super().__init__(message)
        self.code = code


# How long Ctrl-C's clean-up keeps looking for submissions the interrupt cut short.
CANCEL_SETTLE_S = 10.0


@dataclass(frozen=True)
class ReplayOptions:
    trace: Sequence[TraceJob]
    url: str
    admin_token: str
    speed: float
    out: Path
    unix_user: str
    workdir: Path
    allow_existing_jobs: bool = False
    placement: str = "pack"
    poll_s: float = 0.5
    lead_s: float = 1.0  # from set-up to trace time 0 (at least)
    align_s: float = 0.1  # trace cycle boundaries fall this long before a cycle's end
    cycle_s: float | None = None  # the service's cycle, if /metrics does not say
    progress: bool = True


@dataclass
class _Submitted:
    index: int
    service_id: int | None = None
    reason: str = ""  # why refused (service_id None)
    lag_s: float = 0.0  # submitted this late after its scaled time
    markers: set[int] = field(default_factory=set)  # attempts whose OOM marker is written


def default_unix_user() -> str:
    """The account that runs the replay (a service that is not root serves only itself)."""
    return pwd.getpwuid(os.geteuid()).pw_name


def _metric(text: str, name: str) -> float | None:
    m = re.search(rf"^{re.escape(name)}(?:\{{[^}}]*\}})? ([0-9.eE+-]+)$", text, re.MULTILINE)
    return float(m.group(1)) if m else None


class Replay:
    """One replay of `options.trace` against the service at `options.url`."""

    def __init__(
        self,
        options: ReplayOptions,
        *,
        clock: Callable[[], float] = time.time,
        say: Callable[[str], None] | None = None,
    ) -> None:
        self.o = options
        self.clock = clock
        self.say = say or (lambda line: print(line, file=sys.stderr))
        self.admin = Client(options.url, options.admin_token)
        self.clients: dict[str, Client] = {}  # lab -> its replay user's client
        self.user_names: list[str] = []
        self.submitted: dict[int, _Submitted] = {}  # trace index -> what happened
        self.pause = threading.Event()
        self.t0 = 0.0

    # --- set-up --------------------------------------------------------------------------

    def check_service(self) -> None:
        """The service answers, the token is an admin's, it holds no jobs (unless allowed),
        and it has every tier the trace names."""
        try:
            self.admin.users()
        except ApiError as e:
            if e.code == "UNREACHABLE":
                raise ReplayError(f"the service does not answer: {e.message}") from None
            if e.status in (401, 403):
                raise ReplayError(
                    f"the admin token was refused ({e.code}: {e.message})", 2
                ) from None
            raise
        existing = self.admin.jobs(limit=1)["data"]
        if existing and not self.o.allow_existing_jobs:
            raise ReplayError(
                f"the service already holds jobs (the latest is job {existing[0]['id']}): their "
                "runs and lab usage would change the replay; use a fresh database, or pass "
                "--allow-existing-jobs",
                2,
            )
        tiers = {t["name"] for t in self.admin.tiers()["data"]}
        for job in self.o.trace:
            for t in sorted({*(job.oom_on), *([job.min_tier] if job.min_tier else [])}):
                if t not in tiers:
                    raise ReplayError(
                        f"trace job {job.job_id} names tier {t!r}, which the service does "
                        f"not have ({', '.join(sorted(tiers))})",
                        2,
                    )

    def set_up_users(self) -> None:
        """Each lab of the trace (created if missing) gets its replay user and a token."""
        labs = sorted({j.lab for j in self.o.trace})
        have_labs = {lab["name"] for lab in self.admin.labs()["data"]}
        users = {u["name"]: u for u in self.admin.users()["data"]}
        for lab, name in plan.user_names(labs).items():
            if lab not in have_labs:
                self.admin.create_lab(lab)
            user = users.get(name)
            if user is not None and user["lab"] != lab:
                raise ReplayError(
                    f"user {name} exists in lab {user['lab']}, not {lab}: the replay needs it "
                    f"as {lab}'s replay user",
                    2,
                )
            if user is None:
                try:
                    # A replay run as root runs its jobs as root unless told otherwise:
                    # the operator's own choice, said to the API explicitly.
                    self.admin.create_user(
                        name, lab, "student", self.o.unix_user,
                        allow_root=self.o.unix_user == "root",
                    )  # fmt: skip
                except ApiError as e:
                    if e.code == "ACCOUNT_NOT_SERVED":
                        served = e.details.get("served", "?")
                        raise ReplayError(
                            f"the service runs as {served}, not root, so it runs jobs only as "
                            f"{served}: pass --unix-user {served}",
                            2,
                        ) from None
                    if e.code == "UNKNOWN_UNIX_ACCOUNT":
                        raise ReplayError(
                            f"the service's host has no Unix account {self.o.unix_user}: pass "
                            "--unix-user with one that exists there",
                            2,
                        ) from None
                    raise
            self.user_names.append(name)
            secret = self.admin.issue_token(name, "jpushare replay")["secret"]
            self.clients[lab] = Client(self.o.url, secret)

    def prepare_workdir(self) -> None:
        """The jobs' working directory (their output and the OOM markers), usable by the
        account they run as."""
        markers = self.o.workdir / plan.MARKER_DIR
        markers.mkdir(parents=True, exist_ok=True)
        self.o.workdir.chmod(0o755)
        markers.chmod(0o755)
        if os.geteuid() == 0 and self.o.unix_user != "root":
            try:
                account = pwd.getpwnam(self.o.unix_user)
            except KeyError:
                return  # the service's host may know it; this one does not
            shutil.chown(self.o.workdir, account.pw_uid, account.pw_gid)

    # --- the replay ----------------------------------------------------------------------

    def _submit(self, index: int) -> None:
        job = self.o.trace[index]
        record = _Submitted(
            index, lag_s=max(0.0, self.clock() - self.t0 - job.submit_time / self.o.speed)
        )
        try:
            answer = self.clients[job.lab].submit(
                job.job_id[:200],
                plan.job_command(job, self.o.speed),
                job.num_gpus,
                min_tier=job.min_tier,
                time_limit_s=plan.time_limit_s(job, self.o.speed),
                workdir=str(self.o.workdir),
                environment={"PATH": "/usr/local/bin:/usr/bin:/bin"},
                output_path="jpushare-%j.out",
            )
            record.service_id = int(answer["id"])
        except ApiError as e:
            if e.code != "NO_FIT_PLACEMENT":
                raise ReplayError(
                    f"submitting trace job {job.job_id}: {e.code}: {e.message}"
                ) from e
            record.reason = e.message
        self.submitted[index] = record

    def _cancel(self, index: int) -> None:
        record = self.submitted.get(index)
        if record is None or record.service_id is None:
            return
        try:
            self.admin.cancel(record.service_id)
        except ApiError as e:
            if e.code not in ("CONFLICT",):  # it had ended already
                raise ReplayError(
                    f"cancelling trace job {self.o.trace[index].job_id}: {e.code}: {e.message}"
                ) from e

    def _write_markers(self) -> None:
        """Tell each running attempt of an `oom_on` job whether it runs out of memory."""
        for record in self.submitted.values():
            job = self.o.trace[record.index]
            if not job.oom_on or record.service_id is None or -1 in record.markers:
                continue
            state = self.admin.job(record.service_id)
            if state["state"] not in ACTIVE_STATES:
                if state["state"] in ENDED_STATES:
                    record.markers.add(-1)  # ended: never asked again
                continue
            attempt = int(state["attempts"])
            if attempt in record.markers:
                continue
            path = self.o.workdir / plan.marker(
                record.service_id, attempt, state.get("tier") in job.oom_on
            )
            path.touch()
            path.chmod(0o644)
            record.markers.add(attempt)

    def aligned_t0(self, earliest: float, cycle_s: float) -> float:
        """Trace time 0 in the service's cycle phase, so that its cycles fall where the
        simulator's do (t = 0, c, 2c, …): a boundary `align_s` before a cycle ends, judged
        from when the last one ended (`/healthz`; the clocks of the two hosts must agree).
        The service's loop keeps its period but drifts by its wake-up delays."""
        last = (self.admin.healthz().get("dispatcher") or {}).get("last_success_at")
        if not isinstance(last, str):
            return earliest
        ref = datetime.fromisoformat(last).timestamp() - self.o.align_s
        return ref + math.ceil((earliest - ref) / cycle_s) * cycle_s

    def _active(self) -> int:
        labs = self.admin.labs()["data"]
        return sum(int(lab["queued_jobs"]) + int(lab["running_jobs"]) for lab in labs)

    def _ours_active(self) -> set[int]:
        ours = {r.service_id for r in self.submitted.values() if r.service_id is not None}
        active: set[int] = set()
        before: int | None = None
        while True:
            page = self.admin.jobs(states=NOT_ENDED, limit=1000, before_id=before)
            active |= {int(j["id"]) for j in page["data"]} & ours
            before = page.get("next_before_id")
            if before is None:
                return active

    def run(self) -> JSON:
        """Replay, wait for the last job, write the outputs; returns summary.json's data."""
        self.check_service()
        self.set_up_users()
        self.prepare_workdir()
        metrics = self.admin.metrics()
        cycle_s = self.o.cycle_s or _metric(metrics, "jpushare_dispatcher_cycle_interval_seconds")
        if not cycle_s:
            raise ReplayError("the service's /metrics does not say its cycle: pass --cycle", 2)
        cycles_before = _metric(metrics, "jpushare_dispatcher_cycles_total") or 0.0
        usage_start = {
            lab["name"]: float(lab["usage_tflop_s"]) for lab in self.admin.labs()["data"]
        }
        baseline = self._active()
        n_oom = sum(1 for j in self.o.trace if j.oom_on)
        steps = plan.actions(self.o.trace, self.o.speed)
        began = self.clock()
        self.t0 = self.aligned_t0(began + self.o.lead_s, cycle_s)
        last = max(j.submit_time for j in self.o.trace) / self.o.speed
        self.say(
            f"replaying {len(self.o.trace)} jobs at {self.o.speed:g}x (a cycle of "
            f"{cycle_s:g}s is {cycle_s * self.o.speed:g} trace seconds); the last submission "
            f"in {self.t0 + last - began:.0f}s"
        )
        bar = _bar(len(self.o.trace), self.o.progress)
        try:
            next_poll = 0.0
            for step in steps:
                while True:
                    now = self.clock()
                    due = self.t0 + step.at_s
                    if now >= due:
                        break
                    if now >= next_poll:
                        next_poll = now + self.o.poll_s
                        if n_oom:
                            self._write_markers()
                        bar.update_to(len(self.submitted) - max(0, self._active() - baseline))
                    self.pause.wait(min(due, next_poll) - now)
                if step.kind is plan.ActionKind.SUBMIT:
                    self._submit(step.index)
                else:
                    self._cancel(step.index)
            while True:  # wait for the last job
                if n_oom:
                    self._write_markers()
                active = self._active() - baseline
                bar.update_to(len(self.submitted) - max(0, active))
                if active <= 0 and not self._ours_active():
                    break
                self.pause.wait(self.o.poll_s)
            bar.update_to(len(self.submitted))
        except KeyboardInterrupt:
            bar.close()
            cancelled = self.cancel_all()
            raise ReplayError(
                f"interrupted: cancelled the {cancelled} jobs it had submitted that had not ended",
                130,
            ) from None
        finally:
            bar.close()
        wall_s = self.clock() - began
        metrics = self.admin.metrics()
        cycles = (_metric(metrics, "jpushare_dispatcher_cycles_total") or 0.0) - cycles_before
        return self.write(cycle_s, usage_start, int(cycles), wall_s)

    def cancel_all(self) -> int:
        """Cancel every job this replay submitted that is still active (Ctrl-C): those it
        knows, and any active job of its users. A submission the interrupt cut short may
        reach the service without its answer reaching the replay, and, on a busy service,
        only after a first listing: so list again, a poll apart, until one listing finds
        nothing left to cancel (for at most CANCEL_SETTLE_S)."""
        ids = {r.service_id for r in self.submitted.values() if r.service_id is not None}
        cancelled: set[int] = set()
        deadline = time.monotonic() + CANCEL_SETTLE_S
        while True:
            for name in self.user_names:
                try:
                    page = self.admin.jobs(states=NOT_ENDED, user=name, limit=1000)
                except ApiError:
                    continue
                ids |= {int(j["id"]) for j in page["data"]}
            new = sorted(ids - cancelled)
            for job_id in new:
                cancelled.add(job_id)
                try:
                    self.admin.cancel(job_id)
                except ApiError:
                    ids.discard(job_id)  # ended already (409), or the service is gone
            if not new or time.monotonic() >= deadline:
                return len(ids & cancelled)
            time.sleep(self.o.poll_s)

    def write(
        self, cycle_s: float, usage_start: dict[str, float], cycles: int, wall_s: float
    ) -> JSON:
        live: list[LiveJob] = []
        for i, job in enumerate(self.o.trace):
            record = self.submitted.get(i)
            if record is None or record.service_id is None:
                live.append(LiveJob(job, reason=record.reason if record else "not submitted"))
                continue
            live.append(
                LiveJob(
                    job,
                    self.admin.job(record.service_id),
                    self.admin.attempts(record.service_id),
                )
            )
        placements = self.admin.placements()["data"]
        view = ServiceView(
            t0=self.t0,
            speed=self.o.speed,
            cycle_s=cycle_s,
            tflops={t["name"]: float(t["tflops"]) for t in self.admin.tiers()["data"]},
            capacity_gpus=sum(int(p["capacity"]) for p in placements),
            lab_usage_start=usage_start,
            lab_usage_end={
                lab["name"]: float(lab["usage_tflop_s"]) for lab in self.admin.labs()["data"]
            },
            cycles_run=cycles,
            placement=self.o.placement,
            wall_s=wall_s,
        )
        doc = write_outputs(sim_result(live, view), self.o.out)
        lags = sorted(r.lag_s for r in self.submitted.values())
        about = {
            "server": self.o.url,
            "speed": self.o.speed,
            "service_cycle_s": cycle_s,
            "cycle_s": cycle_s * self.o.speed,
            "t0": datetime.fromtimestamp(self.t0, UTC).isoformat(),
            "unix_user": self.o.unix_user,
            "workdir": str(self.o.workdir),
            "submit_lag_s": {
                "mean": sum(lags) / len(lags) if lags else None,
                "max": lags[-1] if lags else None,
            },
            "jobs": [
                {
                    "job_id": t.job_id,
                    "service_id": t.service_id,
                    "first_dispatch_s": _r(t.first_dispatch),
                    "first_start_s": _r(t.first_start),
                }
                for t in job_times(live, view)
            ],
        }
        (self.o.out / REPLAY_FILE).write_text(json.dumps(about, indent=2) + "\n", encoding="utf-8")
        return doc


def _r(x: float | None) -> float | None:
    return None if x is None else round(x, 3)


class _Bar:
    """tqdm's bar, or nothing."""

    def __init__(self, total: int, enabled: bool) -> None:
        self._bar: Any = None
        if enabled:
            from tqdm import tqdm

            self._bar = tqdm(
                total=total, desc="replay", unit="job", file=sys.stderr, disable=None, leave=False
            )

    def update_to(self, done: int) -> None:
        if self._bar is not None and done > self._bar.n:
            self._bar.update(done - self._bar.n)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()


def _bar(total: int, enabled: bool) -> _Bar:
    return _Bar(total, enabled)
