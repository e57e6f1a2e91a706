"""How closely a simulated run predicts a replayed one: per job, from the two jobs.csv.

Pure functions of the files' rows. A job *agrees* on:

- **state**: the same final state;
- **start**: its first start (submit_time + wait_s) within `limit_s` = one cycle plus the
  tolerance. One cycle, because the simulator's cycles fall at t = 0, c, 2c, … of trace
  time and the service's wherever its loop happens to be (the *cycle phase*): a job
  submitted between two cycles waits for the next one in each, up to a cycle apart. The
  tolerance covers what a real start adds: the executor's start latency (a process to
  spawn, an sbatch and Slurm's own scheduling) and Slurm's whole-second times;
- **placement**: the same node and tier for its last attempt;
- **reservation**: it held a reservation in both or in neither.

replay.json (written by `jpushare replay`) gives each job's first dispatch, so a start
that disagrees is split into the dispatch's offset (the policy acted at another cycle:
phase, or a different queue after an earlier difference) and the start latency.

**The baseline.** Under load one small difference (an end seen a cycle later, two jobs
dispatched in another order) changes which GPUs are free for the next job, and that
difference spreads. How much it spreads is a property of the trace, not of the service:
`phase_baseline` replays the trace in the simulator again with every submission shifted
by a quarter, a half and three quarters of a cycle (another cycle phase, which the
service does not control either) and compares each with the unshifted run by the same
rules. The service is as faithful as the simulator can be when its agreement with the
simulator is about that of the simulator with itself, and its summary figures fall in the
range the shifted runs span.
"""

from __future__ import annotations

import csv
import io
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from jpushare.formats.cluster_file import ClusterSpec
from jpushare.formats.trace_file import TraceJob
from jpushare.policy.watch import percentile
from jpushare.sim.engine import SimResult, simulate
from jpushare.sim.report import fmt_number, jobs_csv, row_first_start, summary

PHASE_SHIFTS = (0.25, 0.5, 0.75)  # of a cycle
# Summary figures whose simulated range the service's value is checked against.
RANGE_FIGURES: dict[str, Any] = {
    "gpu_utilization": lambda s: s["gpu_utilization"],
    "wait_mean_s": lambda s: s["wait_s"]["mean"],
    "wait_p95_s": lambda s: s["wait_s"]["p95"],
    "reservations": lambda s: s["reservations"]["started"],
    "jain_fairness": lambda s: s["jain_fairness"],
}

COLUMNS = (
    "job_id",
    "lab",
    "num_gpus",
    "sim_state",
    "live_state",
    "sim_start",
    "live_start",
    "start_diff_s",
    "live_dispatch",
    "start_latency_s",
    "sim_placement",
    "live_placement",
    "sim_reserved",
    "live_reserved",
    "agrees",
    "why",
)


class CompareError(Exception):
    """The two runs cannot be compared (missing files, other jobs)."""


@dataclass(frozen=True, slots=True)
class JobComparison:
    job_id: str
    lab: str
    num_gpus: int
    sim_state: str
    live_state: str
    sim_start: float | None
    live_start: float | None
    live_dispatch: float | None
    sim_placement: str
    live_placement: str
    sim_reserved: bool
    live_reserved: bool
    limit_s: float

    @property
    def start_diff(self) -> float | None:
        if self.sim_start is None or self.live_start is None:
            return None
        return self.live_start - self.sim_start

    @property
    def latency(self) -> float | None:
        if self.live_start is None or self.live_dispatch is None:
            return None
        return self.live_start - self.live_dispatch

    @property
    def state_agrees(self) -> bool:
        return self.sim_state == self.live_state

    @property
    def start_agrees(self) -> bool:
        d = self.start_diff
        if d is None:
            return self.sim_start is None and self.live_start is None
        return abs(d) <= self.limit_s

    @property
    def placement_agrees(self) -> bool:
        return self.sim_placement == self.live_placement

    @property
    def reservation_agrees(self) -> bool:
        return self.sim_reserved == self.live_reserved

    @property
    def agrees(self) -> bool:
        return (
            self.state_agrees
            and self.start_agrees
            and self.placement_agrees
            and self.reservation_agrees
        )

    @property
    def why(self) -> str:
        """What differs, in words ("" when nothing does)."""
        out: list[str] = []
        if not self.state_agrees:
            out.append(f"state {self.sim_state} vs {self.live_state}")
        if not self.start_agrees:
            d = self.start_diff
            if d is None:
                out.append("started in one run only")
            elif (
                self.live_dispatch is not None
                and self.sim_start is not None
                and abs(self.live_dispatch - self.sim_start) <= self.limit_s
            ):
                out.append(f"start {d:+.0f}s: start latency {self.latency:.0f}s")
            else:
                out.append(f"start {d:+.0f}s: dispatched at another cycle")
        if not self.placement_agrees:
            out.append(f"placement {self.sim_placement or '-'} vs {self.live_placement or '-'}")
        if not self.reservation_agrees:
            out.append("reserved in the " + ("simulation" if self.sim_reserved else "service"))
        return "; ".join(out)


def placement(row: Mapping[str, str]) -> str:
    return f"{row['node']}/{row['tier']}" if row["node"] else ""


def read_rows(path: Path) -> list[dict[str, str]]:
    try:
        return list(csv.DictReader(io.StringIO(path.read_text(encoding="utf-8"))))
    except OSError as e:
        raise CompareError(f"cannot read {path}: {e.strerror}") from e


def compare_rows(
    sim: Sequence[Mapping[str, str]],
    live: Sequence[Mapping[str, str]],
    limit_s: float,
    dispatch: Mapping[str, float | None] | None = None,
) -> list[JobComparison]:
    """One comparison per job of `sim` (trace order); both runs must hold the same jobs."""
    by_id = {r["job_id"]: r for r in live}
    if set(by_id) != {r["job_id"] for r in sim}:
        raise CompareError("the two runs do not hold the same jobs: not the same trace")
    dispatch = dispatch or {}
    out = []
    for s in sim:
        r = by_id[s["job_id"]]
        out.append(
            JobComparison(
                job_id=s["job_id"],
                lab=s["lab"],
                num_gpus=int(s["num_gpus"]),
                sim_state=s["state"],
                live_state=r["state"],
                sim_start=row_first_start(s),
                live_start=row_first_start(r),
                live_dispatch=dispatch.get(s["job_id"]),
                sim_placement=placement(s),
                live_placement=placement(r),
                sim_reserved=float(s["reservation_cost"]) > 0,
                live_reserved=float(r["reservation_cost"]) > 0,
                limit_s=limit_s,
            )
        )
    return out


def _share(n: int, total: int) -> float | None:
    return round(n / total, 4) if total else None


def _stats(values: Sequence[float]) -> dict[str, float | None]:
    v = sorted(values)
    if not v:
        return {"count": 0, "median": None, "p95": None, "max": None}
    return {
        "count": len(v),
        "median": round(percentile(v, 50), 3),
        "p95": round(percentile(v, 95), 3),
        "max": round(v[-1], 3),
    }


def figures(jobs: Sequence[JobComparison], cycle_s: float, tolerance_s: float) -> dict[str, Any]:
    """The comparison's totals (fidelity.json)."""
    n = len(jobs)
    started = [j for j in jobs if j.start_diff is not None]
    diffs = [abs(j.start_diff) for j in started if j.start_diff is not None]
    latencies = [j.latency for j in jobs if j.latency is not None]
    both_placed = [j for j in jobs if j.sim_placement and j.live_placement]
    return {
        "jobs": n,
        "cycle_s": cycle_s,
        "tolerance_s": tolerance_s,
        "limit_s": cycle_s + tolerance_s,
        "agree": _share(sum(j.agrees for j in jobs), n),
        "state_agree": _share(sum(j.state_agrees for j in jobs), n),
        "start_agree": _share(sum(j.start_agrees for j in jobs), n),
        "started_in_both": len(started),
        "placement_agree": _share(sum(j.placement_agrees for j in both_placed), len(both_placed)),
        "tier_agree": _share(
            sum(
                j.sim_placement.split("/")[-1] == j.live_placement.split("/")[-1]
                for j in both_placed
            ),
            len(both_placed),
        ),
        "reservation_agree": _share(sum(j.reservation_agrees for j in jobs), n),
        "reserved": {
            "sim": sum(j.sim_reserved for j in jobs),
            "live": sum(j.live_reserved for j in jobs),
        },
        "start_diff_abs_s": _stats(diffs),
        "start_diff_s_mean": round(
            math.fsum(j.start_diff or 0.0 for j in started) / len(started), 3
        )
        if started
        else None,
        "start_latency_s": _stats(latencies),
    }


def rows_csv(jobs: Sequence[JobComparison]) -> str:
    out = io.StringIO()
    w = csv.writer(out, lineterminator="\n")
    w.writerow(COLUMNS)
    for j in jobs:
        w.writerow(
            [
                j.job_id,
                j.lab,
                j.num_gpus,
                j.sim_state,
                j.live_state,
                fmt_number(j.sim_start),
                fmt_number(j.live_start),
                fmt_number(j.start_diff),
                fmt_number(j.live_dispatch),
                fmt_number(j.latency),
                j.sim_placement,
                j.live_placement,
                "yes" if j.sim_reserved else "no",
                "yes" if j.live_reserved else "no",
                "yes" if j.agrees else "no",
                j.why,
            ]
        )
    return out.getvalue()


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


def _s(x: float | None) -> str:
    return "-" if x is None else f"{x:.1f}s"


def text(
    fig: Mapping[str, Any],
    jobs: Sequence[JobComparison],
    sim_summary: Mapping[str, Any],
    live_summary: Mapping[str, Any],
    show: int = 15,
) -> str:
    """The comparison for a person: agreement, then the two summaries side by side, then
    the first jobs that differ and why."""
    d, lat = fig["start_diff_abs_s"], fig["start_latency_s"]
    lines = [
        f"{fig['jobs']} jobs; start agrees within {fig['limit_s']:g}s "
        f"(one cycle {fig['cycle_s']:g}s + tolerance {fig['tolerance_s']:g}s, trace seconds)",
        f"agree on everything: {_pct(fig['agree'])}; state {_pct(fig['state_agree'])}, "
        f"start {_pct(fig['start_agree'])}, placement {_pct(fig['placement_agree'])} "
        f"(tier {_pct(fig['tier_agree'])}), reservation {_pct(fig['reservation_agree'])} "
        f"(reserved: sim {fig['reserved']['sim']}, service {fig['reserved']['live']})",
        f"|start difference|: median {_s(d['median'])}, p95 {_s(d['p95'])}, "
        f"max {_s(d['max'])}; mean signed {_s(fig['start_diff_s_mean'])}",
        f"service start latency (start - dispatch): median {_s(lat['median'])}, "
        f"p95 {_s(lat['p95'])}, max {_s(lat['max'])}",
        "",
        "| | simulated | service |",
        "|---|---|---|",
    ]

    def row(label: str, key: Any) -> None:
        lines.append(f"| {label} | {key(sim_summary)} | {key(live_summary)} |")

    row("completed / failed / cancelled / rejected", _states)
    row("GPU utilization", lambda s: _pct(s["gpu_utilization"]))
    row("reserved fraction", lambda s: _pct(s["reserved_fraction"]))
    row("wait mean / p95 / max", lambda s: _waits(s["wait_s"]))
    for g in sorted({*sim_summary["wait_s_by_gpus"], *live_summary["wait_s_by_gpus"]}, key=int):
        row(f"{g}-GPU wait mean / p95", lambda s, g=g: _waits(s["wait_s_by_gpus"].get(g), 2))
    row("reservations started", lambda s: str(s["reservations"]["started"]))
    row(
        "released filled/swap/r3/r5/cancel",
        lambda s: "/".join(
            str(s["reservations"]["ended"][k]) for k in ("filled", "swap", "r3", "r5", "cancel")
        ),
    )
    row(
        "Jain's index", lambda s: "-" if s["jain_fairness"] is None else f"{s['jain_fairness']:.3f}"
    )
    differing = [j for j in jobs if not j.agrees]
    if differing:
        lines += [
            "",
            f"jobs that differ ({len(differing)}; the first {min(show, len(differing))}):",
        ]
        lines += [f"  {j.job_id} ({j.lab}, {j.num_gpus} GPU): {j.why}" for j in differing[:show]]
    return "\n".join(lines) + "\n"


def _states(s: Mapping[str, Any]) -> str:
    st = s["states"]
    return "/".join(str(st.get(k, 0)) for k in ("COMPLETED", "FAILED", "CANCELLED", "REJECTED"))


def _waits(w: Mapping[str, Any] | None, n: int = 3) -> str:
    if not w or not w.get("count"):
        return "-"
    return " / ".join(_s(w[k]) for k in ("mean", "p95", "max")[:n])


def load_dispatch(replay_dir: Path) -> tuple[dict[str, float | None], dict[str, Any]]:
    """Each job's first dispatch (trace seconds) and the replay's settings, from replay.json
    (empty when there is none: a simulated run on both sides)."""
    path = replay_dir / "replay.json"
    if not path.exists():
        return {}, {}
    doc = json.loads(path.read_text(encoding="utf-8"))
    return {j["job_id"]: j.get("first_dispatch_s") for j in doc.get("jobs", [])}, doc


def _shift(
    jobs: Sequence[TraceJob], cluster: ClusterSpec, by: float
) -> tuple[list[TraceJob], ClusterSpec]:
    moved = [
        replace(
            j,
            submit_time=j.submit_time + by,
            cancel_time=None if j.cancel_time is None else j.cancel_time + by,
        )
        for j in jobs
    ]
    events = tuple(replace(e, time=e.time + by) for e in cluster.events)
    return moved, replace(cluster, events=events)


def _rows(result: SimResult, jobs: Sequence[TraceJob]) -> list[dict[str, str]]:
    """jobs.csv rows of `result`, with each job's submit time as `jobs` has it (so that a
    shifted run's starts read in the unshifted run's time)."""
    rows = list(csv.DictReader(io.StringIO(jobs_csv(result))))
    for row, job in zip(rows, jobs, strict=True):
        row["submit_time"] = repr(job.submit_time)
    return rows


def phase_baseline(
    cluster: ClusterSpec,
    jobs: Sequence[TraceJob],
    cycle_s: float,
    limit_s: float,
    placement: str = "pack",
    latency_s: float = 0.0,
) -> tuple[SimResult, dict[str, Any]]:
    """The unshifted simulation, and how the others agree with it: each shift of the
    submissions, and (when `latency_s` > 0) each again with every duration longer by the
    service's overhead per run (`run_overhead`: what a simulation, where a run starts the
    instant it is dispatched and frees its GPUs the instant it ends, leaves out); with each
    summary figure's range over all the runs."""
    base = simulate(cluster, jobs, "reservation", cycle_s, placement=placement)
    base_rows = _rows(base, jobs)
    summaries = [summary(base)]
    agreement: list[dict[str, Any]] = []
    variants = [(f, 0.0) for f in PHASE_SHIFTS]
    if latency_s > 0:
        variants += [(f, latency_s) for f in (0.0, *PHASE_SHIFTS)]
    for f, extra in variants:
        moved, moved_cluster = _shift(jobs, cluster, f * cycle_s)
        moved = [replace(j, duration=j.duration + extra) for j in moved]
        run = simulate(moved_cluster, moved, "reservation", cycle_s, placement=placement)
        summaries.append(summary(run))
        fig = figures(
            compare_rows(base_rows, _rows(run, jobs), limit_s), cycle_s, limit_s - cycle_s
        )
        agreement.append({"shift_cycles": f, "latency_s": extra, **{k: fig[k] for k in _AGREEMENT}})
    ranges = {
        name: [min(v), max(v)]
        if (v := [x for s in summaries if (x := get(s)) is not None])
        else None
        for name, get in RANGE_FIGURES.items()
    }
    return base, {"shifts": agreement, "ranges": ranges}


_AGREEMENT = ("agree", "state_agree", "start_agree", "placement_agree", "reservation_agree")


def baseline_text(baseline: Mapping[str, Any], live_summary: Mapping[str, Any]) -> str:
    """The baseline for a person: the simulator against itself, and the service's figures
    against the shifted runs' range."""
    lines = [
        "",
        "the simulator against itself, submissions shifted by part of a cycle, durations "
        "as traced or + the service's overhead per run (the baseline):",
    ]
    for b in baseline["shifts"]:
        lines.append(
            f"  shift {b['shift_cycles']:g} cycle, + {b['latency_s']:.1f}s: "
            f"everything {_pct(b['agree'])}, "
            f"state {_pct(b['state_agree'])}, start {_pct(b['start_agree'])}, "
            f"placement {_pct(b['placement_agree'])}, reservation {_pct(b['reservation_agree'])}"
        )
    lines.append("service figures against the range of the simulated runs:")
    for name, rng in baseline["ranges"].items():
        value = RANGE_FIGURES[name](live_summary)
        if rng is None or value is None:
            continue
        inside = "inside" if rng[0] <= value <= rng[1] else "outside"
        lines.append(f"  {name}: {value:g} ({inside} {rng[0]:g} .. {rng[1]:g})")
    return "\n".join(lines) + "\n"


@dataclass(frozen=True, slots=True)
class Tolerance:
    """How far a replay may be from the simulator and still count as predicted by it.

    Per job, the start and placement agreement may be `below_baseline` under the
    baseline's lowest (the simulator against itself at another cycle phase); the final
    states must agree for `min_state_agree` of the jobs. In the summaries, utilization
    within `utilization_points` of the simulated runs' range, and the mean and p95 wait
    within that range widened by `wait_factor` (the service holds GPUs longer than a
    simulation: a start latency per run, ends seen a little later)."""

    min_state_agree: float = 0.95
    below_baseline: float = 0.10
    utilization_points: float = 0.05
    wait_factor: float = 1.35


def problems(fig: Mapping[str, Any], live_summary: Mapping[str, Any], tol: Tolerance) -> list[str]:
    """Where a comparison with a baseline (`compare_dirs` with cluster and trace) falls
    outside `tol`; empty when the simulator predicted the replay."""
    out: list[str] = []
    baseline = fig["baseline"]
    if (fig["state_agree"] or 0) < tol.min_state_agree:
        out.append(f"final states agree for {_pct(fig['state_agree'])} of jobs")
    for key in ("start_agree", "placement_agree"):
        floor = min(b[key] for b in baseline["shifts"] if b[key] is not None)
        if fig[key] is not None and fig[key] < floor - tol.below_baseline:
            out.append(
                f"{key} {_pct(fig[key])} is below the baseline's lowest {_pct(floor)} "
                f"by more than {100 * tol.below_baseline:g} points"
            )
    ranges = baseline["ranges"]
    util = live_summary["gpu_utilization"]
    lo, hi = ranges["gpu_utilization"]
    if not lo - tol.utilization_points <= util <= hi + tol.utilization_points:
        out.append(
            f"GPU utilization {util:.3f} is outside {lo:.3f} .. {hi:.3f} ± "
            f"{tol.utilization_points:g}"
        )
    for name in ("wait_mean_s", "wait_p95_s"):
        value = RANGE_FIGURES[name](live_summary)
        if ranges[name] is None or value is None:
            continue
        lo, hi = ranges[name]
        if not lo / tol.wait_factor <= value <= hi * tol.wait_factor:
            out.append(
                f"{name} {value:.1f}s is outside {lo:.1f} .. {hi:.1f}s widened by "
                f"x{tol.wait_factor:g}"
            )
    return out


def run_overhead(
    trace: Sequence[TraceJob],
    live: Sequence[Mapping[str, str]],
    dispatch: Mapping[str, float | None],
) -> float:
    """What the service adds to each run's hold on its GPUs, in trace seconds: the median,
    over jobs completed in one attempt, of (end - dispatch) - duration: the start latency
    (a process to spawn; sbatch, Slurm's scheduling, slurmstepd) and the end's (Slurm's
    whole-second times). 0 without replay.json."""
    duration = {j.job_id: j.duration for j in trace}
    values = sorted(
        float(r["end_time"]) - d - duration[r["job_id"]]
        for r in live
        if r["state"] == "COMPLETED"
        and r["attempts"] == "1"
        and r["end_time"]
        and (d := dispatch.get(r["job_id"])) is not None
        and r["job_id"] in duration
    )
    return max(0.0, percentile(values, 50)) if values else 0.0


def compare_dirs(
    sim_dir: Path | None,
    live_dir: Path,
    tolerance_s: float | None,
    out: Path | None = None,
    *,
    cluster: ClusterSpec | None = None,
    trace: Sequence[TraceJob] | None = None,
) -> tuple[str, dict[str, Any], list[JobComparison]]:
    """Compare DIR/jobs.csv of a replayed run with a simulated one: `sim_dir`'s, or one
    simulated here from `cluster` and `trace` (with the replay's cycle and placement),
    which also gives the phase baseline. Writes fidelity.csv, .json and .md (and the
    simulated run's jobs.csv and summary.json under sim/) into `out` if given. Default
    tolerance: one cycle."""
    try:
        live_summary = json.loads((live_dir / "summary.json").read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise CompareError(f"cannot read {live_dir / 'summary.json'}: {e}") from e
    dispatch, _ = load_dispatch(live_dir)
    cycle_s = float(live_summary["cycle_s"])
    tol = cycle_s if tolerance_s is None else tolerance_s
    baseline: dict[str, Any] | None = None
    if cluster is not None and trace is not None:
        placement = str(live_summary.get("placement", "pack"))
        overhead = run_overhead(trace, read_rows(live_dir / "jobs.csv"), dispatch)
        base, baseline = phase_baseline(cluster, trace, cycle_s, cycle_s + tol, placement, overhead)
        sim_summary = summary(base)
        sim_rows = _rows(base, trace)
        if out is not None:
            from jpushare.sim.report import write_outputs

            write_outputs(base, out / "sim")
    elif sim_dir is not None:
        try:
            sim_summary = json.loads((sim_dir / "summary.json").read_text(encoding="utf-8"))
        except (OSError, ValueError) as e:
            raise CompareError(f"cannot read {sim_dir / 'summary.json'}: {e}") from e
        sim_rows = read_rows(sim_dir / "jobs.csv")
    else:
        raise CompareError("give --sim DIR, or --cluster and --trace to simulate here")
    jobs = compare_rows(sim_rows, read_rows(live_dir / "jobs.csv"), cycle_s + tol, dispatch)
    fig = figures(jobs, cycle_s, tol)
    report = text(fig, jobs, sim_summary, live_summary)
    if baseline is not None:
        fig["baseline"] = baseline
        report += baseline_text(baseline, live_summary)
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        (out / "fidelity.csv").write_text(rows_csv(jobs), encoding="utf-8")
        (out / "fidelity.json").write_text(json.dumps(fig, indent=2) + "\n", encoding="utf-8")
        (out / "fidelity.md").write_text(report, encoding="utf-8")
    return report, fig, jobs
