"""The local executor beyond the contract: restarts, GPU indices, stops, environment."""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import stat
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from jpushare.executors import local as local_module
from jpushare.executors.base import LaunchSpec, RunInfo, RunState, SubmitRefused
from jpushare.executors.gpus import LocalGpu
from jpushare.executors.local import LocalExecutor
from jpushare.executors.local_records import RunFiles, run_key
from jpushare.executors.process_groups import group_alive, live_groups
from tests.executors.cgroup_cleanup import remove_cgroups
from tests.executors.contract import wait_for

WAIT_S = 10.0
NODE = "ws1"


def gpus(n4090: int = 4, n5090: int = 0) -> list[LocalGpu]:
    return [LocalGpu(NODE, i, "rtx4090") for i in range(n4090)] + [
        LocalGpu(NODE, n4090 + i, "rtx5090") for i in range(n5090)
    ]


def spec(
    job_id: str,
    command: str,
    num_gpus: int = 1,
    gpu_type: str = "rtx4090",
    time_limit_s: float | None = None,
) -> LaunchSpec:
    return LaunchSpec(
        job_id, 1, job_id, command, NODE, gpu_type, num_gpus, time_limit_s=time_limit_s
    )


def wait_end(ex: LocalExecutor, job_id: str) -> RunInfo:
    def probe() -> RunInfo | None:
        info = ex.find(job_id, 1)
        return info if info is not None and info.state.ended else None

    return wait_for(probe, WAIT_S, what=f"{job_id} to end")


SHOW_GPUS = 'echo "GPUS=$JPUSHARE_GPUS CVD=$CUDA_VISIBLE_DEVICES"'


def cvd(ex: LocalExecutor, job_id: str) -> set[int]:
    """The machine's GPU indices a job holds, from the line SHOW_GPUS printed; and what CUDA
    is told: the same, or 0…N-1 where the devices cgroup hides the other GPUs."""
    text = wait_for(lambda: ex.log(job_id, 1) or None, WAIT_S)
    line = next(x for x in text.splitlines() if x.startswith("GPUS="))
    held, visible = (part.split("=", 1)[1].split(",") for part in line.split())
    expected = [str(i) for i in range(len(held))] if ex.cgroups.device_control else held
    assert visible == expected, line
    return {int(i) for i in held}


def process_alive(pid: int) -> bool:
    """Whether `pid` runs: a zombie (dead, not yet reaped by its new parent) does not."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat[stat.rfind(")") + 2] not in "ZX"


def record(state_dir: Path, job_id: str) -> dict[str, object]:
    data: dict[str, object] = json.loads(
        (state_dir / "runs" / f"{run_key(job_id, 1)}.json").read_text()
    )
    return data


@pytest.fixture
def state_dir(tmp_path: Path) -> Iterator[Path]:
    path = tmp_path / "state"
    yield path
    # Leave no process behind, whatever a test did.
    for rec in (path / "runs").glob("*.json"):
        pgid = json.loads(rec.read_text()).get("pgid")
        if pgid and group_alive(pgid, None, live_groups()):
            os.killpg(pgid, signal.SIGKILL)
    remove_cgroups(path)


# A service process that accepts one job and dies at once, as a crash or a restart would.
SERVICE = textwrap.dedent(
    """
    import os, sys
    from jpushare.executors.base import LaunchSpec
    from jpushare.executors.gpus import LocalGpu
    from jpushare.executors.local import LocalExecutor
    state_dir, job_id, command, crash_before_start = sys.argv[1:5]
    ex = LocalExecutor(state_dir, gpus=[LocalGpu("ws1", i, "rtx4090") for i in range(4)])
    if crash_before_start == "yes":
        import subprocess
        def die(*a, **k):
            os._exit(3)
        subprocess.Popen = die
    ex.submit(LaunchSpec(job_id, 1, job_id, command, "ws1", "rtx4090", 1))
    os._exit(0)
    """
)


def run_dying_service(state_dir: Path, job_id: str, command: str, crash: bool = False) -> int:
    done = subprocess.run(
        [sys.executable, "-c", SERVICE, str(state_dir), job_id, command, "yes" if crash else ""],
        check=False,
        timeout=30,
    )
    return done.returncode


class TestRestart:
    def test_a_new_executor_readopts_a_running_job_and_sees_its_exit_code(
        self, state_dir: Path
    ) -> None:
        assert run_dying_service(state_dir, "j1", "sleep 2; exit 7") == 0

        ex = LocalExecutor(state_dir, gpus=gpus())
        running = ex.find("j1", 1)
        assert running is not None and running.state is RunState.RUNNING
        assert ex.inventory()[0].used == 1

        info = wait_end(ex, "j1")
        assert info.state is RunState.FAILED
        assert info.exit_code == 7
        assert info.started_at == running.started_at
        assert ex.inventory()[0].used == 0

    def test_a_job_that_ended_while_no_executor_ran_is_reported_with_its_exit_code(
        self, state_dir: Path
    ) -> None:
        assert run_dying_service(state_dir, "j2", "exit 5") == 0
        exit_file = state_dir / "runs" / "j2.1.exit"
        wait_for(exit_file.exists, WAIT_S, what="the job to end on its own")

        info = LocalExecutor(state_dir, gpus=gpus()).find("j2", 1)

        assert info is not None
        assert (info.state, info.exit_code) == (RunState.FAILED, 5)
        assert info.ended_at == exit_file.stat().st_mtime

    def test_a_job_accepted_but_not_started_before_a_crash_is_started_once(
        self, state_dir: Path, tmp_path: Path
    ) -> None:
        starts = tmp_path / "starts"
        assert run_dying_service(state_dir, "j3", f"echo x >> {starts}", crash=True) == 3
        assert record(state_dir, "j3")["pgid"] is None

        ex = LocalExecutor(state_dir, gpus=gpus(), start_grace_s=0.3)
        assert ex.inventory()[0].used == 1  # its GPU stays promised meanwhile
        ex.submit(spec("j3", f"echo x >> {starts}"))  # the dispatcher's retry

        assert wait_end(ex, "j3").state is RunState.COMPLETED
        assert starts.read_text() == "x\n"

    def test_a_job_accepted_but_not_started_before_a_crash_can_be_cancelled(
        self, state_dir: Path, tmp_path: Path
    ) -> None:
        starts = tmp_path / "starts"
        assert run_dying_service(state_dir, "j6", f"echo x >> {starts}", crash=True) == 3

        ex = LocalExecutor(state_dir, gpus=gpus(), start_grace_s=0.3, cancel_grace_s=0.3)
        ex.cancel(run_key("j6", 1))
        info = wait_end(ex, "j6")

        assert info.state is RunState.CANCELLED
        assert info.reason == "cancelled before it started"
        assert not starts.exists()
        assert ex.inventory()[0].used == 0

    def test_a_job_whose_machine_rebooted_is_a_node_failure(
        self, state_dir: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        ex = LocalExecutor(state_dir, gpus=gpus())
        ex.submit(spec("j4", "sleep 30"))
        pgid = record(state_dir, "j4")["pgid"]
        assert isinstance(pgid, int)
        os.killpg(pgid, signal.SIGKILL)  # what a power cut does: no exit code

        monkeypatch.setattr(local_module, "boot_id", lambda: "another-boot")
        info = LocalExecutor(state_dir, gpus=gpus()).find("j4", 1)

        assert info is not None and info.state is RunState.NODE_FAIL

    def test_a_job_killed_from_outside_fails_without_an_exit_code(self, state_dir: Path) -> None:
        ex = LocalExecutor(state_dir, gpus=gpus())
        ex.submit(spec("j5", "sleep 30"))
        pgid = record(state_dir, "j5")["pgid"]
        assert isinstance(pgid, int)

        os.killpg(pgid, signal.SIGKILL)
        info = wait_end(ex, "j5")

        assert info.state is RunState.FAILED
        assert info.exit_code is None
        assert info.reason is not None and "without an exit code" in info.reason


class TestGpuIndices:
    def test_runs_get_distinct_gpus_and_a_run_that_does_not_fit_is_refused(
        self, state_dir: Path
    ) -> None:
        ex = LocalExecutor(state_dir, gpus=gpus(4))
        show = f"{SHOW_GPUS}; sleep 30"
        ex.submit(spec("a", show, 1))
        ex.submit(spec("b", show, 2))
        with pytest.raises(SubmitRefused, match="1 of 4 free"):
            ex.submit(spec("c", show, 2))
        assert ex.find("c", 1) is None
        ex.submit(spec("d", show, 1))

        seen = [cvd(ex, j) for j in ("a", "b", "d")]
        assert set().union(*seen) == {0, 1, 2, 3}
        assert sum(len(s) for s in seen) == 4
        assert ex.inventory()[0].used == 4

        ex.cancel(run_key("b", 1))
        wait_end(ex, "b")
        ex.submit(spec("e", show, 2))
        assert cvd(ex, "e") == cvd(ex, "b")

    def test_each_gpu_type_hands_out_its_own_indices(self, state_dir: Path) -> None:
        ex = LocalExecutor(state_dir, gpus=gpus(2, 2))
        ex.submit(spec("f", SHOW_GPUS, 2, gpu_type="rtx5090"))
        assert cvd(ex, "f") == {2, 3}
        by_type = {g.gpu_type: (g.total, g.used) for g in ex.inventory()}
        assert by_type["rtx4090"][0] == 2 and by_type["rtx5090"][0] == 2

    def test_two_executors_on_one_state_dir_never_share_a_gpu(self, state_dir: Path) -> None:
        executors = [LocalExecutor(state_dir, gpus=gpus(4)) for _ in range(2)]
        accepted: list[str] = []
        refused: list[str] = []
        lock = threading.Lock()

        def submit(i: int) -> None:
            job = f"race{i}"
            try:
                executors[i % 2].submit(spec(job, f"{SHOW_GPUS}; sleep 30"))
            except SubmitRefused:
                with lock:
                    refused.append(job)
            else:
                with lock:
                    accepted.append(job)

        threads = [threading.Thread(target=submit, args=(i,)) for i in range(10)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()

        assert (len(accepted), len(refused)) == (4, 6)
        assert set().union(*(cvd(executors[0], j) for j in accepted)) == {0, 1, 2, 3}

    def test_a_placement_the_machine_lacks_is_refused_with_what_it_has(
        self, state_dir: Path
    ) -> None:
        ex = LocalExecutor(state_dir, gpus=gpus(2))
        with pytest.raises(SubmitRefused, match="rtx4090 on ws1"):
            ex.submit(spec("g", "true", gpu_type="h100"))


class TestStopping:
    def test_a_job_that_ignores_sigterm_is_killed_after_the_grace(self, state_dir: Path) -> None:
        ex = LocalExecutor(state_dir, gpus=gpus(), cancel_grace_s=1.0)
        ex.submit(spec("h", "trap '' TERM; echo ready; while :; do sleep 0.05; done"))
        wait_for(lambda: "ready" in ex.log("h", 1), WAIT_S)
        pgid = record(state_dir, "h")["pgid"]
        assert isinstance(pgid, int)

        ex.cancel(run_key("h", 1))
        time.sleep(0.1)
        stopping = ex.find("h", 1)
        assert stopping is not None and stopping.state is RunState.RUNNING
        info = wait_end(ex, "h")  # the timer's SIGKILL, no observation needed for it

        assert info.state is RunState.CANCELLED
        assert not group_alive(pgid, None, live_groups())

    def test_a_job_past_its_time_limit_times_out(self, state_dir: Path) -> None:
        ex = LocalExecutor(state_dir, gpus=gpus(), cancel_grace_s=0.3)
        ex.submit(spec("i", "sleep 30", time_limit_s=0.3))

        info = wait_end(ex, "i")

        assert info.state is RunState.TIMEOUT
        assert info.reason == "time limit of 0.3 s reached"

    def test_processes_a_job_leaves_behind_are_killed_when_it_ends(
        self, state_dir: Path, tmp_path: Path
    ) -> None:
        bg = tmp_path / "bg.pid"
        ex = LocalExecutor(state_dir, gpus=gpus())
        ex.submit(spec("k", f"sleep 30 & echo $! > {bg}; exit 0"))

        assert wait_end(ex, "k").state is RunState.COMPLETED
        pid = int(bg.read_text())
        wait_for(lambda: not process_alive(pid), WAIT_S, what="the background sleep to die")
        assert ex.inventory()[0].used == 0

    def test_oom_is_found_only_when_the_job_fails(self, state_dir: Path) -> None:
        ex = LocalExecutor(state_dir, gpus=gpus())
        ex.submit(spec("m", "echo 'caught: CUDA out of memory, retrying smaller'; exit 0"))
        ex.submit(spec("n", "echo 'torch.cuda.OutOfMemoryError: CUDA out of memory'; exit 1"))

        assert wait_end(ex, "m").state is RunState.COMPLETED
        oom = wait_end(ex, "n")
        assert oom.state is RunState.OOM
        assert oom.reason == "CUDA out of memory (reported in the job's output)"


class TestEnvironment:
    def test_the_services_own_settings_do_not_reach_the_job(self, state_dir: Path) -> None:
        env = {"PATH": os.environ["PATH"], "JPUSHARE_DATABASE_URL": "postgresql://secret", "X": "1"}
        ex = LocalExecutor(state_dir, gpus=gpus(), base_env=env)
        ex.submit(spec("p", 'echo "db=${JPUSHARE_DATABASE_URL:-unset} x=$X node=$JPUSHARE_NODE"'))

        wait_end(ex, "p")

        assert ex.log("p", 1) == "db=unset x=1 node=ws1\n"

    def test_the_job_runs_in_the_configured_directory(
        self, state_dir: Path, tmp_path: Path
    ) -> None:
        ex = LocalExecutor(state_dir, gpus=gpus(), workdir=tmp_path)
        ex.submit(spec("q", "pwd"))
        wait_end(ex, "q")
        assert ex.log("q", 1).strip() == str(tmp_path)

    def test_any_job_id_makes_a_safe_run_key(self, state_dir: Path) -> None:
        ex = LocalExecutor(state_dir, gpus=gpus())
        executor_id = ex.submit(spec("../lab a/job.7", "echo ok"))

        assert "/" not in executor_id
        assert wait_end(ex, "../lab a/job.7").state is RunState.COMPLETED
        assert ex.log("../lab a/job.7", 1) == "ok\n"
        assert {p.parent for p in state_dir.rglob("*")} <= {state_dir, state_dir / "runs"}

    def test_a_command_that_cannot_start_is_refused_and_leaves_nothing(
        self, state_dir: Path, tmp_path: Path
    ) -> None:
        ex = LocalExecutor(state_dir, gpus=gpus(), workdir=tmp_path / "missing")
        with pytest.raises(SubmitRefused, match="could not start"):
            ex.submit(spec("r", "true"))
        assert ex.find("r", 1) is None
        assert ex.inventory()[0].used == 0


def test_ended_runs_are_read_from_their_files_once_not_on_every_observation(
    state_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = LocalExecutor(state_dir, gpus=gpus(), start_grace_s=0.5)
    for i in range(5):  # one at a time: 4 GPUs
        first.submit(spec(f"old{i}", "true"))
        assert wait_end(first, f"old{i}").state is RunState.COMPLETED

    # A restarted service: a new instance over the same state directory, nothing cached.
    ex = LocalExecutor(state_dir, gpus=gpus(), start_grace_s=0.5)
    assert len(ex.runs()) == 5  # reads each ended record once
    loaded: list[str] = []
    real_load = RunFiles.load

    def counting_load(self: RunFiles, key: str) -> object:
        loaded.append(key)
        return real_load(self, key)

    monkeypatch.setattr(RunFiles, "load", counting_load)
    again = ex.runs()
    assert [r.state for r in again] == [RunState.COMPLETED] * 5
    assert ex.inventory()[0].used == 0
    assert ex.find("old0", 1) is not None
    assert loaded == []  # no ended run's file was parsed again
    # A new run is still read (it has not ended); the ended ones still are not.
    ex.submit(spec("new", "true"))
    wait_end(ex, "new")
    ex.runs()
    assert set(loaded) <= {run_key("new", 1)}


class TestOwnersRun:
    """Jobs with a working directory (revision 0003 on): limits and private state."""

    def test_cpus_per_gpu_pins_the_job_and_free_cpus_go_first(
        self, state_dir: Path, tmp_path: Path
    ) -> None:
        usable = sorted(os.sched_getaffinity(0))
        if len(usable) < 2:
            pytest.skip("needs two CPUs to tell pinning from no pinning")
        ex = LocalExecutor(state_dir, gpus=gpus())
        flag = tmp_path / "go"
        cmd = (
            f"grep Cpus_allowed_list /proc/self/status; while [ ! -e {flag} ]; do sleep 0.05; done"
        )
        for job in ("c1", "c2"):
            owners = dataclasses.replace(
                spec(job, cmd),
                cpus_per_gpu=1,
                workdir=str(tmp_path),
                environment={"PATH": "/usr/bin:/bin"},
            )
            ex.submit(owners)
        flag.touch()
        seen = []
        for job in ("c1", "c2"):
            assert wait_end(ex, job).state is RunState.COMPLETED
            seen.append(ex.log(job, 1).split()[-1])
        assert all("," not in s and "-" not in s for s in seen), seen  # one CPU each
        assert seen[0] != seen[1]  # the second run took the CPU nobody held

    def test_the_state_directory_and_its_records_are_the_services_alone(
        self, state_dir: Path, tmp_path: Path
    ) -> None:
        state_dir.mkdir(mode=0o755)  # an existing, looser directory is tightened
        state_dir.chmod(0o755)
        ex = LocalExecutor(state_dir, gpus=gpus())
        ex.submit(dataclasses.replace(spec("s", "true"), workdir=str(tmp_path), environment={}))
        wait_end(ex, "s")
        assert stat.S_IMODE(state_dir.stat().st_mode) == 0o700
        assert stat.S_IMODE((state_dir / "runs").stat().st_mode) == 0o700
        for path in [state_dir / "lock", *(state_dir / "runs").iterdir()]:
            assert stat.S_IMODE(path.stat().st_mode) & 0o077 == 0, path
        out = tmp_path / "jpushare-s.out"
        assert stat.S_IMODE(out.stat().st_mode) == 0o600
