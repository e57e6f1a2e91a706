"""scripts/compare_policies.py's sweep: every variant once, and its table read from real
simulator output (the shipped example trace), lending figures included."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[2]


def load_script() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "compare_policies", ROOT / "scripts" / "compare_policies.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look the module up by name
    spec.loader.exec_module(module)
    return module


def test_the_sweep_crosses_readings_modes_and_limits_with_backfill_under_each_limit() -> None:
    script = load_script()
    found = script.variants()
    assert len({v.folder for v in found}) == len(found) == 4 * (2 * 2 + 1)
    for limits in script.LIMITS:
        mine = [v for v in found if v.limits == limits]
        assert {(v.top_job, v.reserved_gpus) for v in mine if v.policy == "reservation"} == {
            (t, m) for t in script.TOP_JOBS for m in script.RESERVED_GPUS
        }
        assert [v.policy for v in mine].count("backfill") == 1
    assert ":" not in "".join(v.folder for v in found)  # a folder name on any filesystem


def test_the_sweep_table_reads_each_variants_summary(tmp_path: Path) -> None:
    script = load_script()
    case = script.Case("example", "the example", "examples/cluster.yaml", "")
    trace = ROOT / "examples" / "trace.csv"
    chosen = [
        script.Variant("reservation", "first-waiting", "llm-only", "exact"),
        script.Variant("reservation", "first-waiting", "lend-by-limit", "none"),
        script.Variant("backfill", "first-waiting", "llm-only", "exact"),
    ]
    for variant in chosen:
        argv = script.variant_command(case, trace, tmp_path / case.name, variant)
        subprocess.run(
            [sys.executable, "-m", "jpushare.cli", *argv[1:]],
            cwd=ROOT,
            check=True,
            capture_output=True,
        )
    runs = script.load_sweep(tmp_path, case)
    assert [v for v, _ in runs] == [v for v in script.variants() if v in chosen]
    lines = script.render_sweep(case, runs)
    rows = [line for line in lines if line.startswith("| `")]
    assert len(rows) == 3
    by_policy = {row.split(" | ")[0]: row for row in rows}
    # backfill reserves nothing and lends nothing: its reservation columns are dashes
    assert by_policy["| `backfill`"].endswith("| – | – |")
    for variant, summary in runs:
        wait = script.hours(summary["wait_s"]["mean"])
        row = next(r for r in rows if f"`{variant.limits}`" in r and variant.policy in r)
        assert f"| {wait} |" in row
    assert script.render_sweep(case, [])[-2].startswith("_No sweep found")
