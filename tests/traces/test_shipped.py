"""The shipped traces as the comparison and the benchmarks replay them."""

from __future__ import annotations

from jpushare.traces import DAY_S
from jpushare.traces.shipped import shipped_trace
from tests.traces.conftest import TRACES


def test_the_shipped_traces_have_the_sizes_the_comparison_reports() -> None:
    philly = shipped_trace("philly-10d", TRACES)
    alibaba = shipped_trace("alibaba-35d", TRACES)
    # docs/policy-comparison.md's headings: 14,001 jobs and 6,203 pods.
    assert (len(philly), len(alibaba)) == (14_001, 6_203)
    for rows, days in ((philly, 10), (alibaba, 35)):
        submits = [r.submit_time for r in rows]
        assert min(submits) >= 0 and max(submits) <= days * DAY_S
        assert all(1 <= r.num_gpus <= 8 for r in rows)
