"""A JPUSHARE_DATABASE_URL that does not work ends serve/init/admin in one line, exit 2."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy.engine import make_url

from jpushare.cli import main
from tests.database import require_postgres

EXAMPLE_CLUSTER = str(Path(__file__).resolve().parents[2] / "examples" / "cluster.yaml")


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    code = main(argv)
    return code, capsys.readouterr().err


def one_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert "Traceback" not in err
    return lines[0]


@pytest.mark.parametrize(
    ("url", "argv", "says"),
    [
        (
            "postgresql+psycopg://postgres@127.0.0.1:1/test",
            ["admin", "lab", "list"],
            "nothing listens",
        ),
        ("nosuch+scheme://x/y", ["init", "--cluster", EXAMPLE_CLUSTER], "unknown scheme"),
        ("not a url at all", ["admin", "user", "list"], "not a database URL"),
    ],
)
def test_a_url_that_cannot_work_is_one_line_and_exit_2(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    tmp_path: object,
    url: str,
    argv: list[str],
    says: str,
) -> None:
    monkeypatch.setenv("JPUSHARE_DATABASE_URL", url)
    code, err = run(argv, capsys)
    line = one_line(err)
    assert code == 2
    assert line.startswith(f"jpushare {argv[0]}: JPUSHARE_DATABASE_URL (")
    assert says in line


def test_serve_says_it_too(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: object
) -> None:
    monkeypatch.setenv("JPUSHARE_DATABASE_URL", "postgresql+psycopg://postgres@127.0.0.1:1/x")
    monkeypatch.setenv("JPUSHARE_STATE_DIR", str(tmp_path))
    code, err = run(["serve", "--no-api"], capsys)
    assert code == 2
    assert [ln for ln in err.splitlines() if "JPUSHARE_DATABASE_URL" in ln]
    assert "Traceback" not in err


@pytest.mark.parametrize(
    ("part", "says"), [("username", "unknown role"), ("database", "missing database")]
)
def test_an_unknown_role_or_database_is_named(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], part: str, says: str
) -> None:
    base = make_url(require_postgres())
    name = "jpushare_no_such_thing"
    url = base.set(username=name) if part == "username" else base.set(database=name)
    monkeypatch.setenv("JPUSHARE_DATABASE_URL", url.render_as_string(hide_password=False))
    code, err = run(["admin", "lab", "list"], capsys)
    line = one_line(err)
    assert code == 2 and says in line and name in line


def test_a_negative_starting_usage_is_refused(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: object
) -> None:
    monkeypatch.setenv("JPUSHARE_DATABASE_URL", f"sqlite:///{tmp_path}/x.sqlite")
    with pytest.raises(SystemExit) as exc:
        main(["admin", "lab", "add", "X", "--usage", "-100"])
    assert exc.value.code == 2
    assert "--usage: a lab's usage is never negative" in capsys.readouterr().err
    assert main(["admin", "lab", "list"]) == 0
    assert "X" not in capsys.readouterr().out.split()
