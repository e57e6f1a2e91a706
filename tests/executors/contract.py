"""The executor contract: what every Executor must do, as one suite that each backend runs.

The dispatcher only ever sees the `Executor` protocol; this suite keeps the local executor,
the Slurm executor and the in-memory one of the tests honest about the same behaviour
(STYLE: "one contract test suite runs against every executor"). It has two parts:

- `ExecutorContract`: the protocol's behaviour (states, exit codes, OOM, cancel, idempotent
  submit, inventory, unknown runs, refusals). Its jobs are `Script`s (tests/job_script.py),
  which each target turns into its own command: bash for real executors, a program for the
  in-memory one.
- `ProcessContract(ExecutorContract)`: what only real processes have: a cancel kills every
  process of the job, the command runs once, in its directory with exactly its
  environment, its output and error files, its memory limit. It makes two tests of the
  first part stronger: the cancel test (same name) and how a start is counted.

How to plug an executor in — subclass one of them in a test module (the class name must
start with `Test` so pytest collects it) and give it a `target` fixture:

    from tests.executors.contract import ContractTarget, ProcessContract

    class TestSlurmExecutorContract(ProcessContract):
        pytestmark = pytest.mark.slurm

        @pytest.fixture
        def target(self, tmp_path: Path) -> Iterator[ContractTarget]:
            shared = ...  # a directory the jobs and this test process both see
            yield ContractTarget(
                SlurmExecutor(...), node="node1", gpu_type="rtx4090",
                partition="p4090", shared_dir=shared, timeout_s=60,
            )

What a target must offer:
- (node, gpu_type) is a placement with at least 2 GPUs, free while the suite runs;
- `shared_dir` is writable by the jobs (run as `bash`) and readable by this process (the
  suite checks through files there that a cancelled job's processes are really gone);
- runs reach their end within `timeout_s` (the jobs sleep at most ~1 s unless cancelled);
- `command` turns a Script into the executor's command (default: bash) and `pause` lets
  time pass between two looks (default: sleep `poll_s`; a manual clock: advance it).

Every test submits fresh job ids, and `ExecutorContract` cancels whatever is still running
at the end of each test, so a shared cluster is left clean.
"""

from __future__ import annotations

import dataclasses
import shlex
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import pytest

from jpushare.executors.base import Executor, LaunchSpec, RunInfo, RunState, SubmitRefused
from tests.job_script import CUDA_OOM, Script, shell

T = TypeVar("T")

OOM_LINE = CUDA_OOM


def wait_for(
    probe: Callable[[], T | None],
    timeout_s: float,
    poll_s: float = 0.05,
    what: str = "",
    pause: Callable[[], None] | None = None,
) -> T:
    """Call `probe` until it returns something other than None/False; fail after timeout_s
    (real seconds). Between calls: `pause()`, else sleep `poll_s`."""
    deadline = time.monotonic() + timeout_s
    last: T | None = None
    while True:
        last = probe()
        if last is not None and last is not False:
            return last
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout_s} s waiting for {what or probe}")
        if pause is None:
            time.sleep(poll_s)
        else:
            pause()


@dataclass
class ContractTarget:
    """An executor under test and the placement the suite may use on it."""

    executor: Executor
    node: str
    gpu_type: str
    shared_dir: Path
    partition: str | None = None
    timeout_s: float = 10.0  # how long a short run may take to reach a state
    poll_s: float = 0.05
    command: Callable[[Script], str] = shell
    pause: Callable[[], None] | None = None  # None: sleep poll_s
    submitted: list[str] = field(default_factory=list)

    def spec(
        self, command: str | Script, num_gpus: int = 1, job_id: str | None = None, **run: Any
    ) -> LaunchSpec:
        """A launch on the target's placement; `run`: LaunchSpec's run fields (workdir …)."""
        job_id = job_id or f"contract-{uuid.uuid4().hex[:12]}"
        if isinstance(command, Script):
            command = self.command(command)
        return LaunchSpec(
            job_id=job_id,
            attempt=1,
            name=f"c-{job_id[-12:]}",
            command=command,
            node=self.node,
            gpu_type=self.gpu_type,
            num_gpus=num_gpus,
            partition=self.partition,
            **run,
        )

    def workdir(self) -> Path:
        """A fresh directory under shared_dir for one job to run in."""
        path = self.shared_dir / f"wd-{uuid.uuid4().hex[:8]}"
        path.mkdir(parents=True)
        return path

    def submit(self, spec: LaunchSpec) -> str:
        executor_id = self.executor.submit(spec)
        self.submitted.append(executor_id)
        return executor_id

    def run(self, spec: LaunchSpec) -> RunInfo:
        """The run as found by `find` (must exist)."""
        info = self.executor.find(spec.job_id, spec.attempt)
        assert info is not None, f"{spec.job_id} unknown to the executor"
        return info

    def wait_state(self, spec: LaunchSpec, *states: RunState) -> RunInfo:
        def probe() -> RunInfo | None:
            info = self.run(spec)
            return info if info.state in states else None

        return self.wait(probe, f"{spec.job_id} in {states}")

    def wait_ended(self, spec: LaunchSpec) -> RunInfo:
        def probe() -> RunInfo | None:
            info = self.run(spec)
            return info if info.state.ended else None

        return self.wait(probe, f"{spec.job_id} to end")

    def wait(self, probe: Callable[[], T | None], what: str = "") -> T:
        """`wait_for` with the target's timeout and way of letting time pass."""
        return wait_for(probe, self.timeout_s, self.poll_s, what, self.pause)

    def used(self) -> int:
        return sum(
            g.used
            for g in self.executor.inventory()
            if g.node == self.node and g.gpu_type == self.gpu_type
        )


def _ticker(path: Path) -> str:
    """Shell that appends a line to `path` every 0.1 s, forever."""
    return f"while :; do echo t >> {shlex.quote(str(path))}; sleep 0.1; done"


def _text(path: Path) -> str | None:
    """The file's text, stripped; None while it is absent or empty."""
    try:
        return path.read_text().strip() or None
    except FileNotFoundError:
        return None


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0


class ExecutorContract:
    """The protocol's part. Subclasses provide the `target` fixture (module docstring)."""

    @pytest.fixture
    def target(self) -> ContractTarget:
        raise NotImplementedError("a subclass provides the `target` fixture")

    @pytest.fixture(autouse=True)
    def _cancel_leftovers(self, target: ContractTarget) -> Iterator[None]:
        yield
        for executor_id in target.submitted:
            target.executor.cancel(executor_id)

    def test_a_short_job_runs_and_completes_with_its_times(self, target: ContractTarget) -> None:
        spec = target.spec(Script(output="hello-from-the-job", seconds=1))
        target.submit(spec)
        assert target.run(spec).state in (RunState.PENDING, RunState.RUNNING)

        info = target.wait_ended(spec)

        assert info.state is RunState.COMPLETED, info
        assert info.exit_code == 0
        assert info.started_at is not None and info.ended_at is not None
        assert info.started_at <= info.ended_at
        assert info.job_id == spec.job_id and info.attempt == spec.attempt
        assert info.node == spec.node
        assert spec.job_id in [r.job_id for r in target.executor.runs()]
        assert "hello-from-the-job" in target.wait(
            lambda: target.executor.log(spec.job_id, 1) or None
        )

    def test_a_non_zero_exit_is_failed_with_its_exit_code(self, target: ContractTarget) -> None:
        spec = target.spec(Script(seconds=0.2, exit_code=3))
        target.submit(spec)

        info = target.wait_ended(spec)

        assert info.state is RunState.FAILED, info
        assert info.exit_code == 3

    def test_cuda_out_of_memory_in_the_output_is_oom(self, target: ContractTarget) -> None:
        spec = target.spec(Script(error=OOM_LINE, exit_code=1))
        target.submit(spec)

        info = target.wait_ended(spec)

        assert info.state is RunState.OOM, info
        assert "CUDA out of memory" in target.executor.log(spec.job_id, 1)

    def test_cancel_stops_the_run(self, target: ContractTarget) -> None:
        spec = target.spec(Script(seconds=None))
        executor_id = target.submit(spec)
        target.wait_state(spec, RunState.RUNNING)

        target.executor.cancel(executor_id)
        info = target.wait_ended(spec)

        assert info.state is RunState.CANCELLED, info
        target.executor.cancel(executor_id)  # idempotent
        assert target.run(spec).state is RunState.CANCELLED

    def test_cancel_of_an_ended_run_changes_nothing(self, target: ContractTarget) -> None:
        spec = target.spec(Script())
        executor_id = target.submit(spec)
        target.wait_ended(spec)

        target.executor.cancel(executor_id)

        assert target.run(spec).state is RunState.COMPLETED

    def counted_job(self, target: ContractTarget) -> tuple[LaunchSpec, Callable[[], int]]:
        """A job of ~0.5 s and how many times it started (here: lines in its log)."""
        spec = target.spec(Script(output="started", seconds=0.5))
        return spec, lambda: target.executor.log(spec.job_id, 1).count("started\n")

    def test_submitting_the_same_run_twice_starts_it_once(self, target: ContractTarget) -> None:
        spec, starts = self.counted_job(target)

        first = target.submit(spec)
        second = target.submit(spec)
        target.wait_ended(spec)
        third = target.submit(spec)  # after it ended too

        assert first == second == third
        assert [r.job_id for r in target.executor.runs()].count(spec.job_id) == 1
        assert starts() == 1

    def test_inventory_counts_the_gpus_of_running_jobs(self, target: ContractTarget) -> None:
        before = target.used()
        spec = target.spec(Script(seconds=None), num_gpus=2)
        executor_id = target.submit(spec)
        target.wait_state(spec, RunState.RUNNING)

        target.wait(lambda: target.used() == before + 2, "2 more used")

        target.executor.cancel(executor_id)
        target.wait_ended(spec)
        target.wait(lambda: target.used() == before, "GPUs back")

    def test_the_job_sees_its_gpus_and_its_job_id(self, target: ContractTarget) -> None:
        spec = target.spec(
            Script(
                output="CVD=$CUDA_VISIBLE_DEVICES JOB=$JPUSHARE_JOB_ID ATTEMPT=$JPUSHARE_ATTEMPT"
            ),
            num_gpus=2,
        )
        target.submit(spec)
        assert target.wait_ended(spec).state is RunState.COMPLETED

        line = target.wait(
            lambda: next(
                (x for x in target.executor.log(spec.job_id, 1).splitlines() if "CVD=" in x),
                None,
            )
        )
        cvd, job, attempt = (part.split("=", 1)[1] for part in line.split())
        assert len(set(cvd.split(","))) == 2, line
        assert job == spec.job_id
        assert attempt == "1"

    def test_an_unknown_run_is_not_found_and_has_no_log(self, target: ContractTarget) -> None:
        assert target.executor.find("contract-never-submitted", 1) is None
        assert target.executor.log("contract-never-submitted", 1) == ""

    def test_a_placement_that_does_not_exist_is_refused(self, target: ContractTarget) -> None:
        spec = target.spec(Script())
        bad = dataclasses.replace(spec, node="no-such-node-jpushare")

        with pytest.raises(SubmitRefused):
            target.executor.submit(bad)

        assert target.executor.find(bad.job_id, bad.attempt) is None


class ProcessContract(ExecutorContract):
    """What only an executor of real processes has (module docstring)."""

    def test_cancel_stops_the_run(self, target: ContractTarget) -> None:
        """Stronger than the protocol's: every process of the job's group is gone."""
        main = target.shared_dir / f"{uuid.uuid4().hex}.main"
        child = target.shared_dir / f"{uuid.uuid4().hex}.child"
        spec = target.spec(f"( {_ticker(child)} ) & {_ticker(main)}")
        executor_id = target.submit(spec)
        target.wait_state(spec, RunState.RUNNING)
        wait_for(lambda: _size(main) > 0 and _size(child) > 0, target.timeout_s, what="ticks")

        target.executor.cancel(executor_id)
        info = target.wait_ended(spec)

        assert info.state is RunState.CANCELLED, info
        sizes = (_size(main), _size(child))
        time.sleep(0.5)  # five ticks' time: a survivor would have written
        assert (_size(main), _size(child)) == sizes, "a process of the job still runs"
        target.executor.cancel(executor_id)  # idempotent
        assert target.run(spec).state is RunState.CANCELLED

    def counted_job(self, target: ContractTarget) -> tuple[LaunchSpec, Callable[[], int]]:
        """Stronger than a log: the command itself appends a line to a file each start."""
        starts = target.shared_dir / f"{uuid.uuid4().hex}.starts"
        spec = target.spec(f"echo started >> {shlex.quote(str(starts))}; sleep 0.5")
        return spec, lambda: starts.read_text().count("started\n")

    # --- where and with what (LaunchSpec.workdir, environment, output, error, limits) -------

    def test_the_job_runs_in_its_directory_with_exactly_its_environment(
        self, target: ContractTarget
    ) -> None:
        wd = target.workdir()
        spec = target.spec(
            'echo "pwd=$(pwd) myvar=$MYVAR pytest=${PYTEST_CURRENT_TEST-unset} '
            'job=$JPUSHARE_JOB_ID user=$USER home=${HOME:+set}"',
            workdir=str(wd),
            environment={"PATH": "/usr/bin:/bin", "MYVAR": "a b=c"},
        )
        target.submit(spec)
        assert target.wait_ended(spec).state is RunState.COMPLETED
        out = wd / f"jpushare-{spec.job_id}.out"
        line = wait_for(lambda: _text(out), target.timeout_s, what=str(out))
        # The test process's (the service's) variables are not the job's.
        assert f"pwd={wd} myvar=a b=c pytest=unset job={spec.job_id} user=" in line, line
        assert line.endswith("home=set") and "user= " not in line, line
        assert target.executor.log(spec.job_id, 1).strip() == line

    def test_output_and_error_files_take_their_patterns(self, target: ContractTarget) -> None:
        wd = target.workdir()
        spec = target.spec(
            "echo to-out; echo to-err >&2",
            workdir=str(wd),
            environment={"PATH": "/usr/bin:/bin"},
            output="out-%j-%a.txt",
            error=str(wd / "err-%j-100%%.txt"),
        )
        target.submit(spec)
        assert target.wait_ended(spec).state is RunState.COMPLETED
        out = wd / f"out-{spec.job_id}-1.txt"
        err = wd / f"err-{spec.job_id}-100%.txt"
        wait_for(lambda: _size(out) > 0 and _size(err) > 0, target.timeout_s, what="files")
        assert out.read_text() == "to-out\n"
        assert err.read_text() == "to-err\n"
        assert target.executor.log(spec.job_id, 1) == "to-out\n"

    def test_cuda_out_of_memory_in_the_error_file_is_oom(self, target: ContractTarget) -> None:
        wd = target.workdir()
        spec = target.spec(
            f"echo {shlex.quote(OOM_LINE)} >&2; exit 1",
            workdir=str(wd),
            environment={"PATH": "/usr/bin:/bin"},
            error="err-%j.txt",
        )
        target.submit(spec)
        assert target.wait_ended(spec).state is RunState.OOM

    def test_an_earlier_attempts_oom_does_not_make_the_next_one_oom(
        self, target: ContractTarget
    ) -> None:
        wd = target.workdir()
        run: dict[str, Any] = {"workdir": str(wd), "environment": {"PATH": "/usr/bin:/bin"}}
        first = target.spec(f"echo {shlex.quote(OOM_LINE)}; exit 1", **run)
        target.submit(first)
        assert target.wait_ended(first).state is RunState.OOM
        second = dataclasses.replace(first, attempt=2, command="echo plain failure; exit 3")
        target.submit(second)
        info = target.wait_ended(second)
        assert info.state is RunState.FAILED, info
        text = (wd / f"jpushare-{first.job_id}.out").read_text()
        assert text.index("CUDA out of memory") < text.index("plain failure")  # appended

    def test_memory_beyond_the_limit_ends_the_job(self, target: ContractTarget) -> None:
        wd = target.workdir()
        run: dict[str, Any] = {
            "workdir": str(wd),
            "environment": {"PATH": "/usr/bin:/bin"},
            "mem_per_gpu_mb": 256,
        }
        grab = "python3 -c 'b = bytearray({n} << 20); print(len(b))'"
        small = target.spec(grab.format(n=16), **run)
        big = target.spec(grab.format(n=1024), **run)
        target.submit(small)
        target.submit(big)
        assert target.wait_ended(small).state is RunState.COMPLETED
        assert target.wait_ended(big).state in (RunState.FAILED, RunState.OOM)

    def test_a_working_directory_that_does_not_exist_fails_with_the_reason(
        self, target: ContractTarget
    ) -> None:
        missing = target.shared_dir / f"missing-{uuid.uuid4().hex[:8]}"
        spec = target.spec("true", workdir=str(missing), environment={})
        reason = "the working directory: No such file or directory"
        try:
            target.submit(spec)
        except SubmitRefused as exc:  # refused at once (Slurm: checked before sbatch)
            assert reason in str(exc)
            return
        info = target.wait_ended(spec)  # or a run that fails to start (local)
        assert info.state is RunState.FAILED
        assert info.reason is not None and reason in info.reason
