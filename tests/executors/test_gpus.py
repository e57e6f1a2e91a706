"""GPU discovery: NVML, nvidia-smi, declared GPUs, and how model names become GPU types."""

from __future__ import annotations

import sys
import types
from pathlib import Path

import pytest

from jpushare.executors import gpus as gpus_module
from jpushare.executors.gpus import (
    DeclaredGpus,
    LocalGpu,
    declared_gpus,
    discover_gpus,
    normalise_gpu_name,
    parse_nvidia_smi,
)
from jpushare.executors.local import LocalExecutor

DECLARED = [
    DeclaredGpus("node-a", "rtx4090", 2),
    ("node-a", "rtx5090", 1),
    ("node-b", "rtx3080ti", 1),
]

NAMES = {
    "NVIDIA GeForce RTX 4090": "rtx4090",
    "NVIDIA GeForce RTX 5090": "rtx5090",
    "NVIDIA GeForce RTX 3080 Ti": "rtx3080ti",
    "NVIDIA A100-SXM4-80GB": "a100",
    "NVIDIA A100-PCIE-40GB": "a100",
    "NVIDIA H100 80GB HBM3": "h100",
    "NVIDIA H100 NVL": "h100",
    "NVIDIA RTX A6000": "rtxa6000",
    "NVIDIA RTX 6000 Ada Generation": "rtx6000ada",
    "Tesla V100-SXM2-16GB": "v100",
    "NVIDIA L40S": "l40s",
    "Quadro RTX 8000": "rtx8000",
}


@pytest.mark.parametrize(("name", "gpu_type"), NAMES.items())
def test_model_names_become_tier_like_gpu_types(name: str, gpu_type: str) -> None:
    assert normalise_gpu_name(name) == gpu_type


def test_an_explicit_mapping_overrides_the_rule() -> None:
    assert normalise_gpu_name("NVIDIA A100-SXM4-80GB", {"NVIDIA A100-SXM4-80GB": "a100-80"}) == (
        "a100-80"
    )


def test_nvidia_smi_output_is_parsed() -> None:
    text = "0, NVIDIA GeForce RTX 4090\n1, NVIDIA GeForce RTX 4090\n\n2, NVIDIA RTX A6000\n"
    assert parse_nvidia_smi(text) == [
        (0, "NVIDIA GeForce RTX 4090"),
        (1, "NVIDIA GeForce RTX 4090"),
        (2, "NVIDIA RTX A6000"),
    ]
    with pytest.raises(ValueError, match="unexpected"):
        parse_nvidia_smi("No devices were found\n")


def test_declared_gpus_are_numbered_per_node_in_declaration_order() -> None:
    assert declared_gpus(DECLARED) == [
        LocalGpu("node-a", 0, "rtx4090"),
        LocalGpu("node-a", 1, "rtx4090"),
        LocalGpu("node-a", 2, "rtx5090"),
        LocalGpu("node-b", 0, "rtx3080ti"),
    ]


def test_without_nvml_or_nvidia_smi_the_declared_gpus_are_used(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(gpus_module, "query_nvml", lambda: None)  # as on this CPU-only machine

    found = discover_gpus("ws", DECLARED, nvidia_smi=str(tmp_path / "no-nvidia-smi"))

    assert found.source == "declared"
    assert found.gpus == tuple(declared_gpus(DECLARED))


def test_nvml_on_a_machine_without_a_driver_finds_nothing_and_does_not_raise() -> None:
    found = gpus_module.query_nvml()
    assert found is None or all(isinstance(i, int) for i, _ in found)


def test_nvidia_smi_is_used_when_nvml_is_not(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(gpus_module, "query_nvml", lambda: None)
    fake = tmp_path / "nvidia-smi"
    fake.write_text(
        '#!/bin/sh\n[ "$1" = --query-gpu=index,name ] || exit 9\n'
        "printf '0, NVIDIA GeForce RTX 4090\\n1, NVIDIA GeForce RTX 3080 Ti\\n'\n"
    )
    fake.chmod(0o755)

    found = discover_gpus("ws", DECLARED, nvidia_smi=str(fake))

    assert found.source == "nvidia-smi"
    assert found.gpus == (
        LocalGpu("ws", 0, "rtx4090", "NVIDIA GeForce RTX 4090"),
        LocalGpu("ws", 1, "rtx3080ti", "NVIDIA GeForce RTX 3080 Ti"),
    )


def test_a_failing_nvidia_smi_falls_back_to_the_declared_gpus(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(gpus_module, "query_nvml", lambda: None)
    fake = tmp_path / "nvidia-smi"
    fake.write_text("#!/bin/sh\necho 'NVIDIA-SMI has failed' >&2\nexit 9\n")
    fake.chmod(0o755)

    assert discover_gpus("ws", DECLARED, nvidia_smi=str(fake)).source == "declared"


def test_nvml_comes_first_when_it_answers(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = types.ModuleType("pynvml")
    names = [b"NVIDIA GeForce RTX 4090", "NVIDIA GeForce RTX 5090"]  # old bindings give bytes
    fake.nvmlInit = lambda: None  # type: ignore[attr-defined]
    fake.nvmlShutdown = lambda: None  # type: ignore[attr-defined]
    fake.nvmlDeviceGetCount = lambda: len(names)  # type: ignore[attr-defined]
    fake.nvmlDeviceGetHandleByIndex = lambda i: i  # type: ignore[attr-defined]
    fake.nvmlDeviceGetName = lambda handle: names[handle]  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "pynvml", fake)

    found = discover_gpus("ws", DECLARED, nvidia_smi=None)

    assert found.source == "nvml"
    assert [(g.node, g.index, g.gpu_type) for g in found.gpus] == [
        ("ws", 0, "rtx4090"),
        ("ws", 1, "rtx5090"),
    ]


def test_the_local_executor_plays_every_declared_node(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(gpus_module, "query_nvml", lambda: None)
    monkeypatch.setattr(gpus_module, "query_nvidia_smi", lambda command="": None)

    ex = LocalExecutor(tmp_path, declared=DECLARED, node="ws")

    assert ex.gpu_source == "declared"
    assert [(g.node, g.gpu_type, g.total, g.used) for g in ex.inventory()] == [
        ("node-a", "rtx4090", 2, 0),
        ("node-a", "rtx5090", 1, 0),
        ("node-b", "rtx3080ti", 1, 0),
    ]
