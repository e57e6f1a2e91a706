"""The settings that pick one of a few names: JPUSHARE_PLACEMENT (the dispatch order inside
a tier) JPUSHARE_POLICY (the policy the dispatcher runs, by its simulator name), JPUSHARE_TOP_JOB
(SPEC decision 7) and JPUSHARE_RESERVED_GPUS (R4 or lending). Each is
read with the other settings, has a default, takes each of its choices in any case and
spacing; a bad value stops `serve` before it starts anything, with one line naming the
valid choices."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

import pytest

from jpushare.cli import main
from jpushare.config import ConfigError, Settings, load_settings
from jpushare.policy import PlacementOrder
from jpushare.policy.options import ReservedGpus, TopJob
from jpushare.policy.peers import POLICIES


@dataclass(frozen=True)
class ChoiceSetting:
    """One such setting and what the tests expect of it."""

    variable: str
    read: Callable[[Settings], object]  # the value the service uses
    default: object
    choices: Mapping[str, object]  # what the variable may say -> what it reads as
    named: str  # the choices as an error lists them
    bad: tuple[str, str]  # a value load_settings refuses, a value serve refuses


SETTINGS = [
    pytest.param(
        ChoiceSetting(
            variable="JPUSHARE_PLACEMENT",
            read=lambda s: s.placement_order,
            default=PlacementOrder.PACK,
            choices={
                "pack": PlacementOrder.PACK,
                "spread": PlacementOrder.SPREAD,
                " PACK ": PlacementOrder.PACK,
            },
            named="pack, spread",
            bad=("best-fit", "tight"),
        ),
        id="placement",
    ),
    pytest.param(
        ChoiceSetting(
            variable="JPUSHARE_POLICY",
            read=lambda s: s.policy,
            default="reservation",
            choices={**{name: name for name in POLICIES}, " Hol-Skip ": "hol-skip"},
            named="reservation, hol-skip, fifo, backfill",
            bad=("easy", "sjf"),
        ),
        id="policy",
    ),
    pytest.param(
        ChoiceSetting(
            variable="JPUSHARE_TOP_JOB",
            read=lambda s: s.top_job,
            default=TopJob.FIRST_WAITING,
            choices={
                "first-waiting": TopJob.FIRST_WAITING,
                "first-queued": TopJob.FIRST_QUEUED,
                " First-Queued ": TopJob.FIRST_QUEUED,
            },
            named="first-waiting, first-queued",
            bad=("pivot", "queue0"),
        ),
        id="top-job",
    ),
    pytest.param(
        ChoiceSetting(
            variable="JPUSHARE_RESERVED_GPUS",
            read=lambda s: s.reserved_gpus,
            default=ReservedGpus.LLM_ONLY,
            choices={
                "llm-only": ReservedGpus.LLM_ONLY,
                "lend-by-limit": ReservedGpus.LEND_BY_LIMIT,
                " Lend-By-Limit ": ReservedGpus.LEND_BY_LIMIT,
            },
            named="llm-only, lend-by-limit",
            bad=("lend", "borrow"),
        ),
        id="reserved-gpus",
    ),
]


def test_the_top_job_setting_reaches_the_policy_the_service_runs() -> None:
    # named_policy binds it: the literal reading releases where decision 7 keeps (S-7 case).
    from jpushare.policy.peers import named_policy

    assert named_policy("reservation") is POLICIES["reservation"]
    assert named_policy("fifo", TopJob.FIRST_QUEUED) is POLICIES["fifo"]
    from jpushare.policy import Placement, QueuedJob, ReleaseReason, Reservation, Snapshot
    from tests.constants import RTX4090

    held = Reservation("node-p", "rtx4090", 1, 0.0, 0.0)
    snap = Snapshot(
        (RTX4090,),
        (Placement("node-p", "rtx4090", 2, busy=1), Placement("node-q", "rtx4090", 1)),
        (QueuedJob("h", "KDG", 2, 10, 0.0, held), QueuedJob("l", "BCG", 1, 10, 4.0)),
        {"KDG": 1.0},
        5.0,
    )
    released = [
        a.reason
        for a in named_policy("reservation", TopJob.FIRST_QUEUED)(snap).actions
        if hasattr(a, "reason")
    ]
    assert released == [ReleaseReason.R3]
    assert named_policy("reservation", TopJob.FIRST_WAITING)(snap).why["h"].reservation == held


def test_the_reserved_gpus_setting_reaches_the_policy_the_service_runs() -> None:
    # The top job holds node-p's idle GPU; "short" ends (limit 60 s) before the running
    # job's limit frees the rest (600 s): lent under lend-by-limit, never under R4.
    from jpushare.policy import Dispatch, Placement, QueuedJob, RunningJob, Snapshot
    from jpushare.policy.peers import named_policy
    from tests.constants import RTX4090

    snap = Snapshot(
        (RTX4090,),
        (Placement("node-p", "rtx4090", 2, busy=1),),
        (
            QueuedJob("top", "KDG", 2, 10, 0.0),
            QueuedJob("short", "KDG", 1, 10, 1.0, time_limit_s=60.0),
        ),
        {"KDG": 1.0},
        5.0,
        (RunningJob("r", "node-p", "rtx4090", 1, 0.0, 600.0),),
    )
    settings = load_settings({"JPUSHARE_RESERVED_GPUS": "lend-by-limit"})
    policy = named_policy("reservation", settings.top_job, settings.reserved_gpus)
    lent = [a for a in policy(snap).actions if isinstance(a, Dispatch)]
    assert lent == [Dispatch("short", "node-p", "rtx4090", 1, lent_from="top", lent_until=65.0)]
    default = load_settings({})
    r4 = named_policy("reservation", default.top_job, default.reserved_gpus)(snap)
    assert r4.dispatches() == []


def _typed(value: object) -> tuple[type, object]:
    """A value with its type: a StrEnum member is equal to its string, and must not be."""
    return type(value), value


@pytest.mark.parametrize("setting", SETTINGS)
def test_unset_or_empty_is_the_default(setting: ChoiceSetting) -> None:
    assert _typed(setting.read(load_settings({}))) == _typed(setting.default)
    assert _typed(setting.read(load_settings({setting.variable: ""}))) == _typed(setting.default)


@pytest.mark.parametrize("setting", SETTINGS)
def test_each_choice_can_be_chosen(setting: ChoiceSetting) -> None:
    for raw, want in setting.choices.items():
        assert _typed(setting.read(load_settings({setting.variable: raw}))) == _typed(want), raw


@pytest.mark.parametrize("setting", SETTINGS)
def test_a_bad_value_names_the_setting_and_the_choices(setting: ChoiceSetting) -> None:
    bad = setting.bad[0]
    with pytest.raises(ConfigError) as info:
        load_settings({setting.variable: bad})
    assert str(info.value) == f"{setting.variable} must be one of {setting.named}, not {bad!r}"


@pytest.mark.parametrize("setting", SETTINGS)
def test_serve_refuses_to_start_with_a_bad_value(
    setting: ChoiceSetting,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    bad = setting.bad[1]
    state = tmp_path / "var"
    monkeypatch.setenv("JPUSHARE_STATE_DIR", str(state))
    monkeypatch.setenv(setting.variable, bad)

    assert main(["serve", "--port", "1"]) == 2

    err = capsys.readouterr().err
    assert (
        err == f"jpushare serve: {setting.variable} must be one of {setting.named}, not {bad!r}\n"
    )
    assert not state.exists(), "nothing was created: no database, no executor state"
