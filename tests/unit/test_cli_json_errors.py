"""``--json`` when a command fails before its report: stdout is one JSON error object with
the code, message and fix, the exit code is the one without --json, and stderr keeps the
human lines."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from ringtrain.cli import cli
from ringtrain.cli.context import CliContext
from ringtrain.cli.jsonout import error_object
from ringtrain.errors import InventoryError, JobFailed, RingtrainError, UsageError
from ringtrain.probe.hostprobe import probe_argv
from tests.fakes import FakeRemote, gpu_rows, ip_lines, probe_stdout


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    monkeypatch.delenv("LOGLEVEL", raising=False)
    (tmp_path / "train.py").write_text("print('hi')\n")
    return tmp_path


COMMANDS = {
    "launch": ["launch", "--no-probe", "--hosts", "missing.txt", "train.py"],
    "check": ["check", "--hosts", "missing.txt"],
    "hosts": ["hosts", "missing.txt"],
}


def _invoke(args: list[str]) -> Result:
    return CliRunner().invoke(cli, args)


def _json_flag(args: list[str]) -> list[str]:
    return [*args[:1], "--json", *args[1:]]


@pytest.mark.usefixtures("project")
@pytest.mark.parametrize("name", COMMANDS)
def test_a_missing_hosts_file_is_a_json_error_with_the_same_exit_code(name: str) -> None:
    plain = _invoke(COMMANDS[name])
    result = _invoke(_json_flag(COMMANDS[name]))
    assert plain.exit_code == result.exit_code == InventoryError.exit_code, result.output
    assert plain.stdout == ""
    error = json.loads(result.stdout)["error"]
    assert error["code"] == "inventory" and error["exit_code"] == 2
    assert "missing.txt" in error["message"] and error["fix"]
    assert f"error: {error['message']}" in result.stderr  # the human lines stay
    assert f"fix: {error['fix']}" in result.stderr


def test_a_config_error_before_the_command_parses_is_a_json_error_too(project: Path) -> None:
    """ringtrain.toml is read by the group, before the sub-command sees --json."""
    (project / "ringtrain.toml").write_text("stall_timout = 900\n")
    result = _invoke(["launch", "--json", "--no-probe", "-H", "localhost:1", "train.py"])
    assert result.exit_code == 2
    error = json.loads(result.stdout)["error"]
    assert error["code"] == "usage" and "stall_timout" in error["message"]
    assert _invoke(["launch", "--no-probe", "-H", "localhost:1", "train.py"]).stdout == ""


@pytest.mark.usefixtures("project")
def test_json_after_the_script_is_the_scripts_own() -> None:
    result = _invoke(["launch", "--no-probe", "--hosts", "missing.txt", "train.py", "--json"])
    assert result.exit_code == 2 and result.stdout == ""


@pytest.mark.usefixtures("project")
def test_an_allocation_that_cannot_fit_is_a_json_error() -> None:
    result = _invoke(["hosts", "--json", "-H", "a:1", "-np", "4"])
    assert result.exit_code == 2
    assert json.loads(result.stdout)["error"]["code"] == "allocation"


def test_a_report_already_out_is_not_followed_by_an_error_object() -> None:
    """check --json prints its report, then refuses (exit 4): stdout stays that one document."""
    remote = FakeRemote()
    for i, (host, gpus) in enumerate((("gpu01", 4), ("gpu02", 2)), start=1):
        remote.on(host, probe_argv(sys.executable), stdout=probe_stdout(
            host, gpu=(gpu_rows(gpus), 0), net=ip_lines(("eth0", f"10.0.0.{i}/24"))))
    result = CliRunner().invoke(cli, ["check", "--json", "-H", "gpu01:4,gpu02:4"],
                                obj=CliContext(remote_factory=lambda _options: remote))
    assert result.exit_code == 4, result.output
    report = json.loads(result.stdout)  # one document, or this raises
    assert "error" not in report and report["refused"]
    assert "error: pre-flight refused the launch" in result.stderr


def test_the_error_object_names_code_message_fix_and_exit_code() -> None:
    err: RingtrainError = UsageError("np must be positive", "pass -np 1 or more")
    assert error_object(err) == {"error": {
        "code": "usage", "message": "np must be positive", "fix": "pass -np 1 or more",
        "exit_code": 2}}
    assert JobFailed("boom", exit_code=7).code == "job_failed"
    assert RingtrainError("x").code == "ringtrain"
