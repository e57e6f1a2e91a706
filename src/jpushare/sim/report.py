"""What a replay produces as text: jobs.csv, summary.json, and the comparison tables.

Pure functions from `SimResult` to rows, dicts and strings, plus the two writers. The
output is deterministic: the same result gives byte-identical jobs.csv (and the same
summary.json apart from `wall_s`, the only wall-clock figure).
"""

from __future__ import annotations

import csv
import io
import json
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from jpushare.client.formatting import duration
from jpushare.policy.watch import (
    FAILED_REASONS,
    BackfillSplit,
    BackfillTotals,
    EndedJob,
    ReservationSpan,
    lending_figures,
    percentile,
    watch_figures,
)
from jpushare.sim.engine import SimResult, TraceJobResult, TraceJobState
from jpushare.vocabulary import ReleaseReason

JOBS_COLUMNS = (
    "job_id",
    "lab",
    "num_gpus",
    "state",
    "submit_time",
    "start_time",
    "end_time",
    "node",
    "tier",
    "wait_s",
    "attempts",
    "run_cost",
    "reservation_cost",
)


def fmt_number(x: float | int | None) -> str:
    """A number as jobs.csv writes it: whole numbers without a point, else 3 decimals at most."""
    if x is None:
        return ""
    if isinstance(x, int):
        return str(x)
    r = round(x, 3)
    if r == int(r):
        return str(int(r))
    return f"{r:.3f}".rstrip("0").rstrip(".")


def job_row(job: TraceJobResult) -> list[str]:
    """One jobs.csv row: the last attempt's start/end/node/tier, costs over all attempts."""
    last = job.last
    return [
        job.job_id,
        job.lab,
        str(job.num_gpus),
        job.state.value,
        fmt_number(job.submit_time),
        fmt_number(last.start if last else None),
        fmt_number(last.end if last else None),
        last.node if last else "",
        last.tier if last else "",
        fmt_number(job.wait_s),
        str(len(job.attempts)),
        fmt_number(job.run_cost),
        fmt_number(job.reservation_cost),
    ]


def jobs_csv(result: SimResult) -> str:
    out = io.StringIO()
    w = csv.writer(out, lineterminator="\n")
    w.writerow(JOBS_COLUMNS)
    for job in result.jobs:
        w.writerow(job_row(job))
    return out.getvalue()


def row_first_start(row: Mapping[str, str]) -> float | None:
    """A jobs.csv row's first start, `submit_time + wait_s` (`start_time` is the last
    attempt's; the first is what a user waits for); None if the job never started."""
    wait = row["wait_s"].strip()
    return float(row["submit_time"]) + float(wait) if wait else None


def wait_stats(waits: Iterable[float]) -> dict[str, Any]:
    """count, mean, p50, p95, p99 and max of waits in seconds (None when there are none)."""
    v = sorted(waits)
    if not v:
        return {"count": 0, "mean": None, "p50": None, "p95": None, "p99": None, "max": None}
    return {
        "count": len(v),
        "mean": round(math.fsum(v) / len(v), 3),
        "p50": round(percentile(v, 50), 3),
        "p95": round(percentile(v, 95), 3),
        "p99": round(percentile(v, 99), 3),
        "max": round(v[-1], 3),
    }


def jain_fairness(result: SimResult) -> float | None:
    """Jain's index J = (sum x)^2 / (n * sum x^2) over labs, 1 = perfectly even, 1/n = worst.

    x_lab is the lab's mean *run fraction*: over its COMPLETED jobs, the time a job's final
    attempt ran divided by the time from its submission to its end (1 = it never waited).
    Final usage would not do: once a trace has drained every lab got all it asked for, and
    the index would read 1 whatever the order was. The run fraction says how evenly the
    waiting was spread over the labs, normalised by how long their jobs are. Labs without a
    completed job are left out; None if no lab has one.
    """
    per_lab: dict[str, list[float]] = {}
    for job in result.jobs:
        last = job.last
        if job.state is not TraceJobState.COMPLETED or last is None:
            continue
        in_system = last.end - job.submit_time
        frac = 1.0 if in_system <= 0 else (last.end - last.start) / in_system
        per_lab.setdefault(job.lab, []).append(frac)
    xs = [math.fsum(v) / len(v) for _, v in sorted(per_lab.items())]
    if not xs:
        return None
    sq = math.fsum(x * x for x in xs)
    if sq == 0:
        return None
    return math.fsum(xs) ** 2 / (len(xs) * sq)


_ENDED = (TraceJobState.COMPLETED, TraceJobState.FAILED, TraceJobState.CANCELLED)


def reservation_spans(result: SimResult) -> list[ReservationSpan]:
    """Every reservation of the replay as the watch-list's record (SPEC §10)."""
    lab_of = {j.job_id: j.lab for j in result.jobs}
    return [
        ReservationSpan(r.job_id, lab_of[r.job_id], r.tier, r.gpus, r.since, r.ended_at, r.reason)
        for r in result.reservations
    ]


def ended_jobs(result: SimResult) -> list[EndedJob]:
    """The replay's ended jobs (COMPLETED, FAILED, CANCELLED) as the watch-list's record;
    jobs REJECTED at submission or never able to start again are not among them."""
    return [
        EndedJob(j.job_id, j.lab, j.num_gpus, j.wait_s, j.run_cost, j.reservation_cost, j.billed)
        for j in result.jobs
        if j.state in _ENDED
    ]


def watch(result: SimResult) -> dict[str, Any]:
    """summary.json's `watch` object: SPEC §10 over the whole replay (the very document
    of the service's GET /v1/stats/watch)."""
    return watch_figures(reservation_spans(result), ended_jobs(result)).as_dict()


def idle_up_gpu_s(result: SimResult, start: float, end: float) -> float:
    """GPU-seconds of open nodes that neither ran nor reserved in [start, end] (the GPU
    timeline is a step function: each sample holds until the next)."""
    samples = result.gpu_timeline
    total = 0.0
    for s, nxt in zip(samples, (*samples[1:], None)[: len(samples)], strict=True):
        lo = max(s.t, start)
        hi = end if nxt is None else min(nxt.t, end)
        if hi > lo:
            total += max(0, s.up - s.running - s.reserved) * (hi - lo)
    return total


def backfill(result: SimResult, start: float, end: float) -> dict[str, Any]:
    """summary.json's `backfill` object: the watch-list's LLM backfill split with a keeper
    that serves every GPU no research job runs on (the replay's model of `jpushare
    backfill`): its reserved GPU-hours are the reserved ones, its idle ones every idle
    GPU-hour of an open node, and nothing is idle unserved. No yields: the simulator
    starts a job on GPUs backfill holds at once (yield latency 0)."""
    totals = BackfillTotals(
        reserved_served_gpu_s=result.reserved_gpu_s,  # the replay's own integral: exact
        idle_served_gpu_s=idle_up_gpu_s(result, start, end),
        idle_gpu_s=0.0,
        since=start,
    )
    return BackfillSplit(result.reserved_gpu_s, totals).as_dict()


def lending(result: SimResult) -> dict[str, Any]:
    """summary.json's `lending` object: the watch-list's lending figures (all zero unless
    `--reserved-gpus lend-by-limit`)."""
    return lending_figures(result.lent_runs, result.lent_waits).as_dict()


def summary(result: SimResult) -> dict[str, Any]:
    """The summary.json document."""
    jobs = result.jobs
    states = {
        s.value: 0 for s in (TraceJobState.COMPLETED, TraceJobState.FAILED, TraceJobState.CANCELLED)
    }
    states[TraceJobState.REJECTED.value] = 0
    for job in jobs:
        states[job.state.value] = states.get(job.state.value, 0) + 1
    accepted = [j for j in jobs if j.state is not TraceJobState.REJECTED]
    first_submit = min((j.submit_time for j in accepted), default=0.0)
    ends = [a.end for j in jobs for a in j.attempts]
    ends += [r.ended_at for r in result.reservations if r.ended_at is not None]
    last_end = max(ends, default=first_submit)
    window = max(0.0, last_end - first_submit)
    capacity_s = result.capacity_gpus * window

    waits = [(j.num_gpus, j.wait_s) for j in jobs if j.wait_s is not None]
    by_gpus: dict[str, Any] = {}
    for n in sorted({n for n, _ in waits}):
        by_gpus[str(n)] = wait_stats(w for g, w in waits if g == n)

    ended: dict[str, int] = {r.value: 0 for r in ReleaseReason}
    holds: list[float] = []
    for r in result.reservations:
        if r.reason is not None:
            ended[r.reason.value] += 1
        if r.hold_s is not None:
            holds.append(r.hold_s)
    attempts_by_end: dict[str, int] = {}
    for j in jobs:
        for a in j.attempts:
            attempts_by_end[a.outcome.value] = attempts_by_end.get(a.outcome.value, 0) + 1

    jain = jain_fairness(result)
    return {
        "policy": result.policy,
        "placement": result.placement,
        "reserved_gpus": result.reserved_gpus,
        "cycle_s": result.cycle_s,
        "jobs": len(jobs),
        "states": states,
        "attempts": dict(sorted(attempts_by_end.items())),
        "first_submit_s": round(first_submit, 3),
        "last_end_s": round(last_end, 3),
        "makespan_s": round(window, 3),
        "capacity_gpus": result.capacity_gpus,
        "gpu_utilization": round(result.running_gpu_s / capacity_s, 6) if capacity_s else 0.0,
        "reserved_fraction": round(result.reserved_gpu_s / capacity_s, 6) if capacity_s else 0.0,
        "wait_s": wait_stats(w for _, w in waits),
        "wait_s_by_gpus": by_gpus,
        "reservations": {
            "started": len(result.reservations),
            "ended": ended,
            "held_at_end": sum(1 for r in result.reservations if r.ended_at is None),
            "mean_hold_s": round(math.fsum(holds) / len(holds), 3) if holds else None,
        },
        "watch": watch(result),
        "backfill": backfill(result, min(first_submit, last_end), last_end),
        "lending": lending(result),
        "lab_usage_start": {k: round(v, 3) for k, v in sorted(result.initial_lab_usage.items())},
        "lab_usage": {k: round(v, 3) for k, v in sorted(result.lab_usage.items())},
        "jain_fairness": None if jain is None else round(jain, 6),
        "jain_fairness_over": "per-lab mean run fraction (run time / time in system) "
        "of completed jobs",
        "cycles": {"run": result.cycles_run, "total": result.cycles_total},
        "wall_s": round(result.wall_s, 3),
    }


def write_outputs(result: SimResult, out_dir: Path) -> dict[str, Any]:
    """Write jobs.csv and summary.json into out_dir; return the summary."""
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "jobs.csv").write_text(jobs_csv(result), encoding="utf-8")
    doc = summary(result)
    (out_dir / "summary.json").write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")
    return doc


# -- tables -----------------------------------------------------------------------------


def fmt_duration(s: float | None) -> str:
    """Seconds for a person: 45s, 12.5m, 3.25h, 2.1d (the CLI's, with hours to 0.01)."""
    return duration(s, hour_digits=2)


def _pct(x: float) -> str:
    return f"{100 * x:.1f}%"


def run_label(s: dict[str, Any]) -> str:
    """A run's name in the tables: "<policy>/<placement>" (`SimResult.label`)."""
    return f"{s['policy']}/{s['placement']}" if "placement" in s else str(s["policy"])


def comparison_rows(summaries: Sequence[dict[str, Any]]) -> tuple[list[str], list[list[str]]]:
    """One row per policy: outcomes, utilization, waits, reservations, fairness, wall time."""
    header = [
        "policy",
        "jobs",
        "completed",
        "failed",
        "cancelled",
        "rejected",
        "util",
        "reserved",
        "wait mean",
        "wait p95",
        "wait max",
        "reservations",
        "filled/swap/r3/r5/cancel",
        "mean hold",
        "jain",
        "wall",
    ]
    rows = []
    for s in summaries:
        w = s["wait_s"]
        r = s["reservations"]
        e = r["ended"]
        rows.append(
            [
                run_label(s),
                str(s["jobs"]),
                str(s["states"].get("COMPLETED", 0)),
                str(s["states"].get("FAILED", 0)),
                str(s["states"].get("CANCELLED", 0)),
                str(s["states"].get("REJECTED", 0)),
                _pct(s["gpu_utilization"]),
                _pct(s["reserved_fraction"]),
                fmt_duration(w["mean"]),
                fmt_duration(w["p95"]),
                fmt_duration(w["max"]),
                str(r["started"]),
                "/".join(str(e[k]) for k in ("filled", "swap", "r3", "r5", "cancel")),
                fmt_duration(r["mean_hold_s"]),
                "-" if s["jain_fairness"] is None else f"{s['jain_fairness']:.3f}",
                f"{s['wall_s']:.2f}s",
            ]
        )
    return header, rows


def wait_rows(summaries: Sequence[dict[str, Any]]) -> tuple[list[str], list[list[str]]]:
    """Wait mean / p95 / max per GPU count (columns), one row per policy."""
    gpu_counts = sorted({int(g) for s in summaries for g in s["wait_s_by_gpus"]})
    header = ["policy"] + [f"{g} GPU{'s' if g > 1 else ''}: mean / p95 / max" for g in gpu_counts]
    rows = []
    for s in summaries:
        row = [run_label(s)]
        for g in gpu_counts:
            b = s["wait_s_by_gpus"].get(str(g))
            row.append(
                "-" if b is None else " / ".join(fmt_duration(b[k]) for k in ("mean", "p95", "max"))
            )
        rows.append(row)
    return header, rows


def _rate(x: float | None) -> str:
    return "-" if x is None else _pct(x)


def _burden(x: float | None) -> str:
    return "-" if x is None else f"{x:.3f}"


def watch_rows(summaries: Sequence[dict[str, Any]]) -> tuple[list[str], list[list[str]]]:
    """The SPEC §10 watch-list, one row per policy: failed reservations, hold, reservation
    share of usage, then burden (charged / run) and mean wait per job size."""
    gpu_counts = sorted({int(g) for s in summaries for g in s["watch"]["by_gpus"]})
    failed = "+".join(r.value for r in FAILED_REASONS)
    header = [
        "policy",
        "reservations",
        f"failed ({failed})",
        "filled/swap/held",
        "hold mean / p95 / max",
        "reservation share",
    ]
    header += [f"{g} GPU{'s' if g > 1 else ''}: burden / mean wait" for g in gpu_counts]
    lends = any(s.get("lending", {}).get("loans") for s in summaries)
    if lends:
        header += ["lent GPU-h", "top job waited for lent GPUs: n / mean / total"]
    rows = []
    for s in summaries:
        w = s["watch"]
        r = w["reservations"]
        h = w["hold_s"]
        rel = r["released"]
        row = [
            run_label(s),
            str(r["started"]),
            "-" if not r["started"] else f"{r['failed']} ({_rate(r['failed_rate'])})",
            f"{rel['filled']}/{rel['swap']}/{r['held']}",
            " / ".join(fmt_duration(h[k]) for k in ("mean", "p95", "max")),
            _rate(w["usage"]["reservation_share"]),
        ]
        for g in gpu_counts:
            c = w["by_gpus"].get(str(g))
            row.append(
                "-" if c is None else f"{_burden(c['burden'])} / {fmt_duration(c['mean_wait_s'])}"
            )
        if lends:
            ln = s.get("lending", {})
            row.append(f"{ln.get('lent_gpu_hours', 0.0):.1f}")
            row.append(
                f"{ln.get('top_job_waits', 0)} / {fmt_duration(ln.get('wait_mean_s'))}"
                f" / {fmt_duration(ln.get('wait_total_s'))}"
            )
        rows.append(row)
    return header, rows


def backfill_rows(summaries: Sequence[dict[str, Any]]) -> tuple[list[str], list[list[str]]]:
    """The LLM backfill split, one row per policy: reserved GPU-hours (all served by the
    replay's keeper), backfill GPU-hours on idle GPUs, idle unserved."""
    header = [
        "policy",
        "reserved GPU-h (served by backfill)",
        "backfill on idle GPU-h",
        "idle unserved GPU-h",
    ]
    rows = []
    for s in summaries:
        b = s.get("backfill")
        if b is None:
            continue
        rows.append(
            [
                run_label(s),
                f"{b['backfill_reserved_gpu_hours']:.1f}",
                f"{b['backfill_idle_gpu_hours']:.1f}",
                f"{b['idle_gpu_hours']:.1f}",
            ]
        )
    return header, rows


def lab_failure_rows(summaries: Sequence[dict[str, Any]]) -> tuple[list[str], list[list[str]]]:
    """Failed reservations per lab (failed / started), one column per policy that
    reserved at all; empty when none did."""
    reserving = [s for s in summaries if s["watch"]["reservations"]["started"]]
    labs = sorted({lab for s in reserving for lab in s["watch"]["reservations_by_lab"]})
    header = ["lab", *(f"{run_label(s)}: failed / started" for s in reserving)]
    rows = []
    for lab in labs:
        row = [lab]
        for s in reserving:
            c = s["watch"]["reservations_by_lab"].get(lab)
            row.append(
                "-" if c is None else f"{c['failed']} / {c['started']} ({_rate(c['failed_rate'])})"
            )
        rows.append(row)
    return header, rows


def text_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """A plain aligned table for a terminal."""
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(header)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True)).rstrip()]
    lines.append("  ".join("-" * w for w in widths))
    for r in rows:
        lines.append("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip())
    return "\n".join(lines) + "\n"


def comparison_text(
    summaries: Sequence[dict[str, Any]],
    table: Callable[[Sequence[str], Sequence[Sequence[str]]], str] = text_table,
) -> str:
    """The comparison tables in one format: overview, waits by GPU count, the SPEC §10
    watch-list, and failed reservations per lab (when some policy reserved)."""
    parts = [
        table(*comparison_rows(summaries)),
        table(*wait_rows(summaries)),
        table(*watch_rows(summaries)),
    ]
    header, rows = backfill_rows(summaries)
    if rows:
        parts.append(table(header, rows))
    header, rows = lab_failure_rows(summaries)
    if rows:
        parts.append(table(header, rows))
    return "\n".join(parts)


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines) + "\n"


def comparison_numbers(summaries: Sequence[dict[str, Any]]) -> tuple[list[str], list[list[str]]]:
    """The comparison as plain numbers (seconds, fractions), for comparison.csv."""
    gpu_counts = sorted({int(g) for s in summaries for g in s["wait_s_by_gpus"]})
    stats = ("mean", "p95", "max")
    header = ["policy", "jobs", "completed", "failed", "cancelled", "rejected"]
    header += ["gpu_utilization", "reserved_fraction", "wait_mean_s", "wait_p95_s", "wait_max_s"]
    header += [f"wait_{g}gpu_{k}_s" for g in gpu_counts for k in stats]
    header += ["reservations_started", *(f"ended_{r.value}" for r in ReleaseReason)]
    header += ["mean_hold_s", "jain_fairness", "wall_s"]
    header += ["reservations_failed", "reservations_failed_rate", "reservations_held"]
    header += ["hold_mean_s", "hold_p95_s", "hold_max_s", "reservation_share"]
    header += [f"{k}_{g}gpu" for g in gpu_counts for k in ("burden", "mean_wait_s")]
    rows = []
    for s in summaries:
        row: list[Any] = [run_label(s), s["jobs"]]
        row += [s["states"].get(k, 0) for k in ("COMPLETED", "FAILED", "CANCELLED", "REJECTED")]
        row += [s["gpu_utilization"], s["reserved_fraction"]]
        row += [s["wait_s"][k] for k in stats]
        for g in gpu_counts:
            b = s["wait_s_by_gpus"].get(str(g), {})
            row += [b.get(k) for k in stats]
        r = s["reservations"]
        row += [r["started"], *(r["ended"][x.value] for x in ReleaseReason)]
        row += [r["mean_hold_s"], s["jain_fairness"], s["wall_s"]]
        w = s["watch"]
        wr = w["reservations"]
        row += [wr["failed"], wr["failed_rate"], wr["held"]]
        row += [w["hold_s"][k] for k in stats]
        row.append(w["usage"]["reservation_share"])
        for g in gpu_counts:
            c = w["by_gpus"].get(str(g), {})
            row += [c.get("burden"), c.get("mean_wait_s")]
        rows.append(["" if v is None else str(v) for v in row])
    return header, rows


def write_comparison(summaries: Sequence[dict[str, Any]], out_dir: Path) -> None:
    """comparison.md (a table to paste into a README) and comparison.csv (numbers)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "comparison.md").write_text(
        comparison_text(summaries, markdown_table), encoding="utf-8"
    )
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    header, rows = comparison_numbers(summaries)
    w.writerow(header)
    w.writerows(rows)
    (out_dir / "comparison.csv").write_text(buf.getvalue(), encoding="utf-8")
