"""Does one run predict another? Job by job, from two jobs.csv files (pure after reading).

A job's *first start* is `sim.report.row_first_start`. Over the jobs that started in both runs:
how far apart their first starts are, what share is within a tolerance, and how often they
ran on the same node; per GPU count too.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from jpushare.policy.watch import percentile
from jpushare.sim.report import fmt_duration, row_first_start


@dataclass(frozen=True, slots=True)
class Row:
    job_id: str
    num_gpus: int
    state: str
    first_start: float | None
    node: str


def read_jobs_csv(path: str | Path) -> dict[str, Row]:
    with open(path, encoding="utf-8", newline="") as f:
        out: dict[str, Row] = {}
        for r in csv.DictReader(f):
            start = row_first_start(r)
            out[r["job_id"]] = Row(r["job_id"], int(r["num_gpus"]), r["state"], start, r["node"])
        return out


def _stats(diffs: Sequence[float], same_node: int, tolerance_s: float) -> dict[str, Any]:
    a = sorted(abs(d) for d in diffs)
    n = len(a)
    if not n:
        return {"jobs": 0}
    return {
        "jobs": n,
        "within_tolerance": round(sum(1 for d in a if d <= tolerance_s) / n, 4),
        "abs_median_s": round(percentile(a, 50), 3),
        "abs_p90_s": round(percentile(a, 90), 3),
        "abs_max_s": round(a[-1], 3),
        "mean_signed_s": round(math.fsum(diffs) / n, 3),
        "same_node": round(same_node / n, 4),
    }


def agreement(
    reference: Mapping[str, Row], other: Mapping[str, Row], tolerance_s: float
) -> dict[str, Any]:
    """First-start differences (other − reference) over jobs that started in both; `all`
    and per GPU count (keys as text), plus the jobs that started in only one of them."""
    both = [j for j in reference if j in other]
    diffs: dict[str, list[float]] = {"all": []}
    same: dict[str, int] = {"all": 0}
    only_ref = only_other = 0
    for j in both:
        r, o = reference[j], other[j]
        if r.first_start is None or o.first_start is None:
            only_ref += r.first_start is not None
            only_other += o.first_start is not None
            continue
        d = o.first_start - r.first_start
        for key in ("all", str(r.num_gpus)):
            diffs.setdefault(key, []).append(d)
            same[key] = same.get(key, 0) + (r.node == o.node)
    out: dict[str, Any] = {
        "tolerance_s": tolerance_s,
        "started_only_in_reference": only_ref,
        "started_only_in_other": only_other,
    }
    for key in sorted(diffs, key=lambda k: (k != "all", int(k) if k.isdigit() else 0)):
        out[key] = _stats(diffs[key], same[key], tolerance_s)
    return out


def agreement_rows(
    labelled: Iterable[tuple[str, Mapping[str, Any]]],
) -> tuple[list[str], list[list[str]]]:
    """A table, one row per (label, agreement) and GPU group."""
    header = [
        "run vs reference",
        "GPUs",
        "jobs",
        "within tolerance",
        "start apart: median",
        "p90",
        "max",
        "mean Δ",
        "same node",
    ]
    rows = []
    for label, a in labelled:
        for key, s in a.items():
            if not isinstance(s, dict) or not s.get("jobs"):
                continue
            rows.append(
                [
                    label,
                    key,
                    str(s["jobs"]),
                    f"{100 * s['within_tolerance']:.0f}%",
                    _dur(s["abs_median_s"]),
                    _dur(s["abs_p90_s"]),
                    _dur(s["abs_max_s"]),
                    _dur(s["mean_signed_s"]),
                    f"{100 * s['same_node']:.0f}%",
                ]
            )
    return header, rows


def _dur(s: float) -> str:
    """fmt_duration with a sign (a mean difference may be negative)."""
    return ("-" if s < 0 else "") + fmt_duration(abs(s))
