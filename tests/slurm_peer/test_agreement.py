"""First-start agreement of two runs' jobs.csv."""

from __future__ import annotations

from pathlib import Path

from jpushare.sim.report import JOBS_COLUMNS
from jpushare.slurm_peer.agreement import agreement, agreement_rows, read_jobs_csv

HEADER = ",".join(JOBS_COLUMNS) + "\n"


def write(path: Path, rows: list[str]) -> Path:
    path.write_text(HEADER + "".join(r + "\n" for r in rows), encoding="utf-8")
    return path


def test_first_starts_compared_over_jobs_that_started_in_both(tmp_path: Path) -> None:
    ref = read_jobs_csv(
        write(
            tmp_path / "ref.csv",
            [
                "a,L,1,COMPLETED,0,0,10,node-a,rtx4090,0,1,0,0",
                "b,L,1,COMPLETED,0,100,110,node-a,rtx4090,100,1,0,0",
                "c,L,4,COMPLETED,50,500,600,node-b,rtx5090,450,1,0,0",
                "d,L,1,CANCELLED,0,,,,,,0,0,0",
            ],
        )
    )
    # b's last attempt started at 900 but its first at 160 (wait_s 160): the first counts
    other = read_jobs_csv(
        write(
            tmp_path / "other.csv",
            [
                "a,L,1,COMPLETED,0,0,10,node-a,rtx4090,0,1,0,0",
                "b,L,1,COMPLETED,0,900,910,node-c,rtx4090,160,2,0,0",
                "c,L,4,COMPLETED,50,350,450,node-b,rtx5090,300,1,0,0",
                "d,L,1,COMPLETED,0,5,6,node-a,rtx4090,5,1,0,0",
            ],
        )
    )
    a = agreement(ref, other, tolerance_s=60)
    assert a["started_only_in_other"] == 1 and a["started_only_in_reference"] == 0
    assert a["all"]["jobs"] == 3
    assert a["all"]["within_tolerance"] == round(2 / 3, 4)  # a (0) and b (60); c is 150 off
    assert a["all"]["abs_max_s"] == 150 and a["all"]["mean_signed_s"] == -30
    assert a["all"]["same_node"] == round(2 / 3, 4)
    assert a["4"] == {
        "jobs": 1,
        "within_tolerance": 0.0,
        "abs_median_s": 150,
        "abs_p90_s": 150,
        "abs_max_s": 150,
        "mean_signed_s": -150,
        "same_node": 1.0,
    }
    header, rows = agreement_rows([("sim", a)])
    assert [r[1] for r in rows] == ["all", "1", "4"]
    assert rows[2][header.index("mean Δ")] == "-2.5m"
