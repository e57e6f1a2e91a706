"""A crash campaign, shared by the local and the Slurm executor's tests.

A scripted workload runs while `Chaos` SIGKILLs the `serve` process again and again, at
random moments of its leadership or at a random crash point of its cycle
(`JPUSHARE_CRASH_AT`), and starts it again each time (now and then it sends SIGTERM
instead, which must stop it cleanly). The workload exercises what a crash can split in
two:

- a blocker runs on the strong node; a 2-GPU job reserves the strong node's other GPU;
- the strong node is drained with `jpushare admin node drain` (R5 releases the
  reservation); a job that only the strong node fits waits and is cancelled there
  (**queued cancel**); a job that prints PyTorch's CUDA out-of-memory text on the weak
  tier runs there, OOMs and is requeued with its minimum tier raised (**OOM escalation**);
- the node is opened again; the 2-GPU job reserves again and is cancelled while it holds
  the reservation (**reserving cancel**); the OOM job then completes on the strong tier;
  the blocker is cancelled while it runs (**running cancel**);
- bursts of short 1- and 2-GPU jobs of both labs (random sizes and lengths; every job
  OOMs on the weak tier), a quarter of each cancelled at random moments, one burst after
  another for as long as the chaos goes on.

Then, with one service left running to settle what is left, the checks:

- every job ends in exactly one terminal state, with exactly one terminal event, and it
  is the one the workload implies (the cancelled jobs CANCELLED, every other COMPLETED:
  nothing FAILED, nothing lost); each attempt was dispatched once, and every attempt that
  did not end the job ended in an OOM requeue;
- no run twice, from the executor's own records (the local executor's run records, or
  Slurm's `squeue -t all`) and from the jobs' own marks: each (job, attempt) is at most
  one run and ran its command at most once; no record for an attempt the database never
  made; a completed job has exactly one completed run, its last attempt;
- charges: each job's run cost is what its runs cost by the executor's own start and end
  times; each job's charge is its run cost plus its reservation cost; each lab's usage is
  the sum of its jobs' charges (exact up to float rounding: 1e-9 relative).

The seed comes from `JPUSHARE_CRASH_SEED` (default fixed, so CI makes the same choices
each run: which crash points, how long each service lives, the burst). It is printed with
every run (pytest shows it on failure) so that a failing run can be replayed. What each
kill hit depends on timing, so a replay makes the same choices, not the same schedule.
"""

from __future__ import annotations

import contextlib
import math
import os
import random
import subprocess
import sys
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy.orm import Session, sessionmaker

from jpushare import store
from jpushare.dispatcher.crash_points import CRASH_AT_ENV, CRASH_POINTS
from jpushare.run_settings import JobRun
from tests.dispatcher.conftest import wait_for
from tests.dispatcher.processes import LEADER, REPO, Service

SEED_ENV = "JPUSHARE_CRASH_SEED"
KILLS_ENV = "JPUSHARE_CRASH_KILLS"  # more kills than the default, for a longer campaign
DEFAULT_SEED = 20261201
TERMINAL = ("COMPLETED", "FAILED", "CANCELLED")
TERMINAL_EVENTS = ("completed", "failed", "cancelled")
# What PyTorch 2.5+ prints (executors/cuda_oom.py recognises it).
OOM_LINE = (
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a "
    "total capacity of 11.76 GiB of which 1.02 GiB is free."
)
MAX_BURSTS = 20
WAIT_S = 90.0  # one step of the workload, kills and restarts included (loaded 2-core CI)


def campaign_seed() -> int:
    """`JPUSHARE_CRASH_SEED`, else the fixed default."""
    text = os.environ.get(SEED_ENV, "").strip()
    return int(text) if text else DEFAULT_SEED


def campaign_kills(default: int) -> int:
    """`JPUSHARE_CRASH_KILLS`, else `default`."""
    text = os.environ.get(KILLS_ENV, "").strip()
    return int(text) if text else default


@dataclass(frozen=True, slots=True)
class ExecutorRun:
    """One run as the executor itself recorded it (not as the database says)."""

    job_id: int
    attempt: int
    state: str  # the executor's own word: COMPLETED, FAILED, OOM, CANCELLED, RUNNING, ...
    ended: bool
    node: str
    started_at: float | None
    ended_at: float | None


@dataclass
class Site:
    """What the campaign needs of one executor's set-up."""

    sessions: sessionmaker[Session]
    db_url: str
    users: Mapping[str, store.UserRecord]  # "alice" and "bob", of two labs
    strong: tuple[str, str]  # (node, tier): 2 GPUs, the strongest tier open
    weak: tuple[str, str]  # (node, tier): the weakest tier
    tflops: Mapping[str, float]  # node -> TFLOPS of its (only open) tier
    work: Path  # the jobs' working directory, which the test reads too
    start: Callable[[str, dict[str, str]], Service]  # a `serve` process, extra env
    runs: Callable[[], list[ExecutorRun]]  # the executor's own records, every run
    duplicate_runs: Callable[[], list[str]]  # names of runs the executor holds twice
    blocker_s: float = 300.0  # how long the blocker runs unless cancelled (it is)


class Chaos(threading.Thread):
    """Starts `serve`, waits until it leads, kills it (SIGKILL, or its own crash point
    fires first; now and then a SIGTERM instead, which must stop it cleanly), starts the
    next, `planned` times; then starts one that stays."""

    def __init__(
        self,
        start_service: Callable[[str, dict[str, str]], Service],
        rng: random.Random,
        planned: int,
        max_life_s: float,
        crash_point_share: float = 0.4,
        clean_stop_share: float = 0.15,
    ) -> None:
        super().__init__(name="chaos", daemon=True)
        self.start_service = start_service
        self.rng = rng
        self.planned = planned
        self.max_life_s = max_life_s
        self.crash_point_share = crash_point_share
        self.clean_stop_share = clean_stop_share
        self.stops = 0  # clean stops (SIGTERM), besides the kills
        self.events: list[str] = []
        self.services: list[Service] = []
        self.final: Service | None = None
        self.error: str | None = None
        self.points: Counter[str] = Counter()
        self.kills = 0
        self._halt = threading.Event()

    def halt(self) -> None:
        self._halt.set()

    def _wait(self, done: Callable[[], bool], timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        while not done():
            if self._halt.is_set() or time.monotonic() > deadline:
                return False
            self._halt.wait(0.02)
        return True

    def run(self) -> None:
        try:
            n = 0
            while self.kills < self.planned:  # clean stops come on top of the kills
                if self._halt.is_set():
                    return
                self._one(n)
                n += 1
                if self.error is not None:
                    return
            self.final = self.start_service("serve-final", {})
            self.services.append(self.final)
        except BaseException as exc:  # reported by the main thread
            self.error = f"chaos thread: {exc!r}"

    def _one(self, n: int) -> None:
        point = (
            self.rng.choice(CRASH_POINTS) if self.rng.random() < self.crash_point_share else None
        )
        # A crash point comes only with a dispatch: give it longer to come.
        life = self.rng.uniform(0.1, self.max_life_s) * (3 if point else 1)
        service = self.start_service(f"serve-{n}", {CRASH_AT_ENV: point} if point else {})
        self.services.append(service)
        began = time.monotonic()
        led = self._wait(lambda: service.proc.poll() is not None or LEADER in service.log(), 60)
        if led and service.proc.poll() is None:
            self._wait(lambda: service.proc.poll() is not None, life)
        code = service.proc.poll()
        # (Not one armed with a crash point: it could kill itself while it stops.)
        if code is None and not point and self.rng.random() < self.clean_stop_share:
            code = service.stop()  # SIGTERM: it must stop, cleanly, whatever it was doing
            self.stops += 1
            self.events.append(f"{service.name}: SIGTERM after {time.monotonic() - began:.1f} s")
            if code != 0:
                self.error = f"{service.name} stopped with {code}:\n{service.log()[-3000:]}"
        elif code is None:
            service.kill()
            self.kills += 1
            self.events.append(
                f"{service.name}: SIGKILL after {time.monotonic() - began:.1f} s"
                + (f" (its crash point {point} did not come)" if point else "")
            )
        elif code == -9 and point and f"{CRASH_AT_ENV}={point}" in service.log():
            self.kills += 1
            self.points[point] += 1
            self.events.append(f"{service.name}: killed itself at {point}")
        else:  # a service must never end by itself
            self.error = f"{service.name} exited with {code}:\n{service.log()[-3000:]}"


class Campaign:
    """The workload (module docstring), its waits, and the checks."""

    def __init__(self, site: Site, seed: int, *, kills: int, burst: int, max_life_s: float):
        self.site = site
        self.seed = seed
        self.rng = random.Random(seed)
        self.chaos = Chaos(site.start, random.Random(seed + 1), kills, max_life_s)
        self.burst = burst
        self.marks = site.work / "marks"
        self.expected: dict[int, str] = {}  # job -> the terminal state the workload implies
        self.cancelled_in: dict[str, int | str] = {}  # cancel -> its job, or what it found
        self.began = time.monotonic()
        self.wide = 0  # the 2-GPU job that reserves and is cancelled so
        self.bursts = 0
        self.ooms = 0

    # --- the store, as users and admins reach it ---------------------------------------

    def submit(self, user: str, num_gpus: int, command: str, *, min_tier: str | None = None) -> int:
        with self.site.sessions.begin() as s:
            return store.submit(
                s,
                user_id=self.site.users[user].id,
                name=f"crash-{user}-{num_gpus}",
                command=command,
                num_gpus=num_gpus,
                now=store.utc_now(),
                min_tier=min_tier,
                run=JobRun(workdir=str(self.site.work), environment={"PATH": "/usr/bin:/bin"}),
            ).job.id

    def job(self, job_id: int) -> store.JobRecord:
        with self.site.sessions() as s:
            return store.get_job(s, job_id)

    def jobs(self) -> list[store.JobRecord]:
        with self.site.sessions() as s:
            return store.list_jobs(s, store.JobFilter(limit=10_000))

    def events(self, job_id: int) -> list[store.JobEventRecord]:
        with self.site.sessions() as s:
            return store.job_history(s, job_id)

    def cancel(self, job_id: int) -> store.Cancelled:
        with self.site.sessions.begin() as s:
            return store.cancel_job(s, job_id, store.utc_now(), reason="crash campaign")

    def admin(self, *argv: str) -> None:
        """`jpushare admin …` as an operator runs it (its own process)."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("JPUSHARE_")}
        env["JPUSHARE_DATABASE_URL"] = self.site.db_url
        out = subprocess.run(
            [sys.executable, "-m", "jpushare.service", "admin", *argv],
            env=env,
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert out.returncode == 0, out.stdout + out.stderr

    # --- commands -----------------------------------------------------------------------

    def _mark(self) -> str:
        return f'echo "$JPUSHARE_JOB_ID $JPUSHARE_ATTEMPT $JPUSHARE_NODE" >> {self.marks}'

    def short(self, seconds: float) -> str:
        """Marks its run, runs `seconds`, and OOMs (exit 1) if it is on the weak tier."""
        return (
            f"{self._mark()}; sleep {seconds:.2f}; "
            f'if [ "$JPUSHARE_NODE" = {self.site.weak[0]} ]; then '
            f"echo '{OOM_LINE}' >&2; exit 1; fi"
        )

    def blocker(self) -> str:
        return f"{self._mark()}; sleep {self.site.blocker_s:g}"

    # --- waiting ------------------------------------------------------------------------

    def wait(self, done: Callable[[], bool], what: str) -> None:
        wait_for(lambda: self.chaos.error is not None or done(), what, WAIT_S)
        assert self.chaos.error is None, self.chaos.error

    def state_is(self, job_id: int, state: str) -> Callable[[], bool]:
        return lambda: self.job(job_id).state == state

    def has_event(self, job_id: int, kind: str, reason: str | None = None) -> Callable[[], bool]:
        def found() -> bool:
            return any(
                e.kind == kind and (reason is None or (e.detail or {}).get("reason") == reason)
                for e in self.events(job_id)
            )

        return found

    # --- the workload -------------------------------------------------------------------

    def run(self) -> str:
        """The workload under chaos, then the checks; a summary for the report."""
        print(f"\ncrash campaign seed {self.seed} (replay: {SEED_ENV}={self.seed})")
        self.chaos.start()
        try:
            self.scripted()
            # Bursts for as long as the chaos goes on (at least one).
            while True:
                self.burst_phase()
                self.wait(lambda: self.all_ended(), "every job ends")
                if not self.chaos.is_alive() or self.bursts >= MAX_BURSTS:
                    break
            self.wait(lambda: not self.chaos.is_alive(), "the chaos has done its kills")
            final = self.chaos.final
            assert final is not None, self.chaos.error
            self.wait(lambda: LEADER in final.log(), "the last service leads")
            self.wait(
                lambda: all(r.ended for r in self.site.runs()), "every run ends, by its records"
            )
            # A cancelled run's charge may follow its real end by a cycle: wait for it.
            self.wait(lambda: not self.charge_problems(), "the charges settle")
            assert final.stop() == 0, final.log()
            self.check()
        finally:
            self.chaos.halt()
            self.chaos.join(timeout=60)
            for service in self.chaos.services:
                service.kill()
        return self.summary()

    def scripted(self) -> None:
        """The steps with a known outcome: drain, the three cancels, an OOM escalation."""
        strong, strong_tier = self.site.strong
        weak = self.site.weak[0]
        blocker = self.submit("alice", 1, self.blocker(), min_tier=strong_tier)
        self.wait(self.state_is(blocker, "RUNNING"), "the blocker runs")
        assert self.job(blocker).node_name == strong

        wide = self.wide = self.submit("bob", 2, self.short(0.3), min_tier=strong_tier)
        self.wait(lambda: self.job(wide).reserved_gpus == 1, "the 2-GPU job reserves")

        self.admin("node", "drain", strong, "--reason", "crash campaign")
        self.wait(self.has_event(wide, "released", "r5"), "R5 releases the reservation")
        queued = self.submit("alice", 1, self.short(0.2), min_tier=strong_tier)
        oom = self.submit("bob", 1, self.short(0.3))
        self.wait(self.has_event(oom, "oom_requeued"), "the job OOMs on the weak tier")
        requeued = self.job(oom)
        assert requeued.state == "GLOBAL_QUEUE_WAIT"
        assert requeued.minimum_tier_sort_order > self._sort_order(self.site.weak[1])
        assert self.job(queued).state == "GLOBAL_QUEUE_WAIT"  # only the drained node fits it
        self.expect(queued, "queued", self.cancel(queued), "GLOBAL_QUEUE_WAIT")

        with self.site.sessions.begin() as s:
            store.undrain_node(s, strong, store.utc_now())
        self.wait(lambda: self.job(wide).reserved_gpus == 1, "it reserves again")
        done = self.cancel(wide)
        assert done.released is not None, "the reservation was held when it was cancelled"
        self.expect(wide, "reserving", done, "GLOBAL_QUEUE_WAIT")

        self.wait(self.state_is(oom, "COMPLETED"), "the OOM job completes on the strong tier")
        self.expected[oom] = "COMPLETED"
        assert self.job(oom).node_name == strong and weak != strong
        assert self.job(blocker).state == "RUNNING"
        self.expect(blocker, "running", self.cancel(blocker), "RUNNING")

    def expect(self, job_id: int, what: str, done: store.Cancelled, was: str) -> None:
        """A scripted cancel: it found the job `was`; the job must end CANCELLED."""
        assert done.previous_state == was, (job_id, what, done)
        self.expected[job_id] = "CANCELLED"
        self.cancelled_in[what] = job_id

    def burst_phase(self) -> None:
        """Short jobs of both labs at once; a quarter of them cancelled at random moments."""
        self.bursts += 1
        jobs = []
        for _ in range(self.burst):
            user = self.rng.choice(("alice", "bob"))
            gpus = 2 if self.rng.random() < 0.3 else 1
            jobs.append(self.submit(user, gpus, self.short(self.rng.uniform(0.2, 1.0))))
        for j in jobs:
            self.expected[j] = "COMPLETED"
        pause = threading.Event()
        for victim in self.rng.sample(jobs, max(1, self.burst // 4)):
            pause.wait(self.rng.uniform(0.0, 2.0))  # a random moment: the point of the campaign
            with contextlib.suppress(store.InvalidTransition):  # it may have ended already
                done = self.cancel(victim)
                self.expected[victim] = "CANCELLED"
                self.cancelled_in[f"burst {victim}"] = done.previous_state

    def _sort_order(self, tier: str) -> int:
        with self.site.sessions() as s:
            return next(t.sort_order for t in store.list_tiers(s) if t.name == tier)

    def all_ended(self) -> bool:
        return all(j.state in TERMINAL for j in self.jobs())

    # --- the checks ---------------------------------------------------------------------

    def charge_problems(self) -> list[str]:
        """Where a job's charges differ from its runs' costs by the executor's records."""
        costs: defaultdict[int, float] = defaultdict(float)
        jobs = {j.id: j for j in self.jobs()}
        for run in self.site.runs():
            if run.started_at is not None and run.ended_at is not None:
                seconds = run.ended_at - run.started_at
                costs[run.job_id] += (
                    jobs[run.job_id].num_gpus * seconds * self.site.tflops[run.node]
                )
        problems = []
        for job in jobs.values():
            if not math.isclose(job.run_cost, costs[job.id], rel_tol=1e-6, abs_tol=1e-2):
                problems.append(
                    f"job {job.id}: run cost {job.run_cost} != {costs[job.id]} by its runs"
                )
            if not math.isclose(job.charged_tflop_s, job.bill, rel_tol=1e-9, abs_tol=1e-9):
                problems.append(f"job {job.id}: charged {job.charged_tflop_s} != bill {job.bill}")
        return problems

    def check(self) -> None:
        jobs = {j.id: j for j in self.jobs()}
        assert set(jobs) == set(self.expected), "every job submitted is accounted for"

        # Exactly one terminal state and event each; the one the workload implies. Each
        # attempt was dispatched once, and every attempt but the last ended in a requeue.
        for job in jobs.values():
            events = self.events(job.id)
            ends = [e.kind for e in events if e.kind in TERMINAL_EVENTS]
            assert ends == [job.state.lower()], (job.id, job.state, ends)
            dispatched = [(e.detail or {}).get("attempt") for e in events if e.kind == "dispatched"]
            assert dispatched == list(range(1, job.attempts + 1)), (job.id, dispatched)
            requeues = [e for e in events if e.kind == "oom_requeued"]
            end = next(e for e in events if e.kind in TERMINAL_EVENTS)
            in_queue = end.from_state == "GLOBAL_QUEUE_WAIT"  # no attempt ended it
            ran_out = job.attempts if in_queue else job.attempts - 1
            assert len(requeues) == ran_out, (job.id, [e.kind for e in events])
        states = {j: jobs[j].state for j in jobs}
        assert states == self.expected, f"{states} != {self.expected}"
        assert set(self.cancelled_in) >= {"queued", "reserving", "running"}

        # No run twice: the executor's own records, and what the jobs themselves marked.
        assert self.site.duplicate_runs() == []
        runs = self.site.runs()
        keys = [(r.job_id, r.attempt) for r in runs]
        assert len(keys) == len(set(keys)), sorted(keys)
        marks = [tuple(line.split()) for line in self.marks.read_text().splitlines()]
        marked = [(int(j), int(a)) for j, a, _ in marks]
        duplicated = [k for k, n in Counter(marked).items() if n > 1]
        assert duplicated == [], f"commands that ran twice: {duplicated}"
        assert set(marked) <= set(keys), "every command that ran is one of the executor's runs"
        for run in runs:
            job = jobs[run.job_id]
            assert 1 <= run.attempt <= job.attempts, (run, job.attempts)
        for job in jobs.values():
            completed = [r for r in runs if r.job_id == job.id and r.state == "COMPLETED"]
            if job.state == "COMPLETED":
                assert [r.attempt for r in completed] == [job.attempts], (job.id, completed)
            else:
                assert completed == [] or job.state == "CANCELLED", (job.id, completed)

        # Charges: runs at their executor's cost, charge = bill, usage = sum of charges.
        assert self.charge_problems() == []
        with self.site.sessions() as s:
            labs = {lab.name: lab.cumulative_usage for lab in store.list_labs(s)}
        charged: defaultdict[str, float] = defaultdict(float)
        for job in jobs.values():
            charged[job.lab_name] += job.charged_tflop_s
        for lab, usage in labs.items():
            assert math.isclose(usage, charged[lab], rel_tol=1e-9, abs_tol=1e-9), (lab, usage)
        wide = jobs[self.wide]
        assert wide.reservation_cost_tflop_s > 0  # its reservations were charged
        assert wide.charged_tflop_s == wide.reservation_cost_tflop_s and wide.run_cost == 0

        # The OOM escalation happened, on the weak tier, and was charged.
        ooms = [r for r in runs if r.state in ("OOM", "FAILED") and r.node == self.site.weak[0]]
        assert ooms, "at least one run OOMed on the weak tier"
        self.ooms = len(ooms)

    def summary(self) -> str:
        chaos = self.chaos
        points = ", ".join(f"{p} {n}" for p, n in sorted(chaos.points.items())) or "none"
        jobs = self.jobs()
        return (
            f"seed {self.seed}: {chaos.kills} kills ({points} at crash points), "
            f"{chaos.stops} clean stops, "
            f"{len(chaos.services)} serve processes, {len(jobs)} jobs in {self.bursts} bursts, "
            f"{len(self.site.runs())} runs, {self.ooms} OOM runs, cancels in "
            f"{dict(sorted(self.cancelled_in.items()))}, "
            f"{time.monotonic() - self.began:.1f} s\n  " + "\n  ".join(chaos.events)
        )
