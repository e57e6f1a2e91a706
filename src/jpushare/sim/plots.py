"""PNG plots of a replay (matplotlib, Agg backend): GPU use, lab usage, waits by GPU count.

Only drawing lives here; every figure is computed from `SimResult` alone. Imported lazily
by the CLI so that a replay without --out does not pay for matplotlib.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt

from jpushare.sim.engine import SimResult

_HOUR = 3600.0
# PNG metadata without the matplotlib version, so files differ only when the figure does.
_META = {"Software": None}


def _hours(t: float) -> float:
    return t / _HOUR


def plot_gpu_use(result: SimResult, path: Path) -> None:
    """GPUs running / reserved / idle / down over time, stacked (a step plot)."""
    samples = list(result.gpu_timeline)
    end = max((a.end for j in result.jobs for a in j.attempts), default=samples[-1].t)
    end = max(end, samples[-1].t)
    ts = [_hours(s.t) for s in samples] + [_hours(end)]
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
    ax.set_xlabel("simulated time (hours)")
    ax.set_ylabel("GPUs")
    ax.set_title(f"GPU use over time — {result.label}")
    ax.legend(loc="upper right", fontsize="small")
    fig.tight_layout()
    fig.savefig(path, dpi=110, metadata=_META)
    plt.close(fig)


def plot_lab_usage(result: SimResult, path: Path) -> None:
    """Each lab's cumulative usage (TFLOP-seconds) over time, as billed at job ends."""
    series: dict[str, tuple[list[float], list[float]]] = {
        lab: ([0.0], [u]) for lab, u in sorted(result.initial_lab_usage.items())
    }
    for t, lab, usage in result.lab_timeline:
        xs, ys = series.setdefault(lab, ([0.0], [0.0]))
        xs.append(_hours(t))
        ys.append(usage)
    end = max((xs[-1] for xs, _ in series.values()), default=0.0)
    fig, ax = plt.subplots(figsize=(11, 4.5))
    for lab, (xs, ys) in series.items():
        ax.step([*xs, end], [*ys, ys[-1]], where="post", label=lab)
    ax.set_xlabel("simulated time (hours)")
    ax.set_ylabel("cumulative usage (TFLOP-seconds)")
    ax.set_title(f"Lab usage over time — {result.label}")
    if len(series) <= 20:
        ax.legend(loc="upper left", fontsize="small", ncol=2)
    fig.tight_layout()
    fig.savefig(path, dpi=110, metadata=_META)
    plt.close(fig)


def plot_wait_by_gpus(results: Sequence[SimResult], path: Path) -> None:
    """Wait-time distribution (box plots, symlog scale) per GPU count, one box per policy."""
    gpu_counts = sorted({j.num_gpus for r in results for j in r.jobs if j.wait_s is not None})
    fig, axes = plt.subplots(
        1, max(1, len(gpu_counts)), figsize=(3 + 2.2 * max(1, len(gpu_counts)), 4.5), sharey=True
    )
    axes_list = list(axes) if len(gpu_counts) > 1 else [axes]
    for ax, n in zip(axes_list, gpu_counts, strict=False):
        data = [
            [_hours(j.wait_s) for j in r.jobs if j.num_gpus == n and j.wait_s is not None]
            for r in results
        ]
        ax.boxplot(
            [d if d else [0.0] for d in data],
            tick_labels=[r.label for r in results],
            showfliers=True,
            flierprops={"markersize": 2},
        )
        ax.set_yscale("symlog", linthresh=0.1)
        ax.set_title(f"{n} GPU{'s' if n > 1 else ''}")
        ax.tick_params(axis="x", labelrotation=45)
    axes_list[0].set_ylabel("wait (hours, symlog)")
    fig.suptitle("Wait time by GPU count")
    fig.tight_layout()
    fig.savefig(path, dpi=110, metadata=_META)
    plt.close(fig)


def write_plots(result: SimResult, out_dir: Path) -> list[Path]:
    """The per-policy figures; returns the files written."""
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = [out_dir / "gpu_use.png", out_dir / "lab_usage.png", out_dir / "wait_by_gpus.png"]
    plot_gpu_use(result, paths[0])
    plot_lab_usage(result, paths[1])
    plot_wait_by_gpus([result], paths[2])
    return paths
