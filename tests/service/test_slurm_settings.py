"""The JPUSHARE_SLURM_* settings: parsing, errors, and how `serve` builds the executor and
the dispatcher's GPU type -> tier mapping from them (no cluster needed)."""

from __future__ import annotations

from pathlib import Path

import pytest

from jpushare.config import ConfigError, load_settings, parse_gpu_types
from jpushare.executors.slurm import SlurmExecutor
from jpushare.service.serve import build_executor, gpu_type_to_tier


def test_defaults() -> None:
    s = load_settings({"JPUSHARE_STATE_DIR": "/srv/jps"})
    assert s.slurm_log_dir is None
    assert s.slurm_logs == Path("/srv/jps/slurm-logs")
    assert dict(s.slurm_gpu_types) == {}
    assert s.slurm_sbatch_args == ()
    assert s.slurm_prefix == "jps"


def test_every_slurm_setting() -> None:
    s = load_settings(
        {
            "JPUSHARE_EXECUTOR": "slurm",
            "JPUSHARE_SLURM_LOG_DIR": "/shared/jps-logs",
            "JPUSHARE_SLURM_GPU_TYPES": " geforce_rtx_4090=rtx4090, a100=a100-80g ,",
            "JPUSHARE_SLURM_SBATCH_ARGS": "--account=lab --comment='two words' --mem-per-gpu=16G",
            "JPUSHARE_SLURM_PREFIX": "jps_prod",
        }
    )
    assert s.slurm_logs == Path("/shared/jps-logs")
    assert dict(s.slurm_gpu_types) == {"geforce_rtx_4090": "rtx4090", "a100": "a100-80g"}
    assert s.slurm_sbatch_args == ("--account=lab", "--comment=two words", "--mem-per-gpu=16G")
    assert s.slurm_prefix == "jps_prod"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("a100", "is not GRES_TYPE=TIER"),
        ("a100=", "is not GRES_TYPE=TIER"),
        ("a 100=x", "is not GRES_TYPE=TIER"),
        ("a100=x,a100=y", "mapped twice"),
        ("a100=x,h100=x", "mapped from two GRES types"),
    ],
)
def test_bad_gpu_types_are_refused_with_the_setting_named(text: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message) as info:
        parse_gpu_types(text)
    assert "JPUSHARE_SLURM_GPU_TYPES" in str(info.value)


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"JPUSHARE_SLURM_PREFIX": "jps-prod"}, "JPUSHARE_SLURM_PREFIX"),
        ({"JPUSHARE_SLURM_PREFIX": "1jps"}, "JPUSHARE_SLURM_PREFIX"),
        ({"JPUSHARE_SLURM_SBATCH_ARGS": "--comment='unclosed"}, "JPUSHARE_SLURM_SBATCH_ARGS"),
    ],
)
def test_bad_values_are_refused(env: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        load_settings(env)


def test_serve_builds_the_slurm_executor_and_the_same_mapping_for_the_dispatcher(
    tmp_path: Path,
) -> None:
    s = load_settings(
        {
            "JPUSHARE_STATE_DIR": str(tmp_path),
            "JPUSHARE_EXECUTOR": "slurm",
            "JPUSHARE_SLURM_GPU_TYPES": "geforce_rtx_4090=rtx4090",
            "JPUSHARE_SLURM_SBATCH_ARGS": "--account=lab",
            "JPUSHARE_SLURM_PREFIX": "jpx",
        }
    )
    executor = build_executor(s, None, None)  # type: ignore[arg-type]  # unused for slurm
    assert isinstance(executor, SlurmExecutor)
    assert executor.log_dir == tmp_path / "slurm-logs"
    assert executor.name_prefix == "jpx"
    assert executor.sbatch_args == ("--account=lab",)
    assert executor.gres_type("rtx4090") == "geforce_rtx_4090"
    assert gpu_type_to_tier(s) == {"geforce_rtx_4090": "rtx4090"}
    local = load_settings({"JPUSHARE_SLURM_GPU_TYPES": "geforce_rtx_4090=rtx4090"})
    assert gpu_type_to_tier(local) == {}  # the local executor names GPUs by tier
