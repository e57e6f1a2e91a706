"""An in-memory executor: the Executor protocol without processes, for tests of the logic
around an executor (the dispatcher cycle, charging, the policy's scenarios end to end).

It passes the executor contract (tests/executors/test_memory_contract.py) where the contract
is not about processes and files. A run plays a `Program` instead of its command: the
command is a key the test registered (`MemoryExecutor.program`), and an unknown command
completes at once with exit 0 (`true`). Time is the executor's clock: real time by default,
a `ManualClock` the test moves, or a `FastClock` (real time sped up: a run's seconds pass
faster, while the store's own times stay real; a cluster's clock may differ too). Runs
are observed, as on the real executors, only when `inventory`, `runs` or `find` is
called; what happened since is settled then.

What the test controls: when a run ends (a `Gate`, or `finish`), how long it stays pending
or takes to stop, GPUs held outside JPU-Share (`foreign`), node states and node failures
(`fail_node`). What it reports is the real executors' vocabulary: RunState, OOM found by the
same rule (jpushare.executors.cuda_oom), a TIMEOUT past `time_limit_s`, NODE_FAIL.

It lives in tests/, not in the package: nothing in the service may select it (a site runs
the local or the Slurm executor), and a fake that ships must be kept up as a product.
"""

from __future__ import annotations

import itertools
import string
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field

from jpushare.executors.base import (
    GpuGroup,
    LaunchSpec,
    NodeState,
    RunInfo,
    RunState,
    SubmitRefused,
)
from jpushare.executors.cuda_oom import CUDA_OOM_REASON, find_cuda_oom
from tests.job_script import CUDA_OOM, Script


class ManualClock:
    """UNIX seconds that move only when the test says so."""

    def __init__(self, start: float | None = None) -> None:
        self.now = time.time() if start is None else start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


class FastClock:
    """Real time, sped up `speed` times from its creation: a run of 1 s takes 1/speed s."""

    def __init__(self, speed: float) -> None:
        self.speed = speed
        self.start = time.time()
        self.origin = time.monotonic()

    def __call__(self) -> float:
        return self.start + (time.monotonic() - self.origin) * self.speed


class Gate:
    """Closed until `open()`: a run that waits on it ends (exit 0 unless its script says
    otherwise) at the first observation after it opens. The in-memory flag file."""

    def __init__(self) -> None:
        self.opened = threading.Event()

    def open(self) -> None:
        self.opened.set()


@dataclass(frozen=True)
class Program:
    """What one run does: its script, plus what only a test of the logic needs to set.

    `script.seconds` None with no gate: runs until cancelled. `start_s`: seconds PENDING
    before it starts (a queue); `stop_s`: seconds it runs on after a cancel (a checkpoint).
    """

    script: Script = field(default_factory=Script)
    gate: Gate | None = None
    start_s: float = 0.0
    stop_s: float = 0.0


PROGRAM_TRUE = Program()
PROGRAM_OOM = Program(Script(error=CUDA_OOM, exit_code=1))

# A program, or one chosen per launch (e.g. by attempt: OOM first, then fits).
Behaviour = Program | Callable[[LaunchSpec], Program]


@dataclass(frozen=True)
class MemoryGpus:
    """`total` GPUs of `gpu_type` on `node` (one placement)."""

    node: str
    gpu_type: str
    total: int


@dataclass
class _Run:
    spec: LaunchSpec
    program: Program
    gpu_indices: tuple[int, ...]
    created_at: float
    started_at: float | None = None
    cancel_at: float | None = None
    state: RunState = RunState.PENDING
    ended_at: float | None = None
    exit_code: int | None = None
    reason: str | None = None
    output: str = ""  # what the job printed, once it started
    error: str = ""

    @property
    def key(self) -> str:
        return f"{self.spec.job_id}.{self.spec.attempt}"


@dataclass
class MemoryExecutor:
    """See the module docstring. Ids are `<job id>.<attempt>`, as the local executor's."""

    gpus: Iterable[MemoryGpus]
    clock: Callable[[], float] = time.time
    foreign: dict[tuple[str, str], int] = field(default_factory=dict)  # GPUs held outside
    node_states: dict[str, NodeState] = field(default_factory=dict)  # default UP
    _groups: dict[tuple[str, str], int] = field(init=False)
    _programs: dict[str, Behaviour] = field(init=False, default_factory=dict)
    _runs: dict[str, _Run] = field(init=False, default_factory=dict)
    _lock: threading.RLock = field(init=False, default_factory=threading.RLock)
    _names: Iterator[int] = field(init=False, default_factory=itertools.count)

    def __post_init__(self) -> None:
        self._groups = {(g.node, g.gpu_type): g.total for g in self.gpus}

    # --- what the test controls ------------------------------------------------------------

    def program(self, behaviour: Behaviour, name: str = "") -> str:
        """Register what runs of the returned command do."""
        with self._lock:
            command = f"memory:{name or 'program'}-{next(self._names)}"
            self._programs[command] = behaviour
            return command

    def command(self, script: Script) -> str:
        """The command of a job that plays `script`."""
        return self.program(Program(script))

    def finish(self, job_id: str, attempt: int, exit_code: int = 0, output: str = "") -> None:
        """End the run now, as if its command exited with `exit_code` after `output`."""
        with self._lock:
            run = self._runs[f"{job_id}.{attempt}"]
            self._settle(run, self.clock())
            if not run.state.ended:
                if run.started_at is None:
                    self._start(run, self.clock())
                run.output += output
                self._end(run, exit_code, self.clock())

    def fail_node(self, node: str) -> None:
        """The node dies: its live runs end NODE_FAIL and it is DOWN until set UP."""
        with self._lock:
            now = self.clock()
            self.node_states[node] = NodeState.DOWN
            for run in self._runs.values():
                self._settle(run, now)
                if run.spec.node == node and not run.state.ended:
                    self._final(run, RunState.NODE_FAIL, now, f"node {node} failed")

    # --- the Executor protocol -------------------------------------------------------------

    def inventory(self) -> list[GpuGroup]:
        with self._lock:
            self._settle_all()
            return [
                GpuGroup(
                    node,
                    gpu_type,
                    total,
                    min(total, self.foreign.get((node, gpu_type), 0) + len(held)),
                    self.node_states.get(node, NodeState.UP),
                )
                for (node, gpu_type), total in sorted(self._groups.items())
                for held in [self._held(node, gpu_type)]
            ]

    def submit(self, spec: LaunchSpec) -> str:
        """Start the run on the lowest free GPUs; refused, like the local executor, for an
        unknown placement, a node not UP or too few free GPUs (it does not queue)."""
        with self._lock:
            key = f"{spec.job_id}.{spec.attempt}"
            if key in self._runs:
                return key
            self._settle_all()
            place = (spec.node, spec.gpu_type)
            if place not in self._groups:
                raise SubmitRefused(f"no {spec.gpu_type} GPUs on node {spec.node!r}")
            if spec.num_gpus < 1:
                raise SubmitRefused(f"num_gpus must be at least 1, not {spec.num_gpus}")
            state = self.node_states.get(spec.node, NodeState.UP)
            if state is not NodeState.UP:
                raise SubmitRefused(f"node {spec.node} is {state}")
            held = self._held(*place)
            free = [
                i for i in range(self._groups[place] - self.foreign.get(place, 0)) if i not in held
            ]
            if len(free) < spec.num_gpus:
                raise SubmitRefused(
                    f"{spec.num_gpus} {spec.gpu_type} GPUs asked on {spec.node}, "
                    f"{len(free)} of {self._groups[place]} free"
                )
            behaviour = self._programs.get(spec.command, PROGRAM_TRUE)
            program = behaviour(spec) if callable(behaviour) else behaviour
            run = _Run(spec, program, tuple(free[: spec.num_gpus]), self.clock())
            self._runs[key] = run
            self._settle(run, run.created_at)
            return key

    def runs(self) -> list[RunInfo]:
        with self._lock:
            self._settle_all()
            infos = [self._info(r) for r in self._runs.values()]
        return sorted(infos, key=lambda r: (r.job_id, r.attempt))

    def find(self, job_id: str, attempt: int) -> RunInfo | None:
        with self._lock:
            run = self._runs.get(f"{job_id}.{attempt}")
            if run is None:
                return None
            self._settle(run, self.clock())
            return self._info(run)

    def cancel(self, executor_id: str) -> None:
        with self._lock:
            run = self._runs.get(executor_id)
            if run is None:
                return
            now = self.clock()
            self._settle(run, now)
            if run.state.ended or run.cancel_at is not None:
                return
            run.cancel_at = now
            self._settle(run, now)

    def log(self, job_id: str, attempt: int) -> str:
        with self._lock:
            run = self._runs.get(f"{job_id}.{attempt}")
            if run is None:
                return ""
            self._settle(run, self.clock())
            # Like a job's own output file: stderr goes there too unless it has its own.
            return run.output if run.spec.error is not None else run.output + run.error

    # --- settling: what happened between two observations ---------------------------------

    def _held(self, node: str, gpu_type: str) -> set[int]:
        return {
            i
            for r in self._runs.values()
            if (r.spec.node, r.spec.gpu_type) == (node, gpu_type) and not r.state.ended
            for i in r.gpu_indices
        }

    def _settle_all(self) -> None:
        now = self.clock()
        for run in self._runs.values():
            self._settle(run, now)

    def _settle(self, run: _Run, now: float) -> None:
        if run.state.ended:
            return
        program = run.program
        if run.started_at is None:
            start = run.created_at + program.start_s
            if run.cancel_at is not None and run.cancel_at < start:
                run.state, run.ended_at = RunState.CANCELLED, run.cancel_at
                run.reason = "cancelled before it started"
                return
            if now < start:
                return
            self._start(run, start)
        assert run.started_at is not None
        ends: list[tuple[float, Callable[[float], None]]] = []
        if run.cancel_at is not None:
            stopped = max(run.cancel_at, run.started_at) + program.stop_s
            ends.append((stopped, lambda at: self._final(run, RunState.CANCELLED, at, "cancelled")))
        limit = run.spec.time_limit_s
        if limit is not None:
            reason = f"time limit of {limit:g} s reached"
            ends.append(
                (run.started_at + limit, lambda at: self._final(run, RunState.TIMEOUT, at, reason))
            )
        script = program.script
        if program.gate is not None:
            if program.gate.opened.is_set():
                ends.append((now, lambda at: self._end(run, script.exit_code, at)))
        elif script.seconds is not None:
            ends.append(
                (run.started_at + script.seconds, lambda at: self._end(run, script.exit_code, at))
            )
        due = [(at, end) for at, end in ends if at <= now]
        if due:
            at, end = min(due, key=lambda d: d[0])
            end(at)

    def _start(self, run: _Run, at: float) -> None:
        run.state, run.started_at = RunState.RUNNING, at
        variables = {
            "JPUSHARE_JOB_ID": run.spec.job_id,
            "JPUSHARE_ATTEMPT": str(run.spec.attempt),
            "JPUSHARE_JOB_NAME": run.spec.name,
            "JPUSHARE_NODE": run.spec.node,
            "CUDA_VISIBLE_DEVICES": ",".join(str(i) for i in run.gpu_indices),
        }
        for text, attr in (
            (run.program.script.output, "output"),
            (run.program.script.error, "error"),
        ):
            if text:
                setattr(run, attr, string.Template(text).safe_substitute(variables) + "\n")

    def _end(self, run: _Run, exit_code: int, at: float) -> None:
        """The command exited: its state by exit code and output, as the real executors."""
        run.exit_code = exit_code
        if exit_code == 0:
            self._final(run, RunState.COMPLETED, at, None)
        elif find_cuda_oom(run.output + "\n" + run.error) is not None:
            self._final(run, RunState.OOM, at, CUDA_OOM_REASON)
        else:
            self._final(run, RunState.FAILED, at, f"exit code {exit_code}")

    @staticmethod
    def _final(run: _Run, state: RunState, at: float, reason: str | None) -> None:
        run.state, run.ended_at, run.reason = state, at, reason

    @staticmethod
    def _info(run: _Run) -> RunInfo:
        reason = run.reason
        if not run.state.ended and run.cancel_at is not None:
            reason = "stopping (cancel)"
        return RunInfo(
            job_id=run.spec.job_id,
            attempt=run.spec.attempt,
            executor_id=run.key,
            state=run.state,
            node=run.spec.node,
            started_at=run.started_at,
            ended_at=run.ended_at,
            exit_code=run.exit_code,
            reason=reason,
        )
