"""scripts/peer_compare.py's race trace: `--jobs N --skip K` takes the slice's jobs K..K+N
and moves them to start at 0, so a shorter race is still a real stretch of the slice."""

from __future__ import annotations

import csv
import importlib.util
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[2]


def load_script() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "peer_compare", ROOT / "scripts" / "peer_compare.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def read(path: Path) -> list[dict[str, str]]:
    with path.open(encoding="utf-8", newline="") as f:
        return list(csv.DictReader(f))


def test_the_short_trace_is_the_slices_stretch_moved_to_start_at_zero(tmp_path: Path) -> None:
    script = load_script()
    whole = read(ROOT / script.TRACE)
    script.write_short_trace(tmp_path, 20, skip=150)
    short = read(tmp_path / "trace.csv")
    assert [r["job_id"] for r in short] == [r["job_id"] for r in whole[150:170]]
    t0 = int(whole[150]["submit_time"])
    assert t0 > 0 and short[0]["submit_time"] == "0"
    for mine, theirs in zip(short, whole[150:170], strict=True):
        assert int(mine["submit_time"]) == int(theirs["submit_time"]) - t0
        assert (mine["duration"], mine["num_gpus"], mine["lab"], mine["time_limit"]) == (
            theirs["duration"], theirs["num_gpus"], theirs["lab"], theirs["time_limit"],
        )  # fmt: skip
    assert script.race_trace(tmp_path) == str(tmp_path / "trace.csv")


def test_every_live_variant_has_its_own_run_folder_in_the_rendered_tables(tmp_path: Path) -> None:
    script = load_script()
    labels = dict((str(d.relative_to(tmp_path)), label) for label, d in script._runs(tmp_path))
    assert labels == {}  # nothing ran: no row
    for run in ("slurm", "jpushare", "jpushare-first-queued", "jpushare-lend", "sim-lend"):
        (tmp_path / run).mkdir()
        (tmp_path / run / "summary.json").write_text("{}", encoding="utf-8")
    found = {str(d.relative_to(tmp_path)) for _, d in script._runs(tmp_path)}
    assert found == {"slurm", "jpushare", "jpushare-first-queued", "jpushare-lend", "sim-lend"}
