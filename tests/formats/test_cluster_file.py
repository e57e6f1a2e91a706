"""CLUSTER.yaml parsing: an example in the form of docs/formats.md §1, defaults, and errors
that name file and line."""

from __future__ import annotations

from pathlib import Path

import pytest

from jpushare.formats.cluster_file import NodeEvent, load_cluster, parse_cluster
from jpushare.formats.errors import ClusterFileError
from jpushare.policy.model import Placement, Tier
from jpushare.vocabulary import NodeState

ISSUE_EXAMPLE = """\
tiers:
  - {name: rtx3080ti, tflops: 34.1, sort_order: 10, max_gpus: 8, auto_assign: true}
  - {name: rtx4090,   tflops: 82.6, sort_order: 20, max_gpus: 8, auto_assign: true}
nodes:
  - {name: node-a, gpus: {rtx4090: 2}}
  - {name: node-c, gpus: {rtx4090: 4, rtx3080ti: 4}}   # two placements
labs: {BCG: 24000, KDG: 28000}            # optional starting usage, TFLOP-seconds
events:                                    # optional
  - {time: 300, node: node-a, state: down} # down | up
"""


def test_the_issue_example_parses_into_policy_types() -> None:
    c = parse_cluster(ISSUE_EXAMPLE, "c.yaml")
    assert c.tiers == (
        Tier("rtx3080ti", 34.1, 10, 8, True),
        Tier("rtx4090", 82.6, 20, 8, True),
    )
    assert c.placements == (
        Placement("node-a", "rtx4090", 2),
        Placement("node-c", "rtx3080ti", 4),
        Placement("node-c", "rtx4090", 4),
    )
    assert dict(c.labs) == {"BCG": 24000.0, "KDG": 28000.0}
    assert c.events == (NodeEvent(300.0, "node-a", NodeState.DOWN, 9),)
    assert c.capacity_gpus == 10
    assert {p.node for p in c.placements} == {"node-a", "node-c"}
    assert c.placements_of("node-c") == c.placements[1:]


def test_optional_fields_take_their_defaults() -> None:
    c = parse_cluster(
        "tiers:\n  - {name: t, tflops: 1, sort_order: 1, partition: gpu}\n"
        "nodes:\n  - {name: n, gpus: {t: 1}}\n"
    )
    assert c.tiers == (Tier("t", 1.0, 1, 8, True, "gpu"),)
    assert dict(c.labs) == {}
    assert c.events == ()


def test_events_are_sorted_by_time_keeping_file_order_on_ties() -> None:
    c = parse_cluster(
        "tiers: [{name: t, tflops: 1, sort_order: 1}]\n"
        "nodes: [{name: a, gpus: {t: 1}}, {name: b, gpus: {t: 1}}]\n"
        "events:\n"
        "  - {time: 50, node: b, state: down}\n"
        "  - {time: 10, node: a, state: down}\n"
        "  - {time: 50, node: a, state: up}\n"
    )
    assert [(e.time, e.node, e.state) for e in c.events] == [
        (10.0, "a", "down"),
        (50.0, "b", "down"),
        (50.0, "a", "up"),
    ]


def test_the_shipped_example_cluster_loads() -> None:
    c = load_cluster(Path(__file__).parents[2] / "examples" / "cluster.yaml")
    assert {t.name: t.tflops for t in c.tiers} == {
        "rtx3080ti": 34.1,
        "rtx4090": 82.6,
        "rtx5090": 104.8,
    }
    assert c.capacity_gpus == 16
    assert len(c.placements) == 5


GOOD_TIERS = "tiers:\n  - {name: t, tflops: 1, sort_order: 1}\n"


@pytest.mark.parametrize(
    ("text", "line", "words"),
    [
        (GOOD_TIERS + "nodes:\n  - {name: n, gpus: {x: 2}}\n", 4, "unknown tier 'x'"),
        (
            GOOD_TIERS + "nodes:\n  - {name: n, gpus: {t: 2}}\n  - {name: n, gpus: {t: 1}}\n",
            5,
            "node 'n' is listed twice",
        ),
        (GOOD_TIERS + "nodes:\n  - {name: n, gpus: {t: 0}}\n", 4, "must be >= 1"),
        (GOOD_TIERS + "nodes:\n  - {name: n, gpus: {t: two}}\n", 4, "whole number"),
        (GOOD_TIERS + "nodes:\n  - {name: n, gpu: {t: 1}}\n", 4, "unknown key 'gpu'"),
        (GOOD_TIERS, 1, "missing 'nodes'"),
        (
            GOOD_TIERS + "nodes: [{name: n, gpus: {t: 1}}]\nevents:\n"
            "  - {time: 5, node: n, state: off}\n",
            5,
            "'down' or 'up'",
        ),
        (
            GOOD_TIERS + "nodes: [{name: n, gpus: {t: 1}}]\nevents:\n"
            "  - {time: 5, node: m, state: down}\n",
            5,
            "unknown node 'm'",
        ),
        (
            "tiers:\n  - {name: t, tflops: -1, sort_order: 1}\nnodes: [{name: n, gpus: {t: 1}}]\n",
            2,
            "tflops must be > 0",
        ),
        (
            "tiers:\n  - {name: t, tflops: 1, sort_order: 1, max_gpus: 9}\n"
            "nodes: [{name: n, gpus: {t: 1}}]\n",
            2,
            "max_gpus must be 1-8",
        ),
        (GOOD_TIERS + "nodes: [{name: n, gpus: {t: 1}}]\nlabs: {A: lots}\n", 4, "must be a number"),
        (GOOD_TIERS + "nodes: [{name: n, gpus: {t: 1}}]\nnodes: []\n", 4, "duplicate key 'nodes'"),
        (GOOD_TIERS + "nodes: [{name: n, gpus: {t: 1}\nlabs: {}\n", 4, "not valid YAML"),
        ("- just\n- a list\n", 1, "expected a mapping"),
    ],
)
def test_a_bad_cluster_file_names_the_line_and_the_problem(
    text: str, line: int, words: str
) -> None:
    with pytest.raises(ClusterFileError) as info:
        parse_cluster(text, "bad.yaml")
    assert info.value.line == line
    assert words in str(info.value)
    assert str(info.value).startswith(f"bad.yaml:{line}: ")
    assert isinstance(info.value, ValueError)


def test_a_missing_cluster_file_is_a_cluster_file_error(tmp_path: Path) -> None:
    with pytest.raises(ClusterFileError, match="cannot read the cluster file"):
        load_cluster(tmp_path / "nope.yaml")
