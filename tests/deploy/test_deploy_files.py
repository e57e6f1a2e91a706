"""The shipped deployment files are valid: Prometheus alert rules and the systemd unit.

`promtool check rules` and `promtool test rules` (the rules' own unit tests, among them
the dispatcher-down alert) need Debian's `prometheus` package (scripts/ensure-promtool.sh
installs it): missing, the tests skip, or fail with CI=true. `systemd-analyze verify`
runs where systemd's tools are installed; the unit's /opt paths are pointed at this
checkout first, since verify checks that ExecStart exists.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.missing import missing

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "deploy" / "prometheus" / "jpushare-alerts.yml"
RULE_TESTS = ROOT / "deploy" / "prometheus" / "jpushare-alerts.test.yml"
UNIT = ROOT / "deploy" / "systemd" / "jpushare.service"
ENV_EXAMPLE = ROOT / "deploy" / "systemd" / "jpushare.env.example"


def tool(name: str, needed_in_ci: bool) -> str:
    path = shutil.which(name)
    if path is None:
        if needed_in_ci:
            missing(f"{name} is missing", "CI=true: scripts/ensure-services.sh installs it")
        pytest.skip(f"{name} is not installed")
    return path


def run(*argv: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, cwd=cwd, timeout=120)


def test_the_alert_rules_are_valid() -> None:
    done = run(tool("promtool", True), "check", "rules", str(RULES))
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_alert_rules_unit_tests_pass() -> None:
    names = {r["alert"] for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"]}
    tested = {
        t["alertname"]
        for c in yaml.safe_load(RULE_TESTS.read_text())["tests"]
        for t in c["alert_rule_test"]
    }
    assert {"JpushareDispatcherDown", "JpushareNoDispatcherLease"} <= tested <= names
    done = run(tool("promtool", True), "test", "rules", RULE_TESTS.name, cwd=RULE_TESTS.parent)
    assert done.returncode == 0 and "SUCCESS" in done.stdout, done.stdout + done.stderr


def test_the_alerts_use_metrics_the_service_exports() -> None:
    from jpushare import metrics

    exported = metrics.__doc__ or ""
    text = RULES.read_text()
    for name in (
        "jpushare_dispatcher_last_success_timestamp_seconds",
        "jpushare_dispatcher_cycles_failed_total",
        "jpushare_executor_calls_failed_total",
        "jpushare_dispatcher_leader",
        "jpushare_database_up",
        "jpushare_jobs_requeued_total",
        "jpushare_oldest_queued_job_wait_seconds",
        "jpushare_gpus_foreign",
        "jpushare_dispatch_cycle_seconds",
    ):
        assert name in text, name
        assert name in exported, name


def test_the_systemd_unit_verifies(tmp_path: Path) -> None:
    analyze = tool("systemd-analyze", False)
    unit = UNIT.read_text()
    assert "EnvironmentFile=/etc/jpushare/jpushare.env" in unit
    local = unit.replace(
        "/opt/jpushare/.venv/bin/jpushare", str(Path(sys.executable).parent / "jpushare")
    )
    local = local.replace("/opt/jpushare", str(ROOT))
    (tmp_path / "jpushare.service").write_text(local)
    done = run(analyze, "verify", str(tmp_path / "jpushare.service"))
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_environment_file_names_known_settings() -> None:
    from jpushare.config import load_settings

    settings = {}
    for line in ENV_EXAMPLE.read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            key, _, value = line.partition("=")
            settings[key] = value
    assert "JPUSHARE_DATABASE_URL" in settings and "JPUSHARE_SLURM_PREFIX" in settings
    loaded = load_settings(settings)
    assert loaded.executor == "slurm" and loaded.slurm_prefix == settings["JPUSHARE_SLURM_PREFIX"]
