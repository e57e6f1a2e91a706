"""`jpushare init --cluster` and `jpushare admin …` on both databases, run in-process the way
the command line runs them (`python -m jpushare.service` has the same parser)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from jpushare import store
from jpushare.service.__main__ import main
from jpushare.store.cluster_setup import set_lab_usage
from jpushare.store.lab_events import lab_events, set_lab_usage_recorded
from tests.dispatcher.conftest import CLUSTER_YAML

TOKEN = re.compile(r"jps_[A-Za-z0-9_-]+")


@pytest.fixture
def cli(empty_db_url: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> tuple[str, Path]:
    monkeypatch.setenv("JPUSHARE_DATABASE_URL", empty_db_url)
    monkeypatch.setenv("JPUSHARE_STATE_DIR", str(tmp_path / "var"))
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text(CLUSTER_YAML.replace("alpha: 0", "alpha: 1500"))
    return empty_db_url, cluster


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def test_init_loads_the_cluster_once_and_is_idempotent(
    cli: tuple[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    url, cluster = cli
    code, out, _ = run(capsys, "init", "--cluster", str(cluster))
    assert code == 0
    assert "labs created: alpha, beta" in out
    engine = store.make_engine(url)
    sessions = store.make_sessionmaker(engine)
    with sessions.begin() as s:
        user = store.create_user(s, "u", "alpha", "student", store.utc_now())
        job = store.submit(
            s, user_id=user.id, name="j", command="true", num_gpus=1, now=store.utc_now()
        ).job
        set_lab_usage(s, "alpha", 9999.0)  # usage since: a second init must not reset it
    code, out, _ = run(capsys, "init", "--cluster", str(cluster))
    assert code == 0
    assert "labs kept as they are: alpha, beta" in out
    assert "GPUs added 0, removed 0" in out
    with sessions() as s:
        assert [t.name for t in store.list_tiers(s)] == ["rtx4090", "rtx3080ti"]
        assert {n.name: n.gpus for n in store.list_nodes(s)} == {
            "node-a": {"rtx4090": 2},
            "node-b": {"rtx3080ti": 1},
        }
        assert store.get_lab(s, "alpha").cumulative_usage == 9999.0
        assert store.get_lab(s, "beta").cumulative_usage == 0.0
        assert store.get_job(s, job.id).state == "GLOBAL_QUEUE_WAIT"
    engine.dispose()


def test_a_fresh_lab_gets_its_starting_usage(
    cli: tuple[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    url, cluster = cli
    assert run(capsys, "init", "--cluster", str(cluster))[0] == 0
    engine = store.make_engine(url)
    with store.make_sessionmaker(engine)() as s:
        assert store.get_lab(s, "alpha").cumulative_usage == 1500.0
    engine.dispose()


def test_admin_commands_manage_labs_users_tokens_nodes_and_tiers(
    cli: tuple[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    url, cluster = cli
    assert run(capsys, "init", "--cluster", str(cluster))[0] == 0
    assert run(capsys, "admin", "lab", "add", "gamma", "--usage", "42")[0] == 0
    code, out, _ = run(
        capsys, "admin", "user", "add", "carol", "--lab", "gamma", "--role", "pi",
        "--unix-user", "nobody",
    )  # fmt: skip
    assert code == 0 and "jobs run as nobody" in out
    first = TOKEN.search(out)
    assert first is not None
    code, out, _ = run(capsys, "admin", "token", "issue", "carol")
    second = TOKEN.search(out)
    assert code == 0 and second is not None and second.group() != first.group()
    engine = store.make_engine(url)
    sessions = store.make_sessionmaker(engine)
    with sessions() as s:
        carol = store.authenticate(s, first.group())
        assert carol is not None and (carol.lab_name, carol.role) == ("gamma", "pi")
        token_id = store.list_tokens(s, carol.id)[0].id
        assert store.get_lab(s, "gamma").cumulative_usage == 42.0
    assert run(capsys, "admin", "token", "revoke", str(token_id))[0] == 0
    with sessions() as s:
        assert store.authenticate(s, first.group()) is None
        assert store.authenticate(s, second.group()) is not None

    assert run(capsys, "admin", "node", "drain", "node-a", "--reason", "fan")[0] == 0
    code, out, _ = run(capsys, "admin", "node", "list")
    assert "drained: fan" in out
    assert run(capsys, "admin", "node", "undrain", "node-a")[0] == 0
    assert run(capsys, "admin", "node", "remove", "node-b")[0] == 0
    code, out, _ = run(capsys, "admin", "tier", "set", "rtx4090", "--max-gpus", "4")
    assert code == 0 and "max 4 GPUs per job" in out
    code, out, _ = run(
        capsys, "admin", "tier", "set", "rtx5090", "--tflops", "104.8", "--sort-order", "30"
    )
    assert code == 0
    with sessions() as s:
        nodes = {n.name: n for n in store.list_nodes(s)}
        assert list(nodes) == ["node-a"] and not nodes["node-a"].admin_drained
        tiers = {t.name: t for t in store.list_tiers(s)}
        assert (tiers["rtx4090"].max_gpus, tiers["rtx4090"].tflops) == (4, 82.6)
        assert tiers["rtx5090"].sort_order == 30
    engine.dispose()


def test_admin_errors_are_one_line_and_exit_1(
    cli: tuple[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    _, cluster = cli
    assert run(capsys, "init", "--cluster", str(cluster))[0] == 0
    code, _, err = run(capsys, "admin", "user", "add", "dave", "--lab", "nope")
    assert code == 1 and err.startswith("jpushare admin:") and err.count("\n") == 1
    code, _, err = run(capsys, "admin", "tier", "set", "h100")
    assert code == 1 and "--tflops and --sort-order are needed" in err
    code, _, err = run(capsys, "init", "--cluster", str(cluster.with_name("missing.yaml")))
    assert code == 2 and "cannot read the cluster file" in err


def test_a_user_is_a_unix_account_checked_when_added(
    cli: tuple[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    """Unknown account -> one line, exit 2, nothing stored; listings show it."""
    _, cluster = cli
    assert run(capsys, "init", "--cluster", str(cluster))[0] == 0
    code, out, err = run(capsys, "admin", "user", "add", "jpst-nosuch", "--lab", "alpha")
    assert code == 2 and out == "" and err.count("\n") == 1
    assert err.startswith("jpushare admin: there is no Unix account 'jpst-nosuch'")
    code, _, err = run(
        capsys, "admin", "user", "add", "ivy", "--lab", "alpha", "--unix-user", "jpst-nosuch"
    )
    assert code == 2 and "'jpst-nosuch'" in err
    code, out, _ = run(
        capsys, "admin", "user", "add", "ivy", "--lab", "alpha", "--unix-user", "nobody"
    )
    assert code == 0 and "jobs run as nobody (uid " in out
    code, out, _ = run(capsys, "admin", "user", "list")
    lines = out.splitlines()
    assert lines[0].split() == ["USER", "LAB", "ROLE", "UNIX-USER"]
    assert [line.split() for line in lines[1:]] == [["ivy", "alpha", "student", "nobody"]]


def test_a_user_mapped_to_uid_0_needs_allow_root(
    cli: tuple[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    """Root's account (given, or the default: a user named root) -> one line, exit 2,
    nothing stored; --allow-root says it is meant."""
    _, cluster = cli
    assert run(capsys, "init", "--cluster", str(cluster))[0] == 0
    for argv in (["ivy", "--unix-user", "root"], ["root"]):
        code, out, err = run(capsys, "admin", "user", "add", *argv, "--lab", "alpha")
        assert code == 2 and out == "" and err.count("\n") == 1, err
        assert "has uid 0" in err and "--allow-root" in err and "nothing was changed" in err
    assert run(capsys, "admin", "user", "list")[1].splitlines()[1:] == []
    code, out, _ = run(
        capsys, "admin", "user", "add", "ivy", "--lab", "alpha", "--unix-user", "root",
        "--allow-root",
    )  # fmt: skip
    assert code == 0 and "jobs run as root (uid 0)" in out


def test_tiers_get_cpu_and_memory_defaults_from_the_cluster_file_and_tier_set(
    cli: tuple[str, Path], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    url, cluster = cli
    text = cluster.read_text().replace(
        "{name: rtx4090, tflops: 82.6,",
        "{name: rtx4090, cpus_per_gpu: 8, mem_per_gpu: 32G, tflops: 82.6,",
    )
    assert "cpus_per_gpu: 8" in text
    cluster.write_text(text)
    assert run(capsys, "init", "--cluster", str(cluster))[0] == 0
    code, out, _ = run(capsys, "admin", "tier", "set", "rtx3080ti", "--cpus-per-gpu", "4")
    assert code == 0 and "per GPU 4 CPUs, -" in out
    code, out, _ = run(capsys, "admin", "tier", "set", "rtx3080ti", "--mem-per-gpu", "12G")
    assert code == 0 and "per GPU 4 CPUs, 12G" in out
    code, out, _ = run(capsys, "admin", "tier", "set", "rtx4090", "--cpus-per-gpu", "none")
    assert code == 0
    code, _, err = run(capsys, "admin", "tier", "set", "rtx4090", "--mem-per-gpu", "1M")
    assert code == 1 and "mem_per_gpu_mb" in err
    engine = store.make_engine(url)
    with store.make_sessionmaker(engine)() as s:
        tiers = {t.name: (t.cpus_per_gpu, t.mem_per_gpu_mb) for t in store.list_tiers(s)}
    engine.dispose()
    assert tiers == {"rtx4090": (None, 32768), "rtx3080ti": (4, 12288)}
    code, out, _ = run(capsys, "admin", "tier", "list")
    assert "CPUS/GPU" in out and "32G" in out


def test_set_usage_is_never_negative_and_leaves_an_auditable_lab_event(
    cli: tuple[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    """`admin lab set-usage LAB VALUE` changes the fair-share order, so it is recorded
    (who, when, before, after, why); a negative value changes nothing."""
    url, cluster = cli
    assert run(capsys, "init", "--cluster", str(cluster))[0] == 0  # alpha 1500, beta 0
    with pytest.raises(SystemExit) as exc:
        main(["admin", "lab", "set-usage", "alpha", "-5"])
    assert exc.value.code == 2
    capsys.readouterr()
    code, out, _ = run(capsys, "admin", "lab", "set-usage", "alpha", "2500000", "--note", "q3")
    assert code == 0
    assert out.startswith("lab alpha: usage 1,500 -> 2,500,000 TFLOP-s (recorded as lab event ")
    code, _, err = run(capsys, "admin", "lab", "set-usage", "nosuch", "1")
    assert code == 1 and err.startswith("jpushare admin: no lab 'nosuch'")
    code, out, _ = run(capsys, "admin", "lab", "list")
    rows = [line.split()[:3] for line in out.splitlines()]
    assert rows == [["RANK", "LAB", "USAGE"], ["1", "beta", "0"], ["2", "alpha", "2,500,000"]]
    code, out, _ = run(capsys, "admin", "lab", "events")
    lines = out.splitlines()
    assert lines[0].split() == ["ID", "LAB", "AT", "KIND", "BY", "BEFORE", "AFTER", "NOTE"]
    assert (
        len(lines) == 2
        and "usage_set" in lines[1]
        and lines[1].split()[-3:]
        == [
            "1,500",
            "2,500,000",
            "q3",
        ]
    )
    engine = store.make_engine(url)
    with store.make_sessionmaker(engine)() as s:
        events = lab_events(s, "alpha")
        assert store.get_lab(s, "alpha").cumulative_usage == 2.5e6
    engine.dispose()
    assert [(e.kind, e.detail) for e in events] == [
        ("usage_set", {"before": 1500.0, "after": 2.5e6, "note": "q3"})
    ]
    assert events[0].actor


def test_the_store_refuses_a_negative_or_infinite_usage(
    cli: tuple[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    url, cluster = cli
    assert run(capsys, "init", "--cluster", str(cluster))[0] == 0
    engine = store.make_engine(url)
    sessions = store.make_sessionmaker(engine)
    for bad in (-1.0, float("inf"), float("nan")):
        with sessions.begin() as s, pytest.raises(store.InvalidRequest):
            set_lab_usage_recorded(s, "alpha", bad, store.utc_now())
    with sessions() as s:
        assert store.get_lab(s, "alpha").cumulative_usage == 1500.0
        assert lab_events(s) == []
    engine.dispose()
