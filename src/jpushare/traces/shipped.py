"""The two real traces the project ships (data/traces/), converted as the comparison uses
them: one definition for scripts/compare_policies.py and the benchmarks, so that a
benchmark measures exactly the replay docs/policy-comparison.md reports."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from jpushare.traces import DAY_S, TraceRow
from jpushare.traces.alibaba import AlibabaOptions, load_alibaba
from jpushare.traces.philly import PhillyOptions, load_philly

ShippedTrace = Literal["philly-10d", "alibaba-35d"]


def shipped_trace(name: ShippedTrace, data_dir: Path) -> list[TraceRow]:
    """Philly's last 10 days, or Alibaba's last 35 days with carry-over (the same rules as
    `jpushare trace philly --window last10d` / `trace alibaba --window last35d
    --carry-over`); `data_dir` is the repository's data/traces."""
    if name == "philly-10d":
        rows, _ = load_philly(
            data_dir / "philly_dirlab_15k" / "philly_data_training.csv",
            PhillyOptions(window_s=10 * DAY_S),
        )
        return rows
    rows, _ = load_alibaba(
        data_dir / "alibaba_openb_2023" / "openb_pod_list_default.csv",
        AlibabaOptions(window_s=35 * DAY_S, carry_over=True),
    )
    return rows
