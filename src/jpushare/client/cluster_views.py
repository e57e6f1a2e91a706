"""The CLI's views of the cluster: `labs`, `placements`, `tiers` and `stats` (sshare,
sinfo and the SPEC §10 watch-list). Printers take (api, args, out, now) like those of
`jpushare.client.cli`, which registers them."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING, TextIO

from jpushare.client.formatting import ago, amount, duration, table

if TYPE_CHECKING:
    from jpushare.client.api import JSON, Client


def held_by(reservations: Sequence[JSON] | None) -> str:
    return ", ".join(f"job {r['job_id']}: {r['gpus']}/{r['of']}" for r in reservations or ()) or "-"


def lent_to(loans: Sequence[JSON] | None, now: datetime) -> str:
    """Runs on GPUs lent from a reservation (lend-by-limit): 'job 9: 1 of job 7's, ends in 5m'."""
    return (
        ", ".join(
            f"job {r['job_id']}: {r['gpus']} of job {r['lent_from_job_id']}'s, ends "
            f"{ago(r.get('until'), now)}"
            for r in loans or ()
        )
        or "-"
    )


def labs(api: Client, args: argparse.Namespace, out: TextIO, now: datetime) -> JSON:
    result = api.labs()
    if not args.json:
        rows = [
            (
                lab.get("rank"),
                lab["name"],
                amount(lab["usage_tflop_s"]),
                _share(lab.get("share")),
                amount(lab.get("in_flight_tflop_s", 0.0)),
                lab["running_jobs"],
                lab.get("running_gpus"),
                lab.get("reserved_gpus"),
                lab["queued_jobs"],
            )
            for lab in result["data"]
        ]
        headers = ("RANK", "LAB", "USAGE (TFLOP-s)", "SHARE", "IN FLIGHT", "RUNNING", "GPUS")
        print(table((*headers, "RESERVED", "QUEUED"), rows), file=out)
        print(
            "(rank 1 is served first; IN FLIGHT: held by running jobs and reservations, "
            "charged when each job ends)",
            file=out,
        )
    return result


def placements(api: Client, args: argparse.Namespace, out: TextIO, now: datetime) -> JSON:
    result = api.placements()
    if not args.json:
        rows = []
        lending = any(p.get("loans") for p in result["data"])  # lend-by-limit: LENT TO
        for p in result["data"]:
            state = p["node_state"] + (" drained" if p["drained"] else "")
            row = [
                p["node"],
                p["tier"],
                p["capacity"],
                p["busy"],
                p["reserved"],
                p["idle"],
                p.get("llm_gpus", 0),
                state,
                held_by(p["reservations"]),
            ]
            if lending:
                row.append(lent_to(p.get("loans"), now))
            rows.append(tuple(row))
        headers = ("NODE", "TIER", "CAPACITY", "BUSY", "RESERVED", "IDLE", "LLM", "STATE")
        extra = ("LENT TO",) if lending else ()
        print(table((*headers, "RESERVED FOR", *extra), rows), file=out)
        if lending:
            print("(lent GPUs count as BUSY: the borrower ends by its time limit)", file=out)
    return result


def tiers(api: Client, args: argparse.Namespace, out: TextIO, now: datetime) -> JSON:
    result = api.tiers()
    if not args.json:
        rows = [
            (
                t["name"],
                t["tflops"],
                t["sort_order"],
                t["max_gpus"],
                "yes" if t["auto_assign"] else "no",
                t.get("partition"),
            )
            for t in result["data"]
        ]
        print(table(("TIER", "TFLOPS", "ORDER", "MAX-GPUS", "AUTO", "PARTITION"), rows), file=out)
    return result


def _share(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


def stats(api: Client, args: argparse.Namespace, out: TextIO, now: datetime) -> JSON:
    w = api.watch(args.since)
    if not args.json:
        r = w["reservations"]
        rel = r["released"]
        h = w["hold_s"]
        u = w["usage"]
        print(f"watch-list (SPEC §10) since {w['since']} ({ago(w['since'], now)})", file=out)
        print(
            f"reservations: {r['started']} started, {r['failed']} failed"
            f" ({_share(r['failed_rate'])}: r3 {rel['r3']}, r5 {rel['r5']},"
            f" cancel {rel['cancel']}); filled {rel['filled']}, swap {rel['swap']},"
            f" still held {r['held']}",
            file=out,
        )
        print(
            f"hold: mean {duration(h['mean'])}, p95 {duration(h['p95'])},"
            f" max {duration(h['max'])} ({h['count']} released)",
            file=out,
        )
        print(
            f"reservation cost: {_share(u['reservation_share'])} of"
            f" {amount(u['charged_tflop_s'])} TFLOP-s charged for {u['ended_jobs']} ended jobs",
            file=out,
        )
        b = w.get("backfill")
        if b is not None:
            print(
                f"LLM backfill: {b['backfill_reserved_gpu_hours']:.2f} of"
                f" {b['reserved_gpu_hours']:.2f} reserved GPU-hours served"
                f" ({_share(b['served_share_of_reserved'])}),"
                f" {b['backfill_idle_gpu_hours']:.2f} on idle GPUs,"
                f" {b['idle_gpu_hours']:.2f} idle with nothing running;"
                f" {b['yields']} yields (mean {duration(b['yield_mean_s'])},"
                f" max {duration(b['yield_max_s'])})"
                + ("" if b["keeper_since"] is None else " — keeper totals since its start"),
                file=out,
            )
        labs = [
            (lab, c["started"], c["failed"], _share(c["failed_rate"]))
            for lab, c in w["reservations_by_lab"].items()
        ]
        if labs:
            print("\nfailed reservations per lab:", file=out)
            print(table(("LAB", "STARTED", "FAILED", "RATE"), labs), file=out)
        sizes = [
            (
                int(g),
                c["jobs"],
                "-" if c["burden"] is None else f"{c['burden']:.3f}",
                duration(c["mean_wait_s"]),
                amount(c["run_tflop_s"]),
                amount(c["reservation_tflop_s"]),
            )
            for g, c in w["by_gpus"].items()
        ]
        if sizes:
            print("\nended jobs by size (burden = charged / run TFLOP-s; 1.000 = none):", file=out)
            headers = ("GPUS", "JOBS", "BURDEN", "MEAN-WAIT", "RUN (TFLOP-s)", "RESERVED")
            print(table(headers, sizes), file=out)
    return w
