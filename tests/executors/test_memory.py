"""What the in-memory executor adds to the contract, for the tests that drive it: gates,
a manual clock, time limits, slow stops, pending starts, foreign GPUs, node failures."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from jpushare.executors.base import LaunchSpec, NodeState, RunState, SubmitRefused
from tests.job_script import CUDA_OOM, Script
from tests.memory_executor import Gate, ManualClock, MemoryExecutor, MemoryGpus, Program


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(1000.0)


@pytest.fixture
def executor(clock: ManualClock) -> MemoryExecutor:
    return MemoryExecutor([MemoryGpus("n1", "t", 2), MemoryGpus("n2", "t", 1)], clock)


def launch(command: str, job_id: str = "1", attempt: int = 1, **fields: Any) -> LaunchSpec:
    return dataclasses.replace(LaunchSpec(job_id, attempt, "job", command, "n1", "t", 1), **fields)


def state(executor: MemoryExecutor, job_id: str = "1") -> RunState:
    run = executor.find(job_id, 1)
    assert run is not None
    return run.state


def test_a_gated_run_ends_when_its_gate_opens(executor: MemoryExecutor, clock: ManualClock) -> None:
    gate = Gate()
    executor.submit(launch(executor.program(Program(Script(output="done"), gate=gate))))
    clock.advance(100)
    assert state(executor) is RunState.RUNNING
    gate.open()
    clock.advance(1)
    run = executor.find("1", 1)
    assert run is not None and (run.state, run.started_at, run.ended_at) == (
        RunState.COMPLETED,
        1000.0,
        1101.0,
    )
    assert executor.log("1", 1) == "done\n"


def test_a_run_ends_on_the_clock_and_an_oom_by_its_output(
    executor: MemoryExecutor, clock: ManualClock
) -> None:
    executor.submit(launch(executor.command(Script(error=CUDA_OOM, seconds=5, exit_code=1))))
    clock.advance(4.9)
    assert state(executor) is RunState.RUNNING
    clock.advance(0.2)
    run = executor.find("1", 1)
    assert run is not None and (run.state, run.ended_at) == (RunState.OOM, 1005.0)
    assert run.reason is not None and "CUDA out of memory" in run.reason


def test_the_program_may_depend_on_the_attempt(executor: MemoryExecutor) -> None:
    command = executor.program(
        lambda spec: Program(Script(exit_code=1 if spec.attempt == 1 else 0))
    )
    executor.submit(launch(command, attempt=1))
    executor.submit(launch(command, attempt=2))
    assert [r.state for r in executor.runs()] == [RunState.FAILED, RunState.COMPLETED]


def test_a_time_limit_ends_the_run_timeout_at_the_limit(
    executor: MemoryExecutor, clock: ManualClock
) -> None:
    executor.submit(launch(executor.command(Script(seconds=None)), time_limit_s=2.0))
    clock.advance(10)
    run = executor.find("1", 1)
    assert run is not None and (run.state, run.ended_at) == (RunState.TIMEOUT, 1002.0)


def test_a_slow_stop_ends_cancelled_after_its_stop_time_and_a_pending_run_at_once(
    executor: MemoryExecutor, clock: ManualClock
) -> None:
    slow = executor.program(Program(Script(seconds=None), stop_s=1.5))
    executor.submit(launch(slow))
    executor.submit(launch(executor.program(Program(start_s=60)), job_id="2", node="n2"))
    clock.advance(1)
    executor.cancel("1.1")
    executor.cancel("2.1")
    assert state(executor) is RunState.RUNNING
    assert state(executor, "2") is RunState.CANCELLED
    clock.advance(2)
    run = executor.find("1", 1)
    assert run is not None and (run.state, run.ended_at) == (RunState.CANCELLED, 1002.5)


def test_foreign_gpus_are_used_and_not_handed_out(executor: MemoryExecutor) -> None:
    executor.foreign[("n1", "t")] = 1
    executor.submit(launch(executor.command(Script(seconds=None))))
    assert [g.used for g in executor.inventory()] == [2, 0]
    with pytest.raises(SubmitRefused, match="0 of 2 free"):
        executor.submit(launch("true", job_id="2"))


def test_a_failed_node_ends_its_runs_node_fail_and_refuses_new_ones(
    executor: MemoryExecutor,
) -> None:
    executor.submit(launch(executor.command(Script(seconds=None))))
    executor.fail_node("n1")
    assert state(executor) is RunState.NODE_FAIL
    assert [g.state for g in executor.inventory()] == [NodeState.DOWN, NodeState.UP]
    with pytest.raises(SubmitRefused, match="down"):
        executor.submit(launch("true", job_id="2"))


def test_finish_ends_a_run_when_told(executor: MemoryExecutor) -> None:
    executor.submit(launch(executor.command(Script(seconds=None))))
    executor.finish("1", 1, exit_code=1, output=CUDA_OOM + "\n")
    assert state(executor) is RunState.OOM
