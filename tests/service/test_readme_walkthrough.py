"""The README's "Try it" holds. Its first shell block is read from README.md and run command
by command, back to back as a reader would, against a real `jpushare serve --demo`; each
command must exit as the block says (0, or 1 where its comment says `error CODE`), and what
its comment claims about job numbers and placements must hold."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.dispatcher.conftest import wait_for
from tests.dispatcher.processes import REPO, Service, start_service
from tests.service.demo_service import free_port


@dataclass(frozen=True)
class Step:
    command: str
    comment: str


def try_it_steps(readme: str) -> list[Step]:
    """The commands of the first ```sh block under "## Try it", with their comments; a
    line of several commands joined by ` ; ` is several steps."""
    section = readme.split("\n## Try it\n", 1)[1].split("\n## ", 1)[0]
    block = section.split("```sh\n", 1)[1].split("\n```", 1)[0]
    steps: list[Step] = []
    for line in block.splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue  # a comment that continues the line above
        command, _, comment = line.partition("  #")
        for part in command.split(" ; "):
            steps.append(Step(part.strip(), comment.strip().lstrip("#").strip()))
    return steps


def test_the_block_is_found_and_read_as_commands() -> None:
    steps = try_it_steps((REPO / "README.md").read_text())
    assert steps[0].command == ". .venv/bin/activate && . var/demo-tokens.env"
    assert all(s.command.startswith(("jpushare ", ". ")) for s in steps)
    assert any(s.comment.startswith("error ") for s in steps)


@pytest.fixture
def demo_dir(tmp_path: Path) -> Iterator[tuple[Path, Service]]:
    """A `serve --demo` whose state dir is `<tmp>/var`, and `<tmp>/.venv` -> this venv, so
    that the block's relative paths hold with `<tmp>` as the reader's directory."""
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("JPUSHARE_")}
    env.update(JPUSHARE_STATE_DIR=str(tmp_path / "var"), JPUSHARE_CYCLE_S="1")
    (tmp_path / ".venv").symlink_to(Path(sys.prefix))
    service = start_service("demo", env, tmp_path, "--demo", "--port", str(port), cwd=REPO)
    tokens = tmp_path / "var" / "demo-tokens.env"
    try:
        wait_for(lambda: tokens.exists() and "JPU-Share demo" in service.log(), "demo is up")
        yield tmp_path, service
    finally:
        code = service.stop()
        assert code == 0, service.log()


def run_in_shell(cwd: Path, setup: str, command: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("JPUSHARE_")}
    env["PATH"] = f"{Path(sys.prefix) / 'bin'}:{env.get('PATH', '/usr/bin:/bin')}"
    (cwd / "client.json").write_text("{}")  # not the reader's own config file
    env["JPUSHARE_CLIENT_CONFIG"] = str(cwd / "client.json")
    return subprocess.run(
        ["bash", "-c", f"{setup}\n{command}"],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_the_readme_walkthrough_runs_back_to_back(demo_dir: tuple[Path, Service]) -> None:
    cwd, service = demo_dir
    assert "(new, from the example cluster)" in service.log()
    setup, *steps = try_it_steps((REPO / "README.md").read_text())
    outputs: dict[str, str] = {}
    for step in steps:
        done = run_in_shell(cwd, setup.command, step.command)
        said = f"{step.command}\nstdout:\n{done.stdout}\nstderr:\n{done.stderr}"
        error = re.match(r"error ([A-Z_]+)", step.comment)
        if error:
            assert done.returncode == 1, said
            assert done.stderr.startswith(f"error {error.group(1)}: "), said
            continue
        assert done.returncode == 0, said
        outputs[step.command] = done.stdout
        claim = re.match(r"job (\d+): (node-[a-z])\b", step.comment)
        if step.command.startswith("jpushare submit") and claim:
            job, node = claim.groups()
            assert done.stdout.startswith(f"submitted job {job} "), said
            if "--wait-started" in shlex.split(step.command):  # it has left the queue: where to?
                assert f"job {job} (sleep): " in done.stdout and f" on {node}/" in done.stdout
    why = next(out for cmd, out in outputs.items() if cmd.startswith("jpushare why"))
    assert why.startswith(("job 3: RESERVING", "job 3: WAITING_FOR_GPUS")), why
    waited = next(out for cmd, out in outputs.items() if cmd.startswith("jpushare wait 3"))
    assert re.match(r"job 3 \(sleep\): (DISPATCHED|RUNNING|COMPLETED) on node-b/rtx5090", waited)
    queue = next(out for cmd, out in outputs.items() if cmd == "jpushare queue")
    assert queue.splitlines()[1].split()[:2] == ["1", "3"]  # job 3 is the top job
    # Leave nothing running behind the test: the reader's own bulk cancel.
    done = run_in_shell(cwd, setup.command, "jpushare cancel --state RUNNING --state QUEUED")
    assert done.returncode == 0, done.stderr
