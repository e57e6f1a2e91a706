#!/usr/bin/env python3
"""One trace through Slurm's own scheduler, through JPU-Share in front of the same Slurm, and
through the simulator: the "Slurm's own scheduler" section of docs/policy-comparison.md.

    .venv/bin/python scripts/peer_compare.py STEP... [--out out/peer] [--speed 5] [--cycle 5]
        [--jobs N]

Steps (run them in this order; each reads what the earlier ones wrote under --out):

- `slice`: write examples/philly-peer.csv, 300 jobs of the shipped Philly trace (below);
- `slurm`: `jpushare slurm-peer run` of it on the peer cluster (root; SLURM_CONF of
  `FAKE_SLURM_PEER=1 scripts/slurm/start-fake-cluster.sh`), ~7 min at --speed 60;
- `slurm-again`: the same into OUT/slurm-2 (how far Slurm agrees with itself);
- `jpushare`: `jpushare serve` with the Slurm executor on that same peer (a fresh SQLite
  database, the product's 5 s cycle in trace time, i.e. 1 s at --speed 5, SPEC decision 7,
  port 8765 or --port) driven by `jpushare replay --speed 5`, which sends each job's time limit as
  Slurm gets it; ~70 min at --speed 5 (a Slurm second is then one cycle);
- `jpushare-again`: the same into OUT/jpushare-2; `jpushare-first-queued[-again]`: with
  JPUSHARE_TOP_JOB=first-queued (the literal reading) into OUT/jpushare-first-queued[-2];
  `jpushare-lend[-again]`: with JPUSHARE_RESERVED_GPUS=lend-by-limit into OUT/jpushare-lend[-2];
- `simulate`: `jpushare simulate --policy all` of it on examples/slurm-cluster.yaml at the
  same cycle (and `reservation --top-job first-queued` into OUT/sim-first-queued,
  `reservation --reserved-gpus lend-by-limit` into OUT/sim-lend), and
  `backfill` on the same cluster
  with node-c's 8 GPUs as one placement (OUT/sim-pooled: what Slurm's untyped requests see);
- `render`: the section's tables from every summary.json and jobs.csv found, written
  between the section's markers in docs/policy-comparison.md (scripts/compare_policies.py
  keeps the section when it regenerates the rest).

Each run writes OUT/<run>/jobs.csv and summary.json; `render` uses the runs it finds.

The slice: `jpushare trace philly --window last10d`, jobs of at most 4 GPUs (the largest
placement of the 16-GPU cluster) that ran at most 2 hours (so the run lasts minutes at
--speed 60), in submission order, the 300 from the 5,051st on, times moved so the first is
at 0. It spans 5.8 trace hours and offers 0.87 of the cluster's GPU-hours over that span;
46 of the jobs ask for 4 GPUs.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from jpushare.sim.report import fmt_duration, markdown_table
from jpushare.slurm_peer.agreement import agreement, agreement_rows, read_jobs_csv
from jpushare.traces import TraceRow, write_trace
from jpushare.traces.shipped import shipped_trace

ROOT = Path(__file__).resolve().parents[1]
TRACE = "examples/philly-peer.csv"
CLUSTER = "examples/slurm-cluster.yaml"
PEER_CONF = "/etc/slurm-peer/slurm.conf"
DOC = ROOT / "docs" / "policy-comparison.md"
BEGIN = "<!-- BEGIN slurm-peer: written by scripts/peer_compare.py render -->"
END = "<!-- END slurm-peer -->"
SLICE_FROM, SLICE_JOBS, MAX_GPUS, MAX_DURATION_S = 5050, 300, 4, 7200
POLICIES = ("reservation", "hol-skip", "fifo", "backfill")


def slice_rows(rows: Sequence[TraceRow]) -> list[TraceRow]:
    """The slice the module docstring describes."""
    kept = sorted(
        (r for r in rows if r.num_gpus <= MAX_GPUS and r.duration <= MAX_DURATION_S),
        key=lambda r: (r.submit_time, r.job_id),
    )[SLICE_FROM : SLICE_FROM + SLICE_JOBS]
    return [r.shifted(-kept[0].submit_time) for r in kept]


def step_slice() -> None:
    rows = slice_rows(shipped_trace("philly-10d", ROOT / "data" / "traces"))
    write_trace(rows, ROOT / TRACE)
    print(f"wrote {TRACE}: {len(rows)} jobs", file=sys.stderr)


def race_trace(out: Path) -> str:
    """The trace every step of a race runs: OUT/trace.csv where `--jobs` wrote one (the
    slice's first jobs, for a race that must fit in less time), else the whole slice."""
    short = out / "trace.csv"
    return str(short) if short.exists() else TRACE


def write_short_trace(out: Path, jobs: int, skip: int = 0) -> None:
    """OUT/trace.csv: the header and the slice's jobs `skip` to `skip + jobs` (submission
    order), times moved so the first of them is submitted at 0."""
    with (ROOT / TRACE).open(encoding="utf-8", newline="") as f:
        reader = csv.DictReader(f)
        fields, kept = list(reader.fieldnames or ()), list(reader)[skip : skip + jobs]
    t0 = int(kept[0]["submit_time"])
    for r in kept:
        for col in ("submit_time", "cancel_time"):
            if r[col]:
                r[col] = str(int(r[col]) - t0)
    out.mkdir(parents=True, exist_ok=True)
    with (out / "trace.csv").open("w", encoding="utf-8", newline="") as f:
        writer = csv.DictWriter(f, fields, lineterminator="\n")
        writer.writeheader()
        writer.writerows(kept)
    end = max(float(r["submit_time"]) + float(r["duration"]) for r in kept)
    print(
        f"wrote {out / 'trace.csv'}: {len(kept)} jobs, {end / 3600:.2f} trace hours",
        file=sys.stderr,
    )


def _jpushare(*args: str, env: dict[str, str] | None = None) -> None:
    """Run `jpushare ARGS`; a token goes in `env`, never in argv (any user reads that)."""
    cmd = [sys.executable, "-m", "jpushare.cli", *args]
    print("+ jpushare " + " ".join(args), file=sys.stderr)
    subprocess.run(cmd, check=True, cwd=ROOT, env=None if env is None else {**os.environ, **env})


def step_slurm(out: Path, speed: float, name: str = "slurm") -> None:
    _jpushare(
        "slurm-peer", "run", "--cluster", CLUSTER, "--trace", race_trace(out),
        "--speed", f"{speed:g}", "--out", str(out / name),
    )  # fmt: skip


def step_simulate(out: Path, speed: float, cycle_s: float = 5.0) -> None:
    """Every policy at the service's cycle in trace time, both top-job readings of the
    reservation policy (SPEC decision 7); `speed` no longer sets the cycle."""
    _jpushare(
        "simulate", "--cluster", CLUSTER, "--trace", race_trace(out), "--policy", "all",
        "--cycle", f"{cycle_s:g}", "--no-plots", "--out", str(out / "sim"),
    )  # fmt: skip
    _jpushare(
        "simulate", "--cluster", CLUSTER, "--trace", race_trace(out), "--policy", "reservation",
        "--top-job", "first-queued", "--cycle", f"{cycle_s:g}", "--no-plots",
        "--out", str(out / "sim-first-queued"),
    )  # fmt: skip
    _jpushare(
        "simulate", "--cluster", CLUSTER, "--trace", race_trace(out), "--policy", "reservation",
        "--reserved-gpus", "lend-by-limit", "--cycle", f"{cycle_s:g}", "--no-plots",
        "--out", str(out / "sim-lend"),
    )  # fmt: skip
    # What Slurm's untyped requests see on node-c: its 8 GPUs as one placement.
    text = (ROOT / CLUSTER).read_text(encoding="utf-8")
    pooled = out / "pooled-cluster.yaml"
    pooled.write_text(
        text.replace(
            "{name: node-c, gpus: {rtx4090: 4, rtx5090: 4}}", "{name: node-c, gpus: {rtx4090: 8}}"
        ),
        encoding="utf-8",
    )
    _jpushare(
        "simulate", "--cluster", str(pooled), "--trace", race_trace(out), "--policy", "backfill",
        "--cycle", f"{cycle_s:g}", "--no-plots", "--out", str(out / "sim-pooled"),
    )  # fmt: skip


def step_jpushare(
    out: Path,
    speed: float,
    name: str = "jpushare",
    port: int = 8765,
    *,
    cycle_s: float = 5.0,
    top_job: str = "first-waiting",
    reserved_gpus: str = "llm-only",
    slurm_conf: str = PEER_CONF,
) -> None:
    """`jpushare serve` (Slurm executor on the peer, a fresh SQLite database) driven by
    `jpushare replay`; the service is stopped afterwards. Its cycle is `cycle_s` in trace
    time (the product's 5 s: `cycle_s / speed` real seconds), and the replay sends each
    job's time limit, the same Slurm gets as --time."""
    state = Path(tempfile.mkdtemp(prefix="jps-peer-serve-"))
    env = {
        **os.environ,
        "JPUSHARE_STATE_DIR": str(state),
        "JPUSHARE_EXECUTOR": "slurm",
        "SLURM_CONF": slurm_conf,
        "JPUSHARE_CYCLE_S": f"{cycle_s / speed:g}",
        "JPUSHARE_TOP_JOB": top_job,
        "JPUSHARE_RESERVED_GPUS": reserved_gpus,
        "JPUSHARE_PORT": str(port),
        "JPUSHARE_SLURM_LOG_DIR": str(state / "slurm-logs"),
        "JPUSHARE_SLURM_PREFIX": f"jpr{uuid.uuid4().hex[:5]}",
    }
    env.pop("JPUSHARE_DATABASE_URL", None)
    jps = [sys.executable, "-m", "jpushare.cli"]
    subprocess.run([*jps, "init", "--cluster", CLUSTER], check=True, cwd=ROOT, env=env)
    add = ["admin", "user", "add", "peer-admin", "--lab", "BCG", "--role", "admin"]
    added = subprocess.run(
        [*jps, *add, "--unix-user", "root", "--allow-root"],
        check=True, cwd=ROOT, env=env, capture_output=True, text=True,
    )  # fmt: skip
    token = added.stdout.strip().split()[-1]
    log = (state / "serve.log").open("w")
    serve = subprocess.Popen([*jps, "serve"], cwd=ROOT, env=env, stdout=log, stderr=log)
    try:
        url = f"http://127.0.0.1:{port}"
        for _ in range(120):
            try:
                with urllib.request.urlopen(f"{url}/healthz", timeout=2):
                    break
            except OSError:
                time.sleep(0.5)
        _jpushare(
            "replay", "--trace", race_trace(out), "--server", url,
            "--speed", f"{speed:g}", "--out", str(out / name), "--unix-user", "root",
            env={"JPUSHARE_ADMIN_TOKEN": token},
        )  # fmt: skip
    finally:
        serve.terminate()
        serve.wait(timeout=60)
        log.close()
    print(f"service state and log in {state}", file=sys.stderr)


def _summary(path: Path) -> dict[str, Any] | None:
    f = path / "summary.json"
    return json.loads(f.read_text(encoding="utf-8")) if f.exists() else None


def _runs(out: Path) -> list[tuple[str, Path]]:
    runs = [("Slurm (multifactor + backfill)", out / "slurm")]
    runs += [("Slurm, the same run again", out / "slurm-2")]
    runs += [("JPU-Share in front of Slurm", out / "jpushare")]
    runs += [("JPU-Share, the same run again", out / "jpushare-2")]
    runs += [("JPU-Share, top job first-queued", out / "jpushare-first-queued")]
    runs += [("JPU-Share, lend-by-limit", out / "jpushare-lend")]
    runs += [(f"simulator `{p}`", out / "sim" / p / "pack") for p in POLICIES]
    runs += [("simulator `reservation`, first-queued", out / "sim-first-queued")]
    runs += [("simulator `reservation`, lend-by-limit", out / "sim-lend")]
    return [(label, d) for label, d in runs if (d / "summary.json").exists()]


@dataclass(frozen=True)
class _LabWait:
    lab: str
    wait: float


def _lab_rows(run_dir: Path) -> list[_LabWait]:
    """Each started job's lab and wait, from a run's jobs.csv."""
    with (run_dir / "jobs.csv").open(encoding="utf-8", newline="") as f:
        return [_LabWait(r["lab"], float(r["wait_s"])) for r in csv.DictReader(f) if r["wait_s"]]


def _big(v: object) -> bool:
    return not isinstance(v, dict) or v.get("jobs", 0) >= 10


def _overtaken(run_dir: Path, gpus: int) -> tuple[float, int]:
    """For the jobs of `gpus` GPUs: how many jobs submitted after each started before it
    (mean, max). Backfill that protects only the first blocked job lets many pass."""
    with (run_dir / "jobs.csv").open(encoding="utf-8", newline="") as f:
        rows = [r for r in csv.DictReader(f) if r["wait_s"]]
    sub = {r["job_id"]: float(r["submit_time"]) for r in rows}
    start = {r["job_id"]: sub[r["job_id"]] + float(r["wait_s"]) for r in rows}
    counts = [
        sum(1 for k in sub if sub[k] > sub[j] and start[k] < start[j])
        for j in (r["job_id"] for r in rows if int(r["num_gpus"]) == gpus)
    ]
    return (sum(counts) / len(counts), max(counts)) if counts else (0.0, 0)


def _wait_cell(s: dict[str, Any], gpus: str) -> str:
    w = s["wait_s_by_gpus"].get(gpus)
    if not w:
        return "-"
    return " / ".join(fmt_duration(w[k]) for k in ("mean", "p95", "max"))


def render(out: Path, speed: float) -> str:
    runs = _runs(out)
    summaries = [(label, d, _summary(d)) for label, d in runs]
    counts = sorted({g for _, _, s in summaries if s for g in s["wait_s_by_gpus"]}, key=int)
    header = ["run", "completed / cancelled / rejected", "GPU utilization", "wait mean / p95"]
    header += [f"{g} GPU{'s' if g != '1' else ''}: wait mean / p95 / max" for g in counts]
    header += ["Jain fairness", "makespan"]
    rows = []
    for label, _, s in summaries:
        if s is None:
            continue
        st = s["states"]
        row = [
            label,
            f"{st.get('COMPLETED', 0)} / {st.get('CANCELLED', 0)} / {st.get('REJECTED', 0)}",
            f"{100 * s['gpu_utilization']:.1f} %",
            f"{fmt_duration(s['wait_s']['mean'])} / {fmt_duration(s['wait_s']['p95'])}",
        ]
        row += [_wait_cell(s, g) for g in counts]
        row += [
            "-" if s["jain_fairness"] is None else f"{s['jain_fairness']:.3f}",
            fmt_duration(s["makespan_s"]),
        ]
        rows.append(row)
    parts = [markdown_table(header, rows)]
    labs = sorted({r.lab for _, d, _ in summaries for r in _lab_rows(d)})
    lab_rows = []
    for label, d, _ in summaries:
        waits: dict[str, list[float]] = {}
        for r in _lab_rows(d):
            waits.setdefault(r.lab, []).append(r.wait)
        lab_rows.append([label, *(fmt_duration(sum(waits[lab]) / len(waits[lab])) for lab in labs)])
    jobs_per_lab = {lab: sum(1 for r in _lab_rows(runs[0][1]) if r.lab == lab) for lab in labs}
    lab_header = ["mean wait per lab (jobs)", *(f"{lab} ({jobs_per_lab[lab]})" for lab in labs)]
    parts.append(markdown_table(lab_header, lab_rows))
    slurm = out / "slurm" / "jobs.csv"
    if slurm.exists():
        ref = read_jobs_csv(slurm)
        # one Slurm second (`speed` trace s) plus one service cycle (5 trace s at --speed 5)
        pairs = [
            (label, agreement(ref, read_jobs_csv(d / "jobs.csv"), 2 * speed))
            for label, d in runs
            if d != out / "slurm"
        ]
        # GPU counts with fewer than 10 jobs (2 GPUs: 4 jobs) say nothing per job
        pairs = [(label, {k: v for k, v in a.items() if _big(v)}) for label, a in pairs]
        parts.append(markdown_table(*agreement_rows(pairs)))
    over = [(label, _overtaken(d, 4)) for label, d in runs]
    parts.append(
        markdown_table(
            ["4-GPU jobs started after later-submitted jobs", *(label for label, _ in over)],
            [["overtaken by: mean / max", *(f"{m:.1f} / {x}" for _, (m, x) in over)]],
        )
    )
    return "\n".join(parts)


def step_render(out: Path, speed: float, template: Path) -> None:
    """Fill the tables into the section text of `template` (the section with `{tables}`)."""
    body = template.read_text(encoding="utf-8").replace("{tables}", render(out, speed))
    doc = DOC.read_text(encoding="utf-8")
    section = f"{BEGIN}\n{body.rstrip()}\n{END}\n"
    if BEGIN in doc:
        head, rest = doc.split(BEGIN, 1)
        doc = head + section + rest.split(END, 1)[1].lstrip("\n")
    else:
        doc = doc.rstrip("\n") + "\n\n" + section
    DOC.write_text(doc, encoding="utf-8")
    print(f"wrote {DOC.relative_to(ROOT)}", file=sys.stderr)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument(
        "steps",
        nargs="+",
        choices=(
            "slice", "slurm", "slurm-again", "jpushare", "jpushare-again",
            "jpushare-first-queued", "jpushare-first-queued-again", "jpushare-lend",
            "jpushare-lend-again", "simulate", "render",
        ),
    )  # fmt: skip
    p.add_argument("--out", type=Path, default=ROOT / "out" / "peer")
    # A fair race: Slurm acts at once, to the whole second; at --speed 5 a Slurm second is
    # 5 trace seconds, one JPU-Share cycle (--cycle 5, the product's), run at 1 s real.
    p.add_argument("--speed", type=float, default=5.0)
    p.add_argument(
        "--jobs",
        type=int,
        help="race only N jobs of the slice (written to OUT/trace.csv, which every "
        "later step with this --out then uses)",
    )
    p.add_argument(
        "--skip",
        type=int,
        default=0,
        help="with --jobs: start after the slice's first K jobs (times moved to start at 0)",
    )
    p.add_argument("--cycle", type=float, default=5.0, help="JPU-Share's cycle, trace seconds")
    p.add_argument(
        "--port",
        type=int,
        default=8765,
        help="the port of a JPU-Share step's service (another, for two JPU-Share steps at once)",
    )
    p.add_argument(
        "--slurm-conf",
        default=PEER_CONF,
        help="the Slurm JPU-Share's steps run on (default the peer); the fake cluster's "
        "/etc/slurm/slurm.conf has the same nodes and GRES, so a JPU-Share step can race "
        "beside a Slurm step on the peer in the same wall time",
    )
    p.add_argument(
        "--template",
        type=Path,
        default=ROOT / "scripts" / "peer_compare.md",
        help="the section's text, with {tables} where the tables go",
    )
    args = p.parse_args(argv)
    if args.jobs:
        write_short_trace(args.out, args.jobs, args.skip)
    for step in args.steps:
        if step == "slice":
            step_slice()
        elif step == "slurm":
            step_slurm(args.out, args.speed)
        elif step == "slurm-again":
            step_slurm(args.out, args.speed, "slurm-2")
        elif step.startswith("jpushare"):
            variant = step.removeprefix("jpushare").removesuffix("-again")
            name = "jpushare" + variant + ("-2" if step.endswith("again") else "")
            step_jpushare(
                args.out,
                args.speed,
                name,
                args.port,
                cycle_s=args.cycle,
                top_job="first-queued" if variant == "-first-queued" else "first-waiting",
                reserved_gpus="lend-by-limit" if variant == "-lend" else "llm-only",
                slurm_conf=args.slurm_conf,
            )
        elif step == "simulate":
            step_simulate(args.out, args.speed, args.cycle)
        else:
            step_render(args.out, args.speed, args.template)
    return 0


if __name__ == "__main__":
    sys.exit(main())
