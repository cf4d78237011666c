"""One set of defaults for both doors (issue 27, item 5): ``ringtrain launch`` and
``ringtrain.run()`` read the same ringtrain.toml, user file and RINGTRAIN_<KEY>; paths are
taken from the file that names them; a host source given wins over a configured one."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

import ringtrain
from ringtrain.cli import cli
from ringtrain.errors import UsageError

SECRET = "hunter2-do-not-print"


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A project with a ringtrain.toml, an inventory and an env file; the working directory
    is one of its sub-directories."""
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("HOME", str(tmp_path))
    for key in list(os.environ):
        if key.startswith("RINGTRAIN_"):
            monkeypatch.delenv(key)
    root = tmp_path / "proj"
    (root / "cluster").mkdir(parents=True)
    (root / "src").mkdir()
    (root / ".git").mkdir()
    (root / "cluster" / "hosts.txt").write_text("localhost slots=2\n")
    (root / ".ringtrain_env").write_text(f"# for the ranks\nWANDB_API_KEY={SECRET}\nA=file\n")
    (root / "ringtrain.toml").write_text(
        'hosts = "cluster/hosts.txt"\nruns_dir = "runs-here"\ncheckpoint = "ckpt"\n'
        'max_restarts = 2\nenv_file = ".ringtrain_env"\n'
        'env = { NCCL_DEBUG = "WARN", A = "table" }\nenv_plain = ["B=shown"]\n')
    (root / "src" / "train.py").write_text("print('hi')\n")
    monkeypatch.chdir(root / "src")
    monkeypatch.setenv("RINGTRAIN_STALL_TIMEOUT", "77")
    monkeypatch.setenv("RINGTRAIN_MAX_RESTARTS", "3")
    return root


def _cli(*args: str) -> Any:
    return CliRunner().invoke(cli, list(args))


def _cli_spec(project: Path, *args: str) -> dict[str, Any]:
    result = _cli("launch", "--dry-run", "--no-probe", *args, "train.py")
    assert result.exit_code == 0, result.output
    plans = sorted((project / "runs-here").rglob("plan.json"))
    spec: dict[str, Any] = json.loads(plans[-1].read_text())["spec"]
    plans[-1].unlink()
    return spec


def _api_spec(**options: Any) -> dict[str, Any]:
    plan = ringtrain.run("train.py", dry_run=True, probe=False, **options)
    spec: dict[str, Any] = plan.to_json()["spec"]
    return spec


def test_both_doors_read_the_same_layers(project: Path) -> None:
    by_cli, by_api = _cli_spec(project), _api_spec()
    assert by_cli == by_api
    assert by_api["hosts_file"] == str(project / "cluster" / "hosts.txt")  # from the file's folder
    assert by_api["runs_dir"] == str(project / "runs-here")
    assert by_api["checkpoint"]["root"] == str(project / "ckpt")
    assert by_api["restart"]["max_restarts"] == 3  # the environment over the project file
    assert by_api["supervision"]["stall_timeout"] == 77
    env = {e["name"]: e["value"] for e in by_api["env"]}
    # issue 40: every env value a secret, whatever its name; env_plain's shown
    assert env == {"WANDB_API_KEY": None, "A": None, "NCCL_DEBUG": None, "B": "shown"}


def test_what_the_caller_gives_wins_through_both_doors(project: Path) -> None:
    by_cli = _cli_spec(project, "--max-restarts", "0", "--env", "A=cli", "--runs-dir",
                       str(project / "runs-here"))
    by_api = _api_spec(max_restarts=0, env={"A": "cli"}, runs_dir=project / "runs-here")
    assert by_cli == by_api
    assert by_api["restart"]["max_restarts"] == 0
    assert {e["name"]: e["value"] for e in by_api["env"]}["A"] is None  # a secret: not kept


def test_env_plain_through_both_doors(project: Path) -> None:
    """--env-plain (env_plain=): the value kept in plan.json and shown; --env's never."""
    by_cli = _cli_spec(project, "--env", "S=hidden-1", "--env-plain", "P=shown-2")
    by_api = _api_spec(env={"S": "hidden-1"}, env_plain={"P": "shown-2"})
    assert by_cli == by_api
    env = {e["name"]: (e["value"], e["plain"]) for e in by_api["env"]}
    assert env["S"] == (None, False) and env["P"] == ("shown-2", True)
    shown = _cli("launch", "--dry-run", "--no-probe", "--env", "S=hidden-1", "--env-plain",
                 "P=shown-2", "train.py")
    assert "P=shown-2" in shown.output and "hidden-1" not in shown.output
    helped = _cli("launch", "--help").output
    assert "--env-plain" in helped and "secret" in helped


def test_a_host_source_given_overrides_the_configured_one(project: Path) -> None:
    by_cli = _cli_spec(project, "-H", "localhost:1")
    by_api = _api_spec(hosts="localhost:1")
    assert by_cli == by_api
    assert (by_api["host_spec"], by_api["hosts_file"]) == ("localhost:1", None)
    result = _cli("launch", "--dry-run", "--no-probe", "-H", "localhost:1", "--hosts",
                  "x.txt", "train.py")
    assert result.exit_code == 2 and "both" in result.stderr  # two on one command line


def test_hosts_and_check_take_a_command_line_source_over_the_configured_one(
        project: Path) -> None:
    shown = _cli("hosts", "--json")
    assert shown.exit_code == 0, shown.output
    assert json.loads(shown.stdout)["inventory"]["source"] == str(
        project / "cluster" / "hosts.txt")
    for args in (["-H", "localhost:3"], ["--hosts", "localhost:3"]):
        shown = _cli("hosts", "--json", *args)
        assert shown.exit_code == 0, shown.output
        assert json.loads(shown.stdout)["allocation"]["np"] == 3
    (project / "src" / "other.txt").write_text("localhost slots=4\n")
    shown = _cli("hosts", "other.txt", "--json")
    assert shown.exit_code == 0, shown.output
    assert json.loads(shown.stdout)["allocation"]["np"] == 4
    assert "both given" in _cli("hosts", "other.txt", "--hosts", "other.txt").stderr


def test_a_missing_file_names_the_layer_it_came_from(project: Path) -> None:
    toml = project / "ringtrain.toml"
    toml.write_text('hosts = "cluster/gone.txt"\n')
    result = _cli("launch", "--dry-run", "--no-probe", "train.py")
    assert result.exit_code == 2
    assert f"error: {toml}: hosts names {project / 'cluster' / 'gone.txt'}, which does not " \
           "exist" in result.stderr
    assert "taken from that file's folder" in result.stderr and "Traceback" not in result.output
    with pytest.raises(UsageError, match=r"hosts names .*gone\.txt"):
        _api_spec()
    assert _api_spec(hosts="localhost:1")["host_spec"] == "localhost:1"  # not used: no error
    os.environ["RINGTRAIN_MAX_RESTARTS"] = "lots"
    result = _cli("config")
    assert result.exit_code == 2 and "RINGTRAIN_MAX_RESTARTS: 'lots' is not an integer" \
        in result.stderr


def test_config_shows_env_names_and_sources_never_values(project: Path) -> None:
    result = _cli("config", "--json")
    assert result.exit_code == 0, result.output
    assert SECRET not in result.output and "table" not in result.output
    rows = {r["key"]: r for r in json.loads(result.stdout)}
    assert rows["env.WANDB_API_KEY"]["value"] == "WANDB_API_KEY=****"
    assert rows["env.WANDB_API_KEY"]["source"] == str(project / "ringtrain.toml")
    assert rows["env_file"]["value"] == str(project / ".ringtrain_env")
    assert rows["max_restarts"]["source"] == "RINGTRAIN_MAX_RESTARTS"
    table = _cli("config")
    assert SECRET not in table.output and "NCCL_DEBUG=****" in table.output
    dry = CliRunner().invoke(cli, ["launch", "--dry-run", "--no-probe", "train.py"])
    assert dry.exit_code == 0 and SECRET not in dry.output


def test_check_takes_launchs_placement_and_ssh_options(project: Path) -> None:
    result = _cli("check", "--help")
    for flag in ("-p, --ssh-port", "-i, --ssh-identity-file", "--include", "--exclude",
                 "--slots", "--ring-label", "--hosts-format"):
        assert flag in result.output, flag
    hosts = _cli("hosts", "--help").output
    for flag in ("--include", "--slots", "--ring-label", "--min-hosts"):
        assert flag in hosts
