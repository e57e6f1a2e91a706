"""PNG plots of a replay (matplotlib, Agg backend): GPU use, lab shares, waits, watch-list.

Only drawing lives here; every figure is computed from `SimResult` alone (the watch-list
through `jpushare.policy.watch`, like summary.json). Imported lazily by the CLI so that a
replay without --out does not pay for matplotlib. Every figure is labelled with the
`policy` each result carries (e.g. `reservation`, or `reservation/pack`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
from matplotlib.axes import Axes
from matplotlib.lines import Line2D
from matplotlib.ticker import (
    FixedLocator,
    FuncFormatter,
    MaxNLocator,
    NullFormatter,
    NullLocator,
)

from jpushare.policy.watch import watch_over_time
from jpushare.sim.engine import SimResult, TraceJobState
from jpushare.sim.report import reservation_spans

_HOUR = 3600.0
_DAY = 86400.0
# PNG metadata without the matplotlib version, so files differ only when the figure does.
_META = {"Software": None}
# Waits shorter than this are drawn at it: a log axis has no zero.
WAIT_FLOOR_S = 1.0
_DURATION_TICKS = (
    (1.0, "1s"),
    (10.0, "10s"),
    (60.0, "1m"),
    (600.0, "10m"),
    (_HOUR, "1h"),
    (6 * _HOUR, "6h"),
    (_DAY, "1d"),
    (7 * _DAY, "1w"),
    (30 * _DAY, "30d"),
    (365 * _DAY, "1y"),
)


def _time_axis(span_s: float) -> tuple[float, str]:
    """Hours for a replay under 3 days, else days: (seconds per unit, axis label)."""
    if span_s < 3 * _DAY:
        return _HOUR, "simulated time (hours)"
    return _DAY, "simulated time (days)"


def _duration_axis(ax: Axes, lo: float, hi: float, axis: str = "x") -> None:
    """A log axis of seconds with ticks a person reads (1s, 1m, 1h, 1d, ...)."""
    ticks = [(v, t) for v, t in _DURATION_TICKS if lo <= v <= hi]
    target = ax.xaxis if axis == "x" else ax.yaxis
    target.set_major_locator(FixedLocator([v for v, _ in ticks]))
    target.set_major_formatter(FuncFormatter(lambda v, _pos: dict(ticks).get(v, "")))
    target.set_minor_locator(NullLocator())
    target.set_minor_formatter(NullFormatter())


def _style(i: int, n: int = 1) -> dict[str, object]:
    """A colour per result (of n), the same in every panel, dashed after ten; earlier
    results are drawn wider, so where curves coincide each still shows as a band."""
    return {
        "color": plt.get_cmap("tab10")(i % 10),
        "linestyle": "-" if i < 10 else "--",
        "linewidth": 1.4 + 1.2 * (n - 1 - i) / max(1, n - 1) if n > 1 else 1.8,
    }


def plot_gpu_use(result: SimResult, path: Path) -> None:
    """GPUs running / reserved / idle / down over time, stacked (a step plot)."""
    samples = list(result.gpu_timeline)
    end = max((a.end for j in result.jobs for a in j.attempts), default=samples[-1].t)
    end = max(end, samples[-1].t)
    unit, label = _time_axis(end - samples[0].t)
    ts = [s.t / unit for s in samples] + [end / unit]
    running = [s.running for s in samples] + [samples[-1].running]
    reserved = [s.reserved for s in samples] + [samples[-1].reserved]
    up = [s.up for s in samples] + [samples[-1].up]
    idle = [max(0, u - r - v) for u, r, v in zip(up, running, reserved, strict=True)]
    down = [result.capacity_gpus - u for u in up]

    fig, ax = plt.subplots(figsize=(11, 4.5))
    ax.stackplot(
        ts,
        running,
        reserved,
        idle,
        down,
        labels=["running", "reserved", "idle (LLM backfill)", "down"],
        colors=["#2b7bba", "#f0a202", "#d9d9d9", "#b33c3c"],
        step="post",
    )
    ax.set_xlim(ts[0], ts[-1] if ts[-1] > ts[0] else ts[0] + 1)
    ax.set_ylim(0, result.capacity_gpus)
    ax.set_xlabel(label)
    ax.set_ylabel("GPUs")
    ax.set_title(f"GPU use over time — {result.label}")
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize="small", frameon=False)
    fig.tight_layout()
    fig.savefig(path, dpi=110, metadata=_META)
    plt.close(fig)


def lab_shares(result: SimResult) -> tuple[list[float], dict[str, list[float]]]:
    """Each lab's share of all usage so far (starting usage included), after every bill:
    (times, lab -> shares), from the first time the total is above zero."""
    usage = dict(sorted(result.initial_lab_usage.items()))
    for _, lab, _ in result.lab_timeline:
        usage.setdefault(lab, 0.0)
    labs = sorted(usage)
    times: list[float] = []
    shares: dict[str, list[float]] = {lab: [] for lab in labs}

    def sample(t: float) -> None:
        total = math.fsum(usage.values())
        if total <= 0:
            return
        if times and times[-1] == t:  # several bills at one time: keep the last state
            times.pop()
            for lab in labs:
                shares[lab].pop()
        times.append(t)
        for lab in labs:
            shares[lab].append(usage[lab] / total)

    sample(0.0)
    for t, lab, value in result.lab_timeline:
        usage[lab] = value
        sample(t)
    return times, shares


def plot_lab_usage(result: SimResult, path: Path) -> None:
    """Each lab's share of the cumulative usage over time, stacked to 100 %."""
    times, shares = lab_shares(result)
    fig, ax = plt.subplots(figsize=(11, 4.5))
    if not times:
        ax.text(0.5, 0.5, "no usage was charged", ha="center", va="center")
        ax.set_axis_off()
    else:
        end = max([*(a.end for j in result.jobs for a in j.attempts), times[-1]])
        unit, label = _time_axis(end)
        xs = [t / unit for t in times] + [end / unit]
        labs = list(shares)
        cmap = plt.get_cmap("tab10" if len(labs) <= 10 else "tab20")
        ax.stackplot(
            xs,
            *([100 * v for v in shares[lab]] + [100 * shares[lab][-1]] for lab in labs),
            labels=labs,
            colors=[cmap(i % cmap.N) for i in range(len(labs))],
            step="post",
        )
        ax.set_xlim(xs[0], xs[-1] if xs[-1] > xs[0] else xs[0] + 1)
        ax.set_ylim(0, 100)
        ax.set_xlabel(label)
        ax.set_ylabel("share of all usage so far (%)")
        # Top to bottom like the stack.
        handles, names = ax.get_legend_handles_labels()
        ax.legend(
            handles[::-1],
            names[::-1],
            loc="upper left",
            bbox_to_anchor=(1.01, 1.0),
            fontsize="small",
            frameon=False,
            title="lab",
        )
    ax.set_title(
        f"Each lab's share of cumulative usage (TFLOP-s charged at job ends, starting usage "
        f"included) — {result.label}",
        fontsize="medium",
    )
    fig.tight_layout()
    fig.savefig(path, dpi=110, metadata=_META)
    plt.close(fig)


def _class_waits(result: SimResult, n: int) -> tuple[list[float], int]:
    """Waits (clipped at WAIT_FLOOR_S, sorted) of the accepted n-GPU jobs that started,
    and how many accepted n-GPU jobs there were in all."""
    accepted = [j for j in result.jobs if j.num_gpus == n and j.state is not TraceJobState.REJECTED]
    waits = sorted(max(WAIT_FLOOR_S, j.wait_s) for j in accepted if j.wait_s is not None)
    return waits, len(accepted)


def plot_wait_by_gpus(results: Sequence[SimResult], path: Path) -> None:
    """Wait before the first start as cumulative distributions, one panel per GPU count,
    every result overlaid on one log time axis (shared by the panels). The legend sits
    above the panels, so it covers no curve; each panel's title gives its job count."""
    gpu_counts = sorted(
        {j.num_gpus for r in results for j in r.jobs if j.state is not TraceJobState.REJECTED}
    )
    all_waits = [
        max(WAIT_FLOOR_S, j.wait_s) for r in results for j in r.jobs if j.wait_s is not None
    ]
    hi = max([WAIT_FLOOR_S * 10, *all_waits]) * 1.6
    cycle_s = max((r.cycle_s for r in results), default=0.0)
    cols = 2 if len(gpu_counts) == 4 else max(1, min(len(gpu_counts), 3))
    rows = max(1, math.ceil(len(gpu_counts) / cols))
    fig, axes = plt.subplots(
        rows,
        cols,
        figsize=(5.6 * cols, 3.6 * rows + 0.9),
        sharey=True,
        squeeze=False,
        layout="constrained",
    )
    flat = [ax for row in axes for ax in row]
    never_total = [0] * len(results)
    for ax, n in zip(flat, gpu_counts, strict=False):
        jobs = 0
        never: list[str] = []
        for i, r in enumerate(results):
            waits, total = _class_waits(r, n)
            jobs = max(jobs, total)
            if total == 0:
                continue
            xs = [WAIT_FLOOR_S, *waits, hi]
            ys = [0.0, *((k + 1) / total for k in range(len(waits))), len(waits) / total]
            ax.step(xs, ys, where="post", **_style(i, len(results)))
            if total > len(waits):
                never_total[i] += total - len(waits)
                never.append(f"{r.label} {total - len(waits)}")
        title = f"{n} GPU{'s' if n > 1 else ''}: {jobs} job{'s' if jobs != 1 else ''}"
        if len(never) <= 2:  # named when it fits on a line; else the legend has the counts
            title += ("\nnever started: " + ", ".join(never)) if never else ""
        else:
            title += f"\nsome never started under {len(never)} runs (counts in the legend)"
        ax.set_title(title, fontsize="medium")
        ax.set_xscale("log")
        ax.set_xlim(WAIT_FLOOR_S, hi)
        ax.set_ylim(0, 1.02)
        ax.grid(True, which="major", alpha=0.3)
        _duration_axis(ax, WAIT_FLOOR_S, hi)
        if cycle_s > WAIT_FLOOR_S:  # waits under one cycle are where a submission fell in it
            ax.axvline(cycle_s, color="#777777", linestyle=":", linewidth=1)
            ax.text(
                cycle_s * 1.1, 0.02, f"one cycle ({cycle_s:g} s)", fontsize="x-small", color="#555"
            )
    for ax in flat[len(gpu_counts) :]:
        ax.set_visible(False)
    for row in axes:
        row[0].set_ylabel("fraction of jobs started")
    for ax in flat[: len(gpu_counts)][-cols:]:
        ax.set_xlabel(f"wait (log scale; under {WAIT_FLOOR_S:g} s drawn at {WAIT_FLOOR_S:g} s)")
    accepted = [sum(1 for j in r.jobs if j.state is not TraceJobState.REJECTED) for r in results]
    handles = [
        Line2D([], [], **_style(i, len(results)))  # type: ignore[arg-type]
        for i in range(len(results))
    ]
    labels = [
        f"{r.label}: {a} jobs" + (f", {k} never started" if k else "")
        for r, a, k in zip(results, accepted, never_total, strict=True)
    ]
    fig.suptitle(
        "Wait from submission to first start, by GPUs asked\n"
        "(cumulative: the higher and further left, the shorter the waits)",
        fontsize="medium",
    )
    fig.legend(
        handles,
        labels,
        loc="outside lower center",
        ncol=min(len(results), 2 if cols < 3 else 4),
        fontsize="small",
        frameon=False,
    )
    fig.savefig(path, dpi=110, metadata=_META)
    plt.close(fig)


_BUCKET_NAMES = {600.0: "10 minutes", _HOUR: "hour", 6 * _HOUR: "6 hours", _DAY: "day"}


def _bucket_width(span_s: float) -> float:
    """The widest of 10 min, 1 h, 6 h, 1 day that still gives >= 8 buckets (else 10 min)."""
    for width in (_DAY, 6 * _HOUR, _HOUR, 600.0):
        if span_s / width >= 8:
            return width
    return 600.0


def plot_watch(result: SimResult, path: Path) -> bool:
    """SPEC §10 over time: reservations started per bucket by outcome, the failed rate, and
    the hold (mean, p95). False (and no file) when the replay made no reservation."""
    spans = reservation_spans(result)
    if not spans:
        return False
    first = min(s.started_at for s in spans)
    last = max(s.ended_at if s.ended_at is not None else s.started_at for s in spans)
    width = _bucket_width(last - first)
    buckets = watch_over_time(spans, width)
    unit, label = _time_axis(last)
    xs = [(b.start + b.width / 2) / unit for b in buckets]
    bar_w = 0.85 * width / unit
    failed = [b.counts.failed for b in buckets]
    started = [b.counts.released["filled"] + b.counts.released["swap"] for b in buckets]
    held = [b.counts.held for b in buckets]
    fig, (top, mid, low) = plt.subplots(
        3, 1, figsize=(11, 8), sharex=True, gridspec_kw={"height_ratios": [1.2, 1, 1.2]}
    )
    top.bar(xs, failed, bar_w, color="#c0392b", label="failed (r3, r5, cancel)")
    top.bar(xs, started, bar_w, bottom=failed, color="#2b7bba", label="job started (filled, swap)")
    top.bar(
        xs,
        held,
        bar_w,
        bottom=[f + s for f, s in zip(failed, started, strict=True)],
        color="#bbbbbb",
        label="still held at the end",
    )
    top.set_ylim(0, max(b.counts.started for b in buckets) * 1.08)
    top.set_ylabel("reservations started")
    top.yaxis.set_major_locator(MaxNLocator(integer=True))
    top.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize="small", frameon=False)

    # NaN where a bucket has no reservation: the lines break there instead of inventing
    # a trend across the gap.
    nan = math.nan
    rate_y = [nan if b.counts.failed_rate is None else 100 * b.counts.failed_rate for b in buckets]
    total = sum(b.counts.started for b in buckets)
    overall = 100 * sum(failed) / total
    mid.plot(xs, rate_y, "o-", color="#c0392b", markersize=3, linewidth=1.2)
    mid.axhline(overall, color="#555555", linestyle=":", linewidth=1)
    mid.text(
        1.01, overall / 105, f"overall\n{overall:.0f} %", transform=mid.transAxes, fontsize="small"
    )
    mid.set_ylim(0, 105)
    mid.set_ylabel("failed (%)")

    means = [nan if b.hold.mean_s is None else b.hold.mean_s for b in buckets]
    p95s = [nan if b.hold.p95_s is None else b.hold.p95_s for b in buckets]
    positive = [v for v in [*means, *p95s] if v > 0]
    if positive:
        low.plot(xs, means, "o-", color="#f0a202", markersize=3, label="mean")
        low.plot(xs, p95s, "s--", color="#7d5a00", markersize=3, label="p95")
        low.set_yscale("log")
        lo = max(WAIT_FLOOR_S, min(positive) / 2)
        hi = max(positive) * 2
        low.set_ylim(lo, hi)
        _duration_axis(low, lo, hi, axis="y")
        low.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize="small", frameon=False)
    low.set_ylabel("hold (log)")
    low.set_xlabel(f"{label}; reservations grouped by start, per {_BUCKET_NAMES[width]}")
    for ax in (top, mid, low):
        ax.grid(True, axis="y", alpha=0.3)
    fig.suptitle(
        f"Reservations over time (SPEC §10 watch-list) — {result.label}: "
        f"{total} started, {overall:.0f} % failed"
    )
    fig.tight_layout()
    fig.savefig(path, dpi=110, metadata=_META)
    plt.close(fig)
    return True


def write_plots(result: SimResult, out_dir: Path) -> list[Path]:
    """The per-policy figures; returns the files written (watch.png only if the replay
    made reservations)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = [out_dir / "gpu_use.png", out_dir / "lab_usage.png", out_dir / "wait_by_gpus.png"]
    plot_gpu_use(result, paths[0])
    plot_lab_usage(result, paths[1])
    plot_wait_by_gpus([result], paths[2])
    if plot_watch(result, out_dir / "watch.png"):
        paths.append(out_dir / "watch.png")
    return paths
