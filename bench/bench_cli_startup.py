"""How long a user command takes to start: `jpushare jobs --help` and `jpushare queue`
(against a closed port, so the time is start-up plus one refused connection), run
repeatedly as fresh processes the way hyperfine does; prints min / median / max in ms, and
the heaviest imports of `jpushare queue` from `python -X importtime`.

    .venv/bin/python bench/bench_cli_startup.py [--runs 20]

Asserts nothing (speed targets are read, not tested): the target is < 150 ms (README, "CLI
start-up").
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BIN = Path(sys.executable).parent / "jpushare"
COMMANDS = {
    "python -c pass (the interpreter alone)": [sys.executable, "-c", "pass"],
    "jpushare --help": [sys.executable, "-m", "jpushare.cli", "--help"],
    "jpushare sumbit (a typo)": [sys.executable, "-m", "jpushare.cli", "sumbit"],
    "jpushare jobs --help": [str(BIN), "jobs", "--help"],
    "jpushare queue": [str(BIN), "queue", "--url", "http://127.0.0.1:9"],
    "jpushare serve --help (server side)": [str(BIN), "serve", "--help"],
}


def timed(argv: list[str], runs: int) -> list[float]:
    config = Path(tempfile.mkdtemp()) / "client.json"
    config.write_text("{}")  # an empty client config: the URL from argv, the token from env
    env = {**os.environ, "JPUSHARE_CLIENT_CONFIG": str(config), "JPUSHARE_TOKEN": "jps_x"}
    out: list[float] = []
    for _ in range(runs):
        t0 = time.perf_counter()
        subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        out.append((time.perf_counter() - t0) * 1000)
    return out


def heaviest_imports(argv: list[str], top: int) -> list[tuple[int, str]]:
    code = f"import sys; sys.argv = {['jpushare', *argv]!r}; from jpushare.cli import main\n"
    code += "try:\n    main()\nexcept SystemExit:\n    pass\n"
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", code], capture_output=True, text=True
    )
    rows = []
    for line in done.stderr.splitlines():
        if line.startswith("import time:") and "|" in line:
            _, cumulative, name = line.split("|")
            if cumulative.strip().isdigit() and not name.startswith("   "):
                rows.append((int(cumulative), name.strip()))
    return sorted(rows, reverse=True)[:top]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=20)
    args = parser.parse_args()
    timed(COMMANDS["jpushare jobs --help"], 2)  # warm the page cache
    print(f"{'command':52} {'min':>7} {'median':>7} {'max':>7}  (ms, {args.runs} runs)")
    for label, argv in COMMANDS.items():
        t = timed(argv, args.runs)
        print(f"{label:52} {min(t):7.1f} {statistics.median(t):7.1f} {max(t):7.1f}")
    print("\nheaviest top-level imports of `jpushare queue` (cumulative µs):")
    queue = ["queue", "--url", "http://127.0.0.1:9"]
    for micros, name in heaviest_imports(queue, 8):
        print(f"  {micros:8d}  {name}")


if __name__ == "__main__":
    main()
