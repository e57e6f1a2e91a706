"""Paths of the shipped raw traces (data/traces/) for the loader tests."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TRACES = ROOT / "data" / "traces"
PHILLY_CSV = TRACES / "philly_dirlab_15k" / "philly_data_training.csv"
ALIBABA_PODS_CSV = TRACES / "alibaba_openb_2023" / "openb_pod_list_default.csv"
ALIBABA_NODES_CSV = TRACES / "alibaba_openb_2023" / "openb_node_list_gpu_node.csv"
EXAMPLES = ROOT / "examples"


@pytest.fixture(scope="session")
def philly_csv() -> Path:
    return PHILLY_CSV


@pytest.fixture(scope="session")
def alibaba_pods_csv() -> Path:
    return ALIBABA_PODS_CSV


@pytest.fixture(scope="session")
def alibaba_nodes_csv() -> Path:
    return ALIBABA_NODES_CSV
