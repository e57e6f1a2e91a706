"""How the local executor finds its cgroups (v2, v1 or none) and says so, the device rules
it gives a run, and what it must not need a new descriptor for."""

from __future__ import annotations

import errno
import logging
import os
from pathlib import Path

import pytest

from jpushare.config import ConfigError, load_settings
from jpushare.executors import cgroups as cgroups_module
from jpushare.executors.cgroups import detect, device_rules, namespace_for
from jpushare.executors.gpus import LocalGpu
from jpushare.executors.local import LocalExecutor
from tests.missing import missing


def fake_proc(tmp_path: Path, mountinfo: list[str], cgroup: list[str]) -> Path:
    proc = tmp_path / "proc"
    (proc / "self").mkdir(parents=True)
    (proc / "self/mountinfo").write_text("\n".join(mountinfo) + "\n")
    (proc / "self/cgroup").write_text("\n".join(cgroup) + "\n")
    return proc


def cgroup2_line(point: Path) -> str:
    return f"41 31 0:38 / {point} rw,relatime - cgroup2 cgroup2 rw"


def test_a_service_that_is_not_root_has_no_cgroups_and_says_why(tmp_path: Path) -> None:
    found = detect(tmp_path / "state", euid=1000)
    assert (found.mode, found.usable) == ("none", False)
    assert found.describe() == (
        "containment: no cgroups (the service is not root): jobs run as process groups only"
    )


def test_an_empty_v2_hierarchy_and_no_v1_mount_mean_no_cgroups(tmp_path: Path) -> None:
    unified = tmp_path / "unified"
    unified.mkdir()
    (unified / "cgroup.controllers").write_text("\n")  # what this lab's machines mount
    proc = fake_proc(tmp_path, [cgroup2_line(unified)], ["0::/"])
    found = detect(tmp_path / "state", proc=proc, euid=0)
    assert found.mode == "none"
    assert f"cgroup v2 at {unified} lacks memory, pids, cpuset" in found.describe()


def test_v2_with_its_controllers_delegated_is_used_and_says_devices_are_not(
    tmp_path: Path,
) -> None:
    unified = tmp_path / "unified"
    service = unified / "system.slice/jpushare.service"
    service.mkdir(parents=True)
    (service / "cgroup.controllers").write_text("cpuset cpu io memory pids\n")
    (service / "cgroup.subtree_control").write_text("cpuset memory pids\n")
    ns = service / namespace_for(tmp_path / "state")
    ns.mkdir()  # the kernel makes a new cgroup's files; a plain directory needs them made
    (ns / "cgroup.subtree_control").write_text("")
    proc = fake_proc(
        tmp_path,
        [cgroup2_line(unified).replace(str(unified), str(unified).replace(" ", "\\040"))],
        ["0::/system.slice/jpushare.service"],
    )
    found = detect(tmp_path / "state", proc=proc, euid=0)
    assert found.mode == "v2" and found.bases == {"unified": service}
    assert (ns / "cgroup.subtree_control").read_text() == "+memory +pids +cpuset"
    line = found.describe()
    assert line.startswith(f"containment: cgroup v2 at {ns} (memory, pids, cpuset;")
    assert "devices NOT constrained (v2 needs an eBPF program, not implemented)" in line
    assert not found.device_control


def test_this_machine_gives_each_run_the_v1_controllers_and_logs_them(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    if os.geteuid() != 0:
        missing("cgroups are made by a root service", "CI runs as root")
    caplog.set_level(logging.INFO, "jpushare.executors.local")
    ex = LocalExecutor(tmp_path / "state", gpus=[LocalGpu("ws1", 0, "rtx4090")])
    if not ex.cgroups.usable:
        missing(f"no cgroups here: {ex.cgroups.why}", "CI mounts cgroups")
    lines = [r.getMessage() for r in caplog.records if "containment" in r.getMessage()]
    assert lines == [f"local executor: {ex.cgroups.describe()}"]
    if ex.cgroups.mode == "v1":
        assert "(memory, pids, cpuset, devices, freezer)" in lines[0]
    # Nothing is left in the hierarchies by an executor that ran no job.
    assert not any((b / ex.cgroups.namespace).exists() for b in ex.cgroups.bases.values())


def test_a_run_may_open_the_usual_devices_its_own_gpu_and_the_control_nodes(
    tmp_path: Path,
) -> None:
    if os.geteuid() != 0:
        missing("making device nodes needs root", "CI runs as root")
    dev = tmp_path / "dev"
    (dev / "nvidia-caps").mkdir(parents=True)
    nodes = {"nvidia0": 0, "nvidia1": 1, "nvidia2": 2, "nvidiactl": 255, "nvidia-uvm": 254}
    for name, minor in nodes.items():
        major = 195 if name != "nvidia-uvm" else 510
        os.mknod(dev / name, 0o666 | 0o020000, os.makedev(major, minor))
    os.mknod(dev / "nvidia-caps/nvidia-cap1", 0o400 | 0o020000, os.makedev(511, 1))
    (dev / "nvidia3").write_text("not a device")  # only character devices count

    rules = device_rules(dev, [1, 3])

    assert rules[:8] == (
        "c 1:3 rwm",
        "c 1:5 rwm",
        "c 1:7 rwm",
        "c 1:8 rwm",
        "c 1:9 rwm",
        "c 5:0 rwm",
        "c 5:2 rwm",
        "c 136:* rwm",
    )
    assert set(rules[8:]) == {"c 195:1 rwm", "c 195:255 rwm", "c 510:254 rwm", "c 511:1 rwm"}


def test_the_executor_lock_is_opened_once_not_at_every_observation(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ex = LocalExecutor(tmp_path / "state", gpus=[LocalGpu("ws1", 0, "rtx4090")])
    opened: list[str] = []
    real_open = os.open

    def counting_open(path: object, *args: object, **kwargs: object) -> int:
        opened.append(str(path))
        return real_open(path, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(os, "open", counting_open)
    ex.runs()
    ex.inventory()
    ex.find("nothing", 1)
    ex.cancel("nothing.1")
    assert [p for p in opened if p.endswith("lock")] == []


def test_the_local_limits_are_settings_with_defaults_and_zero_for_none() -> None:
    defaults = load_settings({})
    assert (defaults.local_pids_max, defaults.local_output_max_bytes) == (4096, 64 << 30)
    set_ = load_settings(
        {"JPUSHARE_LOCAL_PIDS_MAX": "0", "JPUSHARE_LOCAL_OUTPUT_MAX_BYTES": "2097152"}
    )
    assert (set_.local_pids_max, set_.local_output_max_bytes) == (None, 2 << 20)
    for name, bad in (("JPUSHARE_LOCAL_PIDS_MAX", "lots"), ("JPUSHARE_LOCAL_PIDS_MAX", "3")):
        with pytest.raises(ConfigError, match=name):
            load_settings({name: bad})


def test_v2_a_service_alone_in_its_cgroup_moves_into_a_leaf_to_delegate(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    unified = tmp_path / "unified"
    service = unified / "system.slice/jpushare.service"
    leaf = service / "jpushare-service"
    ns = service / namespace_for(tmp_path / "state")
    for d in (leaf, ns):
        d.mkdir(parents=True)
        (d / "cgroup.subtree_control").write_text("")
        (d / "cgroup.procs").write_text("")
    (service / "cgroup.controllers").write_text("cpuset memory pids\n")
    (service / "cgroup.subtree_control").write_text("")
    (service / "cgroup.procs").write_text(f"{os.getpid()}\n")
    real_write = cgroups_module._write
    moved: list[Path] = []

    def kernel_write(path: Path, text: str) -> None:
        # The kernel's rule, played: no controllers for children while processes are here.
        if path == service / "cgroup.subtree_control" and not moved:
            raise OSError(errno.EBUSY, "Device or resource busy")
        if path.name == "cgroup.procs":
            moved.append(path)
        real_write(path, text)

    monkeypatch.setattr(cgroups_module, "_write", kernel_write)
    proc = fake_proc(tmp_path, [cgroup2_line(unified)], ["0::/system.slice/jpushare.service"])
    found = detect(tmp_path / "state", proc=proc, euid=0)
    assert found.mode == "v2" and found.bases == {"unified": service}
    assert moved == [leaf / "cgroup.procs"]
    assert (leaf / "cgroup.procs").read_text() == f"{os.getpid()}\n"
    assert (service / "cgroup.subtree_control").read_text() == "+memory +pids +cpuset"

    # With another process there (a login session's shell), nothing is moved.
    moved.clear()
    (service / "cgroup.subtree_control").write_text("")
    (service / "cgroup.procs").write_text(f"{os.getpid()}\n1\n")
    found = detect(tmp_path / "state", proc=proc, euid=0)
    assert found.mode == "none" and moved == []
    assert "holds 1 other process(es)" in found.why
