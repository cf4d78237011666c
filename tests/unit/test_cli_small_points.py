"""Issue 42's smaller points: ``ringtrain -q``, exit code 25 in ``launch --help``, the built-in
defaults in ``ringtrain config``, ``--json`` on click's usage errors, ``ringtrain.run()``'s
host errors in keyword words, and ``--network-interface`` without the probe."""

from __future__ import annotations

import json
import logging
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

import ringtrain
from ringtrain.cli import cli, verbosity
from ringtrain.errors import UsageError
from ringtrain.launch.record.failure import FAULT_EXIT_CODES


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    monkeypatch.delenv("LOGLEVEL", raising=False)
    for key in ("RINGTRAIN_RUNS_DIR", "RINGTRAIN_HOSTS", "RINGTRAIN_STALL_TIMEOUT"):
        monkeypatch.delenv(key, raising=False)
    (tmp_path / "train.py").write_text("print('hi')\n")
    (tmp_path / "cluster.txt").write_text("localhost slots=1\n")
    return tmp_path


@pytest.mark.usefixtures("project")
def test_quiet_on_the_group_as_on_the_sub_command() -> None:
    result = CliRunner().invoke(cli, ["-q", "hosts", "-H", "a:1"])
    assert result.exit_code == 0, result.output
    assert verbosity.quiet() and logging.getLogger().level == logging.ERROR
    result = CliRunner().invoke(cli, ["hosts", "-H", "a:1"])  # the next command line is its own
    assert result.exit_code == 0 and not verbosity.quiet()


def test_launch_help_names_every_fault_exit_code() -> None:
    text = " ".join(CliRunner().invoke(cli, ["launch", "--help"]).output.split())
    for kind, code in FAULT_EXIT_CODES.items():
        assert re.search(rf"\b{code} [a-zA-Z]", text), (kind, code)
    assert "25 a straggler left out" in text


@pytest.mark.usefixtures("project")
def test_config_shows_the_built_in_values_not_a_dash() -> None:
    result = CliRunner().invoke(cli, ["config"])
    assert result.exit_code == 0, result.output
    rows = {line.split()[0]: line for line in result.output.splitlines() if line.strip()}
    assert rows["runs_dir"].split()[1] == "runs"
    assert rows["max_restarts"].split()[1] == "0"
    assert rows["ssh_transport"].split()[1] == "paramiko"
    assert "(detected)" in rows["hosts_format"]
    assert not any(line.split()[1] == "-" for line in rows.values() if "built-in" in line)
    data = {r["key"]: r for r in json.loads(CliRunner().invoke(cli, ["config", "--json"]).stdout)}
    assert data["start_timeout"]["value"] == "120.0"
    assert data["python"]["value"] is None and data["python"]["source"] == "built-in default"


@pytest.mark.usefixtures("project")
@pytest.mark.parametrize("args", [
    ["launch", "--json", "-np", "many", "train.py"],  # a bad value
    ["check", "--json", "-H", "a:1", "--bogus"],  # no such option
    ["hosts", "-H", "a:1", "--bogus", "--json"],  # --json after the bad option
])
def test_json_gets_clicks_usage_errors_as_an_error_object(args: list[str]) -> None:
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 2
    error = json.loads(result.stdout)["error"]
    assert error["code"] == "usage" and error["exit_code"] == 2
    assert error["message"] in result.stderr and "--help" in error["fix"]
    plain = CliRunner().invoke(cli, [a for a in args if a != "--json"])
    assert plain.exit_code == 2 and plain.stdout == ""


@pytest.mark.usefixtures("project")
def test_run_speaks_of_keyword_arguments() -> None:
    with pytest.raises(UsageError) as err:
        ringtrain.run("train.py", hosts="cluster.txt", dry_run=True, probe=False)
    assert "hosts='cluster.txt'" in err.value.message and err.value.hint == (
        "pass hostfile='cluster.txt'")
    assert "-H" not in err.value.message + err.value.hint
    with pytest.raises(UsageError) as err:
        ringtrain.run("train.py", hosts="a:1", hostfile="cluster.txt", dry_run=True, probe=False)
    assert err.value.message == "hostfile= and hosts= both name hosts"
    with pytest.raises(UsageError) as err:
        ringtrain.run("train.py", hosts="a:1", hosts_format="yaml", dry_run=True, probe=False)
    assert "hosts_format='yaml'" in err.value.message and "--" not in err.value.hint
    result = CliRunner().invoke(cli, ["launch", "-H", "cluster.txt", "train.py"])
    assert "error: -H cluster.txt: -H takes hosts inline" in result.stderr  # the CLI's own
    assert "fix: pass --hosts cluster.txt" in result.stderr


@pytest.mark.usefixtures("project")
@pytest.mark.parametrize(("given", "ifname"), [("eth7", "eth7"), ("ib0,eth7", "ib0,eth7"),
                                               ("10.0.0.0/24", None), (None, None)])
def test_network_interface_without_the_probe_sets_nccl_socket_ifname(
        given: str | None, ifname: str | None) -> None:
    """As the probe's choice does (probe/netif.py); a CIDR needs the probed interfaces to
    become a name, so without the probe only Open MPI gets it."""
    plan = ringtrain.run("train.py", hosts="gpu01:1,gpu02:1", dry_run=True, probe=False,
                         network_interface=given)
    env = dict(plan.command.env)
    assert env.get("NCCL_SOCKET_IFNAME") == ifname
    assert env.get("HOROVOD_GLOO_IFACE") == ("eth7" if given == "eth7" else None)
    if given:
        assert f"btl_tcp_if_include {given}" in " ".join(plan.command.argv)
    result = CliRunner().invoke(cli, ["launch", "--dry-run", "--no-probe", "-H", "gpu01:1,gpu02:1",
                                      "--network-interface", "eth7", "train.py"])
    assert result.exit_code == 0 and "NCCL_SOCKET_IFNAME=eth7" in result.output
